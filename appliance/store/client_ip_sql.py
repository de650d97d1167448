"""The statements of the client IP log, by name: one row per client, address and server
that saw it (empty: this panel; `n<id>`: a node) with the last second it was seen
(`client_ip`, unique on the three), read by email key."""

from __future__ import annotations

from appliance.store.batches import chunks


def ip_log(store) -> list[tuple[str, str, int]]:
    """(email, ip, seen at) of every address this panel's own core saw, by client, the
    latest first."""
    return store.rows(
        "SELECT c.email, i.ip, i.seen_at FROM client_ip i "
        "JOIN client c ON c.email_key = i.email_key WHERE i.server = '' "
        "ORDER BY c.email_key, i.seen_at DESC, i.ip"
    )


def client_log(store, key: str) -> list[tuple[str, int, str]]:
    """(ip, seen at, server) of one client's addresses, the latest first."""
    return store.rows(
        "SELECT ip, seen_at, server FROM client_ip WHERE email_key = ? "
        "ORDER BY seen_at DESC, ip, server",
        [key],
    )


def recent(store, since: int, limit: int) -> list[tuple[str, str, int]]:
    """(email, ip, seen at) of the addresses this panel's own core saw at `since` (unix
    s) or later, the latest first, at most `limit`."""
    return store.rows(
        "SELECT c.email, i.ip, i.seen_at FROM client_ip i "
        "JOIN client c ON c.email_key = i.email_key "
        "WHERE i.server = '' AND i.seen_at >= ? ORDER BY i.seen_at DESC, i.id LIMIT ?",
        [since, limit],
    )


def ip_limits(store, keys: list[str]) -> list[tuple[str, str, int]]:
    """(email key, email, IP limit) of the clients of `keys`."""
    found: list[tuple[str, str, int]] = []
    for chunk in chunks(keys):
        found += store.rows(
            f"SELECT email_key, email, limit_ip FROM client WHERE email_key IN ({_marks(chunk)})",
            chunk,
        )
    return found


def logged(store, keys: list[str], server: str = "") -> list[tuple[int, str, str, int]]:
    """(row id, email key, ip, seen at) of the addresses `server` saw for `keys`."""
    found: list[tuple[int, str, str, int]] = []
    for chunk in chunks(keys):
        found += store.rows(
            "SELECT id, email_key, ip, seen_at FROM client_ip "
            f"WHERE email_key IN ({_marks(chunk)}) AND server = ?",
            [*chunk, server],
        )
    return found


def log_sightings(store, updates: list[tuple[int, int]], inserts: list[tuple]) -> None:
    """Later sightings of logged addresses as (seen at, row id); new ones as (email key,
    ip, seen at, server)."""
    if updates:
        store.execute_many("UPDATE client_ip SET seen_at = ? WHERE id = ?", updates)
    if inserts:
        store.execute_many(
            "INSERT INTO client_ip (email_key, ip, seen_at, server) VALUES (?, ?, ?, ?)", inserts
        )


def seen_since(store, keys: list[str], since: int) -> list[tuple[str, str, str]]:
    """(email key, ip, server) of the addresses of `keys` any server saw at `since` (unix
    s) or later, in the order they were first logged."""
    found: list[tuple[str, str, str]] = []
    for chunk in chunks(keys):
        found += store.rows(
            "SELECT email_key, ip, server FROM client_ip "
            f"WHERE email_key IN ({_marks(chunk)}) "
            "AND seen_at >= ? ORDER BY id",
            [*chunk, since],
        )
    return found


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))
