"""Usage history: what each client and each inbound moved, hour by hour.

Every path that adds traffic to the totals (the core's tick, the MTProto proxies, the
node polls) calls `record` (store/usage_sql.py) with the same amounts in the same
transaction, so the history of a client or inbound sums to what its totals gained since
history began: a tick that fails leaves both as they were. A tick writes one row per
client that moved, into the current hour's bucket through the unique index (insert or
add), which leads with the bucket: the current hour's rows sit together at the index's
end, so a tick's cost follows what moved, not how much history is kept.

Hourly buckets are kept for 90 days; `prune` then adds them into daily buckets (kept for
a year) one hour at a time, oldest first, and drops daily buckets older than a year.
Resetting a client's or inbound's counters leaves its history alone. Deleting a client
keeps its history until it ages out: a client created again with the same email
continues it. Deleting an inbound drops its history.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.domain.parse import parse_id
from appliance.errors import ServiceError
from appliance.runtime.jobs import breathe
from appliance.store import usage_sql
from appliance.store.usage_sql import DAY, HOUR, OWNERS

HOURLY_DAYS = 90
DAILY_DAYS = 365
STEPS = {"hour": HOUR, "day": DAY}
# The longest range one request may ask for, in buckets of its step.
MOST_BUCKETS = {"hour": 24 * 93, "day": 400}
DEFAULT_BUCKETS = {"hour": 24, "day": 30}


class UsageHistory:
    def __init__(self, store, clock=time.time):
        self.store = store
        self.clock = clock

    def client(self, email: str, query: dict) -> dict:
        """A client's buckets over a range (`from`, `to` in ms, `step` hour or day)."""
        key = email_key(email or "")
        with db_session:
            if not usage_sql.has_client_traffic(self.store, key):
                raise ServiceError(f"no client with email {email!r}")
            return self._read("client", key, query)

    def inbound(self, inbound_id, query: dict) -> dict:
        """An inbound's buckets over a range, as `client`."""
        inbound_id = parse_id(inbound_id, "inbound id")
        with db_session:
            if not usage_sql.has_inbound(self.store, inbound_id):
                raise ServiceError(f"no inbound with id {inbound_id}")
            return self._read("inbound", inbound_id, query)

    def _read(self, kind: str, owner, query: dict) -> dict:
        step_name, start, end = _range(query, int(self.clock()))
        step = STEPS[step_name]
        sums: dict[int, list[int]] = {}
        for at, up, down in self._rows(kind, owner, start, end):
            pair = sums.setdefault(at // step * step, [0, 0])
            pair[0] += up
            pair[1] += down
        buckets = [
            {"at": at * 1000, "up": up, "down": down} for at, (up, down) in sorted(sums.items())
        ]
        return {
            "step": step_name,
            "from": start * 1000,
            "to": end * 1000,
            "up": sum(b["up"] for b in buckets),
            "down": sum(b["down"] for b in buckets),
            "buckets": buckets,
        }

    def _rows(self, kind: str, owner, start: int, end: int) -> list[tuple]:
        return usage_sql.bucket_rows(self.store.rows, kind, owner, start, end)

    def prune(self) -> int:
        """Add hourly buckets older than 90 days into daily ones and drop daily buckets
        older than a year; returns the hours rolled up. One hour per transaction, oldest
        first: a prune stopped midway loses nothing and the next goes on from there."""
        now = int(self.clock())
        rolled = 0
        for kind in OWNERS:
            cutoff = (now - HOURLY_DAYS * DAY) // DAY * DAY
            while True:
                with db_session:
                    oldest = usage_sql.oldest_hour(self.store, kind)
                    if oldest is None or oldest >= cutoff:
                        break
                    usage_sql.roll_up(self.store, kind, oldest)
                rolled += 1
                breathe()
            with db_session:
                usage_sql.drop_days_before(self.store, kind, now - DAILY_DAYS * DAY)
        return rolled


def month_usage(rows: Callable[[str, list], list[tuple]], keys: list[str], now: int) -> dict:
    """The daily usage of the current UTC month (to `now`, in seconds), summed over the
    clients of `keys` (one subscription's), read through `rows(statement, params)`: what
    the subscription's owner sees on its page. Every day of the month so far is listed."""
    start = int(
        datetime.fromtimestamp(now, UTC)
        .replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        .timestamp()
    )
    days: dict[int, list[int]] = {}
    for key in keys:
        for at, up, down in usage_sql.bucket_rows(rows, "client", key, start, now):
            pair = days.setdefault(at // DAY * DAY, [0, 0])
            pair[0] += up
            pair[1] += down
    buckets = [
        {"at": at * 1000, "up": days.get(at, (0, 0))[0], "down": days.get(at, (0, 0))[1]}
        for at in range(start, now // DAY * DAY + 1, DAY)
    ]
    return {
        "from": start * 1000,
        "up": sum(b["up"] for b in buckets),
        "down": sum(b["down"] for b in buckets),
        "days": buckets,
    }


def _range(query: dict, now: int) -> tuple[str, int, int]:
    """(step, start, end) in seconds from `step`, `from` and `to` (ms) of a query, each
    refused with a sentence when it is not what it must be."""
    step = query.get("step") or "hour"
    if step not in STEPS:
        raise ServiceError(f"step must be hour or day, not {step!r}")
    size = STEPS[step]
    end = _millis(query.get("to"), "to", now * 1000) // 1000
    start = _millis(query.get("from"), "from", (end - DEFAULT_BUCKETS[step] * size) * 1000) // 1000
    if start >= end:
        raise ServiceError("from must be before to")
    if (end - start) > MOST_BUCKETS[step] * size:
        raise ServiceError(
            f"a range in {step}s may span at most {MOST_BUCKETS[step]} {step}s; "
            "narrow it or ask for days"
        )
    return step, start // size * size, end


def _millis(value, name: str, default: int) -> int:
    if value in (None, ""):
        return default
    if isinstance(value, bool):
        raise ServiceError(f"{name} must be a time in milliseconds since 1970")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ServiceError(f"{name} must be a time in milliseconds since 1970") from None
    if not 0 <= number < 1 << 53:
        raise ServiceError(f"{name} must be a time in milliseconds since 1970")
    return number
