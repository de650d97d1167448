"""The traffic counters' decoder reads what the general protobuf reader reads.

`decode_query_stats_response` takes a fast path for Stats laid out as the core writes
them and falls back to the general field reader otherwise; for any bytes both must give
the same counters, or both refuse them as malformed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.api import wire

names = st.text(max_size=150)
values = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def general(data: bytes) -> dict[str, int]:
    stats = {}
    for number, value in wire.fields(data):
        if number == 1 and isinstance(value, bytes):
            name, count = "", 0
            for inner, item in wire.fields(value):
                if inner == 1 and isinstance(item, bytes):
                    name = item.decode(errors="replace")
                elif inner == 2 and isinstance(item, int):
                    count = wire.int64(item)
            stats[name] = count
    return stats


def outcome(decode, data: bytes):
    try:
        return decode(data)
    except wire.WireError:
        return "malformed"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(names, values), max_size=30))
def test_stats_as_the_core_writes_them(stats):
    data = b"".join(
        wire.bytes_field(1, wire.string_field(1, name) + wire.uint_field(2, value)) or b"\x0a\x00"
        for name, value in stats
    )
    assert wire.decode_query_stats_response(data) == general(data) == dict(stats)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_decode_as_the_general_reader_does(data):
    assert outcome(wire.decode_query_stats_response, data) == outcome(general, data)


@pytest.mark.parametrize(
    "stat",
    [
        b"\x10\x05\x0a\x01a",  # value before name
        b"\x0a\x01a\x0a\x01b",  # two names: the last counts
        b"\x0a\x01a\x10\x01\x10\x02",  # two values: the last counts
        b"\x0a\x01a\x18\x07",  # an unknown field
        b"\x0a\x01a\x10" + b"\xff" * 9 + b"\x01",  # -1 on ten bytes
        b"\x0a\x81\x01" + b"x" * 129 + b"\x10\x01",  # a name of two-byte length
    ],
)
def test_unusual_layouts_read_as_the_general_reader_reads_them(stat):
    data = wire.bytes_field(1, stat)
    assert wire.decode_query_stats_response(data) == general(data)
