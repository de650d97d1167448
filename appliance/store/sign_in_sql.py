"""The statements of the sign-in limiter's shared half: failures and blocks in the
database, so that every instance on one database judges a guesser by the same count.

A failure is a row per budget key it spends; a budget is spent when its key has as many
rows within the budget's window. Blocks are rows of `login_block` (by key digest, the end
in Unix seconds), which every instance reads when an attempt comes in.
"""

from __future__ import annotations

from appliance.store.batches import chunks


def count_failures(store, spent: list[tuple[str, int]], now_ms: int) -> list[int]:
    """Record a failure for each (key, window in seconds) of `spent`; returns how many
    failures each key has within its window, this one included."""
    store.execute_many(
        "INSERT INTO login_failure (key_hash, at) VALUES (?, ?)", [(k, now_ms) for k, _ in spent]
    )
    return [
        store.rows(
            "SELECT COUNT(*) FROM login_failure WHERE key_hash = ? AND at > ?",
            (key, now_ms - window * 1000),
        )[0][0]
        for key, window in spent
    ]


def forget_failures(store, keys: list[str], older_than_ms: int) -> None:
    """The failures of `keys` (blocked now, or signed in), and everyone's before
    `older_than_ms`, which no window reaches any more."""
    for chunk in chunks(sorted(keys)):
        store.execute(
            f"DELETE FROM login_failure WHERE key_hash IN ({', '.join('?' * len(chunk))})",
            chunk,
        )
    store.execute("DELETE FROM login_failure WHERE at < ?", (older_than_ms,))


def blocks(store, keys: list[str], now: int) -> dict[str, int]:
    """key -> the end (Unix seconds) of its block, for the keys of `keys` blocked now."""
    return dict(
        store.rows(
            "SELECT pair_hash, blocked_until FROM login_block "
            f"WHERE blocked_until > ? AND pair_hash IN ({', '.join('?' * len(keys))})",
            (now, *keys),
        )
    )
