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

from appliance.domain.clients import CORE_WIDTH, ClientRecord

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
# What the config build reads of a client (`domain.clients.core_view`): the record's
# leading fields. Its read of 100,000 clients selects only these: decoding the columns it
# never reads made that read a quarter slower.
CORE_SELECT = ", ".join(SELECTED[:CORE_WIDTH])
# The defaults of the other fields, appended to a row of CORE_SELECT.
CORE_PADDING = tuple(ClientRecord._field_defaults.values())

_make = tuple.__new__


def client_records(rows: Iterable[tuple]) -> list[ClientRecord]:
    """Rows that are exactly CLIENT_SELECT, as records."""
    return [_make(ClientRecord, row) for row in rows]


def core_records(rows: Iterable[tuple]) -> list[ClientRecord]:
    """Rows that are exactly CORE_SELECT, as records whose other fields keep their
    defaults: for the config build only."""
    return [_make(ClientRecord, row + CORE_PADDING) for row in rows]


def client_record(row: tuple) -> ClientRecord:
    """The record at the head of a row that selects CLIENT_SELECT first, then more."""
    return _make(ClientRecord, row[:CLIENT_WIDTH])


def extra(row: tuple) -> tuple:
    """What a row selects after CLIENT_SELECT."""
    return row[CLIENT_WIDTH:]


def entity_record(client, traffic) -> ClientRecord:
    """The record of a client entity and its traffic entity (None when it has none), for
    the writes that hold the entities already."""
    columns = {
        field: getattr(client, CLIENT_COLUMN_NAMES.get(field, field)) for field in ENTITY_FIELDS
    }
    if traffic is None:
        return ClientRecord(**columns, up=0, down=0, traffic_enable=True)
    return ClientRecord(**columns, up=traffic.up, down=traffic.down, traffic_enable=traffic.enable)
