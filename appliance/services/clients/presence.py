"""Who is online: emails seen carrying traffic within the heartbeat window.

Traffic accounting reports the emails whose counters moved at each tick; a client counts
as online until a full window passes without traffic. Kept in memory only: after a
restart nobody is online until they send bytes again, which is the truth.
"""

from __future__ import annotations

import time

HEARTBEAT_WINDOW = 60


class Presence:
    def __init__(self, window: float = HEARTBEAT_WINDOW, clock=time.time):
        self.window = window
        self.clock = clock
        self._clients: dict[str, float] = {}
        self._inbounds: dict[str, float] = {}

    def seen(self, email_keys: list[str], inbound_tags: list[str]) -> None:
        """Record one tick's movers: email keys and inbound tags whose counters grew."""
        now = self.clock()
        for key in email_keys:
            self._clients[key] = now
        for tag in inbound_tags:
            self._inbounds[tag] = now

    def online(self) -> set[str]:
        """Email keys seen within the window."""
        return self._fresh(self._clients)

    def active_inbounds(self) -> list[str]:
        """Inbound tags that carried traffic within the window."""
        return sorted(self._fresh(self._inbounds))

    def _fresh(self, seen: dict[str, float]) -> set[str]:
        cutoff = self.clock() - self.window
        for key in [key for key, at in seen.items() if at < cutoff]:
            del seen[key]
        return set(seen)
