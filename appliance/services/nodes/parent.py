"""Which panel manages this one as a node: its `parentGuid`.

Every call a managing panel makes with a node token names it (`X-Panel-Guid`). The first
panel to call keeps the node until it has been silent for `RELEASE_SECONDS`; a managing
panel calls every few seconds (heartbeat, traffic polls), so that silence means it was
stopped or no longer lists the node. Until then another panel calling with a node token
is answered as before but does not take the node over: its own heartbeat sees a
`parentGuid` that is not its guid and shows the node as managed by another panel, so two
panels that both list one node do not trade it back and forth with every call.

The guid is kept in the database (an internal setting); when it was last heard from is
kept in memory and starts at this panel's start, so a restarted node waits the same
silence before it lets another panel in.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

log = logging.getLogger(__name__)

RELEASE_SECONDS = 120
SETTING = "parentGuid"


class ManagingPanel:
    def __init__(self, settings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.clock = clock
        self.heard = clock()

    def guid(self) -> str:
        """The managing panel's guid; "" while none has called."""
        return self.settings.internal(SETTING)

    def called_by(self, guid: str) -> None:
        """A call with a node token named `guid` (anything but a UUID is ignored)."""
        try:
            guid = str(uuid.UUID(guid))
        except ValueError:
            return
        now, current = self.clock(), self.guid()
        if guid == current:
            self.heard = now
            return
        if current and now - self.heard < RELEASE_SECONDS:
            return
        if current:
            log.info(
                "panel %s takes over as the managing panel; %s has been silent for %d s",
                guid,
                current,
                now - self.heard,
            )
        self.settings.set_internal(SETTING, guid)
        self.heard = now
