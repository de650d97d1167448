"""The egress guard at function level: what it refuses, that it connects to the address it
checked, how it follows redirects, and how it bounds answers.

The guard is run in process against servers on loopback. Where a test needs a host name
that resolves to a chosen address, the guard gets a resolver of the test's making; the
names used (`*.test`) resolve nowhere else, so a connection that reaches the loopback
server can only have gone to the address the guard checked, not to a second lookup.
What cannot be tested here is a public host: this machine has no internet, so "a public
server redirects to loopback" is covered by a redirect from an opted-in host to another
host, which the guard checks in the same way.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading

import pytest
from internal_service import LOOPBACK_SPELLINGS, OTHER_INTERNAL

from appliance.errors import ServiceError
from appliance.runtime.egress import (
    DestinationRefused,
    Egress,
    FetchFailed,
    parse_allowed,
    refusal,
)

PUBLIC = "93.184.215.14"


def resolver(table: dict[str, list[str]], calls: list[str] | None = None):
    """Resolves the names in `table`; records each lookup in `calls`."""

    def resolve(name: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(name)
        key = name.lower().rstrip(".")
        if key not in table:
            raise socket.gaierror(socket.EAI_NONAME, "not in the test's table")
        return table[key]

    return resolve


def get(guard: Egress, url: str, limit: int = 1024, **options) -> bytes:
    """The body of a GET of `url` through `guard`."""
    with guard.request(url, **options) as reply:
        return reply.read(limit)


# ---- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("64:ff9b::7f00:1", "loopback"),
        ("2002:7f00:1::", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("10.20.30.40", "private"),
        ("172.31.0.1", "private"),
        ("192.168.0.1", "private"),
        ("::ffff:192.168.0.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("fc00::1", "unique-local"),
        ("fd12:3456::1", "unique-local"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
    ],
)
def test_internal_addresses_are_refused_with_their_kind(address, words):
    assert words in refusal(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_pass_in_every_form(address):
    assert refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("spelling", [*LOOPBACK_SPELLINGS, *OTHER_INTERNAL])
def test_every_spelling_is_refused_after_resolution(spelling):
    guard = Egress("coreReleaseUrl", ("releases.example", 443))
    with pytest.raises(DestinationRefused) as caught:
        guard.addresses(spelling.strip("[]"), 443)
    message = caught.value.msg
    assert "coreReleaseUrl" in message
    if spelling not in OTHER_INTERNAL or OTHER_INTERNAL[spelling] != "metadata":
        assert "allowPrivateDestinations" in message


def test_a_name_with_one_internal_address_among_public_ones_is_refused():
    guard = Egress(
        "smtpHost",
        ("mail.test", 25),
        resolve=resolver({"mail.test": [PUBLIC, "10.0.0.7"]}),
    )
    with pytest.raises(DestinationRefused, match=r"mail.test \(which resolves to 10.0.0.7\)"):
        guard.addresses("mail.test", 25)


def test_a_public_name_passes():
    guard = Egress("smtpHost", ("mail.test", 25), resolve=resolver({"mail.test": [PUBLIC]}))
    assert [str(a) for a in guard.addresses("mail.test", 25)] == [PUBLIC]


def test_the_opt_in_covers_the_settings_own_host_and_port_only():
    table = {"mirror.test": ["10.0.0.5"], "other.test": ["10.0.0.6"]}
    guard = Egress("coreReleaseUrl", ("mirror.test", 8080), True, resolver(table))
    assert [str(a) for a in guard.addresses("Mirror.Test.", 8080)] == ["10.0.0.5"]
    for host, port in (("mirror.test", 9090), ("other.test", 8080)):
        with pytest.raises(DestinationRefused, match="lets only the host written there"):
            guard.addresses(host, port, redirected=True)


def test_the_metadata_address_is_refused_even_when_opted_in():
    guard = Egress("coreReleaseUrl", ("169.254.169.254", 80), private_ok=True)
    with pytest.raises(DestinationRefused, match="metadata address; the panel never"):
        guard.addresses("169.254.169.254", 80)


def test_the_opt_in_list_names_only_known_destinations():
    assert parse_allowed(" smtpHost, coreReleaseUrl,smtpHost ,") == ["coreReleaseUrl", "smtpHost"]
    with pytest.raises(ServiceError, match="lists 'adminPassword', which is not something"):
        parse_allowed("smtpHost, adminPassword")


# ---- connecting to the checked address --------------------------------------------------------


def test_without_the_opt_in_no_spelling_reaches_the_service(internal):
    guard = Egress("panelUpdateUrl", ("releases.example", 443))
    for spelling in LOOPBACK_SPELLINGS:
        with pytest.raises(DestinationRefused):
            get(guard, f"http://{spelling}:{internal.port}/releases")
    assert internal.connections == 0


def test_the_connection_goes_to_the_checked_address_with_one_lookup(host):
    """`mirror.test` exists only in the test's resolver, so reaching the server proves
    the connection used the checked address, and the Host header still names the host."""
    port = int(host.url.rsplit(":", 1)[1])
    calls: list[str] = []
    guard = Egress(
        "coreReleaseUrl",
        ("mirror.test", port),
        True,
        resolver({"mirror.test": ["127.0.0.1"]}, calls),
    )
    host.put("/pinned/releases", b"[]")
    with guard.request(f"http://mirror.test:{port}/pinned/releases") as reply:
        assert (reply.status, reply.read(1024)) == (200, b"[]")
    assert calls == ["mirror.test"]
    assert host.hits["/pinned/releases"] == 1


def test_a_rebinding_name_is_looked_up_once_per_connection(host):
    """A resolver that answers loopback first and an internal address afterwards: the
    guard checks the first answer and connects to it; it never asks again."""
    port = int(host.url.rsplit(":", 1)[1])
    answers = iter([["127.0.0.1"], ["10.9.9.9"], ["10.9.9.9"]])
    calls: list[str] = []

    def rebinding(name: str, _port: int) -> list[str]:
        calls.append(name)
        return next(answers)

    guard = Egress("geoipUrl", ("rebind.test", port), True, rebinding)
    host.put("/rebind/geoip.dat", b"geo")
    with guard.request(f"http://rebind.test:{port}/rebind/geoip.dat") as reply:
        assert reply.read(1024) == b"geo"
    assert calls == ["rebind.test"]


# ---- redirects ---------------------------------------------------------------------------------


def mirror_guard(host) -> tuple[Egress, int]:
    port = int(host.url.rsplit(":", 1)[1])
    table = {n: ["127.0.0.1"] for n in ("mirror.test", "other.test", "localhost")}
    return Egress("coreReleaseUrl", ("mirror.test", port), True, resolver(table)), port


def test_a_redirect_on_the_same_host_is_followed(host):
    guard, port = mirror_guard(host)
    host.put("/moved/final", b"arrived")
    host.redirect("/moved/start", "/moved/final")
    with guard.request(f"http://mirror.test:{port}/moved/start") as reply:
        assert reply.read(1024) == b"arrived"
        assert reply.url == f"http://mirror.test:{port}/moved/final"


@pytest.mark.parametrize("target", ["http://localhost:{internal}/", "http://127.0.0.1:{internal}/"])
def test_a_redirect_to_another_internal_host_is_refused(host, internal, target):
    guard, port = mirror_guard(host)
    before = internal.connections
    path = f"/away/{len(host.redirects)}"
    host.redirect(path, target.format(internal=internal.port))
    with pytest.raises(DestinationRefused, match="a redirect followed for coreReleaseUrl"):
        get(guard, f"http://mirror.test:{port}{path}")
    assert internal.connections == before


def test_a_redirect_to_a_name_of_the_same_address_is_refused(host):
    """`other.test` resolves to the same loopback address as the opted-in host, but only
    the host written in the setting is allowed to be internal."""
    guard, port = mirror_guard(host)
    host.redirect("/alias", f"http://other.test:{port}/moved/final")
    with pytest.raises(DestinationRefused, match=r"other\.test"):
        get(guard, f"http://mirror.test:{port}/alias")


def test_redirects_are_bounded(host):
    guard, port = mirror_guard(host)
    host.redirect("/loop", "/loop")
    with pytest.raises(FetchFailed, match="more than 5 redirects"):
        get(guard, f"http://mirror.test:{port}/loop")
    assert host.hits["/loop"] == 6


def test_a_redirect_away_from_http_is_refused(host):
    guard, port = mirror_guard(host)
    host.redirect("/to-file", "file:///etc/passwd")
    with pytest.raises(FetchFailed, match="not an http"):
        get(guard, f"http://mirror.test:{port}/to-file")


# ---- bounded answers ---------------------------------------------------------------------------


@contextlib.contextmanager
def raw_server(answer: bytes, then_stall: bool):
    """A loopback server that sends `answer` to each connection and then keeps it open
    without a word (`then_stall`) or closes it."""
    listener = socket.create_server(("127.0.0.1", 0))
    release = threading.Event()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(answer)
                if then_stall:
                    release.wait(30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        release.set()
        listener.close()


def loopback_guard(port: int) -> Egress:
    return Egress("coreReleaseUrl", ("127.0.0.1", port), private_ok=True)


def test_an_answer_over_the_size_cap_is_refused_while_it_streams():
    body = b"x" * 5000
    answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body
    with (
        raw_server(answer, then_stall=False) as port,
        pytest.raises(FetchFailed, match="larger than the limit of 1 kB"),
    ):
        get(loopback_guard(port), f"http://127.0.0.1:{port}/", 1024)


def test_a_declared_length_over_the_cap_is_refused_before_reading():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n"
    with (
        raw_server(answer, then_stall=True) as port,
        pytest.raises(FetchFailed, match="larger than the limit of 1 MB"),
    ):
        get(loopback_guard(port), f"http://127.0.0.1:{port}/", 1 << 20)


def test_a_server_that_stops_sending_is_given_up():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"
    with (
        raw_server(answer, then_stall=True) as port,
        pytest.raises(FetchFailed, match=r"sent nothing for 0\.5 s"),
    ):
        get(loopback_guard(port), f"http://127.0.0.1:{port}/", read_timeout=0.5)


def test_a_server_that_never_answers_is_given_up():
    with raw_server(b"", then_stall=True) as port, pytest.raises(FetchFailed, match=r"0\.5 s"):
        get(loopback_guard(port), f"http://127.0.0.1:{port}/", read_timeout=0.5)
