"""The core's gRPC API: the hand-made wire codec, then the client against a real core.

The codec tests compare with byte strings worked out by hand from the protobuf encoding
rules (key = field number << 3 | wire type; varints little-endian base 128). The client
tests run a V2Ray server core with one inbound per protocol and a client core whose
SOCKS ports lead through those inbounds to a local echo server: a user exists in the
server core exactly when bytes sent as that user come back.
"""

from __future__ import annotations

import time
import uuid

import pytest
from core_helpers import (
    V2RAY_PREFIX,
    client_config,
    echo_server,
    inbound,
    running_core,
    server_config,
    socks_echo,
)
from helpers import free_port

from appliance.core.api import CoreApi, CoreApiError, wire

# ---- the wire codec ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**32, b"\x80\x80\x80\x80\x10"),
        (-1, b"\xff" * 9 + b"\x01"),
    ],
)
def test_varints_encode_and_decode(value, encoded):
    assert wire.varint(value) == encoded
    decoded, end = wire.read_varint(encoded, 0)
    assert wire.int64(decoded) == value
    assert end == len(encoded)


def test_query_stats_request_bytes():
    assert wire.query_stats_request("user>>>", True) == b"\x0a\x07user>>>\x10\x01"
    assert wire.query_stats_request("", False) == b""


def test_query_stats_response_decodes_repeated_stats():
    stat_a = b"\x0a\x01a\x10\xac\x02"  # name "a", value 300
    stat_b = b"\x0a\x01b\x10" + b"\xff" * 9 + b"\x01"  # name "b", value -1
    stat_c = b"\x0a\x01c"  # value 0 is not on the wire
    unknown = b"\x1d\x01\x02\x03\x04"  # field 3, fixed32: skipped
    data = b"\x0a\x06" + stat_a + b"\x0a\x0e" + stat_b + unknown + b"\x0a\x03" + stat_c
    assert wire.decode_query_stats_response(data) == {"a": 300, "b": -1, "c": 0}
    assert wire.decode_query_stats_response(b"") == {}


@pytest.mark.parametrize(
    "data",
    [b"\x0a\x06\x0a\x01a", b"\x08\x80", b"\x0b\x00", b"\x0d\x01\x02"],
    ids=["field longer than message", "truncated varint", "group wire type", "short fixed32"],
)
def test_malformed_bytes_raise_wire_error(data):
    with pytest.raises(wire.WireError):
        wire.decode_query_stats_response(data)


def test_long_strings_get_a_two_byte_length():
    assert wire.string_field(1, "x" * 200) == b"\x0a\xc8\x01" + b"x" * 200


def test_accounts_bytes():
    assert wire.vless_account("u1") == b"\x0a\x02u1"
    assert wire.vless_account("u1", "xtls-rprx-vision") == (b"\x0a\x02u1\x12\x10xtls-rprx-vision")
    assert wire.vmess_account("id", "aes-128-gcm") == b"\x0a\x02id\x1a\x02\x08\x03"
    assert wire.vmess_account("id", "none") == b"\x0a\x02id\x1a\x02\x08\x05"
    assert wire.vmess_account("id", "whatever") == b"\x0a\x02id\x1a\x02\x08\x02"
    assert wire.trojan_account("pw") == b"\x0a\x02pw"


def test_alter_inbound_add_user_bytes_nest_as_the_protos_say():
    account = wire.typed_message("T", wire.vless_account("u1"))
    assert account == b"\x0a\x01T\x12\x04\x0a\x02u1"
    user = wire.user(0, "e", account)
    assert user == b"\x12\x01e\x1a\x09" + account
    assert wire.user(2, "e", b"") == b"\x08\x02\x12\x01e"
    operation = wire.typed_message("Op", wire.add_user_operation(user))
    assert operation == b"\x0a\x02Op\x12\x10\x0a\x0e" + user
    request = wire.alter_inbound_request("tag", operation)
    assert request == b"\x0a\x03tag\x12\x16" + operation
    assert list(wire.fields(request)) == [(1, b"tag"), (2, operation)]


def test_remove_user_operation_bytes():
    assert wire.remove_user_operation("e@x") == b"\x0a\x03e@x"


def test_sys_stats_response_decodes_named_fields():
    data = b"\x08\x18\x18\xe0\xcc\x60\x50\x08"  # NumGoroutine 24, Alloc 1582688, Uptime 8
    stats = wire.decode_sys_stats_response(data)
    assert stats["NumGoroutine"] == 24
    assert stats["Alloc"] == 1582688
    assert stats["Uptime"] == 8
    assert stats["NumGC"] == 0


# ---- the client against a real core ------------------------------------------------------

PAYLOAD = b"appliance" * 100


def new_uuid() -> str:
    return str(uuid.uuid4())


SERVER_USERS = {
    "vless": {"id": new_uuid(), "email": "alice@test"},
    "vmess": {"id": new_uuid(), "security": "auto", "email": "bob@test"},
    "trojan": {"password": "carol-secret", "email": "carol@test"},
    "shadowsocks": {"password": "dave-secret", "method": "aes-256-gcm", "email": "dave@test"},
}
LIVE_USERS = {
    "vless": {"id": new_uuid(), "email": "new-vless@test"},
    "vmess": {"id": new_uuid(), "security": "aes-128-gcm", "email": "new-vmess@test"},
    "trojan": {"password": "new-trojan-secret", "email": "new-trojan@test"},
}


class Lab:
    def __init__(self, api_port: int, echo_port: int):
        self.api = CoreApi(f"127.0.0.1:{api_port}", V2RAY_PREFIX)
        self.echo_port = echo_port
        self.socks: dict[tuple[str, str], int] = {}

    def send_as(self, email: str, protocol: str, timeout: float = 3) -> bytes:
        return socks_echo(self.socks[(protocol, email)], self.echo_port, PAYLOAD, timeout)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    directory = tmp_path_factory.mktemp("core")
    api_port = free_port()
    ports = {protocol: free_port() for protocol in SERVER_USERS}
    server = server_config(
        api_port,
        *(inbound(f"{p}-in", p, ports[p], user) for p, user in SERVER_USERS.items()),
    )
    users = [(p, user) for p, user in SERVER_USERS.items()] + list(LIVE_USERS.items())
    routes = [(free_port(), p, ports[p], user) for p, user in users]
    with (
        echo_server() as echo_port,
        running_core(directory, server, api_port),
        running_core(directory, client_config(routes), routes[-1][0]),
    ):
        lab = Lab(api_port, echo_port)
        lab.socks = {(p, user["email"]): socks for socks, p, _, user in routes}
        yield lab
        lab.api.close()


def wait_for_counter(api: CoreApi, name: str, at_least: int) -> dict[str, int]:
    """The core adds to a counter as bytes pass; give it the moment it needs."""
    deadline = time.monotonic() + 5
    while True:
        stats = api.query_stats(name)
        if stats.get(name, 0) >= at_least or time.monotonic() > deadline:
            return stats


def test_query_stats_counts_the_bytes_each_user_sent(lab):
    assert lab.send_as("alice@test", "vless") == PAYLOAD
    assert lab.send_as("carol@test", "trojan") == PAYLOAD
    name = "user>>>alice@test>>>traffic>>>uplink"
    wait_for_counter(lab.api, name, len(PAYLOAD))
    stats = lab.api.query_stats("user>>>")
    assert stats[name] >= len(PAYLOAD)
    assert stats["user>>>carol@test>>>traffic>>>downlink"] >= len(PAYLOAD)
    assert all(key.startswith("user>>>") for key in stats)
    inbound_stats = lab.api.query_stats("inbound>>>vless-in>>>")
    assert inbound_stats["inbound>>>vless-in>>>traffic>>>uplink"] >= len(PAYLOAD)


def test_query_stats_with_reset_returns_the_counters_and_zeroes_them(lab):
    assert lab.send_as("dave@test", "shadowsocks") == PAYLOAD
    name = "user>>>dave@test>>>traffic>>>uplink"
    wait_for_counter(lab.api, name, len(PAYLOAD))
    assert lab.api.query_stats(name, reset=True)[name] >= len(PAYLOAD)
    assert lab.api.query_stats(name) == {name: 0}


def test_sys_stats_describe_the_running_core(lab):
    stats = lab.api.sys_stats()
    assert stats["NumGoroutine"] > 0
    assert stats["Alloc"] > 0


@pytest.mark.parametrize("protocol", sorted(LIVE_USERS))
def test_an_added_user_connects_and_a_removed_one_no_longer_does(lab, protocol):
    user = LIVE_USERS[protocol]
    # A refused connection is seen as silence; the short timeout only bounds the wait.
    assert lab.send_as(user["email"], protocol, timeout=1.5) == b""
    lab.api.add_user(f"{protocol}-in", protocol, user)
    assert lab.send_as(user["email"], protocol) == PAYLOAD
    lab.api.remove_user(f"{protocol}-in", user["email"])
    assert lab.send_as(user["email"], protocol, timeout=1.5) == b""


def test_adding_an_existing_user_is_refused_with_the_cores_reason(lab):
    with pytest.raises(CoreApiError) as refused:
        lab.api.add_user("vless-in", "vless", SERVER_USERS["vless"])
    assert refused.value.msg == (
        "cannot add user alice@test to inbound vless-in: User alice@test already exists."
    )
    assert lab.send_as("alice@test", "vless") == PAYLOAD


def test_removing_an_unknown_user_is_refused_with_the_cores_reason(lab):
    with pytest.raises(CoreApiError) as refused:
        lab.api.remove_user("trojan-in", "nobody@test")
    assert refused.value.msg == (
        "cannot remove user nobody@test from inbound trojan-in: User nobody@test not found."
    )


def test_shadowsocks_users_cannot_be_added_live(lab):
    user = {"password": "x", "method": "aes-256-gcm", "email": "eve@test"}
    with pytest.raises(CoreApiError) as refused:
        lab.api.add_user("shadowsocks-in", "shadowsocks", user)
    assert "proxy is not a UserManager" in refused.value.msg


def test_an_unknown_inbound_tag_is_named_in_the_error(lab):
    with pytest.raises(CoreApiError) as refused:
        lab.api.remove_user("no-such-tag", "alice@test")
    assert "handler not found: no-such-tag" in refused.value.msg


def test_a_protocol_without_users_is_refused_before_calling_the_core(lab):
    with pytest.raises(CoreApiError) as refused:
        lab.api.add_user("vless-in", "dokodemo-door", {"email": "x"})
    assert refused.value.msg == "users of dokodemo-door inbounds cannot be changed live"


def test_the_wrong_prefix_finds_no_service(lab):
    xray = CoreApi(lab.api.address, "xray")
    try:
        with pytest.raises(CoreApiError) as refused:
            xray.query_stats()
        assert "xray.app.stats.command.StatsService" in refused.value.msg
    finally:
        xray.close()


def test_a_core_that_does_not_listen_is_reported_as_unreachable():
    address = f"127.0.0.1:{free_port()}"
    api = CoreApi(address, V2RAY_PREFIX, timeout=2)
    try:
        with pytest.raises(CoreApiError) as refused:
            api.query_stats()
        assert refused.value.msg == (
            f"cannot read stats: the core API at {address} is not reachable (is the core running?)"
        )
    finally:
        api.close()
