"""The statements the review of an imported SQLite file runs on it, by name
(services/admin/import_review.py): the rows it judges (settings, inbounds, hosts,
outbound subscriptions) and the repairs it makes. They run on the file's own `sqlite3`
connection, opened in autocommit mode; the repairs go in one transaction (`transaction`).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator


def settings(conn: sqlite3.Connection) -> dict[str, str]:
    """key -> stored JSON text of every setting row."""
    return dict(conn.execute("SELECT key, value FROM setting").fetchall())


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """The repairs made inside as one transaction, committed when the block ends without
    an error (otherwise left open, and undone when the connection closes)."""
    conn.execute("BEGIN")
    yield
    conn.execute("COMMIT")


def write_setting(conn: sqlite3.Connection, key: str, raw: str | None) -> None:
    """Store `raw` (JSON text) as the setting's value; None deletes the row, back to the
    default."""
    if raw is None:
        conn.execute("DELETE FROM setting WHERE key = ?", (key,))
    else:
        conn.execute("UPDATE setting SET value = ? WHERE key = ?", (raw, key))


def inbound_rows(conn: sqlite3.Connection) -> Iterator[tuple]:
    """(id, remark, tag, protocol, listen, port, enable, expiry time, total, settings,
    stream settings, sniffing, node id) of every inbound, by id, read as they are asked
    for."""
    return conn.execute(
        "SELECT id, remark, tag, protocol, listen, port, enable, expiry_time, total, settings, "
        "stream_settings, sniffing, node_id FROM inbound ORDER BY id"
    )


def host_rows(conn: sqlite3.Connection) -> list[tuple]:
    """(id, remark, address, port, security, sni, tags) of every host, by id."""
    return conn.execute(
        "SELECT id, remark, address, port, security, sni, tags FROM host ORDER BY id"
    ).fetchall()


def delete_host(conn: sqlite3.Connection, host_id: int) -> None:
    conn.execute("DELETE FROM host WHERE id = ?", (host_id,))


def subscription_rows(conn: sqlite3.Connection) -> list[tuple]:
    """(id, remark, url, tag prefix, update interval, enabled, allow private, prepend) of
    every outbound subscription, by id."""
    return conn.execute(
        "SELECT id, remark, url, tag_prefix, update_interval, enabled, allow_private, prepend "
        "FROM outbound_sub ORDER BY id"
    ).fetchall()


def delete_subscription(conn: sqlite3.Connection, sub_id: int) -> None:
    conn.execute("DELETE FROM outbound_sub WHERE id = ?", (sub_id,))
