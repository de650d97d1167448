"""The store: one database (SQLite file, PostgreSQL or MariaDB/MySQL) behind Pony.

`Store.open()` connects, applies pending migrations through a plain DB-API connection,
then maps the Pony entities. SQLite runs in WAL mode with foreign keys on, so readers
never wait for the writer and a crash mid-write leaves a valid file.
"""

from __future__ import annotations

import logging
import os
import sqlite3

from pony.orm import Database

from appliance.store.migrations import migrate
from appliance.store.models import define_entities
from appliance.store.urls import DbUrl, parse_db_url

log = logging.getLogger(__name__)


class Store:
    """A database and its entities; services receive one of these."""

    def __init__(self, url: DbUrl | str):
        self.url = parse_db_url(url) if isinstance(url, str) else url
        self.dialect = self.url.kind
        self.db = Database()
        self.entities = define_entities(self.db)

    def __getattr__(self, name: str):
        return getattr(self.entities, name)

    def raw_connect(self):
        """A plain DB-API connection, for migrations and bulk copies."""
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

    def open(self) -> list[int]:
        """Migrate and map; returns the migration versions applied now."""
        if self.url.kind == "sqlite":
            os.makedirs(os.path.dirname(self.url.path) or ".", exist_ok=True)
        conn = self.raw_connect()
        try:
            applied = migrate(conn, self.dialect)
        finally:
            conn.close()
        self.db.bind(**self._bind_args())
        self.db.generate_mapping(create_tables=False, check_tables=True)
        if applied:
            log.info("database %s now at schema version %d", self.url.redacted(), applied[-1])
        return applied

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

    def execute_many(self, statement: str, rows: list[tuple]) -> None:
        """One statement, many parameter rows, inside the current transaction: the way
        bulk creates insert thousands of rows."""
        if self.dialect != "sqlite":
            statement = statement.replace("%", "%%").replace("?", "%s")
        self.db.get_connection().cursor().executemany(statement, rows)

    def close(self) -> None:
        self.db.disconnect()

    def _bind_args(self) -> dict:
        url = self.url
        if url.kind == "sqlite":
            return {"provider": "sqlite", "filename": url.path}
        if url.kind == "postgres":
            return {
                "provider": "postgres",
                "host": url.host,
                "port": url.port,
                "user": url.user,
                "password": url.password,
                "database": url.database,
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
