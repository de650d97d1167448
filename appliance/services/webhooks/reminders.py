"""Reminders: events raised by time and use passing, not by a change anyone made.

A client nearing its expiry (72, 48 and 24 hours before), a day past it, and a client
that used a given share of its quota (`webhookUsagePercents`, default 80 and 90) each
raise their event once: what was raised is remembered per client in `webhook_mark`,
with the expiry or quota it was about, so a renewed expiry or a new quota raises it
again, as does a client's use falling back under the lowest share (a traffic reset),
and nothing else does. Of several thresholds passed at once (a client created 30
hours before its expiry, or one that jumped from 50 % to 95 %) only the nearest is
raised. A pass runs at each traffic tick, one transaction for the marks and the events
together; with no endpoint that wants a reminder it reads nothing.

Two panels on one database may run a pass at once: the marks' unique key lets one
commit and rolls the other back, which then finds the marks at its next pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pony.orm import TransactionIntegrityError, db_session

from appliance.domain.client_rules import email_key
from appliance.services.webhooks.outbox import Outbox
from appliance.store import webhook_sql

HOUR_MS = 3_600_000
# Hours before the expiry -> the reminder; nearest first.
BEFORE_EXPIRY = ((24, "client.expires_in_24_hours"), (48, "client.expires_in_48_hours"),
                 (72, "client.expires_in_72_hours"))  # fmt: skip
AFTER_EXPIRY = "client.expired_24_hours_ago"
USAGE = "client.usage_reached"
# Past this, a client expired long ago is not reminded of it (a panel started after a
# long stop does not send a reminder per client ever expired).
LATE_HOURS = 48
REMINDERS = (*(event for _, event in BEFORE_EXPIRY), AFTER_EXPIRY, USAGE)


class Reminders:
    def __init__(
        self,
        store,
        outbox: Outbox,
        percents: Callable[[], list[int]],
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.outbox = outbox
        # The percents of the webhookUsagePercents setting, highest first.
        self.percents = percents
        self.clock = clock

    def check(self) -> None:
        """One pass: raise every reminder due and not raised yet."""
        try:
            with db_session:
                self._pass(int(self.clock() * 1000))
        except TransactionIntegrityError:
            return  # another panel raised them in the same moment

    def _pass(self, now: int) -> None:
        wanted = [event for event in REMINDERS if self.outbox.wanted_by_any(event)]
        if not wanted:
            return
        due: list[tuple[str, str, int, dict]] = []  # (key, mark name, mark, extra data)
        if set(wanted) - {USAGE}:
            for key, expiry in webhook_sql.expiring(
                self.store, now - LATE_HOURS * HOUR_MS, now + BEFORE_EXPIRY[-1][0] * HOUR_MS
            ):
                event = _expiry_reminder(expiry - now)
                if event in wanted:
                    due.append((key, event, expiry, {}))
        percents = self.percents()
        if USAGE in wanted and percents:
            reminders = [f"{USAGE}:{percent}" for percent in percents]
            webhook_sql.forget_usage_under(self.store, reminders, percents[-1])
            for key, quota, used in webhook_sql.using(self.store, percents[-1]):
                reached = next(p for p in percents if used * 100 >= quota * p)
                due.append((key, f"{USAGE}:{reached}", quota, {"percent": reached}))
        self._raise(due)

    def _raise(self, due: list[tuple[str, str, int, dict]]) -> None:
        known = webhook_sql.marks(self.store, sorted({key for key, _, _, _ in due}))
        new, changed, raised = [], [], []
        for key, name, mark, extra in due:
            if known.get((key, name)) == mark:
                continue
            (new if (key, name) not in known else changed).append((key, name, mark))
            raised.append((key, name.split(":")[0], extra))
        if not raised:
            return
        webhook_sql.set_marks(self.store, new, [(mark, key, name) for key, name, mark in changed])
        by_key = {
            email_key(view["email"]): view
            for view in self.outbox.stored_views(sorted({key for key, _, _ in raised}))
        }
        for event in dict.fromkeys(event for _, event, _ in raised):
            items = [
                (by_key[key]["email"], {**by_key[key], **extra})
                for key, name, extra in raised
                if name == event and key in by_key
            ]
            self.outbox.raise_event(event, items)


def _expiry_reminder(left_ms: int) -> str:
    """The reminder for a client whose expiry is `left_ms` away ("" for none)."""
    if left_ms <= -24 * HOUR_MS:
        return AFTER_EXPIRY
    for hours, event in BEFORE_EXPIRY:
        if 0 < left_ms <= hours * HOUR_MS:
            return event
    return ""
