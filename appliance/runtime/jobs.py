"""Background work as small greenlets, each with its interval in one place.

A job that raises is logged and runs again at its next tick: one bad sample or one
failed write must not stop status pushes or traffic accounting for good. A failure the
job's `expected` callback explains (the database unavailable for a while) is a warning
line with that sentence; anything else is logged with its traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import gevent

from appliance.errors import ServiceError

log = logging.getLogger(__name__)

BREATH_SECONDS = 0.001
# The work a long computation does between two breaths: a request arriving meanwhile is
# answered within a few milliseconds, on a busy host too, where the same work takes
# several times as long on the clock.
PACE_SECONDS = 0.004


def every(
    seconds: float,
    job: Callable[[], None],
    name: str,
    expected: Callable[[Exception], ServiceError | None] = lambda exc: None,
) -> gevent.Greenlet:
    def loop() -> None:
        while True:
            try:
                job()
            except Exception as exc:
                known = expected(exc)
                if known is not None:
                    log.warning(
                        "background job %s failed: %s; it runs again in %ss",
                        name,
                        known.msg,
                        seconds,
                    )
                else:
                    log.exception("background job %s failed; it runs again in %ss", name, seconds)
            gevent.sleep(seconds)

    return gevent.spawn(loop)


def breathe() -> None:
    """Let the hub serve every ready connection and timer inside a long computation.
    `gevent.sleep(0)` would not: it runs only the callbacks queued on the hub, and a
    greenlet that keeps requeueing itself keeps the hub from polling for I/O."""
    gevent.sleep(BREATH_SECONDS)


class Pace:
    """Called once per item of a long loop, breathes once PACE_SECONDS have passed since
    the last breath: a fixed count of items between breaths is too many on a slow or
    busy host and needlessly few on a fast one."""

    def __init__(self, seconds: float = PACE_SECONDS):
        self.seconds = seconds
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self._since >= self.seconds:
            breathe()
            self._since = time.perf_counter()


class LeaderJobs:
    """The jobs that must run once among the panels sharing one database (node polls,
    backups, notices ...): declared like `every`, started when this process becomes the
    leader and killed the moment it stops being one, so two never run them together.
    A panel alone on its database leads from the start."""

    def __init__(self):
        self._declared: list[tuple[float, Callable[[], None], str, Callable]] = []
        self._running: list[gevent.Greenlet] = []
        self.leading = False

    def every(
        self,
        seconds: float,
        job: Callable[[], None],
        name: str,
        expected: Callable[[Exception], ServiceError | None] = lambda exc: None,
    ) -> None:
        self._declared.append((seconds, job, name, expected))
        if self.leading:
            self._running.append(every(seconds, job, name, expected))

    def lead(self) -> None:
        if not self.leading:
            self.leading = True
            self._running = [every(*declared) for declared in self._declared]

    def follow(self) -> None:
        """Stop every job of the leader now, one mid-run included."""
        self.leading = False
        running, self._running = self._running, []
        gevent.killall(running, block=False)
