"""What moved since a cursor: the counters a managing panel polls.

A managing panel takes differences of this panel's absolute counters (its clients'
traffic totals and its inbounds' up and down), the same exactly-once rule the core's
counters follow. With 10,000 clients polled every few seconds, sending every counter each
time would be most of the work, so every committed write to a client's traffic (a
traffic tick, a reset, an edit) is journaled in memory with a sequence number, and a
poll that sends back the cursor of its last answer gets only the clients journaled
since. A cursor from another process (this panel restarted), one older than the journal
remembers, or one from before a write that touched every client gets every counter
(`full`). Sending a counter that did not move costs nothing but bytes (its difference is
zero); the one rule is that no counter that moved is left out, which is why the
sequence is read before the rows: a write committed after that read is journaled after
it too, and the next poll gets it.

Inbound counters are few: every answer carries all of them. A client deleted since the
cursor is answered as zero (under its email key), so the managing panel's kept value
follows it down.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from typing import Any

from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.errors import ServiceError
from appliance.store import traffic_sql
from appliance.store.client_writes import ClientNotes

# Email keys the journal remembers; past that the oldest are forgotten, and a cursor that
# old gets a full answer.
JOURNAL_LIMIT = 1_000_000


class CounterJournal:
    """Email keys whose traffic row changed, each with the sequence number of its last
    change, in this process."""

    def __init__(self, limit: int = JOURNAL_LIMIT):
        self.boot = uuid.uuid4().hex[:16]
        self.limit = limit
        self.seq = 0
        self._changed: OrderedDict[str, int] = OrderedDict()
        # A cursor before `_floor` may have missed changes the journal no longer holds.
        self._floor = 0

    def note(self, notes: ClientNotes) -> None:
        """A committed write (`ClientWrites.watch`)."""
        keys = notes.keys | notes.moved
        if not keys and not notes.everything:
            return
        self.seq += 1
        if notes.everything:
            self._changed.clear()
            self._floor = self.seq
            return
        for key in keys:
            self._changed[key] = self.seq
            self._changed.move_to_end(key)
        while len(self._changed) > self.limit:
            _, seq = self._changed.popitem(last=False)
            self._floor = max(self._floor, seq)

    def cursor(self) -> str:
        return f"{self.boot}:{self.seq}"

    def since(self, cursor: str) -> list[str] | None:
        """Email keys changed after `cursor`; None when that cannot be told (another
        process's cursor, none, or one older than the journal's memory)."""
        boot, _, number = cursor.partition(":")
        if boot != self.boot or not number.isdigit():
            return None
        after = int(number)
        if after < self._floor or after > self.seq:
            return None
        keys = []
        for key, seq in reversed(self._changed.items()):
            if seq <= after:
                break
            keys.append(key)
        return keys


class CounterFeed:
    """The answer to a managing panel's poll (`clients/counters`)."""

    def __init__(self, store, journal: CounterJournal):
        self.store = store
        self.journal = journal

    def counters(self, body: Any) -> dict:
        if not isinstance(body, dict):
            raise ServiceError('send {"cursor": "..."}: the cursor of the last answer, or ""')
        cursor = body.get("cursor", "")
        if cursor is None:
            cursor = ""
        if not isinstance(cursor, str) or len(cursor) > 64:
            raise ServiceError("cursor must be the text of the last answer's cursor, or empty")
        now = self.journal.cursor()
        keys = self.journal.since(cursor)
        with db_session:
            rows = traffic_sql.client_counters(self.store, keys)
            inbounds = traffic_sql.inbound_counters(self.store)
        clients = [{"email": e, "up": u, "down": d} for e, u, d in rows]
        if keys is not None:
            # A traffic row deleted since (its client deleted) counts as zero: a client
            # made again under that email then starts from zero on the managing panel too.
            found = {email_key(e) for e, _, _ in rows}
            clients += [{"email": k, "up": 0, "down": 0} for k in keys if k not in found]
        return {
            "cursor": now,
            "full": keys is None,
            "clients": clients,
            "inbounds": [{"tag": t, "up": u, "down": d} for t, u, d in inbounds],
        }
