"""How long a connection may keep the server waiting, and how many one address may hold.

A request whose headers never end, a body that stops arriving and a keep-alive
connection left idle each hold a greenlet and a descriptor for as long as the client
likes: a few thousand of them, cheap to open, would use up the process's descriptors
(the "slowloris" attack). So every read of a connection has a limit (`TimedReads`, the
raw stream under the buffered reader gevent's handler reads from), set by the phase the
connection is in (`ReadLimits`):

- **the head**: the request line and headers must be complete `header_seconds` after
  the connection was accepted (its TLS handshake included) or after the previous answer
  went out. It is one deadline, not a wait per read, so a byte now and then does not
  stretch it; a keep-alive connection that sends no next request is closed when it
  passes.
- **the body**: each read may wait `body_seconds` for a byte. An upload that keeps
  coming, however slowly, is not cut; one that stopped is.
- **a WebSocket** (`/ws`): no limit once upgraded; the hub drops sockets that stop
  reading on its own.

Writes have no limit: a long download (a backup) takes as long as the client needs.

A connection that ran out of time is closed without an answer: the stream stopped
mid-request, so nothing more can be read from it. A body that stopped gets the app's
refusal (it could not be read), and the connection is closed after it.

The limits cost one clock read per read of the socket: one timer per connection, armed
for the earliest moment a read could be given up, checks when it fires whether a read
is still waiting and how long it may still wait, and arms itself again if needed.

On the subscription port, one address may hold at most `per_address` connections at a
time in one process (`AddressCap`); the next is reset at once, before anything of it is
read. Reverse proxies listed in the `trustedProxies` setting carry many clients and are
not capped.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent

from appliance.runtime.wsgi import address_in

log = logging.getLogger(__name__)

# SO_LINGER on, zero seconds: close() resets the connection instead of a graceful FIN.
RESET_ON_CLOSE = struct.pack("ii", 1, 0)


@dataclass(frozen=True)
class ConnectionLimits:
    header_seconds: float
    body_seconds: float
    # Connections one address may hold at once on the subscription port, per process; 0: any.
    per_address: int = 0

    def describe(self) -> str:
        """The limits in words, for the panel's start-up log."""
        cap = (
            f"at most {self.per_address} connections per client address"
            if self.per_address
            else "no cap on connections per client address"
        )
        return (
            f"request line and headers within {self.header_seconds:g} s (idle keep-alive "
            f"connections closed after as long), request bodies given up after "
            f"{self.body_seconds:g} s without a byte; on the subscription port {cap} "
            "(in each process serving it)"
        )


class ReadTimedOut(TimeoutError):
    """A read of a connection waited longer than its phase allows."""


class TimedReads(io.RawIOBase):
    """A connection's socket as the raw stream of a buffered reader, every read limited
    by `deadline` (a `time.monotonic()` by which it must return) or `idle` (seconds it
    may wait), whichever is set; neither: no limit. A read given up raises
    `ReadTimedOut` in the connection's greenlet, and so does every read after it."""

    def __init__(self, sock, header_seconds: float):
        self.sock = sock
        self.deadline: float | None = time.monotonic() + header_seconds
        self.idle: float | None = None
        self.given_up = False
        self._greenlet = gevent.getcurrent()
        self._reading_since = 0.0
        self._reading = False
        self._timer = None
        self._fires_at = 0.0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.given_up:
            raise ReadTimedOut("the connection ran out of time before")
        if self.deadline is None and self.idle is None:
            return self.sock.recv_into(buffer)
        now = self._reading_since = time.monotonic()
        due = self._due()
        if self._timer is None or due < self._fires_at:
            self._arm(due - now)
        self._reading = True
        try:
            return self.sock.recv_into(buffer)
        finally:
            self._reading = False

    def _due(self) -> float:
        if self.deadline is not None:
            return self.deadline
        return self._reading_since + self.idle

    def _arm(self, seconds: float) -> None:
        self.stop()
        self._fires_at = time.monotonic() + max(seconds, 0.0)
        self._timer = gevent.get_hub().loop.timer(max(seconds, 0.0))
        self._timer.start(self._check)

    def _check(self) -> None:
        """The timer fired (in the hub): give up the read that is waiting if its time is
        over, else look again when it will be; no read waiting: the next one arms it."""
        self._timer = None
        if not self._reading or (self.deadline is None and self.idle is None):
            return
        left = self._due() - time.monotonic()
        if left > 0:
            self._arm(left)
            return
        self.given_up = True
        if self.deadline is not None:
            late = ReadTimedOut("the request's line and headers did not arrive in time")
        else:
            late = ReadTimedOut(f"nothing of it arrived for {self.idle:g} s")
        self._greenlet.throw(late)

    def stop(self) -> None:
        """No more checks: the connection ended."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None


class ReadLimits:
    """For gevent's WSGIHandler: its reads through `TimedReads`, with the limit of each
    phase of a request. gevent's handler takes the reader to use as its `rfile`
    argument (gevent is pinned in pyproject.toml)."""

    def __init__(self, sock, address, server, rfile=None):
        self.limits: ConnectionLimits = server.limits
        self.reads = TimedReads(sock, self.limits.header_seconds)
        super().__init__(sock, address, server, io.BufferedReader(self.reads))

    def handle(self):
        try:
            return super().handle()
        finally:
            self.reads.stop()

    def handle_one_request(self):
        if self.reads.deadline is None:
            self.reads.deadline = time.monotonic() + self.limits.header_seconds
            self.reads.idle = None
        result = super().handle_one_request()
        if result is None and self.reads.given_up:
            log.debug("closed a connection from %s: it ran out of time", self.client_address[0])
        return result

    def read_request(self, raw_requestline):
        parsed = super().read_request(raw_requestline)
        self.reads.deadline, self.reads.idle = None, self.limits.body_seconds
        return parsed

    def _handle_client_error(self, ex):
        if isinstance(ex, ReadTimedOut):
            return None  # the headers stopped coming: close without an answer
        return super()._handle_client_error(ex)


class UnlimitedWebSocket:
    """For gevent-websocket's handler: an upgraded connection reads without a limit."""

    def run_websocket(self):
        self.reads.deadline = self.reads.idle = None
        return super().run_websocket()


class AddressCap:
    """Counts the connections each address holds on one server; `admit` says no to one
    more once an address holds `most`, unless it is a trusted proxy (`trusted()`, the
    networks of the `trustedProxies` setting, asked only then)."""

    def __init__(self, most: int, trusted: Callable[[], list]):
        self.most = most
        self.trusted = trusted
        self.held: dict[str, int] = {}
        self.told: set[str] = set()

    def admit(self, host: str) -> bool:
        held = self.held.get(host, 0)
        if held >= self.most and not address_in(host, self.trusted()):
            if host not in self.told:
                self.told.add(host)
                log.warning(
                    "refusing connections from %s: it holds %d open on the subscription port",
                    host,
                    held,
                )
            return False
        self.held[host] = held + 1
        return True

    def release(self, host: str) -> None:
        left = self.held.pop(host) - 1
        if left:
            self.held[host] = left
        if left < self.most:
            self.told.discard(host)


def reset(sock) -> None:
    """Close `sock` with a reset, unread: the client learns at once it was refused."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
    sock.close()
