"""The fetch of an outbound subscription, with a resolver of the test's making.

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
from appliance.services.outbounds.subscriptions import OutboundSubs
from tests.internal_service import InternalService


def subs_resolving(table: dict[str, list[str]], calls: list[str]) -> OutboundSubs:
    def resolve(name: str, port: int) -> list[str]:
        calls.append(name)
        return table[name]

    return OutboundSubs(None, lambda: None, resolve=resolve)


@pytest.fixture(scope="module")
def internal():
    service = InternalService()
    yield service
    service.close()


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
    subs = subs_resolving({"provider.test": ["127.0.0.1"]}, calls)
    with http_server({"/sub": (200, body)}) as (port, requested):
        made = subs.parse({"url": f"http://provider.test:{port}/sub", "allowPrivate": True})
    assert [o["protocol"] for o in made] == ["trojan"]
    assert requested == ["/sub"] and calls == ["provider.test"]


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
