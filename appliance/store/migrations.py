"""Numbered schema migrations, recorded in the database they changed.

Every change to a table is a new entry at the end of `MIGRATIONS` (store/schema_steps.py);
entries are never edited once released. On open, `migrate()` applies, in order and each
in its own transaction, the entries newer than the highest version recorded in
`schema_version`, so a database written by any older release upgrades itself on start.
(MySQL commits DDL implicitly; there a failed step can leave a half-applied version,
which is why each step is small.)
"""

from __future__ import annotations

import logging
import time

from appliance.errors import ServiceError
from appliance.store.ddl import Column, Index, Table
from appliance.store.schema_steps import MIGRATIONS

log = logging.getLogger(__name__)

__all__ = ["LATEST", "MIGRATIONS", "VERSION_TABLE", "current_version", "migrate"]

LATEST = MIGRATIONS[-1][0]

VERSION_TABLE = Table(
    "schema_version",
    (Column("version", "int"), Column("name", "str", 255), Column("applied_at", "bigint")),
    (Index(("version",), unique=True),),
)


def current_version(conn, dialect: str) -> int:
    """Highest applied version; 0 for an empty database."""
    cur = conn.cursor()
    if not _has_table(cur, dialect, "schema_version"):
        return 0
    cur.execute("SELECT MAX(version) FROM schema_version")
    row = cur.fetchone()
    return int(row[0] or 0)


def migrate(conn, dialect: str, target: int = LATEST) -> list[int]:
    """Bring the database to `target`; returns the versions applied now."""
    version = current_version(conn, dialect)
    if version > LATEST:
        raise ServiceError(
            f"the database is at schema version {version}, newer than this release knows "
            f"({LATEST}): it was written by a newer panel; run that release (or newer) "
            "instead of downgrading"
        )
    applied = []
    cur = conn.cursor()
    # Checked by table, not by version: a database can hold the table with no rows yet.
    if not _has_table(cur, dialect, VERSION_TABLE.name):
        _run(conn, VERSION_TABLE.create(dialect))
    mark = "?" if dialect == "sqlite" else "%s"
    for number, name, step in MIGRATIONS:
        if number <= version or number > target:
            continue
        log.info("applying schema migration %d: %s", number, name)
        _begin(cur, dialect)
        try:
            for statement in step(dialect):
                if callable(statement):
                    statement(cur, mark)
                else:
                    cur.execute(statement)
            cur.execute(
                "INSERT INTO schema_version (version, name, applied_at) "
                f"VALUES ({mark}, {mark}, {mark})",
                (number, name, int(time.time())),
            )
            conn.commit()
        except Exception:
            conn.rollback()
            raise
        applied.append(number)
    return applied


def _begin(cur, dialect: str) -> None:
    if dialect == "sqlite":
        cur.execute("BEGIN IMMEDIATE")


def _run(conn, statements: list[str]) -> None:
    cur = conn.cursor()
    for sql in statements:
        cur.execute(sql)
    conn.commit()


def _has_table(cur, dialect: str, name: str) -> bool:
    if dialect == "sqlite":
        cur.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,))
    elif dialect == "postgres":
        cur.execute(
            "SELECT 1 FROM information_schema.tables "
            "WHERE table_schema=current_schema() AND table_name=%s",
            (name,),
        )
    else:
        cur.execute(
            "SELECT 1 FROM information_schema.tables "
            "WHERE table_schema=DATABASE() AND table_name=%s",
            (name,),
        )
    return cur.fetchone() is not None
