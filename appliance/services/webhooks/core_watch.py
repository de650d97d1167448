"""The core's webhook events: core.stopped and core.out_of_step, read from what the
core's supervisor says of it (`info()`: its state and whether it runs what is stored).

The core's state lives in the supervisor's memory, not in the database, so there is no
transaction of a change to raise these in: a sample every few seconds compares the
state with the one before and raises the event in a transaction of its own. A panel
that starts with its core down raises nothing for it: it was never seen running.
"""

from __future__ import annotations

from collections.abc import Callable

from pony.orm import db_session

from appliance.services.webhooks.outbox import Outbox

RUNNING = "running"
SUBJECT = "core"


class CoreWatch:
    def __init__(self, outbox: Outbox, info: Callable[[], dict]):
        self.outbox = outbox
        self.info = info  # the supervisor's info(): state, inStep, errorMsg, version
        self._running = False
        self._in_step = True

    def sample(self) -> None:
        """The job: raise what changed since the last sample."""
        info = self.info()
        running = info["state"] == RUNNING
        in_step = bool(info["inStep"]) or not running
        events = []
        if self._running and not running:
            events.append("core.stopped")
        if self._in_step and not in_step:
            events.append("core.out_of_step")
        self._running, self._in_step = running, in_step
        if not events:
            return
        data = {
            "state": info["state"],
            "version": info.get("version", ""),
            "errorMsg": info.get("errorMsg", ""),
        }
        with db_session:
            for event in events:
                self.outbox.raise_event(event, [(SUBJECT, data)])
