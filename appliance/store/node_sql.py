"""The statements over the nodes and what is bound to them, by name: the node rows the
views and the metrics read, which nodes inbounds are bound to, the clients a node should
hold, and the lookups that judge what a node reports (only of the clients bound to it).

Lookups by many keys go a chunk at a time (`chunks`), so a poll of a few clients costs a
few lookups at any fleet size. Every function runs in the caller's db_session.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from appliance.store.batches import chunks
from appliance.store.client_rows import CLIENT_SELECT
from appliance.store.subscription_reads import Rows


def nodes_by_name(store) -> list[tuple[int, str, bool, bool]]:
    """(id, name, enable, dirty) of every node, in name order."""
    return store.rows("SELECT id, name, enable, dirty FROM node ORDER BY name")


def dirty_flags(store, node_ids: list[int]) -> dict[int, bool]:
    """node id -> whether it has changes not yet applied, for those of `node_ids` that
    exist."""
    return dict(
        store.rows(f"SELECT id, dirty FROM node WHERE id IN ({_marks(node_ids)})", node_ids)
    )


def addresses(rows: Rows, node_ids: list[int]) -> dict[int, str]:
    """node id -> address, for those of `node_ids` that exist; `rows` is `Store.rows` or
    `ReadConnections.rows`."""
    return dict(rows(f"SELECT id, address FROM node WHERE id IN ({_marks(node_ids)})", node_ids))


def bound_node_ids(store) -> set[int]:
    """The ids of the (existing) nodes some inbound is bound to."""
    rows = store.rows("SELECT DISTINCT i.node_id FROM inbound i JOIN node n ON n.id = i.node_id")
    return {row[0] for row in rows}


def node_client_rows(store, node_id: int | None, keys: list[str] | None) -> Iterator[tuple]:
    """Rows in CLIENT_SELECT order followed by (node id, inbound tag, email key), one per
    attachment of a client to an inbound bound to `node_id` (to any node when None), of
    all clients or of those of `keys`; read a chunk of keys at a time."""
    base = (
        f"SELECT {CLIENT_SELECT}, i.node_id, i.tag, c.email_key "
        "FROM client c JOIN client_inbound ci ON ci.client_id = c.id "
        "JOIN inbound i ON i.id = ci.inbound_id "
        "LEFT JOIN client_traffic t ON t.email_key = c.email_key "
    )
    if node_id is None:
        condition, params = "WHERE i.node_id IS NOT NULL", []
    else:
        condition, params = "WHERE i.node_id = ?", [node_id]
    statements = []
    if keys is None:
        statements.append((base + condition, params))
    else:
        for part in chunks(sorted(set(keys))):
            statements.append(
                (base + condition + f" AND c.email_key IN ({_marks(part)})", [*params, *part])
            )
    for statement, values in statements:
        yield from store.rows(statement, values)


def depleted_counts(store, depleted: tuple[str, list]) -> list[tuple[int, int]]:
    """(node id, how many distinct clients attached to its inbounds are depleted) for each
    node that has some; `depleted` is the condition and its parameters
    (`client_rules_sql.depleted_sql`)."""
    condition, params = depleted
    return store.rows(
        "SELECT i.node_id, COUNT(DISTINCT c.id) FROM client_inbound ci "
        "JOIN inbound i ON i.id = ci.inbound_id JOIN client c ON c.id = ci.client_id "
        "LEFT JOIN client_traffic t ON t.email_key = c.email_key "
        f"WHERE i.node_id IS NOT NULL AND {condition} GROUP BY i.node_id",
        params,
    )


def bound_keys(store, node_id: int, keys: Iterable[str]) -> set[str]:
    """The email keys among `keys` of clients attached to an inbound bound to `node_id`."""
    found: set[str] = set()
    for chunk in chunks(sorted(set(keys))):
        found.update(
            row[0]
            for row in store.rows(
                "SELECT DISTINCT c.email_key FROM client c "
                "JOIN client_inbound ci ON ci.client_id = c.id "
                "JOIN inbound i ON i.id = ci.inbound_id "
                f"WHERE i.node_id = ? AND c.email_key IN ({', '.join('?' * len(chunk))})",
                [node_id, *chunk],
            )
        )
    return found


def known_emails(store, keys: Iterable[str]) -> dict[str, str]:
    """email key -> email of the clients this panel has among `keys`."""
    found: dict[str, str] = {}
    for chunk in chunks(sorted(set(keys))):
        found.update(
            store.rows(
                "SELECT email_key, email FROM client "
                f"WHERE email_key IN ({', '.join('?' * len(chunk))})",
                list(chunk),
            )
        )
    return found


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))
