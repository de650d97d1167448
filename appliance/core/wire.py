"""The few protobuf messages the panel exchanges with the core's gRPC API, by hand.

The panel reads traffic counters (StatsService) and adds or removes users of a running
inbound (HandlerService). Those messages are a handful of strings, integers and nested
messages, so a small codec of the protobuf wire format (varints and length-delimited
fields) covers them: no generated code to keep in step with two cores, and no protobuf
runtime to ship. Field numbers follow the core's .proto files (app/stats/command,
app/proxyman/command, common/serial/typed_message, common/protocol/user and headers,
proxy/vless/account, proxy/vmess/account, proxy/trojan/config); Xray and V2Ray share them.

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
    """QueryStatsResponse{repeated Stat stat = 1} as {name: value}."""
    stats = {}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            name, count = _decode_stat(value)
            stats[name] = count
    return stats


def _decode_stat(data: bytes) -> tuple[str, int]:
    """Stat{string name = 1; int64 value = 2}."""
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
