"""The statements of the managing panel's totals on a node (`master_traffic`, one row per
managing panel's guid and email key), by name: which keys a push may keep, the totals it
keeps, and the totals of one client. Every function runs in the caller's db_session."""

from __future__ import annotations

from appliance.store.batches import chunks


def client_keys(store, keys: list[str]) -> set[str]:
    """Those of `keys` that name a client of this panel."""
    found: set[str] = set()
    for chunk in chunks(keys):
        found |= {
            row[0]
            for row in store.rows(
                f"SELECT email_key FROM client WHERE email_key IN ({_marks(chunk)})", chunk
            )
        }
    return found


def kept_keys(store, guid: str, keys: list[str]) -> set[str]:
    """Those of `keys` that totals pushed by the panel of `guid` are kept for."""
    found: set[str] = set()
    for chunk in chunks(keys):
        found |= {
            row[0]
            for row in store.rows(
                "SELECT email_key FROM master_traffic "
                f"WHERE master_guid = ? AND email_key IN ({_marks(chunk)})",
                [guid, *chunk],
            )
        }
    return found


def keep_totals(store, updates: list[tuple], inserts: list[tuple]) -> None:
    """Totals already kept as (up, down, updated at, guid, email key); new ones as (guid,
    email key, up, down, updated at)."""
    store.execute_many(
        "UPDATE master_traffic SET up = ?, down = ?, updated_at = ? "
        "WHERE master_guid = ? AND email_key = ?",
        updates,
    )
    store.execute_many(
        "INSERT INTO master_traffic (master_guid, email_key, up, down, updated_at) "
        "VALUES (?, ?, ?, ?, ?)",
        inserts,
    )


def totals_of(store, guid: str, key: str) -> tuple[int, int, int] | None:
    """(up, down, updated at) the panel of `guid` last pushed for an email key, or None."""
    rows = store.rows(
        "SELECT up, down, updated_at FROM master_traffic WHERE master_guid = ? AND email_key = ?",
        [guid, key],
    )
    return rows[0] if rows else None


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))
