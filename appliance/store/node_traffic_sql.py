"""The statements of the nodes' traffic, by name: the counter values kept per node
(`node_counter`, the last each poll saw, so each byte is added once) and the totals of a
node's clients pushed down to it. Every function runs in the caller's db_session."""

from __future__ import annotations

from appliance.store.batches import chunks


def kept_counters(store, node_id: int) -> list[tuple[str, int, int]]:
    """(counter name, up, down) of the values kept for `node_id`."""
    return store.rows("SELECT name, up, down FROM node_counter WHERE node_id = ?", [node_id])


def keep_counters(store, updates: list[tuple], inserts: list[tuple]) -> None:
    """Kept values that moved as (up, down, node id, name); new ones as (node id, name,
    up, down)."""
    store.execute_many(
        "UPDATE node_counter SET up = ?, down = ? WHERE node_id = ? AND name = ?", updates
    )
    store.execute_many(
        "INSERT INTO node_counter (node_id, name, up, down) VALUES (?, ?, ?, ?)", inserts
    )


def drop_counters(store, node_id: int, names: list[str]) -> None:
    """Forget the kept values of `names` (counters the node no longer answers)."""
    for chunk in chunks(names):
        store.execute(
            "DELETE FROM node_counter WHERE node_id = ? "
            f"AND name IN ({', '.join('?' * len(chunk))})",
            [node_id, *chunk],
        )


def client_totals(store, node_id: int, keys: list[str] | None) -> list[tuple[str, str, int, int]]:
    """(email key, email, up, down) of the clients attached to the inbounds of `node_id`,
    of `keys` only (a chunk at a time) unless None."""
    select = (
        "SELECT DISTINCT t.email_key, c.email, t.up, t.down FROM client_inbound ci "
        "JOIN inbound i ON i.id = ci.inbound_id JOIN client c ON c.id = ci.client_id "
        "JOIN client_traffic t ON t.email_key = c.email_key WHERE i.node_id = ?"
    )
    if keys is None:
        return store.rows(select, [node_id])
    rows = []
    for chunk in chunks(sorted(keys)):
        rows += store.rows(
            f"{select} AND t.email_key IN ({', '.join('?' * len(chunk))})",
            [node_id, *chunk],
        )
    return rows
