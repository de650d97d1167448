"""The few protobuf messages the panel exchanges with the core's gRPC API, by hand.

The panel reads traffic counters and, from Xray, who is online from which addresses
(StatsService), adds or removes users of a running inbound (HandlerService), and asks
Xray's RoutingService and ObservatoryService which outbound a connection would take, how
balancers stand and how outbounds answer probes.
Those messages are a handful of strings, integers and nested messages, so a small codec
of the protobuf wire format (varints and length-delimited fields) covers them: no
generated code to keep in step with two cores, and no protobuf runtime to ship. Field
numbers follow the core's .proto files (app/stats/command, app/proxyman/command,
common/serial/typed_message, common/protocol/user and headers, proxy/vless/account,
proxy/vmess/account, proxy/trojan/config, app/router/command, app/observatory and its
command); Xray and V2Ray share them where both have them.

Encoding follows proto3: a field holding its default (0, "", b"", False) is not written.
"""

from __future__ import annotations

from collections.abc import Iterator

VARINT = 0
FIXED64 = 1
LENGTH_DELIMITED = 2
FIXED32 = 5
UINT64_LIMIT = 1 << 64

# common/protocol/headers.proto SecurityType, by the names the JSON config uses. "zero"
# exists in Xray only; the core reads the value on the client side, never on an inbound.
VMESS_SECURITY = {"auto": 2, "aes-128-gcm": 3, "chacha20-poly1305": 4, "none": 5, "zero": 6}


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


# ---- encoding -------------------------------------------------------------------------


def varint(value: int) -> bytes:
    """Base-128 varint; a negative number is written as its 64-bit two's complement."""
    if value < 0:
        value += UINT64_LIMIT
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def uint_field(number: int, value: int) -> bytes:
    """A varint field (int32/int64/uint32/uint64/bool/enum); omitted when zero."""
    return varint(number << 3 | VARINT) + varint(int(value)) if value else b""


def bytes_field(number: int, data: bytes) -> bytes:
    """A length-delimited field (bytes or an encoded message); omitted when empty."""
    return varint(number << 3 | LENGTH_DELIMITED) + varint(len(data)) + data if data else b""


def string_field(number: int, text: str) -> bytes:
    return bytes_field(number, text.encode())


def repeated_field(number: int, items: list[bytes]) -> bytes:
    """A repeated length-delimited field: every item is written, an empty one too (only
    a singular field holding its default is left out)."""
    key = varint(number << 3 | LENGTH_DELIMITED)
    return b"".join(key + varint(len(item)) + item for item in items)


# ---- decoding -------------------------------------------------------------------------


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) for each field in order: an int for varint and fixed
    fields, bytes for length-delimited ones. Repeated fields simply occur repeatedly."""
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == VARINT:
            value, pos = read_varint(data, pos)
        elif wire_type in (FIXED64, FIXED32):
            size = 8 if wire_type == FIXED64 else 4
            if pos + size > len(data):
                raise WireError(f"truncated fixed field {number}")
            value = int.from_bytes(data[pos : pos + size], "little")
            pos += size
        elif wire_type == LENGTH_DELIMITED:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise WireError(f"field {number} is longer than the message")
            value = data[pos : pos + size]
            pos += size
        else:
            raise WireError(f"unsupported wire type {wire_type} in field {number}")
        yield number, value


def int64(value: int) -> int:
    """A varint read as a signed 64-bit integer."""
    return value - UINT64_LIMIT if value >= 1 << 63 else value


# ---- the messages -----------------------------------------------------------------------


def query_stats_request(pattern: str, reset: bool) -> bytes:
    return string_field(1, pattern) + uint_field(2, reset)


def decode_query_stats_response(data: bytes) -> dict[str, int]:
    """QueryStatsResponse{repeated Stat stat = 1} as {name: value}.

    At 100,000 clients the core answers 200,000 counters every traffic tick, 12 MB that
    the general field reader took seconds of the one process's CPU to walk. The core
    writes each Stat the same way (name, then value, each at most once), which a
    tighter loop reads several times faster; anything else it might send is read by the
    general reader, with the same result."""
    try:
        return _stats_as_written(data)
    except _Unusual:
        return _stats_by_fields(data)


class _Unusual(Exception):
    """A message not laid out the way the core writes it."""


def _stats_as_written(data: bytes) -> dict[str, int]:
    """Stats laid out as `0A len [0A len name] [10 value]`, in that order; lengths of one
    byte (every Stat the core writes) are read inline, longer ones by `read_varint`."""
    stats = {}
    pos, end = 0, len(data)
    while pos < end:
        if data[pos] != 0x0A:
            raise _Unusual
        stop = data[pos + 1] if pos + 1 < end else 0x80
        if stop < 0x80:
            pos += 2
        else:
            stop, pos = read_varint(data, pos + 1)
        stop += pos
        if stop > end:
            raise _Unusual
        name = ""
        if pos < stop and data[pos] == 0x0A:
            length = data[pos + 1] if pos + 1 < stop else 0x80
            if length < 0x80:
                pos += 2
            else:
                length, pos = read_varint(data, pos + 1)
            if pos + length > stop:
                raise _Unusual
            name = data[pos : pos + length].decode(errors="replace")
            pos += length
        count = 0
        if pos < stop:
            if data[pos] != 0x10:
                raise _Unusual
            pos += 1
            shift = 0
            while True:
                if pos >= stop or shift >= 70:
                    raise _Unusual
                byte = data[pos]
                pos += 1
                count |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
            count = int64(count)
        if pos != stop:
            raise _Unusual
        stats[name] = count
    return stats


def _stats_by_fields(data: bytes) -> dict[str, int]:
    stats = {}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            name, count = _string_and_int64(value)
            stats[name] = count
    return stats


def _string_and_int64(data: bytes) -> tuple[str, int]:
    """A message {string = 1; int64 = 2}: a Stat {name, value}, or an entry of a map of
    strings to int64 {key, value}."""
    name, count = "", 0
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            name = value.decode(errors="replace")
        elif number == 2 and isinstance(value, int):
            count = int64(value)
    return name, count


def decode_sys_stats_response(data: bytes) -> dict[str, int]:
    """SysStatsResponse: all varint fields, named as in the .proto file."""
    names = {
        1: "NumGoroutine",
        2: "NumGC",
        3: "Alloc",
        4: "TotalAlloc",
        5: "Sys",
        6: "Mallocs",
        7: "Frees",
        8: "LiveObjects",
        9: "PauseTotalNs",
        10: "Uptime",
    }
    stats = dict.fromkeys(names.values(), 0)
    for number, value in fields(data):
        if number in names and isinstance(value, int):
            stats[names[number]] = value
    return stats


def online_ip_request(name: str) -> bytes:
    """GetStatsRequest{string name = 1; bool reset = 2} for GetStatsOnlineIpList (Xray);
    `name` is an online map's, `user>>>EMAIL>>>online`. Never reset: the map is the core's
    own record of who is connected, not a counter of the panel's."""
    return string_field(1, name)


def decode_online_users(data: bytes) -> list[str]:
    """GetAllOnlineUsersResponse{repeated string users = 1} (Xray): the names of the online
    maps that hold an address, `user>>>EMAIL>>>online`."""
    return [
        value.decode(errors="replace")
        for number, value in fields(data)
        if number == 1 and isinstance(value, bytes)
    ]


def decode_online_ips(data: bytes) -> dict[str, int]:
    """GetStatsOnlineIpListResponse{string name = 1; map<string, int64> ips = 2} (Xray) as
    {address: unix seconds it was last seen}; a map is a repeated entry message
    {key = 1; value = 2}."""
    ips: dict[str, int] = {}
    for number, value in fields(data):
        if number == 2 and isinstance(value, bytes):
            address, seen = _string_and_int64(value)
            if address:
                ips[address] = seen
    return ips


def typed_message(type_name: str, value: bytes) -> bytes:
    return string_field(1, type_name) + bytes_field(2, value)


def alter_inbound_request(tag: str, operation: bytes) -> bytes:
    """AlterInboundRequest{tag = 1; TypedMessage operation = 2}."""
    return string_field(1, tag) + bytes_field(2, operation)


def user(level: int, email: str, account: bytes) -> bytes:
    """User{uint32 level = 1; string email = 2; TypedMessage account = 3}."""
    return uint_field(1, level) + string_field(2, email) + bytes_field(3, account)


def add_user_operation(user_message: bytes) -> bytes:
    return bytes_field(1, user_message)


def remove_user_operation(email: str) -> bytes:
    return string_field(1, email)


def vless_account(user_id: str, flow: str = "", encryption: str = "") -> bytes:
    return string_field(1, user_id) + string_field(2, flow) + string_field(3, encryption)


def vmess_account(user_id: str, security: str = "auto") -> bytes:
    """Account{id = 1; SecurityConfig security_settings = 3}; alter_id (2) is gone from
    Xray and 0 means AEAD in V2Ray, so it is never written. An unknown security name
    means "auto", as it does in the core's JSON config."""
    security_type = VMESS_SECURITY.get(security.lower(), VMESS_SECURITY["auto"])
    return string_field(1, user_id) + bytes_field(3, uint_field(1, security_type))


def trojan_account(password: str, flow: str = "") -> bytes:
    return string_field(1, password) + string_field(2, flow)


# ---- routing (RoutingService of app/router/command) ---------------------------------------

# common/net/network.proto Network, by the names the routing rules use.
NETWORKS = {"tcp": 2, "udp": 3}


def routing_context(
    *,
    inbound_tag: str = "",
    network: str = "tcp",
    target_ips: list[bytes] | None = None,
    target_port: int = 0,
    target_domain: str = "",
    protocol: str = "",
    user: str = "",
) -> bytes:
    """RoutingContext{InboundTag = 1; Network = 2; repeated bytes TargetIPs = 4;
    TargetPort = 6; TargetDomain = 7; Protocol = 8; User = 9}: a connection that has not
    been routed yet, as TestRoute takes it."""
    return (
        string_field(1, inbound_tag)
        + uint_field(2, NETWORKS[network])
        + repeated_field(4, target_ips or [])
        + uint_field(6, target_port)
        + string_field(7, target_domain)
        + string_field(8, protocol)
        + string_field(9, user)
    )


def route_test_request(context: bytes, field_selectors: list[str]) -> bytes:
    """TestRouteRequest{RoutingContext = 1; repeated FieldSelectors = 2; PublishResult = 3},
    never published: a test must not show up as traffic in the routing statistics."""
    selectors = [name.encode() for name in field_selectors]
    return bytes_field(1, context) + repeated_field(2, selectors)


def decode_routed(data: bytes) -> dict:
    """The outbound part of a RoutingContext answer: OutboundTag (12) and the balancers
    the connection went through, OutboundGroupTags (11)."""
    routed: dict = {"outboundTag": "", "outboundGroupTags": []}
    for number, value in fields(data):
        if number == 12 and isinstance(value, bytes):
            routed["outboundTag"] = value.decode(errors="replace")
        elif number == 11 and isinstance(value, bytes):
            routed["outboundGroupTags"].append(value.decode(errors="replace"))
    return routed


def balancer_info_request(tag: str) -> bytes:
    """GetBalancerInfoRequest{string tag = 1} (Xray)."""
    return string_field(1, tag)


def decode_balancer_info(data: bytes) -> dict:
    """GetBalancerInfoResponse{BalancerMsg balancer = 1}, where BalancerMsg is
    {OverrideInfo override = 5; PrincipleTargetInfo principle_target = 6},
    OverrideInfo {string target = 2} and PrincipleTargetInfo {repeated string tag = 1}."""
    info: dict = {"override": "", "principleTargets": []}
    for number, value in fields(data):
        if number != 1 or not isinstance(value, bytes):
            continue
        for inner, part in fields(value):
            if inner == 5 and isinstance(part, bytes):
                for key, target in fields(part):
                    if key == 2 and isinstance(target, bytes):
                        info["override"] = target.decode(errors="replace")
            elif inner == 6 and isinstance(part, bytes):
                info["principleTargets"] += [
                    tag.decode(errors="replace")
                    for key, tag in fields(part)
                    if key == 1 and isinstance(tag, bytes)
                ]
    return info


def override_balancer_request(balancer_tag: str, target: str) -> bytes:
    """OverrideBalancerTargetRequest{string balancerTag = 1; string target = 2} (Xray);
    an empty target clears the override."""
    return string_field(1, balancer_tag) + string_field(2, target)


# ---- observatory (ObservatoryService of app/observatory/command) --------------------------


def outbound_status_request(tags: list[str]) -> bytes:
    """GetOutboundStatusRequest{repeated string outbound_tags = 1}; none: every outbound."""
    return repeated_field(1, [tag.encode() for tag in tags])


def decode_outbound_status(data: bytes) -> list[dict]:
    """GetOutboundStatusResponse{ObservationResult status = 1}, ObservationResult being
    {repeated OutboundStatus status = 1}; each status as the dict `_decode_observed` makes."""
    found = []
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            found += [
                _decode_observed(status)
                for key, status in fields(value)
                if key == 1 and isinstance(status, bytes)
            ]
    return found


def _decode_observed(data: bytes) -> dict:
    """OutboundStatus{bool alive = 1; int64 delay = 2 (ms); string last_error_reason = 3;
    string outbound_tag = 4; int64 last_seen_time = 5; int64 last_try_time = 6}."""
    status = {
        "tag": "",
        "alive": False,
        "delay": 0,
        "lastErrorReason": "",
        "lastSeenTime": 0,
        "lastTryTime": 0,
    }
    names = {2: "delay", 5: "lastSeenTime", 6: "lastTryTime"}
    for number, value in fields(data):
        if number == 1 and isinstance(value, int):
            status["alive"] = bool(value)
        elif number in names and isinstance(value, int):
            status[names[number]] = int64(value)
        elif number == 3 and isinstance(value, bytes):
            status["lastErrorReason"] = value.decode(errors="replace")
        elif number == 4 and isinstance(value, bytes):
            status["tag"] = value.decode(errors="replace")
    return status
