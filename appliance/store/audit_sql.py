"""The statements of the audit log, by name: its filters as a WHERE clause, a page of
entries newest first with their count, the batches an export reads, and the prune of old
entries. Entries are written as Pony entities (`AuditEntry`); only the reads over many
and the prune run as SQL.
"""

from __future__ import annotations

COLUMNS = (
    "id, at, actor, actor_kind, method, route, path, target, address, success, status, "
    "message, fields"
)


def filters(actor: str, route: str) -> tuple[str, list]:
    """The WHERE clause (empty without filters) and its parameters for entries of
    `actor` (exact) whose route holds `route` (letter case ignored); "" filters nothing."""
    where, params = [], []
    if actor:
        where.append("actor = ?")
        params.append(actor)
    if route:
        escaped = route.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_")
        where.append("LOWER(route) LIKE ? ESCAPE '!'")
        params.append(f"%{escaped}%")
    return (" WHERE " + " AND ".join(where) if where else ""), params


def count(store, where: str, params: list) -> int:
    """How many entries the clause of `filters` selects."""
    return store.rows(f"SELECT COUNT(*) FROM audit_entry{where}", params)[0][0]


def newest_page(store, where: str, params: list, size: int, offset: int) -> list[tuple]:
    """`size` entries (in COLUMNS order) after the first `offset`, newest first."""
    return store.rows(
        f"SELECT {COLUMNS} FROM audit_entry{where} ORDER BY id DESC LIMIT ? OFFSET ?",
        [*params, size, offset],
    )


def batch_before(store, where: str, params: list, before: int | None, limit: int) -> list[tuple]:
    """At most `limit` entries (in COLUMNS order), newest first, with ids below `before`
    (from the newest when None)."""
    clause, values = where, list(params)
    if before is not None:
        joiner = " AND " if where else " WHERE "
        clause, values = f"{where}{joiner}id < ?", [*params, before]
    return store.rows(
        f"SELECT {COLUMNS} FROM audit_entry{clause} ORDER BY id DESC LIMIT ?",
        [*values, limit],
    )


def delete_before(store, cutoff_ms: int) -> int:
    """Delete the entries written before `cutoff_ms`; returns how many went."""
    return store.execute("DELETE FROM audit_entry WHERE at < ?", (cutoff_ms,))
