"""A panel killed with SIGKILL in the middle of an import or a schema migration.

An import (`POST /panel/api/server/importDB`) checks the uploaded file in a scratch copy,
keeps the live data as a file under `<data dir>/backups/`, and then writes the new pages
over the live database in one transaction (appliance/services/admin/backups.py). A
migration applies each numbered step in a transaction of its own, recorded in
`schema_version` (appliance/store/migrations.py). So a kill at any moment must leave a
database that passes SQLite's checks and holds the old data or the new, never a mix: after
an import, every row as before or every row of the backup; after a migration, every row
as before and the schema of exactly the last version recorded. The next start of the
panel must run on it and serve the data.

The backup is a sizeable one (20,000 clients with long comments, about 60 MB), so
checking it, copying it in and indexing it take a moment, and the kill lands while the
panel is visibly at work: scratch files in the backup folder, the live write-ahead log
growing, or the panel saying which migration it applies.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
import requests
from helpers import clean_env, create_plain_vless, db_path, ok
from panels import skip_unless_sqlite, start_panel

from appliance.store.backup import columns, tables_in_dependency_order
from appliance.store.migrations import LATEST, migrate

pytestmark = pytest.mark.slow

CLIENTS = "/panel/api/clients"
SERVER = "/panel/api/server"
NEW_COUNT = 20_000
OLD_COUNT = 500
COMMENT = "a comment that makes every client row and its search text long " * 9
# The tables a user's data lives in (sessions and the audit log change with every call).
DATA_TABLES = ("inbound", "client", "client_inbound", "client_traffic")
# The version a migrated database starts at: the later steps index the client tables.
OLD_VERSION = 4
WORK_WAIT_SECONDS = 120
WAL_GROWTH = 4 * 1024 * 1024


def bulk(prefix: str, count: int, inbound_id: int) -> list[dict]:
    return [
        {
            "client": {"email": f"{prefix}-{n:05d}@kill", "comment": COMMENT},
            "inboundIds": [inbound_id],
        }
        for n in range(count)
    ]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A backup of a panel with NEW_COUNT clients (its file path), and that panel's
    sign-in, which the backup carries."""
    skip_unless_sqlite("the kills are checked on the SQLite file")
    tmp_path = tmp_path_factory.mktemp("source")
    server = start_panel(tmp_path)
    try:
        api = server.client()
        inbound_id = create_plain_vless(api, 33501)
        assert (
            ok(api.post(f"{CLIENTS}/bulkCreate", bulk("new", NEW_COUNT, inbound_id)))["created"]
            == NEW_COUNT
        )
        reply = api.raw("GET", f"{SERVER}/getDb")
        assert reply.status_code == 200
        path = tmp_path / "backup.db"
        path.write_bytes(reply.content)
    finally:
        server.stop()
    return str(path), server.username, server.password


def integrity_problems(path: str) -> list[tuple]:
    """SQLite's own checks of the file at `path`; empty when sound."""
    conn = sqlite3.connect(path)
    try:
        problems = [row for row in conn.execute("PRAGMA integrity_check") if row != ("ok",)]
        return problems + conn.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        conn.close()


def old_columns() -> dict[str, list[str]]:
    """The columns the data tables have at OLD_VERSION (and still have since)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(conn, "sqlite", target=OLD_VERSION)
        return {table: columns(conn, table) for table in DATA_TABLES}
    finally:
        conn.close()


def data_digest(path: str) -> str:
    """A digest of every row of the data tables (through SQLite, so the WAL counts)."""
    digest = hashlib.sha256()
    conn = sqlite3.connect(path)
    try:
        for table, names in old_columns().items():
            for row in conn.execute(f"SELECT {', '.join(names)} FROM {table} ORDER BY id"):
                digest.update(repr(row).encode())
    finally:
        conn.close()
    return digest.hexdigest()


def schema_at(path: str) -> tuple[set[tuple], dict[str, list[str]]]:
    """The file's tables and indexes by name, and each table's columns."""
    conn = sqlite3.connect(path)
    try:
        names = set(
            conn.execute(
                "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            )
        )
        return names, {table: columns(conn, table) for table in tables_in_dependency_order(conn)}
    finally:
        conn.close()


def stored_versions(path: str) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute("SELECT version FROM schema_version ORDER BY 1")]
    finally:
        conn.close()


def scratch_files(data_dir: str) -> list[str]:
    backups = os.path.join(data_dir, "backups")
    names = os.listdir(backups) if os.path.isdir(backups) else []
    return [name for name in names if name.startswith(".scratch-")]


def serves_clients(api, count: int, sample: str) -> None:
    assert ok(api.get(f"{CLIENTS}/list/paged?pageSize=1"))["total"] == count
    client = ok(api.get(f"{CLIENTS}/get/{sample}"))["client"]
    assert (client["email"], client["comment"]) == (sample, COMMENT)


# ---- import ---------------------------------------------------------------------------------


class ImportCall(threading.Thread):
    """importDB in the background; `reply` is its envelope if it answered."""

    def __init__(self, server, content: bytes):
        super().__init__(daemon=True)
        self.client = server.client()
        self.content = content
        self.reply: dict | None = None

    def run(self) -> None:
        with contextlib.suppress(requests.ConnectionError):  # killed before it answered
            self.reply = self.client.raw(
                "POST", f"{SERVER}/importDB", files={"db": ("backup.db", self.content)}
            ).json()


def import_reached(server, stage: str, wal_before: int) -> bool:
    """Whether the import is checking its scratch copy, or writing over the live file."""
    backups = os.path.join(server.data_dir, "backups")
    names = os.listdir(backups) if os.path.isdir(backups) else []
    kept = any(name.startswith("appliance-before-import-") for name in names)
    if stage == "checking":
        return bool(scratch_files(server.data_dir)) and not kept
    wal = db_path(server) + "-wal"
    grown = os.path.exists(wal) and os.path.getsize(wal) - wal_before >= WAL_GROWTH
    return kept and grown


@pytest.mark.parametrize("stage", ["checking", "replacing"])
def test_a_kill_during_an_import_leaves_the_old_data_or_the_new(tmp_path, source, stage):
    backup_path, source_user, source_password = source
    server = start_panel(tmp_path)
    try:
        api = server.client()
        inbound_id = create_plain_vless(api, 33502)
        assert (
            ok(api.post(f"{CLIENTS}/bulkCreate", bulk("old", OLD_COUNT, inbound_id)))["created"]
            == OLD_COUNT
        )
        old, new = data_digest(db_path(server)), data_digest(backup_path)
        wal = db_path(server) + "-wal"
        wal_before = os.path.getsize(wal) if os.path.exists(wal) else 0

        with open(backup_path, "rb") as fh:
            call = ImportCall(server, fh.read())
        call.start()
        deadline = time.monotonic() + WORK_WAIT_SECONDS
        while not import_reached(server, stage, wal_before) and call.is_alive():
            assert time.monotonic() < deadline, f"the import never reached {stage}"
            time.sleep(0.005)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        call.join(30)

        assert integrity_problems(db_path(server)) == []
        after = data_digest(db_path(server))
        assert after in (old, new), "the database holds neither the old data nor the new"
        if stage == "checking":
            # Nothing was written over the live file before its copy was kept.
            assert after == old
        if call.reply is not None and call.reply.get("success") is True:
            assert after == new

        if after == new:
            server.username, server.password = source_user, source_password
        server.start()
        api = server.client()
        if after == new:
            serves_clients(api, NEW_COUNT, "new-00042@kill")
        else:
            serves_clients(api, OLD_COUNT, "old-00042@kill")
        # The scratch files the kill left behind go with the next backup.
        assert api.raw("GET", f"{SERVER}/getDb").status_code == 200
        assert scratch_files(server.data_dir) == []
        assert "Traceback" not in server.output()
    finally:
        server.stop()


# ---- migration ------------------------------------------------------------------------------


def database_at_old_version(backup_path: str, path: str) -> None:
    """The backup's rows in a new database at OLD_VERSION: each table that version has,
    with the columns it has then."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn, "sqlite", target=OLD_VERSION)
        conn.execute("ATTACH DATABASE ? AS source", (backup_path,))
        conn.execute("BEGIN")
        for table in tables_in_dependency_order(conn):
            names = ", ".join(columns(conn, table))
            conn.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM source.{table}")
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE source")
    finally:
        conn.close()


def reference_schema(version: int, tmp_path) -> tuple[set[tuple], dict[str, list[str]]]:
    path = str(tmp_path / f"reference-{version}.db")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn, "sqlite", target=version)
    finally:
        conn.close()
    return schema_at(path)


@pytest.mark.parametrize("step", [6, 8])
def test_a_kill_during_a_migration_leaves_whole_versions(tmp_path, source, step):
    backup_path, user, password = source
    db = str(tmp_path / "old.db")
    database_at_old_version(backup_path, db)
    before = data_digest(db)
    command = [sys.executable, "-m", "appliance", "run", "--data-dir", str(tmp_path / "data")]
    command += ["--db", db, "--listen", "127.0.0.1", "--port", "0", "--sub-port", "0"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env()
    )
    wanted = f"applying schema migration {step}:"
    seen = ""
    try:
        for line in process.stdout:
            if wanted in line or "listening" in line:
                seen = line
                break
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    assert wanted in seen, "the panel never said it applies the migration"

    assert integrity_problems(db) == []
    versions = stored_versions(db)
    assert versions == list(range(1, versions[-1] + 1))
    assert OLD_VERSION <= versions[-1] <= LATEST
    assert schema_at(db) == reference_schema(versions[-1], tmp_path)
    assert data_digest(db) == before

    server = start_panel(tmp_path, "--db", db)
    try:
        server.username, server.password = user, password
        serves_clients(server.client(), NEW_COUNT, "new-00042@kill")
        assert "Traceback" not in server.output()
    finally:
        server.stop()
    assert stored_versions(db) == list(range(1, LATEST + 1))
