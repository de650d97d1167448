"""client.device_added and client.device_refused: a device admitted to a subscription,
or refused beyond its limit (services/clients/devices.py).

Devices are admitted and refused on connections of their own, in the panel and in the
subscription workers, which have no outbox to write to. So the events are raised from
what they commit: each admitted device is a new row of `client_device`, each refused one
a new row of `device_refusal`, and a pass every few seconds raises the event for the rows
after the last one it raised for, moving that mark (in `webhook_mark`) in the same
transaction as the events. The mark only moves from the value it was read at, so two
panels never both raise a device, and a crash between the admission and the pass loses
nothing. The first pass starts at the rows already there.
"""

from __future__ import annotations

from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.services.webhooks.outbox import Outbox
from appliance.store import webhook_sql

# event -> the table whose new rows raise it
TABLES = {"client.device_added": "client_device", "client.device_refused": "device_refusal"}
MARK = "last raised"
STEP = 1000


class NewDevices:
    def __init__(self, store, outbox: Outbox):
        self.store = store
        self.outbox = outbox

    def check(self) -> None:
        """The job: raise each event for the rows written since the last pass."""
        for event, table in TABLES.items():
            with db_session:
                if self.outbox.wanted_by_any(event):
                    self._raise(event, table)

    def _raise(self, event: str, table: str) -> None:
        known = webhook_sql.marks(self.store, [table]).get((table, MARK))
        if known is None:
            start = webhook_sql.last_id(self.store, table)
            webhook_sql.set_marks(self.store, [(table, MARK, start)], [])
            return
        rows = webhook_sql.devices_after(self.store, table, known, STEP)
        if not rows or not webhook_sql.move_mark(self.store, table, MARK, known, rows[-1][0]):
            return
        views = {
            email_key(view["email"]): view
            for view in self.outbox.stored_views(sorted({row[1] for row in rows}))
        }
        self.outbox.raise_event(
            event,
            [
                (views[row[1]]["email"], {**views[row[1]], "device": _device(row)})
                for row in rows
                if row[1] in views
            ],
        )


def _device(row: tuple) -> dict:
    _, _, hwid, os, os_version, model, user_agent, address, first_seen = row
    return {
        "hwid": hwid,
        "os": os,
        "osVersion": os_version,
        "model": model,
        "userAgent": user_agent,
        "address": address,
        "firstSeen": first_seen,
    }
