"""`migrate-db`: copy a panel's SQLite file into an empty PostgreSQL or MariaDB/MySQL database.

The copy is table by table through plain DB-API connections, not through Pony: the rows
go over as they are stored (ids included), so every reference between tables stays
valid. The order follows the foreign keys, parents first. The approach, step by step:

1. open the source read-only and hold one read transaction, so the copy is one consistent
   snapshot even while a panel still runs on the file (the file itself is never written);
2. bring the target schema to the source's version with the same migrations a panel runs
   on start (a newer panel then upgrades both the same way);
3. refuse a target that holds rows, unless asked to replace them;
4. insert every row, move the id sequences past the highest id (PostgreSQL `setval`,
   MySQL `AUTO_INCREMENT`, after SQLite's own record of ids already handed out), then
   compare row counts and a SHA-256 per table over the rows ordered by id, rendered the
   same way on both sides. Only when every table matches is the transaction committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import quote as url_quote

from appliance.errors import ServiceError
from appliance.store import Store
from appliance.store.ddl import quote
from appliance.store.migrations import LATEST, VERSION_TABLE, current_version, migrate
from appliance.store.urls import DbUrl

BATCH_ROWS = 2000


@dataclass(frozen=True)
class TableCopy:
    """What one table looked like on both sides after the copy."""

    name: str
    source_rows: int
    target_rows: int
    source_sha256: str
    target_sha256: str

    @property
    def matches(self) -> bool:
        return (self.source_rows, self.source_sha256) == (self.target_rows, self.target_sha256)


def migrate_database(source_path: str, target: DbUrl, replace: bool = False) -> list[TableCopy]:
    """Copy every table of the SQLite file at `source_path` into `target`; returns the
    per-table comparison, all matching (a mismatch rolls back and raises)."""
    if target.kind == "sqlite":
        raise ServiceError(
            "--to must name a PostgreSQL or MySQL/MariaDB database "
            "(postgresql://user:password@host/db or mysql://user:password@host/db)"
        )
    source = _open_source(source_path)
    try:
        source.execute("BEGIN")
        version = _source_version(source, source_path)
        tables = _tables_in_dependency_order(source)
        store = Store(target)
        conn = _connect_target(store)
        try:
            return _copy(source, conn, store.dialect, version, tables, replace)
        except _driver_error(store.dialect) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ServiceError(
                f"copying into {target.redacted()} failed and was rolled back: {reason}"
            ) from None
        finally:
            conn.close()
    finally:
        source.close()


def format_report(copies: Iterable[TableCopy]) -> str:
    """The comparison as a table for the terminal."""
    lines = [f"{'table':<18} {'rows':>10}  {'sha256 (source = target)':<24}"]
    for copy in copies:
        verdict = "ok" if copy.matches else f"MISMATCH (target {copy.target_rows} rows)"
        lines.append(
            f"{copy.name:<18} {copy.source_rows:>10}  {copy.source_sha256[:24]:<24}  {verdict}"
        )
    return "\n".join(lines)


# ---- the source -------------------------------------------------------------------------


def _open_source(path: str) -> sqlite3.Connection:
    if not os.path.isfile(path):
        raise ServiceError(f"no SQLite database at {path}; name the panel's file with --from")
    try:
        conn = sqlite3.connect(f"file:{url_quote(path)}?mode=ro", uri=True, isolation_level=None)
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ServiceError(f"{path} cannot be read as a SQLite database: {exc}") from None
    return conn


def _source_version(source: sqlite3.Connection, path: str) -> int:
    version = current_version(source, "sqlite")
    if version == 0:
        raise ServiceError(f"{path} is not a panel database (it has no schema version)")
    if version > LATEST:
        raise ServiceError(
            f"{path} is at schema version {version}, newer than this release knows "
            f"({LATEST}); run migrate-db from that release or newer"
        )
    return version


def _tables_in_dependency_order(source: sqlite3.Connection) -> list[str]:
    """Every table but SQLite's own and the version record, parents before children."""
    names = [
        name
        for (name,) in source.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY rowid"
        )
        if name != VERSION_TABLE.name
    ]
    parents = {name: _parents(source, name) - {name} for name in names}
    ordered: list[str] = []
    while len(ordered) < len(names):
        ready = [n for n in names if n not in ordered and parents[n] <= set(ordered)]
        if not ready:
            raise ServiceError("the source's foreign keys form a cycle; it cannot be copied")
        ordered += ready
    return ordered


def _parents(source: sqlite3.Connection, table: str) -> set[str]:
    return {row[2] for row in source.execute(f"PRAGMA foreign_key_list({quote(table, 'sqlite')})")}


def _columns(source: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in source.execute(f"PRAGMA table_info({quote(table, 'sqlite')})")]


def _highest_issued_ids(source: sqlite3.Connection) -> dict[str, int]:
    """SQLite's AUTOINCREMENT record: ids handed out once are never reused, even when
    their rows were deleted; the target's sequences start past them too."""
    try:
        return dict(source.execute("SELECT name, seq FROM sqlite_sequence"))
    except sqlite3.OperationalError:
        return {}


# ---- the target -------------------------------------------------------------------------


def _driver_error(dialect: str) -> type[Exception]:
    """The base class of every error the target's driver raises."""
    if dialect == "postgres":
        import psycopg2

        return psycopg2.Error
    import pymysql

    return pymysql.err.Error


def _connect_target(store: Store):
    try:
        return store.raw_connect()
    except Exception as exc:
        raise ServiceError(
            f"cannot connect to {store.url.redacted()}: {str(exc).strip() or type(exc).__name__}"
        ) from None


def _copy(source, conn, dialect: str, version: int, tables: list[str], replace: bool):
    target_version = current_version(conn, dialect)
    if target_version > version:
        raise ServiceError(
            f"the target is at schema version {target_version}, newer than the source's "
            f"{version}; start this release on the SQLite file once to upgrade it first"
        )
    migrate(conn, dialect, target=version)
    cur = conn.cursor()
    missing = [t for t in tables if not _target_has_table(cur, dialect, t)]
    if missing:
        raise ServiceError(f"the target schema has no table {', '.join(missing)}")
    occupied = [t for t in tables if _count(cur, dialect, t)]
    if occupied and not replace:
        raise ServiceError(
            f"the target database is not empty (rows in {', '.join(occupied)}); "
            "use --replace to overwrite it"
        )
    try:
        for table in reversed(occupied):
            cur.execute(f"DELETE FROM {quote(table, dialect)}")
        issued = _highest_issued_ids(source)
        copies = []
        for table in tables:
            columns = _columns(source, table)
            _insert_rows(
                cur, dialect, table, columns, _target_booleans(cur, dialect, table), source
            )
            if dialect == "postgres":
                _advance_postgres_sequence(cur, table, issued.get(table, 0))
            copies.append(_compare(source, cur, dialect, table, columns))
        bad = [copy.name for copy in copies if not copy.matches]
        if bad:
            raise ServiceError(f"the copy differs from the source in {', '.join(bad)}")
        conn.commit()
    except Exception:
        conn.rollback()
        raise
    if dialect == "mysql":
        # ALTER TABLE commits implicitly in MySQL, so it waits until the data is in.
        for table in tables:
            _advance_mysql_counter(cur, table, issued.get(table, 0))
    return copies


def _target_has_table(cur, dialect: str, table: str) -> bool:
    schema = "current_schema()" if dialect == "postgres" else "DATABASE()"
    cur.execute(
        "SELECT 1 FROM information_schema.tables "
        f"WHERE table_schema = {schema} AND table_name = %s",
        (table,),
    )
    return cur.fetchone() is not None


def _target_booleans(cur, dialect: str, table: str) -> set[str]:
    """PostgreSQL's BOOLEAN takes no 0/1; SQLite stores booleans that way."""
    if dialect != "postgres":
        return set()
    cur.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s AND data_type = 'boolean'",
        (table,),
    )
    return {row[0] for row in cur.fetchall()}


def _count(cur, dialect: str, table: str) -> int:
    cur.execute(f"SELECT COUNT(*) FROM {quote(table, dialect)}")
    return int(cur.fetchone()[0])


def _insert_rows(cur, dialect: str, table: str, columns: list[str], booleans: set[str], source):
    names = ", ".join(quote(c, dialect) for c in columns)
    flags = [c in booleans for c in columns]
    rows = source.execute(_ordered_select(table, columns, "sqlite"))
    if dialect == "postgres":
        from psycopg2.extras import execute_values

        statement = f"INSERT INTO {quote(table, dialect)} ({names}) VALUES %s"
    else:
        marks = ", ".join(["%s"] * len(columns))
        statement = f"INSERT INTO {quote(table, dialect)} ({names}) VALUES ({marks})"
    while batch := rows.fetchmany(BATCH_ROWS):
        if any(flags):
            batch = [
                tuple(
                    bool(v) if flag and v is not None else v
                    for v, flag in zip(row, flags, strict=True)
                )
                for row in batch
            ]
        if dialect == "postgres":
            execute_values(cur, statement, batch, page_size=BATCH_ROWS)
        else:
            cur.executemany(statement, batch)


def _advance_postgres_sequence(cur, table: str, issued: int) -> None:
    cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM {quote(table, 'postgres')}")
    highest = max(int(cur.fetchone()[0]), issued)
    # setval(seq, n, false) makes n the next id handed out; a sequence starts at 1.
    cur.execute(
        "SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, false)",
        (quote(table, "postgres"), highest + 1),
    )


def _advance_mysql_counter(cur, table: str, issued: int) -> None:
    cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM {quote(table, 'mysql')}")
    highest = max(int(cur.fetchone()[0]), issued)
    cur.execute(f"ALTER TABLE {quote(table, 'mysql')} AUTO_INCREMENT = {int(highest) + 1}")


# ---- verification ---------------------------------------------------------------------------


def _compare(source, cur, dialect: str, table: str, columns: list[str]) -> TableCopy:
    source_rows, source_sha = table_digest(
        source.execute(_ordered_select(table, columns, "sqlite"))
    )
    cur.execute(_ordered_select(table, columns, dialect))
    target_rows, target_sha = table_digest(_fetch_all_batched(cur))
    return TableCopy(table, source_rows, target_rows, source_sha, target_sha)


def _ordered_select(table: str, columns: list[str], dialect: str) -> str:
    names = ", ".join(quote(c, dialect) for c in columns)
    return f"SELECT {names} FROM {quote(table, dialect)} ORDER BY {quote('id', dialect)}"


def _fetch_all_batched(cur) -> Iterator[tuple]:
    while batch := cur.fetchmany(BATCH_ROWS):
        yield from batch


def table_digest(rows: Iterable[tuple]) -> tuple[int, str]:
    """Row count and SHA-256 over the rows, each rendered canonically: booleans as 0/1
    (PostgreSQL answers True, SQLite and MySQL 1), numbers in decimal, NULL as null, one
    JSON array per line. The same rows give the same digest on every backend."""
    digest = hashlib.sha256()
    count = 0
    for row in rows:
        cells = [int(v) if isinstance(v, bool) else v for v in row]
        digest.update(json.dumps(cells, ensure_ascii=False).encode())
        digest.update(b"\n")
        count += 1
    return count, digest.hexdigest()
