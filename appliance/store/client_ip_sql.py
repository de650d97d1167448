"""The statements of the client IP log, by name: one row per client and address with the
last second it was seen (`client_ip`, unique on both), read by email key."""

from __future__ import annotations

from appliance.store.batches import chunks


def ip_log(store) -> list[tuple[str, str, int]]:
    """(email, ip, seen at) of every address logged, by client, the latest first."""
    return store.rows(
        "SELECT c.email, i.ip, i.seen_at FROM client_ip i "
        "JOIN client c ON c.email_key = i.email_key "
        "ORDER BY c.email_key, i.seen_at DESC, i.ip"
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


def logged(store, keys: list[str]) -> list[tuple[int, str, str, int]]:
    """(row id, email key, ip, seen at) of the addresses logged for `keys`."""
    found: list[tuple[int, str, str, int]] = []
    for chunk in chunks(keys):
        found += store.rows(
            "SELECT id, email_key, ip, seen_at FROM client_ip "
            f"WHERE email_key IN ({_marks(chunk)})",
            chunk,
        )
    return found


def log_sightings(store, updates: list[tuple[int, int]], inserts: list[tuple]) -> None:
    """Later sightings of logged addresses as (seen at, row id); new ones as (email key,
    ip, seen at)."""
    if updates:
        store.execute_many("UPDATE client_ip SET seen_at = ? WHERE id = ?", updates)
    if inserts:
        store.execute_many(
            "INSERT INTO client_ip (email_key, ip, seen_at) VALUES (?, ?, ?)", inserts
        )


def seen_since(store, keys: list[str], since: int) -> list[tuple[str, str]]:
    """(email key, ip) of the addresses of `keys` seen at `since` (unix s) or later, in
    the order they were first logged."""
    found: list[tuple[str, str]] = []
    for chunk in chunks(keys):
        found += store.rows(
            f"SELECT email_key, ip FROM client_ip WHERE email_key IN ({_marks(chunk)}) "
            "AND seen_at >= ? ORDER BY id",
            [*chunk, since],
        )
    return found


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))
