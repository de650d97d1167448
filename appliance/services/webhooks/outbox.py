"""Where events are raised: rows of the webhook outbox, written inside the caller's
transaction.

A service that commits a change calls `raise_event` (or `raise_clients` for clients,
whose `data` is the client as the API shows it) inside the same `db_session`, before it
ends: the event is committed with the change or not at all. One event is one row per
enabled endpoint that asks for it, written by one statement however many there are (a
bulk create of 10,000 clients is one insert of 10,000 rows, not 10,000 round trips).
With no endpoint enabled, raising costs one small read and writes nothing.

The deliverer learns of new rows from the change notice the same services publish once
they have committed (`wake`), and from its own poll otherwise.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

from appliance.domain.clients import api_view
from appliance.runtime.jobs import Pace
from appliance.services.webhooks.events import EVENTS, wanted
from appliance.store import client_queries, webhook_sql
from appliance.store.batches import chunks

# Clients read and shown per breath: a chunk of the store's usual 500 held the hub for
# 100 ms of a bulk create's events.
VIEW_CHUNK = 100


class Outbox:
    def __init__(self, store, clock: Callable[[], float] = time.time):
        self.store = store
        self.clock = clock

    def raise_event(self, event: str, items: Iterable[tuple[str, dict]]) -> int:
        """Write `event` for each (subject, data) of `items` to every enabled endpoint
        that wants it, inside the caller's transaction; returns the rows written."""
        if event not in EVENTS:
            raise ValueError(f"{event} is not declared in webhooks.events.EVENTS")
        targets = [
            endpoint_id
            for endpoint_id, events in webhook_sql.enabled_endpoints(self.store)
            if wanted(json.loads(events or "[]"), event)
        ]
        if not targets:
            return 0
        now = int(self.clock() * 1000)
        rows = []
        pace = Pace()
        for subject, data in items:
            pace()
            event_id = uuid.uuid4().hex
            body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
            rows += [
                (endpoint_id, event_id, event, subject[:255], body, now, 0)
                for endpoint_id in targets
            ]
        # Handed to the driver a row at a time with breaths between: 10,000 rows in one
        # call would hold every other request for the length of the statement.
        webhook_sql.insert_events(self.store, _paced(rows))
        return len(rows)

    def raise_for(self, endpoint_id: int, event: str, subject: str, data: dict) -> str:
        """One event for one endpoint (a test delivery); returns its id."""
        event_id = uuid.uuid4().hex
        body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        now = int(self.clock() * 1000)
        webhook_sql.insert_events(
            self.store, [(endpoint_id, event_id, event, subject, body, now, 0)]
        )
        return event_id

    def raise_clients(self, event: str, views: Iterable[dict]) -> int:
        """`event` for clients given as the API shows them, each its own subject."""
        return self.raise_event(event, ((view["email"], view) for view in views))

    def raise_stored_clients(self, event: str, keys: list[str]) -> int:
        """`event` for the stored clients of some email keys, read in this transaction
        in chunks (the clients a bulk call just inserted)."""
        if not self.wanted_by_any(event):
            return 0
        return self.raise_clients(event, self.stored_views(keys))

    def stored_views(self, keys: list[str]) -> list[dict]:
        """The stored clients of some email keys as the API shows them."""
        views = []
        pace = Pace()
        for part in chunks(keys, VIEW_CHUNK):
            pace()
            records = client_queries.clients_of_keys(self.store, list(part))
            attached = client_queries.attachments(self.store, [r.row_id for r in records])
            views += [api_view(r, attached.get(r.row_id, [])) for r in records]
        return views

    def wanted_by_any(self, event: str) -> bool:
        """Whether an enabled endpoint asks for `event`: what spares building the data."""
        return any(
            wanted(json.loads(events or "[]"), event)
            for _, events in webhook_sql.enabled_endpoints(self.store)
        )


def _paced(rows: list[tuple]) -> Iterator[tuple] | list[tuple]:
    """`rows` one at a time, breathing at the job pace; none stay an empty list (which
    writes nothing)."""
    if not rows:
        return rows
    return _one_at_a_time(rows)


def _one_at_a_time(rows: list[tuple]) -> Iterator[tuple]:
    pace = Pace()
    for row in rows:
        pace()
        yield row
