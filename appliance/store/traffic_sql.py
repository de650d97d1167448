"""The statements that count traffic, by name: totals added in place, the counter values
kept beside them, and the counters a managing panel polls.

Every traffic path (the core's tick, the MTProto proxies, the node polls) adds to the
same totals with the same statement (`add_client_traffic`, `add_inbound_traffic`), which
stops at the largest value a 64-bit column holds: past it SQLite would store a
floating-point number and the networked servers would refuse the whole tick. Every
function runs inside the caller's transaction.
"""

from __future__ import annotations

import functools

from appliance.domain.protocols import INT64_MAX
from appliance.store.batches import chunks
from appliance.store.ddl import replacing_upsert

ADD_UP_DOWN = (
    "up = CASE WHEN up > ? THEN ? ELSE up + ? END, "
    "down = CASE WHEN down > ? THEN ? ELSE down + ? END"
)
# How `add_inbound_traffic` finds an inbound, by the kind of its parameters.
INBOUND_BY = {
    "id": "id = ?",
    "tag": "tag = ?",
    "node tag": "tag = ? AND node_id = ?",
}


@functools.lru_cache(maxsize=1 << 19)
def added(up: int, down: int) -> tuple[int, ...]:
    """The parameters of ADD_UP_DOWN that add `up` and `down`, stopping at the maximum."""
    return (INT64_MAX - up, INT64_MAX, up, INT64_MAX - down, INT64_MAX, down)


def add_client_traffic(store, moved: dict[str, list[int]], now_ms: int) -> None:
    """Add email key -> [up, down] to the clients' totals, in the order of their keys;
    each was last online now."""
    store.execute_many(
        f"UPDATE client_traffic SET {ADD_UP_DOWN}, last_online = ? WHERE email_key = ?",
        [(*added(*step), now_ms, key) for key, step in sorted(moved.items())],
    )


def add_client_core_traffic(
    store,
    moved: dict[str, list[int]],
    core_values: dict[str, list[int]],
    instance: str,
    now_ms: int,
) -> None:
    """Add email key -> [up, down] to the clients' totals, in the order of their keys
    (the order bulk calls lock them in, `bulk.in_lock_order`, so a tick and a bulk call
    never wait on each other in a circle), and keep the core's [up, down] values they
    were measured against as `instance`'s."""
    add_client_traffic(store, moved, now_ms)
    upsert = replacing_upsert(("instance", "email_key"), ("up", "down"), store.dialect)
    store.execute_many(
        "INSERT INTO client_core_value (instance, email_key, up, down) "
        f"VALUES (?, ?, ?, ?){upsert}",
        [(instance, key, *core_values[key]) for key in sorted(moved)],
    )


def add_inbound_traffic(store, moved: list[tuple[tuple, int, int]], by: str = "id") -> None:
    """Add (the inbound's parameters in `INBOUND_BY[by]`, up, down) to inbound totals."""
    store.execute_many(
        f"UPDATE inbound SET {ADD_UP_DOWN} WHERE {INBOUND_BY[by]}",
        [(*added(up, down), *where) for where, up, down in moved],
    )


def add_outbound_traffic(store, moved: dict[str, list[int]], new_tags: list[str]) -> None:
    """Add tag -> [up, down] to outbound totals, making the rows of `new_tags` first."""
    store.execute_many(
        "INSERT INTO outbound_traffic (tag, up, down) VALUES (?, 0, 0)",
        [(tag,) for tag in new_tags],
    )
    store.execute_many(
        f"UPDATE outbound_traffic SET {ADD_UP_DOWN} WHERE tag = ?",
        [(*added(up, down), tag) for tag, (up, down) in moved.items()],
    )


def outbound_tags(store) -> set[str]:
    return {row[0] for row in store.rows("SELECT tag FROM outbound_traffic")}


def outbound_totals(store) -> list[tuple[str, int, int]]:
    """(tag, up, down) of every outbound counted, in tag order."""
    return store.rows("SELECT tag, up, down FROM outbound_traffic ORDER BY tag")


def zero_outbound_traffic(store, tag: str) -> None:
    """One outbound's totals back to zero."""
    store.execute("UPDATE outbound_traffic SET up = 0, down = 0 WHERE tag = ?", [tag])


def zero_all_outbound_traffic(store) -> None:
    store.execute("UPDATE outbound_traffic SET up = 0, down = 0")


def start_clocks(store, moved: set[str], now: int) -> None:
    """Expiry "start on first use" (stored as minus the duration) begins with the first
    bytes, here or on a node: it becomes now plus the duration. Few clients wait to
    start, and an index finds them, so only those are touched."""
    waiting = {row[0] for row in store.rows("SELECT email_key FROM client WHERE expiry_time < 0")}
    keys = sorted(waiting & moved)
    for chunk in chunks(keys):
        store.execute(
            "UPDATE client SET expiry_time = ? - expiry_time "
            f"WHERE expiry_time < 0 AND email_key IN ({', '.join('?' * len(chunk))})",
            [now, *chunk],
        )


def claim_unowned(store, instance: str) -> None:
    """The values kept before they were kept per instance (instance '') become
    `instance`'s, unless it has its own: the first instance to start after the upgrade
    is the panel that kept them, and collects its orphaned core against them."""
    if store.rows("SELECT 1 FROM core_counter WHERE instance = ? LIMIT 1", [instance]):
        return
    for table in ("core_counter", "client_core_value"):
        store.execute(f"UPDATE {table} SET instance = ? WHERE instance = ''", [instance])


def kept_core_values(store, instance: str) -> tuple[dict[str, list[int]], dict[str, int]]:
    """The values of `instance`'s core counters kept: by client (email key -> [up,
    down]) and the others by counter name."""
    users = {
        key: [up, down]
        for key, up, down in store.rows(
            "SELECT email_key, up, down FROM client_core_value WHERE instance = ?", [instance]
        )
    }
    others = store.rows("SELECT name, value FROM core_counter WHERE instance = ?", [instance])
    return users, dict(others)


def zero_core_values(store, instance: str) -> None:
    """Every kept value of `instance`'s core counters to zero: they belong to a core
    gone. The clients' go (rows of clients since deleted among them); the others' are
    kept at zero, to be set by name."""
    store.execute("UPDATE core_counter SET value = 0 WHERE instance = ?", [instance])
    store.execute("DELETE FROM client_core_value WHERE instance = ?", [instance])


def keep_core_values(
    store, instance: str, known: list[tuple[int, str]], fresh: list[tuple[str, int]]
) -> None:
    """`instance`'s kept counter values: (value, name) of counters kept before, (name,
    value) of new. A new one may have a row all the same (written by the panel process
    this one replaced while both ran, or by a tick that failed after its commit): it is
    set, not refused, else every tick after would fail on it."""
    store.execute_many(
        "UPDATE core_counter SET value = ? WHERE instance = ? AND name = ?",
        [(value, instance, name) for value, name in known],
    )
    upsert = replacing_upsert(("instance", "name"), ("value",), store.dialect)
    store.execute_many(
        f"INSERT INTO core_counter (instance, name, value) VALUES (?, ?, ?){upsert}",
        [(instance, name, value) for name, value in fresh],
    )


def client_counters(store, keys: list[str] | None) -> list[tuple[str, int, int]]:
    """(email, up, down) of every client's traffic, or of the clients of `keys`."""
    if keys is None:
        return store.rows("SELECT email, up, down FROM client_traffic")
    rows: list[tuple[str, int, int]] = []
    for chunk in chunks(sorted(keys)):
        rows += store.rows(
            "SELECT email, up, down FROM client_traffic "
            f"WHERE email_key IN ({', '.join('?' * len(chunk))})",
            chunk,
        )
    return rows


def inbound_counters(store) -> list[tuple[str, int, int]]:
    """(tag, up, down) of every inbound."""
    return store.rows("SELECT tag, up, down FROM inbound")


def mtproto_kept(store, inbound_id: int) -> dict[str, tuple[str, int, int]]:
    """email key -> (proxy instance, up, down) last seen of one MTProto inbound."""
    return {
        key: (instance, up, down)
        for key, instance, up, down in store.rows(
            "SELECT email_key, instance, up, down FROM mtproto_counter WHERE inbound_id = ?",
            [inbound_id],
        )
    }


def keep_mtproto_values(store, updates: list[tuple], inserts: list[tuple]) -> None:
    """Kept values of an MTProto inbound's counters: updates as (instance, up, down,
    inbound id, email key), inserts as (inbound id, instance, email key, up, down)."""
    store.execute_many(
        "UPDATE mtproto_counter SET instance = ?, up = ?, down = ? "
        "WHERE inbound_id = ? AND email_key = ?",
        updates,
    )
    store.execute_many(
        "INSERT INTO mtproto_counter (inbound_id, instance, email_key, up, down) "
        "VALUES (?, ?, ?, ?, ?)",
        inserts,
    )


def drop_mtproto_values(store, inbound_id: int) -> None:
    store.execute("DELETE FROM mtproto_counter WHERE inbound_id = ?", [inbound_id])


def never_online(store, keys: list[str]) -> list[str]:
    """Which of these email keys have never been online."""
    found: list[str] = []
    for part in chunks(keys):
        marks = ", ".join("?" for _ in part)
        found += [
            row[0]
            for row in store.rows(
                f"SELECT email_key FROM client_traffic WHERE last_online = 0 "
                f"AND email_key IN ({marks})",
                list(part),
            )
        ]
    return found
