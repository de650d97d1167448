"""One subscription worker process: the subscription server and nothing else.

On a host with several cores the panel starts one of these per core
(`appliance.runtime.workers`); each serves the subscription port's socket it inherits,
with the same `SubscriptionApp` the panel serves it with on one core. It reads the
panel's database directly (SQLite in WAL mode, so readers never wait for the panel's
writes, or the networked server) and writes one table alone: its database sessions
refuse writes (`Store.attach`), and its one write path is `DeviceWrites`
(appliance.store.device_sql), a few connections of its own that insert the devices it
admits and write, in a batch every few seconds, when known ones were last seen, exactly
as the panel does; the unique keys of that table keep the two from admitting one slot
twice. The panel's caches hold no device, so they need to hear nothing of these writes.

A worker keeps the same caches the panel keeps (settings, rendered bodies) and drops
them when the panel's change counter moved since its last request, so what an admin
changed is what the next subscription shows. Its log records go to the panel as JSON
lines on stdout. It stops on SIGTERM, and when its stdin reaches EOF: the panel is gone.
One started on demand also stops, with `IDLE_EXIT`, once it served little for the idle
period the panel gives it (`LeaveWhenIdle`).
SIGINT (Ctrl-C in a terminal) is left to the panel, which then stops its workers.

It serves with the panel's own gevent server rather than waitress's threads, which suit
blocking reads: measured on 10,000 subscriptions, one process each, waitress took as much
CPU per request or more (0.17 to 0.22 ms cached, 0.50 to 1.04 ms uncached, with 4 or 8
threads, against gevent's 0.15 and 0.47 ms), and its threads would need the database
connections to be shared between threads. Its connections wait no longer than the
panel's, and one address may hold as many of them as on the panel's own server: the
panel hands its limits over (`web.connections`); the count per address is this
process's own.

Started as `python -m appliance sub-worker` (or the one-file binary with `sub-worker`),
never by hand: it reads what to serve from its stdin.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.fileobject import FileObject  # noqa: E402

from appliance.runtime.changes import ChangeNotice  # noqa: E402
from appliance.runtime.file_paths import FilePlaces  # noqa: E402
from appliance.runtime.logbuffer import parse_level  # noqa: E402
from appliance.runtime.memory import serve_large_blocks_from_mmap  # noqa: E402
from appliance.runtime.workers import IDLE_EXIT, IDLE_RATE, ChangeCounter  # noqa: E402
from appliance.services.admin.settings import Settings  # noqa: E402
from appliance.services.admin.settings_rules import trusted_networks  # noqa: E402
from appliance.services.clients.devices import Devices  # noqa: E402
from appliance.services.clients.subscriptions import Subscriptions  # noqa: E402
from appliance.store import RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS, Store  # noqa: E402
from appliance.sub.app import SubscriptionApp  # noqa: E402
from appliance.web.connections import ConnectionLimits  # noqa: E402
from appliance.web.server import make_server, tls_context  # noqa: E402

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 1
# Connections a worker takes from the shared socket each time it is ready: gevent's 100
# let whichever worker woke first take a whole burst of connections while the others
# idled; one at a time spreads them over the workers that are free.
ACCEPT_AT_ONCE = 1


class JsonLines(logging.Handler):
    """A log record as one JSON line on stdout, which the panel reads and logs."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            line = json.dumps({"level": record.levelno, "name": record.name, "message": message})
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except Exception:
            self.handleError(record)


class FollowChanges:
    """Drops the worker's caches when the panel's change counter moved: the settings
    are read again, every rendered body is forgotten, and the prepared inbounds too when
    an inbound or host changed. Called at the start of each request, so a change the
    panel answered for is in the next body."""

    def __init__(
        self,
        counter: ChangeCounter,
        settings: Settings,
        subscriptions: Subscriptions,
    ):
        self.counter = counter
        self.settings = settings
        self.subscriptions = subscriptions
        self.seen = counter.read()

    def __call__(self) -> None:
        now = self.counter.read()
        if now != self.seen:
            # What the panel's own cache drops for a client change alone: rendered bodies,
            # not the prepared inbounds every cold request relies on.
            self.subscriptions.invalidate("inbounds" if now[1] != self.seen[1] else "clients")
            self.settings.load()
            self.seen = now


class LeaveWhenIdle:
    """Counts the requests served (a WSGI app wrapped around another) and, run as a
    greenlet, sets `idle` once fewer than IDLE_RATE a second came over `seconds`: a
    look every sixth of the period over the last six, so a worker leaves between one
    period and seven sixths of it after the demand ended."""

    LOOKS = 6

    def __init__(self, app, seconds: float):
        self.app = app
        self.seconds = seconds
        self.served = 0
        self.idle = Event()

    def __call__(self, environ, start_response):
        self.served += 1
        return self.app(environ, start_response)

    def watch(self, stopped: Event) -> None:
        counts = [self.served]
        while not stopped.wait(self.seconds / self.LOOKS):
            counts = [*counts, self.served][-(self.LOOKS + 1) :]
            if len(counts) > self.LOOKS and counts[-1] - counts[0] < IDLE_RATE * self.seconds:
                self.idle.set()
                stopped.set()
                return


def main() -> int:
    first = sys.stdin.readline()
    if not first:  # the panel ended before it said what to serve
        return 0
    spec = json.loads(first)
    _setup_logging(spec["logLevel"])
    serve_large_blocks_from_mmap()
    stopped = Event()
    gevent.signal_handler(signal.SIGTERM, stopped.set)
    # Ctrl-C reaches the whole process group: the panel stops the workers then, and one
    # that stopped first would be taken for a crash and started again.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gevent.spawn(_until_eof, FileObject(sys.stdin.fileno(), "rb", close=False), stopped)
    store = Store(spec["db"])
    # A worker only reads: its notice has nothing to tell and nobody following it; the
    # panel's changes reach it through the change counter.
    places = FilePlaces(spec["dataDir"], tuple(spec["certDirs"]))
    settings = Settings(store, places, ChangeNotice())
    subscriptions = Subscriptions(store, settings)
    devices = Devices(store, settings)
    # The counter is read before the settings: a change meanwhile is followed at once.
    counter = ChangeCounter.attach(spec["counterFd"])
    follow = FollowChanges(counter, settings, subscriptions)
    if not _open(store, settings, stopped):
        return 0
    sock = socket.socket(fileno=spec["listenFd"])
    tls = tls_context(spec["certFile"], spec["keyFile"]) if spec["certFile"] else None
    devices.start()
    app = SubscriptionApp(settings, subscriptions, devices, refresh=follow)
    leave = LeaveWhenIdle(app, spec["idleSeconds"]) if spec.get("idleSeconds") else None
    limits = ConnectionLimits(**spec["limits"])  # the panel's, so every process has the same

    def trusted() -> list:
        return trusted_networks(settings.get("trustedProxies"))

    server = make_server(sock, leave or app, limits, tls=tls, cap_exempt=trusted)
    server.max_accept = ACCEPT_AT_ONCE
    server.start()
    log.info("serving the subscription port")
    if leave is not None:
        gevent.spawn(leave.watch, stopped)
    stopped.wait()
    server.stop(timeout=STOP_GRACE_SECONDS)
    subscriptions.close()
    devices.close()
    store.close()
    return IDLE_EXIT if leave is not None and leave.idle.is_set() else 0


def _open(store: Store, settings: Settings, stopped: Event) -> bool:
    """Map the database and read the settings; False when told to stop first. A database
    that is unavailable (a networked server down, the SQLite file locked) is waited for
    with a warning, as the panel waits for it at its start, rather than ending the worker
    with a traceback."""
    pause = RETRY_FIRST_SECONDS
    while True:
        try:
            store.attach()
            settings.load()
            return True
        except Exception as exc:
            unavailable = store.unavailable(exc)
            if unavailable is None:
                raise
        log.warning("%s; trying again in %d s", unavailable.msg, pause)
        if stopped.wait(pause):
            return False
        pause = min(pause * 2, RETRY_MAX_SECONDS)


def _until_eof(stream, stopped: Event) -> None:
    """Stop when the panel closes our stdin: on purpose, or because it ended."""
    while stream.readline():
        pass
    stopped.set()


def _setup_logging(level: str) -> None:
    root = logging.getLogger()
    root.addHandler(JsonLines())
    root.setLevel(logging.WARNING)
    logging.getLogger("appliance").setLevel(parse_level(level))


if __name__ == "__main__":
    sys.exit(main())
