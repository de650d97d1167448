"""The statements of webhooks: endpoints, the outbox of events and their delivery state.

An event is written once per endpoint that wants it, in the transaction of the change
that raised it (`insert_events`, one statement for many rows), so what was committed is
what will be sent, and nothing is sent for what was rolled back.

A deliverer takes rows with a lease (`claim`): it picks rows that are due, then marks
them with a token of its own and a time the lease ends, on the condition that no one
holds them; only the rows whose update went through are its to send. Two panels on one
database can run the same statement at once and never hold the same row, and a row
whose holder died is due again once its lease has run out. A row waits while an earlier
row of the same endpoint and subject (a client, a node) is still pending, so each
subject's events reach each endpoint in the order they were raised.
"""

from __future__ import annotations

from collections.abc import Iterable

ENDPOINT_COLUMNS = (
    "id, name, url, secret, events, enabled, allow_private, with_secrets, batch, "
    "created_at, updated_at"
)
OUTBOX_INSERT = (
    "INSERT INTO webhook_outbox (endpoint_id, event_id, event, subject, data, created_at, "
    "status, attempts, next_at, lease_until, lease_token, last_code, last_error, done_at) "
    "VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, 0, '', 0, '', 0)"
)
DELIVERY_COLUMNS = (
    "id, event_id, event, subject, status, attempts, last_code, last_error, created_at, "
    "next_at, done_at"
)


# ---- endpoints -------------------------------------------------------------------------


def endpoints(store) -> list[tuple]:
    """Every endpoint (ENDPOINT_COLUMNS), in the order they were added."""
    return store.rows(f"SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoint ORDER BY id")


def endpoint(store, endpoint_id: int) -> tuple | None:
    found = store.rows(
        f"SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoint WHERE id = ?", [endpoint_id]
    )
    return found[0] if found else None


def endpoint_named(store, name: str) -> int | None:
    found = store.rows("SELECT id FROM webhook_endpoint WHERE name = ?", [name])
    return found[0][0] if found else None


def enabled_endpoints(store) -> list[tuple[int, str]]:
    """(id, events as stored) of the enabled endpoints: who an event is written for."""
    return store.rows(
        "SELECT id, events FROM webhook_endpoint WHERE enabled = ? ORDER BY id", [True]
    )


def insert_endpoint(store, values: dict) -> int:
    columns = list(values)
    store.execute(
        f"INSERT INTO webhook_endpoint ({', '.join(columns)}) "
        f"VALUES ({', '.join('?' for _ in columns)})",
        [values[c] for c in columns],
    )
    # Names are unique: the row just inserted is the one of this name.
    return store.rows("SELECT id FROM webhook_endpoint WHERE name = ?", [values["name"]])[0][0]


def update_endpoint(store, endpoint_id: int, values: dict) -> None:
    sets = ", ".join(f"{column} = ?" for column in values)
    store.execute(
        f"UPDATE webhook_endpoint SET {sets} WHERE id = ?", [*values.values(), endpoint_id]
    )


def delete_endpoint(store, endpoint_id: int) -> int:
    """The endpoint and its outbox (a delivery to no endpoint is no delivery)."""
    store.execute("DELETE FROM webhook_outbox WHERE endpoint_id = ?", [endpoint_id])
    return store.execute("DELETE FROM webhook_endpoint WHERE id = ?", [endpoint_id])


# ---- the outbox ------------------------------------------------------------------------


def insert_events(store, rows: Iterable[tuple]) -> None:
    """Outbox rows (endpoint id, event id, event, subject, data, created at, due at), in
    one statement inside the caller's transaction."""
    store.execute_many(OUTBOX_INSERT, rows)


def due(store, now: int, limit: int) -> list[int]:
    """Ids of pending rows of enabled endpoints due now, unheld, with no earlier pending
    row of their endpoint and subject: oldest first. (A disabled endpoint's rows wait,
    and are due again once it is enabled.)"""
    return [
        row[0]
        for row in store.rows(
            "SELECT o.id FROM webhook_outbox o WHERE o.status = 'pending' AND o.next_at <= ? "
            "AND o.lease_until <= ? AND o.endpoint_id IN "
            "(SELECT e.id FROM webhook_endpoint e WHERE e.enabled = ?) "
            "AND NOT EXISTS (SELECT 1 FROM webhook_outbox p "
            "WHERE p.endpoint_id = o.endpoint_id AND p.subject = o.subject "
            "AND p.status = 'pending' AND p.id < o.id) ORDER BY o.id LIMIT ?",
            [now, now, True, limit],
        )
    ]


def claim(store, ids: list[int], now: int, until: int, token: str) -> int:
    """Lease the rows of `ids` no one holds to `token` until `until`; the rows leased."""
    marks = ", ".join("?" for _ in ids)
    return store.execute(
        f"UPDATE webhook_outbox SET lease_until = ?, lease_token = ? WHERE id IN ({marks}) "
        "AND status = 'pending' AND lease_until <= ?",
        [until, token, *ids, now],
    )


def release(store, prefix: str) -> int:
    """Let go of the rows held under leases whose token starts with `prefix` (a lease
    owner: hex digits, nothing LIKE reads as a wildcard)."""
    return store.execute(
        "UPDATE webhook_outbox SET lease_until = 0, lease_token = '' "
        "WHERE status = 'pending' AND lease_token LIKE ?",
        [prefix + "%"],
    )


def leased(store, token: str) -> list[tuple]:
    """(id, endpoint id, event id, event, subject, data, created at, attempts) of the
    rows `token` holds (only pending rows are held), oldest first. Sorted here, not by
    the statement: asked for in id order, SQLite walked every pending row by the
    status index instead of finding the few held through the token's."""
    return sorted(
        store.rows(
            "SELECT id, endpoint_id, event_id, event, subject, data, created_at, attempts "
            "FROM webhook_outbox WHERE lease_token = ?",
            [token],
        )
    )


def record_outcomes(store, outcomes: list[tuple]) -> None:
    """(status, attempts, next at, code, error, done at, id, token) for rows a lease
    held: written only where the lease is still the holder's."""
    store.execute_many(
        "UPDATE webhook_outbox SET status = ?, attempts = ?, next_at = ?, last_code = ?, "
        "last_error = ?, done_at = ?, lease_until = 0, lease_token = '' "
        "WHERE id = ? AND lease_token = ?",
        outcomes,
    )


def deliveries(store, endpoint_id: int, limit: int) -> list[tuple]:
    """The latest rows of an endpoint (DELIVERY_COLUMNS), newest first."""
    return store.rows(
        f"SELECT {DELIVERY_COLUMNS} FROM webhook_outbox WHERE endpoint_id = ? "
        "ORDER BY id DESC LIMIT ?",
        [endpoint_id, limit],
    )


def counts(store) -> dict[tuple[int, str], int]:
    """(endpoint id, status) -> how many rows."""
    return {
        (endpoint_id, status): count
        for endpoint_id, status, count in store.rows(
            "SELECT endpoint_id, status, COUNT(*) FROM webhook_outbox GROUP BY endpoint_id, status"
        )
    }


def prune(store, before: int) -> int:
    """Forget rows delivered or failed before `before`."""
    return store.execute(
        "DELETE FROM webhook_outbox WHERE status <> 'pending' AND done_at < ?", [before]
    )


# ---- reminders -------------------------------------------------------------------------


def expiring(store, since: int, until: int) -> list[tuple[str, int]]:
    """(email key, expiry) of the clients whose expiry falls in [since, until] (those
    the sweep switched off for it too)."""
    return store.rows(
        "SELECT email_key, expiry_time FROM client WHERE expiry_time >= ? "
        "AND expiry_time <= ? AND expiry_time > 0",
        [since, until],
    )


def using(store, least_percent: int) -> list[tuple[str, int, int]]:
    """(email key, quota, bytes used) of enabled clients with a quota who used at least
    `least_percent` of it."""
    return store.rows(
        "SELECT c.email_key, c.total_bytes, t.up + t.down FROM client c "
        "JOIN client_traffic t ON t.email_key = c.email_key "
        "WHERE c.enable = ? AND c.total_bytes > 0 AND (t.up + t.down) * 100 >= c.total_bytes * ?",
        [True, least_percent],
    )


def forget_usage_under(store, reminders: list[str], least_percent: int) -> int:
    """Forget the usage `reminders` (event:percent names) of clients now under
    `least_percent` of their quota, or gone: a traffic reset, by whatever path, lets
    them be raised again. The reminders are named exactly, to read migration 23's index."""
    names = ", ".join("?" for _ in reminders)
    return store.execute(
        f"DELETE FROM webhook_mark WHERE event IN ({names}) AND NOT EXISTS ("
        "SELECT 1 FROM client c JOIN client_traffic t ON t.email_key = c.email_key "
        "WHERE c.email_key = webhook_mark.subject AND c.total_bytes > 0 "
        "AND (t.up + t.down) * 100 >= c.total_bytes * ?)",
        [*reminders, least_percent],
    )


def marks(store, subjects: list[str]) -> dict[tuple[str, str], int]:
    """(subject, reminder) -> the expiry or quota it was raised for."""
    if not subjects:
        return {}
    marks_sql = ", ".join("?" for _ in subjects)
    return {
        (subject, event): mark
        for subject, event, mark in store.rows(
            f"SELECT subject, event, mark FROM webhook_mark WHERE subject IN ({marks_sql})",
            subjects,
        )
    }


def set_marks(store, new: list[tuple[str, str, int]], changed: list[tuple[int, str, str]]) -> None:
    """Insert (subject, reminder, mark) rows and update (mark, subject, reminder) ones."""
    store.execute_many("INSERT INTO webhook_mark (subject, event, mark) VALUES (?, ?, ?)", new)
    store.execute_many("UPDATE webhook_mark SET mark = ? WHERE subject = ? AND event = ?", changed)


# ---- devices ---------------------------------------------------------------------------


def last_id(store, table: str) -> int:
    """The last row of a device table (`client_device` or `device_refusal`)."""
    return store.rows(f"SELECT COALESCE(MAX(id), 0) FROM {table}")[0][0]


def devices_after(store, table: str, after_id: int, limit: int) -> list[tuple]:
    """(id, email key, hwid, os, os version, model, user agent, address, first seen) of
    the rows of `table` (devices admitted or refused) after row `after_id`, in order."""
    return store.rows(
        "SELECT d.id, c.email_key, d.hwid, d.os, d.os_version, d.model, d.user_agent, "
        f"d.address, d.first_seen FROM {table} d JOIN client c ON c.sub_id = d.sub_id "
        "WHERE d.id > ? ORDER BY d.id LIMIT ?",
        [after_id, limit],
    )


def move_mark(store, subject: str, event: str, old: int, new: int) -> int:
    """Move a mark from `old` to `new`; 0 when it no longer held `old` (another panel
    moved it first)."""
    return store.execute(
        "UPDATE webhook_mark SET mark = ? WHERE subject = ? AND event = ? AND mark = ?",
        [new, subject, event, old],
    )
