"""Backups of the live database as files, and the checks a file passes before it may
replace the live data.

Every backup is a consistent snapshot, never a copy of a file being written:

- a SQLite database is copied with SQLite's online backup API in one step, which reads
  the whole file inside one read transaction (WAL readers never wait for the writer, and
  the writer never waits for them);
- a PostgreSQL or MariaDB/MySQL database is read inside one repeatable-read transaction
  into a new SQLite file made by the same migrations, so one portable format holds any
  panel's data and restores onto any backend.

A file offered for restore is first loaded into a scratch SQLite file (a SQL text dump is
run statement by statement under an allowlist: no ATTACH, no VACUUM INTO, no triggers),
then checked: SQLite's integrity check, the foreign keys, a `schema_version` no newer
than this release, and after upgrading, exactly the tables and columns this release
creates. Only a file that passes replaces the live data, and it does so in one
transaction. These functions are synchronous and know nothing of HTTP.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable

from appliance.errors import ServiceError
from appliance.store.ddl import quote
from appliance.store.migrations import LATEST, VERSION_TABLE, current_version, migrate

SQLITE_HEADER = b"SQLite format 3\x00"
COPY_BATCH_ROWS = 2000
BUSY_TIMEOUT_SECONDS = 30
MAX_REPORTED_PROBLEMS = 3
# What a SQL dump of one of our databases consists of: the words Python's `iterdump()`
# and the sqlite3 shell's `.dump` begin their statements with.
DUMP_STATEMENTS = frozenset({"BEGIN", "COMMIT", "END", "CREATE", "INSERT", "DELETE", "PRAGMA"})
DUMP_PRAGMAS = frozenset({"foreign_keys"})
DUMP_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_CREATE_TABLE,
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_REINDEX,
        sqlite3.SQLITE_INSERT,
        sqlite3.SQLITE_UPDATE,
        sqlite3.SQLITE_DELETE,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_TRANSACTION,
        sqlite3.SQLITE_FUNCTION,
    }
)
LEADING_WORD = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*([A-Za-z]+)", re.DOTALL)


# Tables that describe the panels running on the database, not its data: the instances
# and the log of changes sent between them. A backup leaves their rows behind, so a
# database restored from it lists only the instances that start on it.
RUNNING_STATE = frozenset({"panel_instance", "change_log"})


# ---- snapshots ------------------------------------------------------------------------------


def snapshot_sqlite(live_path: str, dest_path: str) -> None:
    """Copy the live SQLite file at `live_path` to a new file at `dest_path`."""
    source = sqlite3.connect(live_path, timeout=BUSY_TIMEOUT_SECONDS)
    try:
        target = sqlite3.connect(dest_path, isolation_level=None)
        try:
            source.backup(target, progress=_deadline(BUSY_TIMEOUT_SECONDS))
            # The copy inherits the live file's WAL flag; a downloaded backup should be
            # one self-contained file that opens without companion files.
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()
    finally:
        source.close()


def snapshot_networked(conn, dialect: str, dest_path: str) -> None:
    """Copy every table of a PostgreSQL or MySQL connection into a new SQLite file.

    The SQLite file gets its schema from our migrations at the source's version, then the
    source's rows (ids and the version record included) in one read-only transaction."""
    _begin_consistent_read(conn, dialect)
    try:
        version = current_version(conn, dialect)
        if version == 0:
            raise ServiceError("the live database has no schema version; nothing to back up")
        target = sqlite3.connect(dest_path, isolation_level=None)
        try:
            migrate(target, "sqlite", target=version)
            target.execute("BEGIN")
            target.execute(f"DELETE FROM {VERSION_TABLE.name}")
            for table in tables_in_dependency_order(target, include_versions=True):
                if table in RUNNING_STATE:
                    continue
                _copy_into_sqlite(conn, dialect, target, table, columns(target, table))
            target.execute("COMMIT")
        finally:
            target.close()
    finally:
        conn.rollback()


def _begin_consistent_read(conn, dialect: str) -> None:
    if dialect == "postgres":
        conn.rollback()
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
    else:
        cur = conn.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")


def _copy_into_sqlite(conn, dialect: str, target, table: str, names: list[str]) -> None:
    if dialect == "postgres":
        cur = conn.cursor(name=f"backup_{table}")  # server-side: rows arrive in batches
    else:
        import pymysql.cursors

        cur = conn.cursor(pymysql.cursors.SSCursor)
    try:
        cur.execute(f"SELECT {_names(names, dialect)} FROM {quote(table, dialect)}")
        insert = (
            f"INSERT INTO {quote(table, 'sqlite')} ({_names(names, 'sqlite')}) "
            f"VALUES ({', '.join('?' * len(names))})"
        )
        while batch := cur.fetchmany(COPY_BATCH_ROWS):
            target.executemany(insert, batch)
    finally:
        cur.close()


def dump_sql(sqlite_path: str, dest_path: str) -> None:
    """The SQLite file at `sqlite_path` as SQL text that `sqlite3` loads back."""
    conn = sqlite3.connect(sqlite_path)
    try:
        with open(dest_path, "w", encoding="utf-8", newline="\n") as out:
            # Tables are dumped in name order, children before some parents.
            out.write("PRAGMA foreign_keys=OFF;\n")
            for statement in conn.iterdump():
                out.write(statement + "\n")
    finally:
        conn.close()


# ---- loading and checking a file offered for restore ------------------------------------------


def is_sqlite_file(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER


def looks_like_sql_dump(path: str) -> bool:
    """Whether the file begins (after blanks and comments) with a word a dump begins with."""
    with open(path, "rb") as fh:
        head = fh.read(4096).decode("utf-8", "ignore")
    match = LEADING_WORD.match(head)
    return match is not None and match.group(1).upper() in DUMP_STATEMENTS


def load_sql_dump(dump_path: str, dest_path: str) -> None:
    """Run the SQL text at `dump_path` into a new SQLite file at `dest_path`.

    Statements run one at a time as they are read, so memory holds one statement; only
    the statements a dump consists of are allowed, and an authorizer refuses anything
    that would reach outside the new file (ATTACH) or add code to it (triggers, views)."""
    conn = sqlite3.connect(dest_path, isolation_level=None)
    conn.set_authorizer(_dump_authorizer)
    try:
        pending: list[str] = []
        number = 0
        with open(dump_path, encoding="utf-8", newline="") as fh:
            try:
                for line in fh:
                    pending.append(line)
                    if not line.rstrip().endswith(";"):
                        continue
                    statement = "".join(pending)
                    if not sqlite3.complete_statement(statement):
                        continue
                    pending = []
                    number += 1
                    _run_dump_statement(conn, statement, number)
            except UnicodeDecodeError:
                raise ServiceError("the SQL dump is not UTF-8 text") from None
        if LEADING_WORD.match("".join(pending)):
            raise ServiceError("the SQL dump ends in the middle of a statement: it is incomplete")
        if conn.in_transaction:
            raise ServiceError("the SQL dump ends before its COMMIT: it is incomplete")
        if number == 0:
            raise ServiceError("the SQL dump holds no statements")
    finally:
        conn.close()


def _run_dump_statement(conn, statement: str, number: int) -> None:
    match = LEADING_WORD.match(statement)
    word = match.group(1).upper() if match else ""
    if word not in DUMP_STATEMENTS:
        raise ServiceError(
            f"statement {number} of the SQL dump begins with '{word or statement[:20]}', "
            "which a database dump never does"
        )
    try:
        conn.execute(statement)
    except sqlite3.Error as exc:
        raise ServiceError(f"statement {number} of the SQL dump failed: {exc}") from None


def _dump_authorizer(action: int, first, second, database, trigger) -> int:
    if action == sqlite3.SQLITE_PRAGMA:
        return sqlite3.SQLITE_OK if first in DUMP_PRAGMAS else sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in DUMP_ACTIONS else sqlite3.SQLITE_DENY


def check_restorable(path: str) -> int:
    """Refuse, with the reason, a SQLite file that is damaged or not one of ours; returns
    its schema version."""
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise ServiceError(f"the file cannot be opened as a SQLite database: {exc}") from None
    try:
        conn.execute("PRAGMA trusted_schema=OFF")
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise ServiceError(
                "the database fails SQLite's integrity check: "
                + "; ".join(problems[:MAX_REPORTED_PROBLEMS])
            )
        dangling = conn.execute("PRAGMA foreign_key_check").fetchall()
        if dangling:
            raise ServiceError(
                f"the database has {len(dangling)} row{'s' if len(dangling) > 1 else ''} whose "
                f"references point nowhere (first in table {dangling[0][0]})"
            )
        code = conn.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')"
        ).fetchall()
        if code:
            raise ServiceError(
                f"the database holds a {code[0][0]} ({code[0][1]}); this panel creates none, "
                "so the file is not one of its databases"
            )
        version = current_version(conn, "sqlite")
    except sqlite3.Error as exc:
        raise ServiceError(f"the file is not a readable SQLite database: {exc}") from None
    finally:
        conn.close()
    if version == 0:
        raise ServiceError(
            "the database is not one of this panel's: it has no schema_version table"
        )
    if version > LATEST:
        raise ServiceError(
            f"the database is at schema version {version}, newer than this release knows "
            f"({LATEST}): it was written by a newer panel"
        )
    return version


def prepare_for_restore(path: str, page_size: int | None) -> None:
    """Upgrade a checked file to this release's schema, make sure the schema is exactly
    ours, and give it the live file's page size when one is given (SQLite copies pages
    one for one into a live SQLite file)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        try:
            conn.execute("PRAGMA journal_mode=DELETE")
            migrate(conn, "sqlite")
        except sqlite3.Error as exc:
            raise ServiceError(
                f"the database could not be upgraded to schema version {LATEST}: {exc}"
            ) from None
        _check_schema(schema(conn))
        if page_size and conn.execute("PRAGMA page_size").fetchone()[0] != page_size:
            conn.execute(f"PRAGMA page_size={int(page_size)}")
            conn.execute("VACUUM")
    finally:
        conn.close()


def _check_schema(found: dict[str, list[str]]) -> None:
    expected = reference_schema()
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing table {', '.join(missing)}")
        if extra:
            parts.append(f"unknown table {', '.join(extra)}")
        raise ServiceError(f"the database is not one of this panel's: {'; '.join(parts)}")
    for table, names in expected.items():
        if found[table] != names:
            raise ServiceError(
                f"the database is not one of this panel's: table {table} has columns "
                f"{', '.join(found[table])}; expected {', '.join(names)}"
            )


def reference_schema() -> dict[str, list[str]]:
    """Tables and their columns as this release creates them."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(conn, "sqlite")
        return schema(conn)
    finally:
        conn.close()


def schema(conn) -> dict[str, list[str]]:
    return {
        table: columns(conn, table)
        for table in tables_in_dependency_order(conn, include_versions=True)
    }


def page_size(path: str) -> int:
    """The page size of the SQLite file at `path`."""
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def row_counts(path: str) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: conn.execute(f"SELECT COUNT(*) FROM {quote(table, 'sqlite')}").fetchone()[0]
            for table in tables_in_dependency_order(conn, include_versions=True)
        }
    finally:
        conn.close()


# ---- replacing the live data --------------------------------------------------------------------


def restore_sqlite(source_path: str, live_path: str) -> None:
    """Write the prepared file at `source_path` over the live database, in one write
    transaction through the backup API: connections the panel holds open see the old
    data or the new, never a mix, and a failure leaves the old data in place."""
    source = sqlite3.connect(source_path)
    try:
        target = sqlite3.connect(live_path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        try:
            source.backup(target, progress=_deadline(BUSY_TIMEOUT_SECONDS))
            version = current_version(target, "sqlite")
        finally:
            target.close()
    finally:
        source.close()
    if version != LATEST:
        raise ServiceError(f"the restored database reads as schema version {version}")


def _deadline(seconds: float) -> Callable[[int, int, int], None]:
    """A backup progress callback that gives up when the other side stays busy."""
    give_up = time.monotonic() + seconds

    def progress(status: int, remaining: int, total: int) -> None:
        if status in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) and time.monotonic() > give_up:
            raise ServiceError(f"the database stayed locked for {seconds:g} s; try again")

    return progress


# ---- tables ---------------------------------------------------------------------------------


def tables_in_dependency_order(conn, include_versions: bool = False) -> list[str]:
    """The SQLite connection's tables (not SQLite's own), parents before children."""
    names = [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
        if include_versions or name != VERSION_TABLE.name
    ]
    parents = {
        name: {
            row[2]
            for row in conn.execute(f"PRAGMA foreign_key_list({quote(name, 'sqlite')})")
            if row[2] != name
        }
        for name in names
    }
    ordered: list[str] = []
    while len(ordered) < len(names):
        ready = [n for n in names if n not in ordered and parents[n] <= set(ordered)]
        if not ready:
            raise ServiceError("the database's foreign keys form a cycle or name a missing table")
        ordered += ready
    return ordered


def columns(conn, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({quote(table, 'sqlite')})")]


def _names(names: list[str], dialect: str) -> str:
    return ", ".join(quote(name, dialect) for name in names)
