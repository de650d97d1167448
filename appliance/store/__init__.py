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
            "passwd": url.password,
            "db": url.database,
            "charset": "utf8mb4",
        }
