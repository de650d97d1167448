"""The WebSocket hub: one message encoded once, offered to every open socket.

Each socket has a small bounded queue drained by its own sender greenlet. A socket that
cannot keep up (queue full) or whose send stalls past a timeout is closed and forgotten,
so a dead or slow browser costs nothing after a few seconds and idle sockets hold only
their queue and two greenlets. Nothing here blocks the caller of `publish`.

Every socket belongs to the sign-in session its upgrade was allowed for, and lives no
longer than that session: `close_sessions` ends the sockets of sessions that ended (sign
out, a password change, two-factor turned on, expiry).
"""

from __future__ import annotations

import contextlib
import json
import logging

import gevent
from gevent.queue import Full, Queue

log = logging.getLogger(__name__)

QUEUE_SIZE = 32
SEND_TIMEOUT = 10


class Subscriber:
    def __init__(self, hub: Hub, socket, session_id: int):
        self.hub = hub
        self.socket = socket
        self.session_id = session_id
        self.queue: Queue = Queue(maxsize=QUEUE_SIZE)
        self.sender = gevent.spawn(self._send_loop)

    def offer(self, data: str) -> None:
        try:
            self.queue.put_nowait(data)
        except Full:
            log.info("dropping a WebSocket that stopped reading")
            self.close()

    def close(self) -> None:
        self.hub.discard(self)
        with contextlib.suppress(Exception):  # a torn-down socket has nothing to close
            self.socket.close()
        if gevent.getcurrent() is not self.sender:
            self.sender.kill(block=False)

    def _send_loop(self) -> None:
        while True:
            data = self.queue.get()
            try:
                with gevent.Timeout(SEND_TIMEOUT):
                    self.socket.send(data)
            except gevent.GreenletExit:
                raise
            except BaseException:  # a send timeout and a broken socket both end it
                self.close()
                return


class Hub:
    def __init__(self):
        self.subscribers: set[Subscriber] = set()

    def __len__(self) -> int:
        return len(self.subscribers)

    def subscribe(self, socket, session_id: int) -> Subscriber:
        subscriber = Subscriber(self, socket, session_id)
        self.subscribers.add(subscriber)
        return subscriber

    def session_ids(self) -> set[int]:
        """The sessions that hold at least one open socket."""
        return {subscriber.session_id for subscriber in self.subscribers}

    def close_sessions(self, session_ids: set[int]) -> None:
        """Close every socket opened under one of these (ended) sessions."""
        for subscriber in list(self.subscribers):
            if subscriber.session_id in session_ids:
                subscriber.close()

    def discard(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    def publish(self, message: dict) -> None:
        if not self.subscribers:
            return
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
        for subscriber in list(self.subscribers):
            subscriber.offer(data)

    def invalidate(self, resource: str) -> None:
        self.publish({"type": "invalidate", "resource": resource})

    def notify(self, title: str, body: str, severity: str = "info", key: str = "") -> None:
        """`key` names the action the notice reports on ("core"): the page shows one
        notice per action, so this one gives way to the page's own words on it."""
        message = {"type": "notification", "title": title, "body": body, "severity": severity}
        self.publish({**message, "key": key} if key else message)
