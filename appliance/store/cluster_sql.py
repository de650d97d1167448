"""The statements and dedicated connections of several panels on one database.

Instances register in `panel_instance` and beat there (statements by name below, run in
the caller's db_session). What must outlive a db_session runs on a connection of its own,
opened here and kept by the one greenlet that uses it:

- `LeaderLock`: the database's own lock, held by its connection's session (PostgreSQL
  `pg_try_advisory_lock`, MariaDB `GET_LOCK(name, 0)`): a leader whose process or host
  dies loses it with the connection. TCP keepalives on both ends, and on MariaDB a short
  `wait_timeout`, bound how long a dead host's connection keeps it.
- `NotifyChannel` (PostgreSQL): changes sent with `pg_notify` and heard with `LISTEN`.
- `ChangeLog` (MariaDB): changes appended to `change_log` and read after the last id seen.

SQLite has one instance by construction: its lock is always held and it has no channel.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import select
import socket
import time
from collections import deque
from collections.abc import Iterator

log = logging.getLogger(__name__)

CHANNEL = "appliance_changes"
# How long an idle connection of a host that vanished may hold the lock or listen.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 5, 2, 3
MYSQL_WAIT_TIMEOUT = 20
# Rows of the change log read at once; ids remembered to skip one read twice.
LOG_PAGE, LOG_SEEN = 500, 2000
# Ids below the last seen that are read again: a row whose id was handed out earlier may
# commit after a later one was read.
LOG_REREAD = 50


def register(store, guid: str, name: str, address: str, version: str, now: int) -> None:
    """This instance's row, replacing what an earlier run from the same data directory left."""
    store.execute("DELETE FROM panel_instance WHERE guid = ?", (guid,))
    store.execute(
        "INSERT INTO panel_instance (guid, name, address, version, leader, started_at, "
        "last_seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (guid, name, address, version, False, now, now),
    )


def beat(store, guid: str, now: int) -> int:
    """The instance's heartbeat; returns the rows changed (0: its row was removed)."""
    return store.execute("UPDATE panel_instance SET last_seen = ? WHERE guid = ?", (now, guid))


def schema_version(store) -> int:
    """The highest schema version applied to the database, by whichever instance."""
    return int(store.rows("SELECT MAX(version) FROM schema_version")[0][0] or 0)


def claim_leadership(store, guid: str) -> None:
    """`guid` leads from now on, and no other row says it does."""
    store.execute(
        "UPDATE panel_instance SET leader = CASE WHEN guid = ? THEN ? ELSE ? END",
        (guid, True, False),
    )


def give_up_leadership(store, guid: str) -> None:
    store.execute("UPDATE panel_instance SET leader = ? WHERE guid = ?", (False, guid))


def instances(store) -> list[tuple]:
    """(guid, name, address, version, leader, started_at, last_seen) of every instance,
    most recently seen first."""
    return store.rows(
        "SELECT guid, name, address, version, leader, started_at, last_seen "
        "FROM panel_instance ORDER BY last_seen DESC, guid"
    )


def forget_before(store, cutoff: int) -> int:
    """Remove the instances not seen since `cutoff` (long gone, never coming back), and
    the core counter values they kept."""
    gone = "SELECT guid FROM panel_instance WHERE last_seen < ?"
    for table in ("core_counter", "client_core_value"):
        store.execute(f"DELETE FROM {table} WHERE instance IN ({gone})", (cutoff,))
    return store.execute("DELETE FROM panel_instance WHERE last_seen < ?", (cutoff,))


def prune_change_log(store, cutoff: int) -> int:
    """Remove the change log's rows written before `cutoff`: every instance read them."""
    return store.execute("DELETE FROM change_log WHERE at < ?", (cutoff,))


def lock_name(database: str, purpose: str = "leader") -> str:
    """A lock's name: MariaDB's locks are server-wide, so it names the database (at most
    64 characters); PostgreSQL's advisory locks are per database already."""
    return f"appliance-{purpose}-" + hashlib.sha256(database.encode()).hexdigest()[:40]


def lock_key(database: str, purpose: str = "leader") -> int:
    """An advisory lock's key, a signed 64-bit number of its purpose and the database."""
    digest = hashlib.sha256(f"appliance-{purpose}:{database}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# How long an instance waits for another's migrations before it gives up starting.
SCHEMA_LOCK_SECONDS = 600


@contextlib.contextmanager
def schema_lock(connection, dialect: str, database: str) -> Iterator[None]:
    """Held while an instance migrates: instances started together on one database
    migrate it one after the other, and each after the first finds nothing left to do.
    The lock is the session's, so a migrator that dies releases it with its connection.
    Committed after taking it, so what the holder before wrote is what the next reads."""
    if dialect == "postgres":
        key = lock_key(database, "schema")
        take, release = "SELECT pg_try_advisory_lock(%s)", "SELECT pg_advisory_unlock(%s)"
    else:
        key = lock_name(database, "schema")
        take, release = "SELECT GET_LOCK(%s, 0)", "SELECT RELEASE_LOCK(%s)"
    deadline = time.monotonic() + SCHEMA_LOCK_SECONDS
    waited = False
    while _one(connection, take, (key,)) not in (True, 1):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"another instance held the schema lock for over {SCHEMA_LOCK_SECONDS} s"
            )
        if not waited:
            log.info("another instance is migrating the database; waiting for it")
            waited = True
        connection.commit()
        time.sleep(0.2)
    connection.commit()
    try:
        yield
    finally:
        _one(connection, release, (key,))
        connection.commit()


def dedicated_connection(store):
    """A connection of its own, in autocommit, with keepalives on both ends."""
    url = store.url
    if url.kind == "postgres":
        import psycopg2

        server_side = (
            f"-c tcp_keepalives_idle={KEEPALIVE_IDLE} "
            f"-c tcp_keepalives_interval={KEEPALIVE_INTERVAL} "
            f"-c tcp_keepalives_count={KEEPALIVE_COUNT}"
        )
        connection = psycopg2.connect(
            host=url.host,
            port=url.port,
            user=url.user,
            password=url.password,
            dbname=url.database,
            keepalives=1,
            keepalives_idle=KEEPALIVE_IDLE,
            keepalives_interval=KEEPALIVE_INTERVAL,
            keepalives_count=KEEPALIVE_COUNT,
            options=server_side,
            connect_timeout=10,
        )
        connection.autocommit = True
        return connection
    connection = store.writable_connect()
    connection.autocommit(True)
    _keep_alive(connection._sock)
    with connection.cursor() as cursor:
        cursor.execute(f"SET SESSION wait_timeout = {MYSQL_WAIT_TIMEOUT}")
    return connection


def _keep_alive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)


def _one(connection, statement: str, params: tuple = ()):
    cursor = connection.cursor()
    try:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    finally:
        cursor.close()
    return None if row is None else row[0]


class LeaderLock:
    """The leader's lock on a connection of its own; `hold()` says whether this process
    holds it now, taking it when free. A connection that fails is dropped, and the lock
    with it: the caller stops leading at once and the next `hold()` connects anew."""

    def __init__(self, store):
        self.store = store
        self._connection = None
        self._held = False

    def hold(self) -> bool:
        if self.store.dialect == "sqlite":
            return True
        try:
            if self._connection is None:
                self._connection = dedicated_connection(self.store)
                self._held = False
            self._held = self._check() if self._held else self._take()
        except Exception:
            self.release()
            raise
        return self._held

    def _take(self) -> bool:
        database = self.store.url.database
        if self.store.dialect == "postgres":
            return bool(
                _one(self._connection, "SELECT pg_try_advisory_lock(%s)", (lock_key(database),))
            )
        return _one(self._connection, "SELECT GET_LOCK(%s, 0)", (lock_name(database),)) == 1

    def _check(self) -> bool:
        """The lock is the session's as long as the session lives: one round trip."""
        if self.store.dialect == "postgres":
            return _one(self._connection, "SELECT 1") == 1
        owner = _one(
            self._connection,
            "SELECT IS_USED_LOCK(%s) = CONNECTION_ID()",
            (lock_name(self.store.url.database),),
        )
        return owner == 1

    def release(self) -> None:
        """Close the connection, which ends the session and frees the lock."""
        connection, self._connection, self._held = self._connection, None, False
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()


class NotifyChannel:
    """PostgreSQL: `send` on one connection, `listen` on another (each kept by one
    greenlet); a payload is the change as JSON text, within NOTIFY's 8000 bytes."""

    def __init__(self, store):
        self.store = store
        self._sender = None

    def send(self, origin: str, body: str, now: int) -> None:
        if self._sender is None:
            self._sender = dedicated_connection(self.store)
        try:
            _one(self._sender, "SELECT pg_notify(%s, %s)", (CHANNEL, f"{origin} {body}"))
        except Exception:
            self._sender, sender = None, self._sender
            sender.close()
            raise

    def listen(self, wait: float) -> Iterator[tuple[str, str]]:
        """("", "") once listening, then (origin, body) of every change heard, as they
        come; raises when the connection fails (the caller listens again)."""
        connection = dedicated_connection(self.store)
        try:
            cursor = connection.cursor()
            cursor.execute(f"LISTEN {CHANNEL}")
            cursor.close()
            yield "", ""
            while True:
                select.select([connection], [], [], wait)
                connection.poll()
                while connection.notifies:
                    origin, _, body = connection.notifies.pop(0).payload.partition(" ")
                    yield origin, body
        finally:
            connection.close()


class ChangeLog:
    """MariaDB: each change a row of `change_log`, read by the others after the last id
    they saw, every second."""

    def __init__(self, store):
        self.store = store
        self._sender = None
        self._after: int | None = None
        self._seen: deque[int] = deque(maxlen=LOG_SEEN)

    def send(self, origin: str, body: str, now: int) -> None:
        if self._sender is None:
            self._sender = dedicated_connection(self.store)
        cursor = self._sender.cursor()
        try:
            cursor.execute(
                "INSERT INTO change_log (origin, body, at) VALUES (%s, %s, %s)", (origin, body, now)
            )
        except Exception:
            self._sender, sender = None, self._sender
            sender.close()
            raise
        finally:
            cursor.close()

    def read(self, connection) -> list[tuple[str, str]]:
        """(origin, body) of the rows written since the last read; the first read only
        notes where the log ends."""
        cursor = connection.cursor()
        try:
            if self._after is None:
                cursor.execute("SELECT COALESCE(MAX(id), 0) FROM change_log")
                self._after = cursor.fetchone()[0]
                return []
            cursor.execute(
                "SELECT id, origin, body FROM change_log WHERE id > %s ORDER BY id LIMIT %s",
                (max(self._after - LOG_REREAD, 0), LOG_PAGE),
            )
            rows = cursor.fetchall()
        finally:
            cursor.close()
        fresh = [
            (row_id, origin, body) for row_id, origin, body in rows if row_id not in self._seen
        ]
        for row_id, _, _ in fresh:
            self._seen.append(row_id)
            self._after = max(self._after, row_id)
        return [(origin, body) for _, origin, body in fresh]

    def listen(self, wait: float) -> Iterator[tuple[str, str]]:
        """("", "") once connected, then (origin, body) of every row written by any
        instance, read every `wait` s."""
        import gevent

        connection = dedicated_connection(self.store)
        try:
            yield "", ""
            while True:
                yield from self.read(connection)
                gevent.sleep(wait)
        finally:
            connection.close()


def change_channel(store) -> NotifyChannel | ChangeLog | None:
    """How this database's instances hear of each other's changes; None on SQLite."""
    if store.dialect == "postgres":
        return NotifyChannel(store)
    if store.dialect == "mysql":
        return ChangeLog(store)
    return None
