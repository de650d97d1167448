"""The store: one database (SQLite file, PostgreSQL or MariaDB/MySQL) behind Pony.

`Store.open()` connects, applies pending migrations through a plain DB-API connection,
then maps the Pony entities. SQLite runs in WAL mode with foreign keys on, so readers
never wait for the writer and a crash mid-write leaves a valid file.

A networked server is a separate machine that can be down or restart. At start the
panel waits for it (`wait_for_server`, with a log line per attempt) rather than exit or
run with nothing. A connection that breaks later fails only the request using it: Pony
rolls the transaction back and drops the connection, the API answers "the database is
unavailable" (`unavailable()`), and the next statement on a fresh transaction connects
anew, so the panel recovers by itself once the server is back. The SQLite file fails
in its own ways (another program holding its lock, a file or folder made read-only) and
gets the same answer and recovery (`sqlite_faults`).

Connections held: Pony keeps one connection per greenlet that has used the database, for
the greenlet's life, and closes it when the greenlet ends. That is one per open HTTP
connection to the panel (browsers keep two to six) plus one per background job (traffic,
status) and one for the subscription server's open connections; an idle panel with one
browser holds about five. An open WebSocket gives its connection back once subscribed
(`release`), so hundreds of open tabs hold none. Subscription workers (up to one per core,
appliance.sub_worker) hold their own: a few each for their reads, and one per client app
connection they are rendering for. Size the server's connection limit (PostgreSQL's
default is 100) for the browsers, API clients and client apps expected at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Iterator

from pony.orm.core import ConnectionClosedError, TransactionError, local
from pony.orm.dbapiprovider import InterfaceError, OperationalError

from appliance.errors import ServiceError
from appliance.store.client_writes import ClientWrites
from appliance.store.cluster_sql import schema_lock
from appliance.store.migrations import LATEST, current_version, migrate
from appliance.store.models import define_entities
from appliance.store.sqlite_faults import C_BUSY_SECONDS, CooperativeSQLiteProvider, fault_reason
from appliance.store.timed import TimedDatabase
from appliance.store.urls import DbUrl, parse_db_url

log = logging.getLogger(__name__)

RETRY_FIRST_SECONDS = 2
RETRY_MAX_SECONDS = 30
PG_PAGE_ROWS = 500  # statements per round trip in execute_many on PostgreSQL


class DatabaseUnavailable(ServiceError):
    """The networked database cannot be reached; the request changed nothing."""

    status = 503


class Store:
    """A database and its entities; services receive one of these."""

    def __init__(self, url: DbUrl | str):
        self.url = parse_db_url(url) if isinstance(url, str) else url
        self.dialect = self.url.kind
        # Counts how long each statement takes (`timed`), for the metrics page.
        self.db = TimedDatabase()
        # Which clients writes touched, for the summary that follows them.
        self.client_writes = ClientWrites()
        self.entities = define_entities(self.db, self.client_writes)
        # `appliance run` waits for a networked server that is down at start; the
        # offline commands say so and stop instead.
        self.wait_for_server = False
        # Every connection refuses writes (`attach`).
        self.read_only = False
        # Whether this process holds the schema lock (`starting`).
        self._starting = False

    def raw_connect(self):
        """A plain DB-API connection, for migrations, bulk copies and single reads."""
        connection = self._raw_connect()
        if self.read_only and self.dialect in READ_ONLY_SESSION:
            _execute(connection, READ_ONLY_SESSION[self.dialect])
            connection.commit()
        return connection

    def writable_connect(self):
        """A plain DB-API connection that may write even on a read-only store: for the
        device table alone (`device_sql.DeviceWrites`, the one writer that runs on it)."""
        return self._raw_connect(writable=True)

    def _raw_connect(self, writable: bool = False):
        url = self.url
        if url.kind == "sqlite":
            conn = sqlite3.connect(url.path, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            return conn
        if url.kind == "postgres":
            import psycopg2

            _cooperate_with_gevent()

            return psycopg2.connect(
                host=url.host,
                port=url.port,
                user=url.user,
                password=url.password,
                dbname=url.database,
                **({} if writable else self._pg_options()),
            )
        import pymysql

        return pymysql.connect(
            host=url.host,
            port=url.port,
            user=url.user,
            password=url.password,
            database=url.database,
            charset="utf8mb4",
        )

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Held by an instance from opening a networked database to having seeded it
        (migrations, the first admin, the identity and secrets the instances share):
        instances started together on an empty database do it one after the other, so
        the schema is migrated once and there is one admin and one session secret. A
        SQLite file has one panel by construction."""
        if self.url.kind == "sqlite" or self._starting:
            yield
            return
        conn = self._connect_at_start()
        try:
            with schema_lock(conn, self.dialect, self.url.database):
                self._starting = True
                try:
                    yield
                finally:
                    self._starting = False
        finally:
            conn.close()

    def open(self) -> list[int]:
        """Migrate and map; returns the migration versions applied now."""
        if self.url.kind == "sqlite":
            os.makedirs(os.path.dirname(self.url.path) or ".", exist_ok=True)
        with self.starting():
            conn = self._connect_at_start()
            try:
                if self.url.kind == "sqlite":
                    applied = _migrate_sqlite_or_restore(conn, self.url.path)
                else:
                    applied = migrate(conn, self.dialect)
            finally:
                conn.close()
        self.db.bind(**self._bind_args())
        self.db.generate_mapping(create_tables=False, check_tables=True)
        if applied:
            log.info("database %s now at schema version %d", self.url.redacted(), applied[-1])
        return applied

    def attach(self) -> None:
        """Map the entities onto a database another process opened and migrated, without
        touching its schema, on read-only connections: how a subscription worker reads the
        panel's database, which only the panel writes (the database itself refuses any
        write through this store). Binding connects; after a failure (`unavailable()` says
        whether the database is to blame) a call again picks up where this one stopped."""
        if not self.read_only:
            self.read_only = True
            statement = READ_ONLY_SESSION.get(self.dialect)
            if statement is not None:

                def read_only_session(db: TimedDatabase, connection) -> None:
                    _execute(connection, statement)

                self.db.on_connect(read_only_session)  # Pony commits after it
        if self.db.provider is None:
            self.db.bind(**self._bind_args())
        if self.db.schema is None:
            self.db.generate_mapping(create_tables=False, check_tables=True)

    def _connect_at_start(self):
        """The first connection; a networked server that does not answer is waited for
        with growing pauses when `wait_for_server` is set, and refused with a sentence
        otherwise."""
        if self.url.kind == "sqlite":
            return self.raw_connect()
        pause = RETRY_FIRST_SECONDS
        while True:
            try:
                return self.raw_connect()
            except self._driver_errors() as exc:
                reason = _first_line(exc)
                if not self.wait_for_server:
                    raise ServiceError(
                        f"the database at {self.url.redacted()} is unreachable ({reason})"
                    ) from None
            log.warning(
                "database at %s is unreachable (%s); retrying in %d s",
                self.url.redacted(),
                reason,
                pause,
            )
            time.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_SECONDS)

    def unavailable(self, exc: BaseException) -> DatabaseUnavailable | None:
        """`exc` as "the database is unavailable", when it is a networked server's lost or
        refused connection, or the SQLite file locked by another program, read-only or
        failing; None for anything else (a bug stays a bug). Called after the db_session
        ended: on SQLite it also closes this greenlet's connection (see below)."""
        if isinstance(exc, ConnectionClosedError) and self.url.kind != "sqlite":
            return DatabaseUnavailable("the database is unavailable: the connection was lost")
        if isinstance(exc, TransactionError):
            # The connection broke while Pony flushed, committed or rolled back: it wraps
            # what the driver raised (CommitException, UnexpectedError ...).
            wrapped = [info[1] for info in getattr(exc, "exceptions", ())]
            wrapped.append(getattr(exc, "original_exc", None))
            return next(filter(None, map(self.unavailable, filter(None, wrapped))), None)
        if self.url.kind == "sqlite":
            return self._sqlite_fault(exc)
        if isinstance(exc, (OperationalError, InterfaceError, *self._driver_errors())):
            reason = _first_line(exc)
            if not any(char.isalpha() for char in reason):
                # PyMySQL's "(0, '')": a connection closed under it.
                reason = "the connection was lost"
            return DatabaseUnavailable(f"the database is unavailable: {reason}")
        return None

    def _sqlite_fault(self, exc: BaseException) -> DatabaseUnavailable | None:
        reason = fault_reason(exc)
        if reason is None:
            return None
        # A connection opened while the file could not be written stays read-only for
        # good, though the file is writable again: the greenlet's next statement opens
        # the file anew instead.
        if not local.db_context_counter:
            self.db.disconnect()
        return DatabaseUnavailable(f"the database is unavailable: {reason}")

    def _driver_errors(self) -> tuple[type[BaseException], ...]:
        if self.url.kind == "postgres":
            import psycopg2

            return (psycopg2.OperationalError, psycopg2.InterfaceError)
        import pymysql

        return (pymysql.err.OperationalError, pymysql.err.InterfaceError)

    def rows(self, statement: str, params: tuple | list = ()) -> list[tuple]:
        """Read with raw SQL in the current db_session; `?` placeholders on every backend.

        The hot paths (paged lists, summaries, exports) read this way: set-based SQL over
        100,000 rows beats loading them as entities by far. Reads do not open a write
        transaction, so they never wait behind SQLite's writer lock."""
        cursor = self.db._exec_raw_sql(*_pony_sql(statement, params), frame_depth=0)
        if self.dialect == "sqlite":
            # Pony decodes every text cell through a Python function (tolerating bad
            # UTF-8, which this panel never writes); the C default is several times
            # faster on the 100,000-row reads that come through here.
            cursor.connection.text_factory = str
        return [tuple(row) for row in cursor.fetchall()]

    def execute(self, statement: str, params: tuple | list = ()) -> int:
        """Write with raw SQL inside the current transaction; returns the rows changed."""
        return self.db.execute(*_pony_sql(statement, params)).rowcount

    def begin_write(self) -> None:
        """Open the current db_session's write transaction now, before its first write.
        On SQLite that takes this process's turn among writers: what the session reads
        from here on no other writer changes until it commits, even if it yields."""
        self.db.get_connection()

    def execute_many(self, statement: str, rows: list[tuple] | Iterator[tuple]) -> None:
        """One statement, many parameter rows, inside the current transaction: the way
        bulk creates insert thousands of rows. psycopg2's executemany sends one row per
        round trip (20,000 clients took half a minute); its execute_batch sends a page
        of statements at once. PyMySQL already folds an INSERT's rows into one.
        No rows write nothing: no write transaction is opened for them (a traffic tick
        in which nothing moved would otherwise commit, and sync the file, every time).
        An iterator of rows is read one row at a time as they are written."""
        if not rows:
            return
        cursor = self.db.get_connection().cursor()
        if self.dialect == "sqlite":
            cursor.executemany(statement, rows)
            return
        statement = statement.replace("%", "%%").replace("?", "%s")
        if self.dialect == "postgres":
            from psycopg2.extras import execute_batch

            execute_batch(cursor, statement, rows, page_size=PG_PAGE_ROWS)
        else:
            cursor.executemany(statement, rows)

    def release(self) -> None:
        """Close the current greenlet's connection, if it has one: for a greenlet that
        lives on without the database, like an open WebSocket."""
        self.db.disconnect()

    def close(self) -> None:
        self.db.disconnect()

    def _pg_options(self) -> dict:
        """A read-only store's PostgreSQL sessions start read-only: a setting made with
        SET would not last, since Pony's pool ends each use with DISCARD ALL, which
        resets what SET changed but not what the connection started with."""
        return {"options": PG_READ_ONLY_OPTIONS} if self.read_only else {}

    def _bind_args(self) -> dict:
        url = self.url
        if url.kind == "sqlite":
            return {
                "provider": CooperativeSQLiteProvider,
                "filename": url.path,
                "timeout": C_BUSY_SECONDS,
            }
        if url.kind == "postgres":
            return {
                "provider": "postgres",
                "host": url.host,
                "port": url.port,
                "user": url.user,
                "password": url.password,
                "database": url.database,
                **self._pg_options(),
            }
        return {
            "provider": "mysql",
            "host": url.host,
            "port": url.port,
            "user": url.user,
            "password": url.password,
            "database": url.database,
            "charset": "utf8mb4",
        }


def _migrate_sqlite_or_restore(conn: sqlite3.Connection, path: str) -> list[int]:
    """Migrate a SQLite file as a whole or not at all.

    Each migration commits on its own, so a step that fails after earlier ones succeeded
    would leave the file at a version in between, which the release that wrote it refuses
    to open as "newer". A file behind the latest version is therefore copied first
    (SQLite's online backup: WAL included, consistent) and copied back when any step
    fails; the reason is raised with the file as it was. Should the copy-back fail too,
    the copy stays beside the file for the owner to put back."""
    version = current_version(conn, "sqlite")
    if not 0 < version < LATEST:
        return migrate(conn, "sqlite")
    copy_path = f"{path}.before-v{LATEST}"
    with contextlib.closing(sqlite3.connect(copy_path)) as copy:
        conn.backup(copy)
    try:
        applied = migrate(conn, "sqlite")
    except Exception as exc:
        with contextlib.closing(sqlite3.connect(copy_path)) as copy:
            copy.backup(conn)
        os.remove(copy_path)
        raise ServiceError(
            f"upgrading the database {path} from schema version {version} to {LATEST} "
            f"failed ({exc}); it was restored to version {version} unchanged"
        ) from exc
    os.remove(copy_path)
    return applied


# Run on each connection of a read-only store: every write on it is refused from then on.
# PostgreSQL's sessions are made read-only when they start (`Store._pg_options`).
READ_ONLY_SESSION = {
    "sqlite": "PRAGMA query_only = ON",
    "mysql": "SET SESSION TRANSACTION READ ONLY",
}
PG_READ_ONLY_OPTIONS = "-c default_transaction_read_only=on"


def _execute(connection, statement: str) -> None:
    cursor = connection.cursor()
    cursor.execute(statement)
    cursor.close()


def _first_line(exc: BaseException) -> str:
    """A driver's message without its hints and context lines (never a password: the
    drivers do not repeat the connection string)."""
    original = getattr(exc, "original_exc", None) or exc
    text = str(original).strip().splitlines()
    return text[0].strip() if text and text[0].strip() else type(original).__name__


def _pony_sql(statement: str, params) -> tuple[str, dict, dict]:
    """`?` placeholders to Pony's `$(p[i])`, which Pony turns into the driver's style."""
    parts = [part.replace("$", "$$") for part in statement.split("?")]
    if len(parts) - 1 != len(params):
        raise ValueError(f"{len(parts) - 1} placeholders for {len(params)} parameters")
    text = parts[0] + "".join(f"$(p[{i}]){part}" for i, part in enumerate(parts[1:]))
    return text, {}, {"p": list(params)}


def _cooperate_with_gevent() -> None:
    """psycopg2 is a C driver: unless told to wait through gevent, every query would
    block the whole process. PyMySQL is pure Python and cooperates by itself."""
    from gevent import monkey

    if monkey.is_module_patched("socket"):
        from psycogreen.gevent import patch_psycopg

        patch_psycopg()
