"""The fetch of an outbound subscription, with a resolver of the test's making, and the
screen of the servers it names.

`provider.test` exists only in the stub resolver: a fetch that reaches the loopback
server by that name went to the address the guard checked, and a name that resolves to
this machine is refused without `allowPrivate` before any connection. `parse` touches no
database, so the service runs here without one.
"""

from __future__ import annotations

import base64

import pytest
from core_panel import http_server
from links_cases import CASES, CTX

from appliance.errors import ServiceError
from appliance.links import client_links
from appliance.links.outbound_feed import read_feed
from appliance.runtime.changes import ChangeNotice
from appliance.services.outbounds.subscriptions import OutboundSubs, screen_servers


def subs_resolving(table: dict[str, list[str]], calls: list[str]) -> OutboundSubs:
    def resolve(name: str, port: int) -> list[str]:
        calls.append(name)
        return table[name]

    return OutboundSubs(None, ChangeNotice(), check=lambda extra: None, resolve=resolve)


def test_a_name_that_resolves_to_this_machine_is_refused_without_a_connection(internal):
    calls: list[str] = []
    subs = subs_resolving({"provider.test": ["127.0.0.1"]}, calls)
    with pytest.raises(ServiceError, match=r"provider.test \(which resolves to 127.0.0.1\)"):
        subs.parse({"url": f"http://provider.test:{internal.port}/sub"})
    assert internal.connections == 0
    assert calls == ["provider.test"]


def test_with_allow_private_the_checked_address_is_the_one_connected_to():
    record, user, hosts = CASES["trojan_tcp_tls"]
    body = base64.b64encode("\n".join(client_links(record, user, hosts, CTX)).encode())
    calls: list[str] = []
    table = {"provider.test": ["127.0.0.1"], "vpn.example.com": ["1.1.1.1"]}
    subs = subs_resolving(table, calls)
    with http_server({"/sub": (200, body)}) as (port, requested):
        made = subs.parse({"url": f"http://provider.test:{port}/sub", "allowPrivate": True})
    assert [o["protocol"] for o in made] == ["trojan"]
    # The subscription's host once, then the server's name, which is screened too.
    assert requested == ["/sub"] and calls == ["provider.test", "vpn.example.com"]


@pytest.mark.parametrize(
    "host", ["[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]", "169.254.169.254"]
)
def test_the_metadata_address_is_refused_in_every_form_even_with_allow_private(host):
    subs = subs_resolving({}, [])
    with pytest.raises(ServiceError, match="metadata"):
        subs.parse({"url": f"http://{host}/latest/meta-data/", "allowPrivate": True})


def test_a_body_over_the_size_limit_is_refused():
    subs = subs_resolving({}, [])
    body = b"x" * (8 << 20 | 1)
    with (
        http_server({"/sub": (200, body)}) as (port, requested),
        pytest.raises(ServiceError, match="larger than the limit of 8 MB"),
    ):
        subs.parse({"url": f"http://127.0.0.1:{port}/sub", "allowPrivate": True})
    assert requested == ["/sub"]


def share_links(*hosts: str) -> bytes:
    return "\n".join(
        f"vless://b3c7a5f0-1c2d-4e5f-8a9b-0c1d2e3f4a5b@{host}:443?type=tcp#server-{n}"
        for n, host in enumerate(hosts)
    ).encode()


def test_servers_at_internal_addresses_are_left_out_unless_allow_private():
    """The system's own resolver: `localhost` is a name that resolves to this machine."""
    hosts = ("127.0.0.1", "10.0.0.1", "169.254.169.254", "[::ffff:127.0.0.1]", "localhost")
    plans = read_feed(share_links(*hosts, "1.1.1.1")).plans
    kept, note = screen_servers(plans, False)
    assert [plan.address for plan in kept] == ["1.1.1.1"]
    assert note == (
        "5 servers were left out: the first, 127.0.0.1, is a loopback address; a "
        "subscription's servers may be at internal addresses only when it sets allowPrivate"
    )
    kept, note = screen_servers(plans, True)
    assert [plan.address for plan in kept] == [
        "127.0.0.1",
        "10.0.0.1",
        "::ffff:127.0.0.1",
        "localhost",
        "1.1.1.1",
    ]
    assert note.startswith("1 server was left out: the first, 169.254.169.254, is the cloud")


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("2130706433", "2130706433 (resolves to 127.0.0.1), is a loopback address"),
        ("[::1]", "::1, is a loopback address"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("192.168.1.1", "a private address"),
        ("[fd00::1]", "unique-local"),
        ("[64:ff9b::7f00:1]", "loopback address (127.0.0.1) in IPv6 form"),
        ("[2002:7f00:1::]", "loopback address (127.0.0.1) in IPv6 form"),
        ("[fd00:ec2::254]", "metadata"),
    ],
)
def test_every_spelling_of_an_internal_server_is_left_out(host, kind):
    kept, note = screen_servers(read_feed(share_links(host)).plans, False)
    assert kept == [] and kind in note


def test_a_subscription_whose_servers_are_all_left_out_is_refused_with_the_reason():
    table = {"provider.test": ["127.0.0.1"], "metadata.test": ["169.254.169.254"]}
    subs = subs_resolving(table, [])
    body = share_links("metadata.test", "169.254.169.254")
    with (
        http_server({"/sub": (200, body)}) as (port, _),
        pytest.raises(ServiceError) as refusal,
    ):
        subs.parse({"url": f"http://provider.test:{port}/sub", "allowPrivate": True})
    assert refusal.value.msg == (
        "the subscription holds no server the core can use: 2 servers were left out: the "
        "first, metadata.test (resolves to 169.254.169.254), is the cloud metadata address; "
        "the panel never lets the core connect to it"
    )
