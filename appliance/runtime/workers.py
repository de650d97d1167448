"""Worker processes that serve one listening socket beside the panel, one per core.

One gevent process uses one core. The subscription port is what client apps hit all day,
and it only reads, so on a host with several cores it is served by worker processes, one
per core, while the panel process stays the only writer and the only one that
supervises. This module is the panel's side of that arrangement and the small protocol
both sides share; what a worker serves is composed elsewhere (`appliance.sub_worker`).

- **One socket, shared.** The panel binds and listens, as it always did, and each worker
  inherits the listening socket and accepts on it. The port stays bound while a worker
  restarts (connections wait in the backlog instead of being refused), a worker that is
  busy does not accept, so new connections go to the one that is free, and the panel
  still knows and reserves the port it bound. SO_REUSEPORT, the alternative, would
  spread connections by a hash, busy worker or not, and drop the backlog of a worker that
  dies.
- **Started anew, not forked.** The panel has a gevent hub, open database
  connections and the core's watcher by the time it listens; a fork would copy all of it.
  A worker is this program started again (`environment.self_command`): `python -m appliance
  sub-worker`, or the one-file binary with `sub-worker`, which reuses the folder the
  running binary unpacked itself into (`environment.self_environment`).
- **Told what to serve on stdin.** The first line a worker reads is a JSON object with
  what it needs (the database URL, which may hold a password, never shows in `ps`). The
  pipe then stays open: when the panel is gone, however it ended, the worker reads EOF
  and stops, so no worker outlives its panel.
- **Changes by a shared counter.** The panel bumps a counter in a small shared file
  (`ChangeCounter`) after every change that a subscription could show, before its answer
  goes out; a worker compares it with the value it last saw at the start of each request
  (an 8-byte read) and drops its caches when it moved. A change therefore reaches the very
  next request to any worker, which a message through a pipe, read whenever the worker's
  loop comes round to it, would not promise.
- **Logs through the panel.** A worker writes its log records as JSON lines to stdout;
  the panel logs them as its own, so they reach the panel's log file and log page, which
  only the panel writes.

A worker that exits is started again after a pause that doubles from one second up to
half a minute, and starts from one second again once a worker has run for a minute.

**On demand, by default.** Each worker holds about 43 MiB of its own, which an idle host
should not pay. Unless a fixed count is asked for, the panel serves the port itself, as
on one core, and counts the subscription requests it accepts (`DemandMeter`); once they
keep up `DEMAND_RATE` a second over `DEMAND_WINDOW_SECONDS`, it starts the workers that
are not running, up to one per core. A worker that then serves fewer than `IDLE_RATE`
requests a second over `idle_seconds()` exits with `IDLE_EXIT`, which is not a crash:
it is not started again until the demand comes back. A worker that crashes is started
again as above, and leaves by itself if the demand is gone by then.

While every worker runs, the panel stops accepting on the shared socket, and takes it up
again as soon as one has left (`on_full`): the panel's hub is then left to the admin's
requests, and the port's load to processes that do nothing else (in a bench run on two
cores, a panel that went on accepting beside two workers served cold subscriptions at
0.73 of the rate of the two workers alone: three processes on two cores, three caches to
fill). Nothing is refused meanwhile: the panel holds the socket open, so a connection
nobody takes at once waits in the backlog for the next process that accepts.

A cold subscription costs the panel 0.5 to 0.6 ms of CPU (`cpu_ms_per_request` in the
bench's `subscription_workers`), so `DEMAND_RATE` is about 6 % of a core: below it the
panel alone keeps most of its core free, and a worker would cost memory for little.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gevent

from appliance.runtime.environment import self_environment

if TYPE_CHECKING:
    from gevent.baseserver import BaseServer

log = logging.getLogger(__name__)

WORKERS_ENV = "APPLIANCE_SUB_WORKERS"
# Two counters: every change, and those of them that reach an inbound's prepared links
# (which changes do, the subscription service says: `drops_inbounds`).
COUNTER = struct.Struct("<QQ")
RESTART_FIRST_SECONDS = 1.0
RESTART_MAX_SECONDS = 30.0
HEALTHY_SECONDS = 60.0
STOP_GRACE_SECONDS = 5.0
# On demand: the panel starts the workers once it accepted DEMAND_RATE subscription
# requests a second over DEMAND_WINDOW_SECONDS; a worker leaves (with IDLE_EXIT) once it
# served fewer than IDLE_RATE a second over the idle period (IDLE_ENV, in seconds).
DEMAND_RATE = 100
DEMAND_WINDOW_SECONDS = 3.0
IDLE_RATE = 1
IDLE_SECONDS = 300.0
IDLE_ENV = "APPLIANCE_SUB_WORKER_IDLE"
IDLE_EXIT = 3


def worker_count(wanted: int | None) -> int:
    """How many processes serve the port: `wanted` when given, else (on demand) at most
    one per core this process may run on. One means no worker: the panel serves the port
    itself."""
    if wanted is not None:
        return wanted
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def idle_seconds() -> float:
    """How long a worker started on demand serves little before it leaves: IDLE_ENV
    when set to a positive number of seconds, else IDLE_SECONDS."""
    try:
        seconds = float(os.environ.get(IDLE_ENV) or IDLE_SECONDS)
    except ValueError:
        return IDLE_SECONDS
    return seconds if seconds > 0 else IDLE_SECONDS


class DemandMeter:
    """Counts the requests one process accepts and calls `on_demand` each time they
    reached `rate` a second over `window` seconds: a WSGI app wrapped around another."""

    def __init__(
        self,
        app: Callable,
        on_demand: Callable[[], None],
        rate: float = DEMAND_RATE,
        window: float = DEMAND_WINDOW_SECONDS,
    ):
        self.app = app
        self.on_demand = on_demand
        self.wanted = rate * window
        self.window = window
        self.since = time.monotonic()
        self.count = 0

    def __call__(self, environ, start_response):
        now = time.monotonic()
        if now - self.since > self.window:
            self.since, self.count = now, 0
        self.count += 1
        if self.count >= self.wanted:
            self.since, self.count = now, 0
            gevent.spawn(self.on_demand)
        return self.app(environ, start_response)


class ChangeCounter:
    """A counter in a file both sides map into memory: the panel bumps it, workers read
    it. The file is anonymous (unlinked at creation) and reaches a worker as an inherited
    descriptor, so nothing else can open it, and it vanishes with the last process."""

    def __init__(self, fileno: int, owner: bool):
        self._fileno = fileno
        self._map = mmap.mmap(fileno, COUNTER.size)
        self._owner = owner

    @classmethod
    def create(cls) -> ChangeCounter:
        with tempfile.TemporaryFile() as handle:
            fileno = os.dup(handle.fileno())
        os.ftruncate(fileno, COUNTER.size)
        return cls(fileno, owner=True)

    @classmethod
    def attach(cls, fileno: int) -> ChangeCounter:
        return cls(fileno, owner=False)

    def fileno(self) -> int:
        return self._fileno

    def bump(self, inbounds: bool) -> None:
        """Count a change; `inbounds`: one that reaches the prepared inbounds too."""
        changes, inbound_changes = self.read()
        if inbounds:
            inbound_changes += 1
        COUNTER.pack_into(self._map, 0, changes + 1, inbound_changes)

    def read(self) -> tuple[int, int]:
        """Every change so far, and those of them that inbounds' links depend on."""
        return COUNTER.unpack_from(self._map, 0)

    def close(self) -> None:
        self._map.close()
        os.close(self._fileno)


@dataclass
class Worker:
    slot: int
    process: subprocess.Popen | None = None
    started: float = 0.0
    pause: float = RESTART_FIRST_SECONDS
    readers: list[gevent.Greenlet] = field(default_factory=list)
    supervisor: gevent.Greenlet | None = None


class WorkerPool:
    """`count` processes running `command`, each handed `spec` (a JSON line on its stdin)
    and the descriptors `pass_fds`; restarted when they exit until `stop()`. With
    `on_demand`, none runs until `grow()`, and one that exits with IDLE_EXIT stays away
    until the next `grow()`; `on_full` hears whether every worker runs (or waits to be
    started again after a crash) each time that changes."""

    def __init__(
        self,
        command: list[str],
        spec: dict,
        pass_fds: tuple[int, ...],
        count: int,
        describe: str = "worker",
        env: Callable[[], dict[str, str]] = self_environment,
        on_demand: bool = False,
        on_full: Callable[[bool], None] | None = None,
    ):
        self.command = command
        self.spec = spec
        self.pass_fds = pass_fds
        self.describe = describe
        self.env = env
        self.on_demand = on_demand
        self.on_full = on_full
        self.workers = [Worker(slot) for slot in range(count)]
        self._stopping = False

    def start(self) -> None:
        if not self.on_demand:
            self.grow()

    def grow(self) -> None:
        """Start every worker that is not running (nor waiting to be started again)."""
        if self._stopping:
            return
        idle = [w for w in self.workers if w.supervisor is None]
        for worker in idle:
            if worker.process is not None:
                _close_pipes(worker.process)
            self._launch(worker)
            worker.supervisor = gevent.spawn(self._supervise, worker)
        if idle and self.on_demand:
            log.info("subscription demand: %d %s processes started", len(idle), self.describe)
        self._tell_full()

    def _tell_full(self) -> None:
        if self.on_full is not None:
            self.on_full(all(w.supervisor is not None for w in self.workers))

    def pids(self) -> list[int]:
        """The process ids of the workers running now."""
        return [
            worker.process.pid
            for worker in self.workers
            if worker.process is not None and worker.process.poll() is None
        ]

    def _launch(self, worker: Worker) -> None:
        process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=self.pass_fds,
            env=self.env(),
        )
        process.stdin.write(json.dumps({**self.spec, "slot": worker.slot}).encode() + b"\n")
        process.stdin.flush()
        worker.process = process
        worker.started = time.monotonic()
        worker.readers = [gevent.spawn(self._relay_log, process)]
        log.debug("%s %d started as process %d", self.describe, worker.slot, process.pid)

    def _supervise(self, worker: Worker) -> None:
        """Wait for the worker to exit; start it again after a pause, unless stopping."""
        while True:
            code = worker.process.wait()
            if self._stopping:
                return
            lived = time.monotonic() - worker.started
            if code == IDLE_EXIT and self.on_demand:
                log.info(
                    "%s process %d left after %.0f s: little demand",
                    self.describe,
                    worker.process.pid,
                    lived,
                )
                worker.supervisor = None
                self._tell_full()
                return
            if lived >= HEALTHY_SECONDS:
                worker.pause = RESTART_FIRST_SECONDS
            log.warning(
                "%s process %d exited (%s) after %.0f s; starting it again in %g s",
                self.describe,
                worker.process.pid,
                _exit_text(code),
                lived,
                worker.pause,
            )
            gevent.sleep(worker.pause)
            worker.pause = min(worker.pause * 2, RESTART_MAX_SECONDS)
            if self._stopping:
                return
            _close_pipes(worker.process)
            self._launch(worker)

    def _relay_log(self, process: subprocess.Popen) -> None:
        """Log the worker's records (JSON lines on its stdout) as the panel's own."""
        for line in process.stdout:
            try:
                record = json.loads(line)
                level, name, message = record["level"], record["name"], record["message"]
            except (ValueError, KeyError, TypeError):
                continue
            logging.getLogger(name).log(level, "[%s %d] %s", self.describe, process.pid, message)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop every worker: SIGTERM, then SIGKILL for any still running after `grace`
        seconds. Returns once all have exited, so their sockets are closed."""
        self._stopping = True
        gevent.killall([w.supervisor for w in self.workers if w.supervisor is not None])
        running = [w.process for w in self.workers if w.process and w.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s process %d did not stop; killing it", self.describe, process.pid)
                process.kill()
                process.wait()
        for worker in self.workers:
            if worker.process is not None:
                gevent.killall(worker.readers)
                _close_pipes(worker.process)


def accept_unless(server: BaseServer) -> Callable[[bool], None]:
    """`on_full` for a pool beside a server of the panel's own on the shared socket: the
    server leaves the socket to the workers while they all run, and takes it up again
    when one has left."""

    def full(running: bool) -> None:
        if running:
            server.stop_accepting()
        else:
            server.start_accepting()

    return full


def _close_pipes(process: subprocess.Popen) -> None:
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
