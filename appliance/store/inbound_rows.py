"""The reads of inbound rows, by name, and the columns an inbound row is read by, in the
order `inbound_record` unpacks them (services/inbounds/views.py): one list for every
statement that reads inbounds whole. Every function runs in the caller's db_session."""

from __future__ import annotations

from collections.abc import Iterable

from appliance.store.batches import chunks

INBOUND_COLUMNS = [
    "id",
    "remark",
    "tag",
    "protocol",
    "listen",
    "port",
    "enable",
    "expiry_time",
    "total",
    "up",
    "down",
    "settings",
    "stream_settings",
    "sniffing",
    "node_id",
    "created_at",
    "updated_at",
]
INBOUND_SELECT = ", ".join(INBOUND_COLUMNS)


def all_inbound_rows(store) -> list[tuple]:
    """Every inbound's row in INBOUND_SELECT order, by id."""
    return store.rows(f"SELECT {INBOUND_SELECT} FROM inbound ORDER BY id")


def inbound_row(store, inbound_id: int) -> tuple | None:
    """An inbound's row in INBOUND_SELECT order, or None when there is none."""
    found = store.rows(f"SELECT {INBOUND_SELECT} FROM inbound WHERE id = ?", [inbound_id])
    return found[0] if found else None


def node_inbound_rows(store, node_id: int) -> list[tuple]:
    """The rows in INBOUND_SELECT order of the inbounds bound to `node_id`, by id."""
    return store.rows(
        f"SELECT {INBOUND_SELECT} FROM inbound WHERE node_id = ? ORDER BY id", [node_id]
    )


def ids_and_tags(store) -> list[tuple[int, str]]:
    """(id, tag) of every inbound, by id."""
    return store.rows("SELECT id, tag FROM inbound ORDER BY id")


def traffic_by_tag(store) -> list[tuple[str, int, int]]:
    """(tag, up, down) of every inbound, in tag order."""
    return store.rows("SELECT tag, up, down FROM inbound ORDER BY tag")


def tags_of_node(store, node_id: int) -> set[str]:
    """The tags (as this panel names them) of the inbounds bound to `node_id`."""
    return {row[0] for row in store.rows("SELECT tag FROM inbound WHERE node_id = ?", [node_id])}


def known_tags(store, tags: Iterable[str]) -> set[str]:
    """Those of `tags` that an inbound of this panel has."""
    found: set[str] = set()
    for chunk in chunks(sorted(set(tags))):
        found.update(
            row[0]
            for row in store.rows(
                f"SELECT tag FROM inbound WHERE tag IN ({', '.join('?' * len(chunk))})",
                list(chunk),
            )
        )
    return found
