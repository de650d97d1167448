"""Several panels on one database: who runs, who leads, and how changes reach the others.

Each `appliance run` on PostgreSQL or MariaDB is an instance: it registers in the
database under the guid of its data directory and beats every few seconds, so
`members()` can tell the live ones from the stale. The leader is whoever holds the
database's own lock (store/cluster_sql.py); each instance tries for it every few seconds
and runs the jobs that must run once (`LeaderJobs`) only while it holds it: a lost
connection is lost leadership, and those jobs stop at once.

Every change delivered by this instance's notice is sent to the others (PostgreSQL
NOTIFY, MariaDB the change log) by one sender greenlet, in the order published, after the
call that made it committed, and tried again until it is sent; a change heard from
another instance `arrive`s at the local consumers as if made here, and is never sent on.
A panel alone on SQLite is one instance and the leader, and none of this runs.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections import deque
from dataclasses import dataclass

import gevent
from gevent.queue import Queue
from pony.orm import db_session

from appliance.runtime.changes import KINDS, Change, ChangeNotice
from appliance.runtime.jobs import LeaderJobs, every
from appliance.store import cluster_sql
from appliance.store.migrations import LATEST

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 3
LEADER_TRY_SECONDS = 2
# An instance not heard from for this long is shown as stale (five missed heartbeats).
STALE_SECONDS = 15
# Instances not seen for a week are removed from the list.
FORGET_SECONDS = 7 * 24 * 3600
# How often the change log is read (MariaDB), or how long a LISTEN waits between polls.
LISTEN_SECONDS = 1.0
LISTEN_RETRY_SECONDS = 2
# A change that could not be sent is tried again this often; past SEND_BACKLOG changes
# waiting, every kind is sent as changed instead.
SEND_RETRY_SECONDS = 1
SEND_BACKLOG = 1000
# Change log rows older than this were read by every instance that runs.
CHANGE_LOG_KEEP_SECONDS = 300
PRUNE_SECONDS = 60
GUID_FILE = "instance-guid"


@dataclass(frozen=True)
class Instance:
    """What this process says of itself in the instance list."""

    guid: str
    name: str
    address: str
    version: str


def instance_guid(data_dir: str) -> str:
    """The guid of the instance run from `data_dir`, made at its first start: the panel's
    own guid (a setting) is shared by every instance of one database."""
    path = os.path.join(data_dir, GUID_FILE)
    try:
        with open(path) as fh:
            guid = fh.read().strip()
        if guid:
            return guid
    except FileNotFoundError:
        pass
    guid = str(uuid.uuid4())
    os.makedirs(data_dir, exist_ok=True)
    with open(path, "w") as fh:
        fh.write(guid + "\n")
    return guid


def local_address(toward: tuple[str, int] | None, port: int) -> str:
    """host:port the other instances may reach this one at: the address this host leaves
    from toward the database (a UDP socket's route; nothing is sent), else its name."""
    host = socket.gethostname()
    if toward is not None:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect(toward)
                host = probe.getsockname()[0]
        except OSError:
            pass
    return f"{host}:{port}"


class Cluster:
    def __init__(self, store, notice: ChangeNotice, jobs: LeaderJobs):
        self.store = store
        self.notice = notice
        self.jobs = jobs
        self.me: Instance | None = None
        self.lock = cluster_sql.LeaderLock(store)
        self.channel = cluster_sql.change_channel(store)
        self._outbox: Queue = Queue()
        self._greenlets: list[gevent.Greenlet] = []
        self.started = int(time.time() * 1000)
        # The database's schema version once an instance of a newer release migrated it
        # past what this one knows; 0 while this release knows it.
        self.newer_schema = 0

    @property
    def shared(self) -> bool:
        """Whether other instances may share this database (not SQLite)."""
        return self.channel is not None

    def start(self, me: Instance, fault) -> None:
        """Register and run: alone on SQLite this instance simply leads."""
        self.me = me
        if not self.shared:
            self.jobs.lead()
            return
        with db_session:
            cluster_sql.register(self.store, me.guid, me.name, me.address, me.version, self.started)
        self.notice.relay(self._queue)
        # Tried once before the job that tries again starts: the lock's connection is
        # the one greenlet's at a time.
        self.lead_or_follow()
        self._greenlets = [
            every(HEARTBEAT_SECONDS, self.beat, "instance heartbeat", fault),
            every(LEADER_TRY_SECONDS, self.lead_or_follow, "leadership", fault),
            gevent.spawn(self._send_loop),
            gevent.spawn(self._listen_loop),
        ]
        self.jobs.every(PRUNE_SECONDS, self.prune, "instance list pruning", fault)

    def stop(self) -> None:
        gevent.killall(self._greenlets, block=False)
        self._greenlets = []
        if self.jobs.leading and self.shared:
            self.jobs.follow()
        self.lock.release()

    # ---- instances ------------------------------------------------------------------------

    def writes_refused(self) -> str:
        """Why this instance refuses writes ("" while it does not): a newer release
        migrated the database past what this one knows, and what it would write could
        be wrong for the new schema. It keeps answering reads until it is upgraded."""
        if not self.newer_schema:
            return ""
        return (
            f"this instance runs release {self.me.version}, which knows the database's "
            f"schema up to version {LATEST}; another instance of a newer release has "
            f"migrated it to version {self.newer_schema}: upgrade this instance, which "
            "serves reads only until then"
        )

    def beat(self) -> None:
        with db_session:
            version = cluster_sql.schema_version(self.store)
            if version > LATEST and not self.newer_schema:
                self.newer_schema = version
                log.error("%s", self.writes_refused())
            if not cluster_sql.beat(self.store, self.me.guid, _now_ms()):
                # Removed by a prune while this instance was away: it registers again.
                me = self.me
                cluster_sql.register(
                    self.store, me.guid, me.name, me.address, me.version, self.started
                )
                if self.jobs.leading:
                    cluster_sql.claim_leadership(self.store, me.guid)

    def members(self) -> list[dict]:
        """Every instance of the database: `self` is this one, `stale` one not heard from
        for STALE_SECONDS (dead, or cut off from the database)."""
        me = self.me
        if not self.shared:
            return [self._view(me.guid, me.name, me.address, me.version, True, _now_ms())]
        now = _now_ms()
        with db_session:
            rows = cluster_sql.instances(self.store)
        return [
            self._view(guid, name, address, version, bool(leader), seen, now)
            for guid, name, address, version, leader, _, seen in rows
        ]

    def _view(self, guid, name, address, version, leader, seen, now=None) -> dict:
        stale = now is not None and now - seen > STALE_SECONDS * 1000
        return {
            "guid": guid,
            "name": name,
            "address": address,
            "version": version,
            "leader": leader and not stale,
            "lastSeen": seen,
            "stale": stale,
            "self": guid == self.me.guid,
            # On this instance's own entry: why it refuses writes, "" while it does not.
            "writesRefused": self.writes_refused() if guid == self.me.guid else "",
        }

    def prune(self) -> None:
        now = int(time.time())
        with db_session:
            cluster_sql.forget_before(self.store, (now - FORGET_SECONDS) * 1000)
            cluster_sql.prune_change_log(self.store, now - CHANGE_LOG_KEEP_SECONDS)

    # ---- leadership ------------------------------------------------------------------------

    def lead_or_follow(self) -> None:
        """Take the lock when it is free; start or stop the leader's jobs as it went."""
        try:
            if self.newer_schema:
                # An instance behind the schema runs no job that writes for everyone.
                self.lock.release()
                held = False
            else:
                held = self.lock.hold()
        except Exception as exc:
            held = False
            if self.jobs.leading:
                log.warning("the leader's lock connection failed: %s", _first_line(exc))
        if held and not self.jobs.leading:
            self.jobs.lead()
            log.info("this instance leads: the jobs that run once run here")
            with db_session:
                cluster_sql.claim_leadership(self.store, self.me.guid)
        elif not held and self.jobs.leading:
            self.jobs.follow()
            log.warning("this instance no longer leads: the jobs that run once stopped here")
            with db_session:
                cluster_sql.give_up_leadership(self.store, self.me.guid)

    # ---- changes to and from the other instances --------------------------------------------

    def _queue(self, change: Change) -> None:
        self._outbox.put(change.as_text())

    def _send_loop(self) -> None:
        """Sends the changes in the order published. One that fails (the sender's
        connection lost, the database away) is tried again until it is sent, with those
        published meanwhile behind it: the change was committed, and an instance that
        never hears of it serves what it cached before. Past SEND_BACKLOG waiting, they
        become one change of every kind (the others reload everything)."""
        waiting: deque[str] = deque()
        failing = False
        while True:
            if not waiting:
                waiting.append(self._outbox.get())
            while not self._outbox.empty():
                waiting.append(self._outbox.get_nowait())
            if len(waiting) > SEND_BACKLOG:
                waiting = deque(Change(kind).as_text() for kind in KINDS)
            try:
                self.channel.send(self.me.guid, waiting[0], int(time.time()))
            except Exception as exc:
                if not failing:
                    log.warning(
                        "changes are not reaching the other instances (%s); trying again "
                        "every %d s",
                        _first_line(exc),
                        SEND_RETRY_SECONDS,
                    )
                failing = True
                gevent.sleep(SEND_RETRY_SECONDS)
                continue
            waiting.popleft()
            if failing:
                log.info("changes reach the other instances again")
                failing = False

    def _listen_loop(self) -> None:
        lost = False
        while True:
            try:
                for origin, body in self.channel.listen(LISTEN_SECONDS):
                    if not origin:
                        # Listening (again): what was sent while not is lost, so
                        # everything may have changed.
                        if lost:
                            for kind in KINDS:
                                self.notice.arrive(Change(kind))
                        lost = False
                    elif origin != self.me.guid:
                        self._arrived(body)
            except Exception as exc:
                lost = True
                log.warning(
                    "not hearing the other instances' changes (%s); listening again in %d s",
                    _first_line(exc),
                    LISTEN_RETRY_SECONDS,
                )
            gevent.sleep(LISTEN_RETRY_SECONDS)

    def _arrived(self, body: str) -> None:
        try:
            change = Change.from_text(body)
        except ValueError as exc:
            log.warning("a change from another instance was not understood: %s", exc)
            return
        self.notice.arrive(change)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text and text[0] else type(exc).__name__
