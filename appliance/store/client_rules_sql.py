"""The client rules of `appliance.domain.clients` as SQL conditions, for the queries that
judge thousands of clients at once (the paged list's filters, its summary).

Each function returns a WHERE fragment over `c` (client) and `t` (its traffic row, LEFT
JOINed, so possibly NULL) with its parameters in order. The same text runs on SQLite,
PostgreSQL and MariaDB; tests/test_client_rules_sql.py checks every one, row by row,
against the Python rule it stands for, on each backend.
"""

from __future__ import annotations

# Bytes used; a client without a traffic row has used nothing.
USED = "(COALESCE(t.up, 0) + COALESCE(t.down, 0))"
QUOTA_USED = f"(c.total_bytes > 0 AND {USED} >= c.total_bytes)"


def expired_sql(now_ms: int) -> tuple[str, list]:
    """`expired`: a positive expiry at or before `now_ms`."""
    return "(c.expiry_time > 0 AND c.expiry_time <= ?)", [now_ms]


def depleted_sql(now_ms: int) -> tuple[str, list]:
    """`depleted`: quota used up or expiry passed (an expiry that starts on first use
    has not)."""
    expired, params = expired_sql(now_ms)
    return f"({QUOTA_USED} OR {expired})", params


def active_sql(now_ms: int) -> tuple[str, list]:
    """`active`: enabled and not depleted (the paged list's "active" filter)."""
    depleted, params = depleted_sql(now_ms)
    return f"(c.enable = ? AND NOT {depleted})", [True, *params]


def expiring_sql(now_ms: int, horizon_ms: int, margin_bytes: int) -> tuple[str, list]:
    """Enabled, not yet depleted, and with an expiry by `horizon_ms` or at most
    `margin_bytes` of quota left."""
    depleted, params = depleted_sql(now_ms)
    return (
        f"(c.enable = ? AND NOT {depleted} AND ("
        "(c.expiry_time > 0 AND c.expiry_time <= ?) "
        f"OR (c.total_bytes > 0 AND c.total_bytes - {USED} <= ?)))",
        [True, *params, horizon_ms, margin_bytes],
    )


def near_limits_sql(horizon_ms: int, margin_bytes: int) -> tuple[str, list]:
    """Within `margin_bytes` of the quota (or past it), or with an expiry by
    `horizon_ms` (or past): the clients whose bucket more traffic can change."""
    return (
        f"((c.total_bytes > 0 AND c.total_bytes - {USED} <= ?) "
        "OR (c.expiry_time > 0 AND c.expiry_time <= ?))",
        [margin_bytes, horizon_ms],
    )
