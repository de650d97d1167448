"""Who is online: emails seen carrying traffic within the heartbeat window, and where.

Traffic accounting reports the emails whose counters moved at each tick; a client counts
as online until a full window passes without traffic. The counters this panel polls from
its nodes are reported the same way, each under its node's id (`origin`; None is this
panel's own core), so the panel can say where a client is online as well as whether.
Kept in memory only: after a restart nobody is online until they send bytes again, which
is the truth.
"""

from __future__ import annotations

import time

HEARTBEAT_WINDOW = 60


class Presence:
    def __init__(self, window: float = HEARTBEAT_WINDOW, clock=time.time):
        self.window = window
        self.clock = clock
        self._clients: dict[int | None, dict[str, float]] = {None: {}}
        self._inbounds: dict[int | None, dict[str, float]] = {None: {}}

    def seen(self, email_keys: list[str], inbound_tags: list[str], origin: int | None = None):
        """Record one tick's movers: email keys and inbound tags whose counters grew, on
        this panel's core (`origin` None) or on the node of that id."""
        now = self.clock()
        clients = self._clients.setdefault(origin, {})
        inbounds = self._inbounds.setdefault(origin, {})
        for key in email_keys:
            clients[key] = now
        for tag in inbound_tags:
            inbounds[tag] = now

    def online_count(self) -> int:
        """How many clients are online, here or on any node."""
        return len(self.online())

    def online(self) -> set[str]:
        """Email keys seen within the window, here or on any node."""
        found: set[str] = set()
        for origin in list(self._clients):
            found |= self.online_at(origin)
        return found

    def online_at(self, origin: int | None) -> set[str]:
        """Email keys seen within the window on one origin."""
        return self._fresh(self._clients.get(origin, {}))

    def active_inbounds(self, origin: int | None = None) -> list[str]:
        """Inbound tags that carried traffic within the window on one origin."""
        return sorted(self._fresh(self._inbounds.get(origin, {})))

    def forget(self, origin: int) -> None:
        """A node deleted or disabled: what it reported is no longer anyone's."""
        self._clients.pop(origin, None)
        self._inbounds.pop(origin, None)

    def _fresh(self, seen: dict[str, float]) -> set[str]:
        cutoff = self.clock() - self.window
        for key in [key for key, at in seen.items() if at < cutoff]:
            del seen[key]
        return set(seen)
