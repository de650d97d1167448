"""The statements of the usage history, by name: what moved added to the current hour's
buckets, the buckets of one owner over a range, and the roll-up of old hours into days.

Each hourly or daily bucket is one row per owner (a client by email key, an inbound by
id) under a unique index that leads with the bucket's start, so a tick's rows sit
together at the index's end and a range is a lookup per bucket: the cost follows what
moved or the range asked for, never how much history is kept.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.store.batches import chunks
from appliance.store.ddl import adding_upsert
from appliance.store.traffic_sql import INBOUND_BY

HOUR = 3600
DAY = 86400
# Each kind of owner: its hourly table (the daily one adds "_day") and its column.
OWNERS = {"client": ("client_usage", "email_key"), "inbound": ("inbound_usage", "inbound_id")}


def record(
    store,
    now_ms: int,
    clients: dict[str, list[int]],
    inbounds: list[tuple[tuple, int, int]],
    by: str = "id",
) -> None:
    """Add what moved to the current hour's buckets, inside the caller's transaction:
    `clients` by email key -> [up, down]; `inbounds` as (parameters of `INBOUND_BY[by]`,
    up, down), the inbound found by that condition (a tag, a node's tag, an id)."""
    hour = now_ms // 1000 // HOUR * HOUR
    dialect = store.dialect
    if clients:
        # Through the client's traffic row, as the totals: a counter of a client that is
        # gone (or a node's own) adds to neither.
        store.execute_many(
            "INSERT INTO client_usage (email_key, at, up, down) "
            "SELECT email_key, ?, ?, ? FROM client_traffic WHERE email_key = ?"
            + adding_upsert("client_usage", ("at", "email_key"), ("up", "down"), dialect),
            [(hour, up, down, key) for key, (up, down) in sorted(clients.items())],
        )
    if inbounds:
        store.execute_many(
            "INSERT INTO inbound_usage (inbound_id, at, up, down) "
            f"SELECT id, ?, ?, ? FROM inbound WHERE {INBOUND_BY[by]}"
            + adding_upsert("inbound_usage", ("at", "inbound_id"), ("up", "down"), dialect),
            [(hour, up, down, *where) for where, up, down in inbounds if up or down],
        )


def has_client_traffic(store, key: str) -> bool:
    """Whether a client of this email key has a traffic row (every client has one)."""
    return bool(store.rows("SELECT 1 FROM client_traffic WHERE email_key = ?", [key]))


def has_inbound(store, inbound_id: int) -> bool:
    return bool(store.rows("SELECT 1 FROM inbound WHERE id = ?", [inbound_id]))


def oldest_hour(store, kind: str) -> int | None:
    """The start of the oldest hourly bucket of a kind of owner; None for none."""
    table, _ = OWNERS[kind]
    return store.rows(f"SELECT MIN(at) FROM {table}")[0][0]


def roll_up(store, kind: str, hour: int) -> None:
    """Add one hour's buckets into their daily ones and drop them."""
    table, column = OWNERS[kind]
    rows = store.rows(f"SELECT {column}, up, down FROM {table} WHERE at = ?", [hour])
    day = hour // DAY * DAY
    store.execute_many(
        f"INSERT INTO {table}_day ({column}, at, up, down) VALUES (?, ?, ?, ?)"
        + adding_upsert(f"{table}_day", ("at", column), ("up", "down"), store.dialect),
        [(owner, day, up, down) for owner, up, down in rows],
    )
    store.execute(f"DELETE FROM {table} WHERE at = ?", [hour])


def drop_days_before(store, kind: str, start: int) -> None:
    """Drop the daily buckets of a kind of owner that start before `start` (seconds)."""
    table, _ = OWNERS[kind]
    store.execute(f"DELETE FROM {table}_day WHERE at < ?", [start])


def drop_inbound_history(store, inbound_id: int) -> None:
    """Drop every hourly and daily bucket of an inbound (one deleted)."""
    for name in ("inbound_usage", "inbound_usage_day"):
        store.execute(f"DELETE FROM {name} WHERE inbound_id = ?", [inbound_id])


def bucket_rows(
    rows: Callable[[str, list], list[tuple]], kind: str, owner, start: int, end: int
) -> list[tuple]:
    """(at, up, down) of one owner's hourly and daily buckets starting from `start` to
    `end` (seconds, both included), read through `rows(statement, params)`. The index
    leads with the bucket, so each bucket of the range is looked up: the cost follows
    the range, never the number of clients or how much history is kept. A daily bucket
    counts whole in the range its start falls in."""
    table, column = OWNERS[kind]
    found = []
    for name, size in ((table, HOUR), (f"{table}_day", DAY)):
        starts = list(range(-(-start // size) * size, end + 1, size))
        for chunk in chunks(starts):
            found += rows(
                f"SELECT at, up, down FROM {name} "
                f"WHERE at IN ({', '.join('?' * len(chunk))}) AND {column} = ?",
                [*chunk, owner],
            )
    return found
