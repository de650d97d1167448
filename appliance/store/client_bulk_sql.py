"""The statements of operations over many clients, by name: set-based inserts of a bulk
create, the lookups it makes by email key and secret, the sweeps over depleted clients,
and deletes by id. Every function runs inside the caller's transaction; rows are given
as iterables so a caller can pace their making (`Pace`)."""

from __future__ import annotations

from collections.abc import Iterable

from appliance.store.batches import chunks
from appliance.store.client_rules_sql import QUOTA_USED, USED, expired_sql

# The traffic a quota is judged by: the managing panel's totals where it pushed them,
# this panel's own counters elsewhere. Totals pushed before the client last changed here
# (re-enabled, its quota raised or its traffic reset by that panel) may be the ones that
# change undid: until fresh ones come, the quota does not cut that client off.
SWEEP_QUOTA_USED = (
    f"(c.total_bytes > 0 AND CASE WHEN m.email_key IS NULL THEN {USED} >= c.total_bytes "
    "WHEN m.updated_at >= c.updated_at THEN m.up + m.down >= c.total_bytes "
    "ELSE 1 = 0 END)"
)


def insert_clients(store, columns: list[str], rows: Iterable[tuple]) -> None:
    """Client rows of (email key, `columns`..., created at, updated at)."""
    names = ", ".join(["email_key", *columns, "created_at", "updated_at"])
    marks = ", ".join("?" * (len(columns) + 3))
    store.execute_many(f"INSERT INTO client ({names}) VALUES ({marks})", rows)


def insert_attachments(store, rows: Iterable[tuple[int, int]]) -> None:
    """Attachments as (client id, inbound id)."""
    store.execute_many("INSERT INTO client_inbound (client_id, inbound_id) VALUES (?, ?)", rows)


def insert_traffic(store, rows: Iterable[tuple]) -> None:
    """Traffic rows as (email key, email, up, down, enable, last online)."""
    store.execute_many(
        "INSERT INTO client_traffic (email_key, email, up, down, enable, last_online) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )


def ids_by_key(store, keys: list[str]) -> dict[str, int]:
    """email key -> client id, for the keys that name a client."""
    ids: dict[str, int] = {}
    for chunk in chunks(keys):
        ids.update(
            store.rows(
                f"SELECT email_key, id FROM client WHERE email_key IN ({_marks(chunk)})", chunk
            )
        )
    return ids


def secret_holders(store, secrets: list[str]) -> dict[str, str]:
    """MTProto secret -> email of the client holding it, for those held."""
    return dict(
        store.rows(
            f"SELECT mt_secret, email FROM client WHERE mt_secret IN ({_marks(secrets)})", secrets
        )
    )


def stored_keys(store, table: str, keys: list[str]) -> set[str]:
    """Which of these email keys `table` (client or client_traffic) holds."""
    return {
        row[0]
        for row in store.rows(
            f"SELECT email_key FROM {table} WHERE email_key IN ({_marks(keys)})", keys
        )
    }


def keys_with_traffic(store) -> list[str]:
    """The email keys of the clients whose counters are not zero."""
    return [
        row[0]
        for row in store.rows(
            "SELECT email_key FROM client_traffic WHERE up <> 0 OR down <> 0 ORDER BY email_key"
        )
    ]


def reset_all_traffic(store) -> int:
    """Every client's counters to zero; returns the rows that moved."""
    return store.execute("UPDATE client_traffic SET up = 0, down = 0 WHERE up <> 0 OR down <> 0")


def depleted_for_deletion(store, now_ms: int) -> list[int]:
    """Ids of the clients whose expiry passed, or whose quota is used up and will not be
    given a fresh one by a periodic reset."""
    expired, params = expired_sql(now_ms)
    rows = store.rows(
        "SELECT c.id FROM client c LEFT JOIN client_traffic t "
        f"ON t.email_key = c.email_key "
        f"WHERE ({QUOTA_USED} AND c.reset_days = 0) OR {expired}",
        params,
    )
    return [row[0] for row in rows]


def depleted_enabled(store, now_ms: int, master_guid: str) -> list[tuple[int, str, str]]:
    """(id, email, email key) of the enabled clients whose quota is used up (judged by
    the managing panel's totals where it pushed them, `SWEEP_QUOTA_USED`) or whose
    expiry passed."""
    expired, params = expired_sql(now_ms)
    return store.rows(
        "SELECT c.id, c.email, c.email_key FROM client c LEFT JOIN client_traffic t "
        "ON t.email_key = c.email_key LEFT JOIN master_traffic m "
        "ON m.email_key = c.email_key AND m.master_guid = ? "
        f"WHERE c.enable = ? AND ({SWEEP_QUOTA_USED} OR {expired})",
        [master_guid, True, *params],
    )


def due_for_renewal(store, now_ms: int) -> list[str]:
    """Emails of the clients with a reset period (`reset` days) whose expiry has passed:
    the sweep renews them before it judges anyone (the index on expiry finds them)."""
    rows = store.rows(
        "SELECT email FROM client WHERE expiry_time > 0 AND expiry_time <= ? AND reset_days > 0",
        (now_ms,),
    )
    return [row[0] for row in rows]


def still_enabled(store, ids: list[int]) -> set[int]:
    """Of `ids`, the clients still enabled, read anew once the caller's write transaction
    has begun, and on a networked server locked until it ends: two sweeps at once (after
    a core tick and a node poll, or on two instances) found the same clients, and each
    disabled them and raised their events. The second now waits for the first and finds
    them disabled."""
    lock = "" if store.dialect == "sqlite" else " FOR UPDATE"
    found: set[int] = set()
    for chunk in chunks(sorted(ids)):
        found.update(
            row[0]
            for row in store.rows(
                f"SELECT id FROM client WHERE enable = ? AND id IN ({_marks(chunk)}){lock}",
                [True, *chunk],
            )
        )
    return found


def disable(store, ids: list[int], keys: list[str]) -> None:
    """Disable the clients of `ids` and the traffic rows of their `keys`."""
    store.execute(f"UPDATE client SET enable = ? WHERE id IN ({_marks(ids)})", [False, *ids])
    store.execute(
        f"UPDATE client_traffic SET enable = ? WHERE email_key IN ({_marks(keys)})",
        [False, *keys],
    )


def unattached_ids(store) -> list[int]:
    """Ids of the clients attached to no inbound."""
    rows = store.rows(
        "SELECT c.id FROM client c WHERE NOT EXISTS "
        "(SELECT 1 FROM client_inbound ci WHERE ci.client_id = c.id)"
    )
    return [row[0] for row in rows]


def keys_of_ids(store, ids: list[int]) -> list[str]:
    return [
        row[0]
        for row in store.rows(f"SELECT email_key FROM client WHERE id IN ({_marks(ids)})", ids)
    ]


def delete_clients(store, ids: list[int]) -> None:
    """The clients of `ids` with their links and attachments."""
    marks = _marks(ids)
    store.execute(f"DELETE FROM client_link WHERE client_id IN ({marks})", ids)
    store.execute(f"DELETE FROM client_inbound WHERE client_id IN ({marks})", ids)
    store.execute(f"DELETE FROM client WHERE id IN ({marks})", ids)


def delete_traffic_and_ips(store, keys: list[str]) -> None:
    """The traffic rows and IP logs of some email keys."""
    marks = _marks(keys)
    store.execute(f"DELETE FROM client_traffic WHERE email_key IN ({marks})", keys)
    store.execute(f"DELETE FROM client_ip WHERE email_key IN ({marks})", keys)


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))
