"""Schema versions: every table change is a numbered migration recorded in the database.

A database left at any older version opens and upgrades when the panel starts; one
written by a newer release is refused with a sentence, not a traceback. The same
migrations run on PostgreSQL and MariaDB, which run on this machine's loopback.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from uuid import uuid4

import pytest
from helpers import NETWORKED, fresh_database, server_reachable, without_core_or_nodes
from panels import start_panel

from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.inbounds.records import Inbounds
from appliance.store import Store
from appliance.store.migrations import LATEST, MIGRATIONS, migrate

TOKEN_HASH = "ab" * 32
# The inbounds stored here name no files, so no data directory is needed.
PLACES = FilePlaces("/nonexistent/data")


def versions(conn) -> list[int]:
    cur = conn.cursor()
    cur.execute("SELECT version FROM schema_version ORDER BY version")
    return [int(row[0]) for row in cur.fetchall()]


def stored_versions(path) -> list[int]:
    """The versions recorded in the database file at `path`, read after the panel stopped."""
    conn = sqlite3.connect(path)
    try:
        return versions(conn)
    finally:
        conn.close()


def sqlite_at(path, version: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert migrate(conn, "sqlite", target=version) == list(range(1, version + 1))
        if version >= 1:  # data written by that release must survive the upgrade
            conn.execute(
                "INSERT INTO api_token (name, token_hash, enabled, created_at) "
                "VALUES ('from-old-release', ?, 1, 1700000000)",
                (TOKEN_HASH,),
            )
    finally:
        conn.close()


def test_versions_are_numbered_in_order():
    numbers = [number for number, _, _ in MIGRATIONS]
    assert numbers == list(range(1, len(numbers) + 1))
    assert numbers[-1] == LATEST
    assert all(name for _, name, _ in MIGRATIONS)


def test_migrate_twice_applies_nothing_the_second_time(tmp_path):
    conn = sqlite3.connect(tmp_path / "twice.db", isolation_level=None)
    try:
        assert migrate(conn, "sqlite") == list(range(1, LATEST + 1))
        assert migrate(conn, "sqlite") == []
        assert versions(conn) == list(range(1, LATEST + 1))
    finally:
        conn.close()


def test_a_version_table_with_no_rows_upgrades(tmp_path):
    """target=0 leaves an empty schema_version table; opening again must not recreate it."""
    conn = sqlite3.connect(tmp_path / "zero.db", isolation_level=None)
    try:
        assert migrate(conn, "sqlite", target=0) == []
        assert versions(conn) == []
        assert migrate(conn, "sqlite") == list(range(1, LATEST + 1))
    finally:
        conn.close()


def serves(server) -> None:
    api = server.client()
    status = api.get("/panel/api/server/status")
    assert status["success"] is True, status
    assert api.get("/panel/api/inbounds/list")["success"] is True
    added = api.post(
        "/panel/api/inbounds/add",
        json={"protocol": "socks", "port": 32170, "settings": {"auth": "noauth"}},
    )
    assert added["success"] is True, added


@pytest.mark.parametrize("version", range(LATEST))
def test_older_database_upgrades_on_start(tmp_path, version):
    db = tmp_path / f"v{version}.db"
    sqlite_at(db, version)
    server = start_panel(tmp_path, "--db", str(db))
    try:
        serves(server)
        tokens = server.client().get("/panel/api/setting/apiTokens")["obj"]
        if version >= 1:
            assert [t["name"] for t in tokens] == ["from-old-release"]
            # A token of a release before scopes was a full admin one that never expired.
            assert (tokens[0]["scope"], tokens[0]["expiresAt"]) == ("admin", 0)
    finally:
        server.stop()
    assert stored_versions(db) == list(range(1, LATEST + 1))


def test_empty_file_is_a_new_database(tmp_path):
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    server = start_panel(tmp_path, "--db", str(db))
    try:
        serves(server)
    finally:
        server.stop()
    assert stored_versions(db) == list(range(1, LATEST + 1))


def run_on_newer_database(tmp_path) -> tuple[subprocess.CompletedProcess, str]:
    db = tmp_path / "newer.db"
    sqlite_at(db, LATEST)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "INSERT INTO schema_version (version, name, applied_at) VALUES (?, 'future', 0)",
        (LATEST + 1,),
    )
    conn.close()
    command = [sys.executable, "-m", "appliance", "run", "--data-dir", str(tmp_path / "data")]
    command += ["--db", str(db), "--listen", "127.0.0.1", "--port", "0", "--sub-port", "0"]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result, str(db)


def test_newer_database_is_refused(tmp_path):
    result, db = run_on_newer_database(tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"schema version {LATEST + 1}" in output and "newer" in output
    assert "panel listening" not in output
    assert stored_versions(db) == [*range(1, LATEST + 1), LATEST + 1]  # left as it was


def test_newer_database_is_refused_without_a_traceback(tmp_path):
    result, _ = run_on_newer_database(tmp_path)
    assert "Traceback" not in result.stdout + result.stderr


# ---- networked backends -----------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(NETWORKED))
def test_networked_migrations_step_by_step(kind):
    with fresh_database(kind) as url:
        store = Store(url)
        conn = store.raw_connect()
        try:
            for version in range(LATEST + 1):
                applied = migrate(conn, store.dialect, target=version)
                assert applied == ([version] if version else [])
                assert versions(conn) == list(range(1, version + 1))
            assert migrate(conn, store.dialect) == []
        finally:
            conn.close()


def test_a_role_that_may_not_add_extensions_migrates_and_searches_by_a_scan(caplog):
    """A PostgreSQL role without CREATE on its database cannot add pg_trgm: the panel
    starts all the same, says in the log how to add the index, and searches by a scan."""
    if not server_reachable("postgres"):
        pytest.skip("no postgres server")
    import psycopg2

    role = f"appliance_limited_{uuid4().hex[:8]}"
    host, port = NETWORKED["postgres"]
    try:
        with fresh_database("postgres") as url:
            admin = psycopg2.connect(
                host=host, port=port, user="postgres", dbname=url.rsplit("/", 1)[1]
            )
            admin.autocommit = True
            with admin.cursor() as cur:
                cur.execute(f"CREATE ROLE {role} LOGIN")
                cur.execute(f"GRANT ALL ON SCHEMA public TO {role}")
            store = Store(url.replace("postgresql://postgres@", f"postgresql://{role}@"))
            with caplog.at_level("WARNING", logger="appliance.store.schema_steps"):
                assert store.open() == list(range(1, LATEST + 1))
            try:
                assert "pg_trgm could not be added" in caplog.text
                assert "CREATE INDEX ix_client_search_trigram" in caplog.text
                with admin.cursor() as cur:
                    cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'client'")
                    assert "ix_client_search_trigram" not in {row[0] for row in cur.fetchall()}
            finally:
                store.close()
                admin.close()
    finally:
        with contextlib.closing(
            psycopg2.connect(host=host, port=port, user="postgres", dbname="postgres")
        ) as conn:
            conn.autocommit = True
            conn.cursor().execute(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.parametrize("kind", sorted(NETWORKED))
def test_networked_store_round_trips_an_inbound(kind):
    with fresh_database(kind) as url:
        store = Store(url)
        assert store.open() == list(range(1, LATEST + 1))
        try:
            inbounds = Inbounds(
                store,
                lambda: [],
                lambda ids, slim: {},
                clock=lambda: 1_700_000_000.0,
                places=PLACES,
                notice=ChangeNotice(),
                **without_core_or_nodes(),
            )
            created = inbounds.add(
                {
                    "protocol": "socks",
                    "port": 32180,
                    "remark": "Grüße 🚀 'quoted'",
                    "settings": {"auth": "noauth", "udp": True},
                    "total": 2**40,
                }
            )
            stored = inbounds.get(created["id"])
            assert stored == created
            assert stored["remark"] == "Grüße 🚀 'quoted'"
            assert stored["total"] == 2**40
            assert stored["settings"]["udp"] is True
            assert [i["id"] for i in inbounds.list()] == [created["id"]]
        finally:
            store.close()
        reopened = Store(url)
        assert reopened.open() == []  # already at LATEST: nothing to apply
        try:
            again = Inbounds(
                reopened,
                lambda: [],
                lambda ids, slim: {},
                places=PLACES,
                notice=ChangeNotice(),
                **without_core_or_nodes(),
            )
            assert again.get(created["id"])["remark"] == "Grüße 🚀 'quoted'"
        finally:
            reopened.close()


# ---- MTProto secrets ----------------------------------------------------------------------

SHARED_UUID = "1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed"


@contextlib.contextmanager
def raw_database(kind: str, tmp_path) -> Iterator[tuple[object, str]]:
    """A DB-API connection to a new, empty database of `kind`, and its dialect."""
    if kind == "sqlite":
        conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
        try:
            yield conn, "sqlite"
        finally:
            conn.close()
        return
    with fresh_database(kind) as url:
        store = Store(url)
        conn = store.raw_connect()
        try:
            yield conn, store.dialect
        finally:
            conn.close()


@pytest.mark.parametrize("kind", ["sqlite", *sorted(NETWORKED)])
def test_shared_and_empty_mtproto_secrets_are_rekeyed_and_then_unique(kind, tmp_path):
    with raw_database(kind, tmp_path) as (conn, dialect):
        mark = "?" if dialect == "sqlite" else "%s"
        migrate(conn, dialect, target=12)
        cur = conn.cursor()
        # Two clients of one UUID (as 3x-ui allows): version 13 gives both its bytes.
        for n, uuid in enumerate([SHARED_UUID, SHARED_UUID, str(uuid4())]):
            cur.execute(
                "INSERT INTO client (email, email_key, uuid, password, auth, sub_id, "
                f"search_key) VALUES ({mark}, {mark}, {mark}, 'p', 'a', {mark}, '')",
                (f"c{n}", f"c{n}", uuid, f"s{n}"),
            )
        conn.commit()
        migrate(conn, dialect, target=14)
        cur.execute("UPDATE client SET mt_secret = '' WHERE email = 'c2'")
        conn.commit()
        migrate(conn, dialect)
        cur.execute("SELECT email, mt_secret FROM client ORDER BY id")
        secrets = dict(cur.fetchall())
        assert secrets["c0"] == SHARED_UUID.replace("-", "")
        assert len(set(secrets.values())) == 3
        assert all(re.fullmatch(r"[0-9a-f]{32}", key) for key in secrets.values())
        with pytest.raises(Exception, match="mt_secret"):
            cur.execute(
                f"UPDATE client SET mt_secret = {mark} WHERE email = 'c1'", (secrets["c0"],)
            )
        conn.rollback()


# ---- natural email order --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", *sorted(NETWORKED)])
def test_clients_stored_before_get_their_natural_email_order(kind, tmp_path):
    with raw_database(kind, tmp_path) as (conn, dialect):
        mark = "?" if dialect == "sqlite" else "%s"
        migrate(conn, dialect, target=15)
        cur = conn.cursor()
        for n, email in enumerate(["bulk10@ex", "bulk2@ex", "Bulk1@ex", "bulk@ex"]):
            cur.execute(
                "INSERT INTO client (email, email_key, uuid, password, auth, sub_id, "
                f"search_key, mt_secret) VALUES ({mark}, {mark}, {mark}, 'p', 'a', {mark}, '', "
                f"{mark})",
                (email, email.casefold(), str(uuid4()), f"s{n}", f"{n:032x}"),
            )
        conn.commit()
        migrate(conn, dialect)
        cur.execute("SELECT email FROM client ORDER BY email_order, id")
        assert [row[0] for row in cur.fetchall()] == [
            "Bulk1@ex",
            "bulk2@ex",
            "bulk10@ex",
            "bulk@ex",
        ]
