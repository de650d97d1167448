"""client.device_added: a device admitted to a subscription (services/clients/devices.py).

Devices are admitted on connections of their own, in the panel and in the subscription
workers, which have no outbox to write to. So the event is raised from what they commit:
each admitted device is a new row of `client_device`, and a pass every few seconds raises
the event for the rows after the last one it raised for, moving that mark (in
`webhook_mark`) in the same transaction as the events. The mark only moves from the value
it was read at, so two panels never both raise a device, and a crash between the
admission and the pass loses nothing. The first pass starts at the devices already there.
"""

from __future__ import annotations

from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.services.webhooks.outbox import Outbox
from appliance.store import webhook_sql

EVENT = "client.device_added"
MARK = ("client_device", "last raised")
STEP = 1000


class NewDevices:
    def __init__(self, store, outbox: Outbox):
        self.store = store
        self.outbox = outbox

    def check(self) -> None:
        """The job: raise client.device_added for each device admitted since the last pass."""
        with db_session:
            if not self.outbox.wanted_by_any(EVENT):
                return
            known = webhook_sql.marks(self.store, [MARK[0]]).get(MARK)
            if known is None:
                webhook_sql.set_marks(
                    self.store, [(*MARK, webhook_sql.last_device_id(self.store))], []
                )
                return
            rows = webhook_sql.devices_after(self.store, known, STEP)
            if not rows or not webhook_sql.move_mark(self.store, *MARK, known, rows[-1][0]):
                return
            views = {
                email_key(view["email"]): view
                for view in self.outbox.stored_views(sorted({row[1] for row in rows}))
            }
            self.outbox.raise_event(
                EVENT,
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
