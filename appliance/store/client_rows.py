"""The one reader of client rows: SQL that selects a client with its traffic by named
columns, and the function that turns such rows into `ClientRecord` values.

The select list is made from the record's field names, so a column and the field it
fills can never drift apart, and a row becomes its record without any per-field work
(`tuple.__new__`, the cost of the row's own tuple). Traffic comes from a LEFT JOIN: a
client without a traffic row reads as having used nothing and as enabled there, on every
backend, in the SQL itself (TRUE is a literal SQLite, PostgreSQL and MariaDB all read).
Statements add their own columns after the client's (`extra`), read back beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import get_type_hints

from appliance.domain.clients import ClientRecord

# The traffic columns, by field name; every other field is the client column of its name.
TRAFFIC_COLUMNS = {
    "up": "COALESCE(t.up, 0)",
    "down": "COALESCE(t.down, 0)",
    "traffic_enable": "COALESCE(t.enable, TRUE)",
}
# Columns named as the entity names them where the record's name differs.
CLIENT_COLUMN_NAMES = {"row_id": "id"}
# `c` is the client, `t` its traffic row (see CLIENT_FROM).
SELECTED = [
    TRAFFIC_COLUMNS.get(field) or f"c.{CLIENT_COLUMN_NAMES.get(field, field)}"
    for field in ClientRecord._fields
]
CLIENT_SELECT = ", ".join(SELECTED)
CLIENT_WIDTH = len(ClientRecord._fields)
# The fields a client entity carries itself.
ENTITY_FIELDS = [field for field in ClientRecord._fields if field not in TRAFFIC_COLUMNS]
CLIENT_FROM = "FROM client c LEFT JOIN client_traffic t ON t.email_key = c.email_key"
# What the config build reads of a client (`domain.clients.core_view`). Its read of
# 100,000 clients selects only these columns, the other fields an empty literal ('' or
# 0): decoding the columns it never reads would cost it a fifth of its time.
CORE_FIELDS = frozenset(
    {
        "row_id", "uuid", "email", "password", "auth", "flow", "security", "reverse_tag",
        "method", "enable", "total_bytes", "expiry_time", *TRAFFIC_COLUMNS,
    }
)  # fmt: skip
CORE_SELECT = ", ".join(
    column
    if field in CORE_FIELDS
    else ("''" if get_type_hints(ClientRecord)[field] is str else "0")
    for field, column in zip(ClientRecord._fields, SELECTED, strict=True)
)

_make = tuple.__new__


def client_records(rows: Iterable[tuple]) -> list[ClientRecord]:
    """Rows that are exactly CLIENT_SELECT, as records."""
    return [_make(ClientRecord, row) for row in rows]


def client_record(row: tuple) -> ClientRecord:
    """The record at the head of a row that selects CLIENT_SELECT first, then more."""
    return _make(ClientRecord, row[:CLIENT_WIDTH])


def extra(row: tuple) -> tuple:
    """What a row selects after CLIENT_SELECT."""
    return row[CLIENT_WIDTH:]


def entity_record(client, traffic) -> ClientRecord:
    """The record of a client entity and its traffic entity (None when it has none), for
    the writes that hold the entities already."""
    columns = [getattr(client, CLIENT_COLUMN_NAMES.get(f, f)) for f in ENTITY_FIELDS]
    if traffic is None:
        return ClientRecord(*columns, 0, 0, True)
    return ClientRecord(*columns, traffic.up, traffic.down, traffic.enable)
