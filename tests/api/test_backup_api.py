"""Backups a user can trust: getDb, getMigration and importDB over real HTTP.

A backup must be a consistent snapshot even while clients are being added, must open as a
SQLite database (getDb) or load into sqlite3 as SQL text (getMigration), and must restore
through importDB. Anything that is not one of this panel's databases (garbage, a cut-off
file, somebody else's SQLite file, a database from a newer release, an oversized upload)
is refused with a sentence while the panel keeps serving its data. The networked backends
produce the same portable SQLite file and restore from it too.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import socket
import sqlite3
import threading
import time
import uuid

import psutil
import pytest
from core_helpers import V2RAY
from core_panel import wait_until as poll_until
from helpers import (
    NETWORKED,
    create_inbound,
    db_path,
    free_port,
    fresh_database,
    ok,
    refused,
)
from panels import backend, start_panel, stop_and_drop

from appliance.errors import ServiceError
from appliance.services.admin.backups import MAX_UPLOAD_BYTES
from appliance.store.migrations import LATEST
from appliance.web.http import BodyTooLarge
from appliance.web.upload import save_file_field

SERVER = "/panel/api/server"
CLIENTS = "/panel/api/clients"
RESTART_WAIT = 40
WS = {"network": "ws", "security": "none", "wsSettings": {"path": "/ws"}}


# ---- helpers ------------------------------------------------------------------------------


def add_inbound(api, remark: str = "backup") -> dict:
    return create_inbound(
        api,
        {
            "protocol": "vless",
            # Some of these panels run a real core, which binds the port: one from this
            # process's block, never one the system may hand out as a source port.
            "port": free_port(),
            "remark": remark,
            "settings": {"decryption": "none"},
            "streamSettings": WS,
        },
    )


def add_client(api, inbound_id: int, email: str | None = None) -> str:
    email = email or f"c-{uuid.uuid4().hex[:10]}"
    ok(api.post(f"{CLIENTS}/add", {"client": {"email": email}, "inboundIds": [inbound_id]}))
    return email


def emails(api) -> set[str]:
    return {client["email"] for client in ok(api.get(f"{CLIENTS}/list"))}


def download(api, path: str):
    reply = api.raw("GET", f"{SERVER}/{path}")
    assert reply.status_code == 200, reply.text
    return reply


def sql_dump(api, tmp_path) -> bytes:
    """The panel's SQL text dump: getMigration on SQLite; on PostgreSQL and MariaDB, where
    getMigration is a SQLite file, that file dumped as SQL here."""
    content = download(api, "getMigration").content
    if backend["kind"] == "sqlite":
        return content
    path = write(tmp_path, "portable.db", content)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return "\n".join(conn.iterdump()).encode() + b"\n"


def sqlite_only(reason: str) -> None:
    if backend["kind"] != "sqlite":
        pytest.skip(f"{reason}; this run uses --db={backend['kind']}")


def write(tmp_path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


def rows(path: str, statement: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(statement).fetchall()
    finally:
        conn.close()


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    tables = [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}


def file_counts(path: str) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return counts(conn)
    finally:
        conn.close()


def import_db(api, content: bytes, filename: str = "backup.db") -> dict:
    reply = api.raw("POST", f"{SERVER}/importDB", files={"db": (filename, content)})
    return reply.json()


def import_and_wait(server, api, content: bytes, filename: str = "backup.db"):
    """Import `content`, expect success, wait for the restart; a new signed-in client."""
    mark = len(server.lines)
    reply = import_db(api, content, filename)
    assert reply["success"] is True, reply
    server.wait_listening(mark, timeout=RESTART_WAIT)
    return reply, server.client()


def live_digest(server) -> str:
    """A digest of every row of the panel's SQLite file (read through SQLite, so the WAL
    counts): equal digests mean the live data did not change. The audit log is left out:
    a refused import is written down there, as every call that could change something."""
    conn = sqlite3.connect(db_path(server))
    try:
        digest = hashlib.sha256()
        for line in conn.iterdump():
            if "audit_entry" not in line:
                digest.update(line.encode())
        return digest.hexdigest()
    finally:
        conn.close()


# ---- getDb and getMigration ---------------------------------------------------------------


@pytest.fixture(scope="module")
def filled(panel):
    """The module's panel with an inbound and three clients."""
    api = panel.client()
    inbound = add_inbound(api, "Grüße 'quoted'")
    added = {add_client(api, inbound["id"]) for _ in range(3)}
    return api, inbound, added


def test_get_db_is_a_sqlite_file_holding_the_data(panel, filled, tmp_path):
    api, inbound, added = filled
    reply = download(api, "getDb")
    disposition = reply.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="appliance-')
    assert disposition.endswith('.db"')
    assert reply.headers["Content-Type"] == "application/vnd.sqlite3"
    assert int(reply.headers["Content-Length"]) == len(reply.content)
    path = write(tmp_path, "backup.db", reply.content)
    assert reply.content[:16] == b"SQLite format 3\x00"
    # One file, no write-ahead log needed to read it.
    assert reply.content[18:20] == b"\x01\x01"
    assert rows(path, "PRAGMA integrity_check") == [("ok",)]
    assert {row[0] for row in rows(path, "SELECT email FROM client")} >= added
    assert rows(path, f"SELECT remark FROM inbound WHERE id = {inbound['id']}") == [
        ("Grüße 'quoted'",)
    ]
    assert rows(path, "SELECT MAX(version) FROM schema_version") == [(LATEST,)]
    # The scratch file it was streamed from is gone.
    backups = os.path.join(panel.data_dir, "backups")
    assert not [name for name in os.listdir(backups) if name.startswith(".scratch")]


def test_get_migration_is_sql_text_with_the_same_rows(filled, tmp_path):
    sqlite_only("getMigration is SQL text for the file database only")
    api, _inbound, added = filled
    database = write(tmp_path, "backup.db", download(api, "getDb").content)
    reply = download(api, "getMigration")
    disposition = reply.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="appliance-')
    assert disposition.endswith('.sql"')
    text = reply.content.decode("utf-8")
    assert "CREATE TABLE" in text and "INSERT INTO" in text
    loaded = sqlite3.connect(":memory:")
    loaded.executescript(text)
    assert counts(loaded) == file_counts(database)
    assert {row[0] for row in loaded.execute("SELECT email FROM client")} >= added
    assert loaded.execute("PRAGMA foreign_key_check").fetchall() == []
    assert loaded.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_backups_need_a_signed_in_caller(panel):
    anonymous = panel.client(login=False)
    for path in ("getDb", "getMigration"):
        reply = anonymous.raw("GET", f"{SERVER}/{path}")
        assert reply.status_code == 401
        refused(reply.json(), "sign in")
    refused(anonymous.raw("POST", f"{SERVER}/importDB").json(), "sign in")


# ---- refused uploads ---------------------------------------------------------------------


def foreign_sqlite(tmp_path) -> bytes:
    path = tmp_path / f"foreign-{uuid.uuid4().hex}.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('not a panel')")
    conn.commit()
    conn.close()
    return path.read_bytes()


def edited_backup(api, tmp_path, *statements: str) -> bytes:
    """A real backup of the panel, changed by `statements`."""
    path = tmp_path / f"edited-{uuid.uuid4().hex}.db"
    path.write_bytes(download(api, "getDb").content)
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path.read_bytes()


BAD_UPLOADS = {
    "garbage": (lambda api, tmp: os.urandom(50_000), "neither a SQLite database nor an SQL dump"),
    "empty": (lambda api, tmp: b"", "empty"),
    "truncated": (
        lambda api, tmp: download(api, "getDb").content[:20_000],
        "malformed",
    ),
    "foreign sqlite": (lambda api, tmp: foreign_sqlite(tmp), "no schema_version table"),
    "newer release": (
        lambda api, tmp: edited_backup(
            api,
            tmp,
            f"INSERT INTO schema_version (version, name, applied_at) "
            f"VALUES ({LATEST + 1}, 'future', 0)",
        ),
        f"schema version {LATEST + 1}, newer than this release",
    ),
    "extra table": (
        lambda api, tmp: edited_backup(api, tmp, "CREATE TABLE extra (id INTEGER)"),
        "unknown table extra",
    ),
    "trigger": (
        lambda api, tmp: edited_backup(
            api,
            tmp,
            "CREATE TRIGGER t AFTER INSERT ON client BEGIN DELETE FROM inbound; END",
        ),
        "trigger",
    ),
    "dangling reference": (
        lambda api, tmp: edited_backup(
            api, tmp, "INSERT INTO client_inbound (client_id, inbound_id) VALUES (999999, 1)"
        ),
        "references point nowhere",
    ),
    "truncated sql": (
        lambda api, tmp: sql_dump(api, tmp).rsplit(b"COMMIT;", 1)[0],
        "ends before its COMMIT",
    ),
    "cut sql statement": (
        lambda api, tmp: sql_dump(api, tmp)[:-60],
        "incomplete",
    ),
    "sql attach": (
        lambda api, tmp: b"BEGIN;\nATTACH DATABASE '/tmp/evil.db' AS evil;\nCOMMIT;\n",
        "never does",
    ),
    "sql vacuum into": (lambda api, tmp: b"VACUUM INTO '/tmp/evil.db';\n", "neither"),
    "sql trigger": (
        lambda api, tmp: (
            b"BEGIN;\nCREATE TABLE a (x);\n"
            b"CREATE TRIGGER t AFTER INSERT ON a BEGIN SELECT 1; END;\nCOMMIT;\n"
        ),
        "not authorized",
    ),
    "foreign sql": (
        lambda api, tmp: b"BEGIN TRANSACTION;\nCREATE TABLE notes (id INTEGER);\nCOMMIT;\n",
        "no schema_version table",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_UPLOADS))
def test_a_bad_upload_is_refused_and_changes_nothing(filled, tmp_path, case):
    api, _inbound, added = filled
    make, words = BAD_UPLOADS[case]
    content = make(api, tmp_path)
    before = emails(api)
    reply = import_db(api, content)
    refused(reply, words)
    assert emails(api) == before and before >= added
    assert api.post("/panel/api/setting/all")["success"] is True
    assert not os.path.exists("/tmp/evil.db")


def test_refusals_leave_the_live_file_and_no_scratch_files(panel, filled, tmp_path):
    sqlite_only("the live file is the SQLite database's")
    api, _inbound, _added = filled
    before = live_digest(panel)
    for make, _words in BAD_UPLOADS.values():
        assert import_db(api, make(api, tmp_path))["success"] is False
    assert live_digest(panel) == before
    backups = os.path.join(panel.data_dir, "backups")
    assert not [name for name in os.listdir(backups) if name.startswith(".scratch")]
    # A refused import keeps no "previous" copy: nothing was replaced.
    assert not [name for name in os.listdir(backups) if "before-import" in name]
    assert "Traceback" not in panel.output(), panel.output()


def test_an_upload_without_the_db_field_or_not_multipart_is_refused(filled):
    api, _inbound, _added = filled
    reply = api.raw("POST", f"{SERVER}/importDB", files={"file": ("x.db", b"SQLite")})
    refused(reply.json(), "no field db")
    reply = api.raw("POST", f"{SERVER}/importDB", json={"db": "x"})
    refused(reply.json(), "multipart/form-data")


def test_an_oversized_upload_is_refused_before_it_is_read(panel, filled):
    api, _inbound, added = filled
    host, port = panel.url.split("://", 1)[1].split("/", 1)[0].split(":")
    cookie = "; ".join(f"{c.name}={c.value}" for c in api.http.cookies)
    declared = MAX_UPLOAD_BYTES + (1 << 20)
    request = (
        f"POST {panel.url.split(host + ':' + port, 1)[1]}{SERVER}/importDB HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nCookie: {cookie}\r\n"
        f"X-CSRF-Token: {api.http.headers['X-CSRF-Token']}\r\n"
        "Content-Type: multipart/form-data; boundary=xyz\r\n"
        f"Content-Length: {declared}\r\nConnection: close\r\n\r\n--xyz\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request.encode())
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
                if b'"success"' in answer and answer.rstrip().endswith(b"}"):
                    break
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b'"success": false' in body
    assert b"a database upload may be at most 512.0 MiB" in body
    assert emails(api) >= added


def test_an_upload_framed_as_a_browser_frames_it_restores(tmp_path):
    """Chromium's boundary is mixed case (----WebKitFormBoundary...) and its part headers
    name a Content-Type after the file name; the restore reads it as sent."""
    server = start_panel(tmp_path)
    try:
        api = server.client()
        kept = emails(api)
        backup = download(api, "getDb").content
        add_client(api, add_inbound(api)["id"], "after-backup")
        boundary = "----WebKitFormBoundaryZx81QbVrTa5LmNoP"
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="db"; '
                f'filename="x-ui.db"\r\nContent-Type: application/octet-stream\r\n\r\n'
            ).encode()
            + backup
            + f"\r\n--{boundary}--\r\n".encode()
        )
        mark = len(server.lines)
        reply = api.raw(
            "POST",
            f"{SERVER}/importDB",
            data=body,
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        ).json()
        assert reply["success"] is True, reply
        server.wait_listening(mark, timeout=RESTART_WAIT)
        assert emails(server.client()) == kept
    finally:
        stop_and_drop(server)


def test_the_upload_reader_stops_at_the_limit_without_a_declared_length(tmp_path):
    """Chunked uploads announce no length: the reader counts as the bytes arrive."""
    boundary = "b0undary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="db"; filename="x.db"\r\n\r\n'
        ).encode()
        + b"x" * 5000
        + f"\r\n--{boundary}--\r\n".encode()
    )
    dest = str(tmp_path / "upload")
    content_type = f"multipart/form-data; boundary={boundary}"
    with pytest.raises(BodyTooLarge) as raised:
        save_file_field(io.BytesIO(body), content_type, -1, "db", dest, 4096)
    assert "at most 0.0 MiB" in raised.value.msg
    assert not os.path.exists(dest)
    assert save_file_field(io.BytesIO(body), content_type, -1, "db", dest, 5000) == 5000
    with open(dest, "rb") as fh:
        assert fh.read() == b"x" * 5000
    with pytest.raises(ServiceError, match="cut off"):
        save_file_field(io.BytesIO(body[:-30]), content_type, -1, "db", dest, 5000)


# ---- restore ------------------------------------------------------------------------------


def test_a_backup_taken_during_writes_restores_a_consistent_set(tmp_path):
    server = start_panel(tmp_path)
    try:
        api = server.client()
        inbound = add_inbound(api)
        for _ in range(5):
            add_client(api, inbound["id"])
        stop = threading.Event()
        written: list[str] = []

        def writer():
            client = server.client()
            while not stop.is_set():
                written.append(add_client(client, inbound["id"]))

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            time.sleep(0.3)
            snapshots = [download(api, "getDb").content for _ in range(3)]
            time.sleep(0.3)
        finally:
            stop.set()
            thread.join(30)
        assert len(written) > 10
        backup = snapshots[-1]
        path = write(tmp_path, "during.db", backup)
        assert rows(path, "PRAGMA integrity_check") == [("ok",)]
        assert rows(path, "PRAGMA foreign_key_check") == []
        in_backup = {row[0] for row in rows(path, "SELECT email FROM client")}
        # Taken mid-stream: some of the writer's clients are in it, later ones are not.
        assert 5 < len(in_backup) < 5 + len(written)
        # Every client in it came with its attachment and its traffic row.
        assert rows(path, "SELECT COUNT(*) FROM client_inbound")[0][0] == len(in_backup)
        traffic = {row[0] for row in rows(path, "SELECT email FROM client_traffic")}
        assert traffic == in_backup

        reply, api = import_and_wait(server, api, backup)
        assert f"{len(in_backup)} clients" in reply["msg"]
        assert emails(api) == in_backup
        listed = ok(api.get("/panel/api/inbounds/list"))
        assert [i["remark"] for i in listed] == ["backup"]
        kept = [n for n in os.listdir(os.path.join(server.data_dir, "backups")) if "before" in n]
        assert len(kept) == 1
        previous = os.path.join(server.data_dir, "backups", kept[0])
        assert kept[0] in reply["msg"]
        assert len(rows(previous, "SELECT email FROM client")) == 5 + len(written)
        # The restored data is the live data: a new client lands next to it.
        add_client(api, inbound["id"], "after-restore")
        assert emails(api) == in_backup | {"after-restore"}
        assert "Traceback" not in server.output(), server.output()
    finally:
        server.stop()


def test_a_sql_dump_restores_and_the_panel_runs_on(tmp_path):
    server = start_panel(tmp_path)
    try:
        api = server.client()
        inbound = add_inbound(api, "from the dump")
        kept = {add_client(api, inbound["id"]) for _ in range(4)}
        dump = download(api, "getMigration").content
        later = add_client(api, inbound["id"])
        ok(api.post(f"/panel/api/inbounds/del/{add_inbound(api, 'later')['id']}"))
        assert later in emails(api)

        reply, api = import_and_wait(server, api, dump, "backup.sql")
        assert "4 clients" in reply["msg"]
        assert emails(api) == kept
        assert [i["remark"] for i in ok(api.get("/panel/api/inbounds/list"))] == ["from the dump"]
        ok(api.post(f"{CLIENTS}/add", {"client": {"email": "new"}, "inboundIds": [inbound["id"]]}))
    finally:
        server.stop()


def test_a_backup_carries_the_audit_log_and_the_restore_is_written_after_it(tmp_path):
    """The audit log is part of the data: a backup holds it, and a restore brings back the
    backup's log like every other table; the restore itself is written after it."""
    server = start_panel(tmp_path)
    try:
        api = server.client()
        inbound = add_inbound(api, "audited")
        backup = download(api, "getDb").content
        ok(api.post(f"/panel/api/inbounds/del/{inbound['id']}"))
        _, api = import_and_wait(server, api, backup)
        items = ok(api.get("/panel/api/audit/list", params={"pageSize": 200}))["items"]
        routes = [entry["route"] for entry in items]
        restore = routes.index(f"{SERVER}/importDB")
        assert items[restore]["success"] is True
        assert restore < routes.index("/panel/api/inbounds/add")
        assert "/panel/api/inbounds/del/<id>" not in routes
    finally:
        server.stop()


def core_children(server, started_after: float = 0.0) -> list[int]:
    """Pids of the core processes the panel runs, or of those it started after a
    process's psutil `create_time()` (on the same clock, which time.time() is not)."""
    found = []
    for child in psutil.Process(server.process.pid).children():
        with contextlib.suppress(psutil.Error):
            if (
                child.status() != psutil.STATUS_ZOMBIE
                and child.exe() == V2RAY
                and child.create_time() > started_after
            ):
                found.append(child.pid)
    return found


def core_tags(api) -> set[str]:
    return {inbound.get("tag") for inbound in ok(api.get(f"{SERVER}/getConfigJson"))["inbounds"]}


# core_panel's polling, for up to 30 seconds: an import restarts the panel and its core.
wait_until = functools.partial(poll_until, timeout=30)


def born(pid: int) -> float:
    """When the process `pid` started; taken while it surely runs, before a change that
    may replace it."""
    return psutil.Process(pid).create_time()


def restarted(server, api, inbound: dict, after: float) -> list[int]:
    """The core that serves `inbound`, started after the psutil time `after`."""
    return wait_until(
        lambda: inbound["tag"] in core_tags(api) and core_children(server, after),
        f"a core serving {inbound['tag']}",
    )


def test_an_import_restarts_the_core_on_the_imported_inbounds(tmp_path):
    server = start_panel(tmp_path, env={"APPLIANCE_CORE": V2RAY})
    try:
        api = server.client()
        [first] = wait_until(lambda: core_children(server), "the core runs")
        # A new inbound restarts the core, and config.json names it before the old process
        # ends: the core that serves it is the one started after the core of before.
        first_born = born(first)
        kept = add_inbound(api, "kept")
        [kept_core] = restarted(server, api, kept, first_born)
        kept_born = born(kept_core)
        backup = download(api, "getDb").content
        dropped = add_inbound(api, "dropped")
        [before] = restarted(server, api, dropped, kept_born)

        # A refused file never touches the core: the same process runs on, whatever
        # was wrong with the file.
        refused(import_db(api, b"not a database"), "neither a SQLite database")
        for make, words in BAD_UPLOADS.values():
            refused(import_db(api, make(api, tmp_path)), words)
        assert core_children(server) == [before]
        assert ok(api.get(f"{SERVER}/status"))["core"]["state"] == "running"

        _reply, api = import_and_wait(server, api, backup)
        wait_until(lambda: core_children(server), "the core runs after the import")
        assert before not in core_children(server)
        tags = core_tags(api)
        assert kept["tag"] in tags and dropped["tag"] not in tags
        # The status is sampled every 2 s: it may still show the core of before.
        wait_until(
            lambda: ok(api.get(f"{SERVER}/status"))["core"]["state"] == "running",
            "the status shows the core running",
        )
        assert "Traceback" not in server.output(), server.output()
    finally:
        server.stop()


def test_an_imported_log_path_outside_the_core_folder_ends_confined(tmp_path):
    """SECURITY-CASES 18: a backup whose core template names /etc/cron.d/x (and a file
    of this test outside the data directory) as the core's logs restores, but the core
    it runs never writes there: the Core page would refuse that template, so the import
    resets it to the built-in one and says so (case 40)."""
    outside = tmp_path / "outside" / "access.log"
    outside.parent.mkdir()
    server = start_panel(tmp_path, env={"APPLIANCE_CORE": V2RAY})
    try:
        api = server.client()
        wait_until(lambda: core_children(server), "the core runs")
        template = ok(api.get("/panel/api/core/getDefaultJsonConfig"))
        template["log"] = {"access": str(outside), "error": "/etc/cron.d/x", "loglevel": "info"}
        stored = json.dumps(json.dumps(template)).replace("'", "''")
        backup = edited_backup(
            api,
            tmp_path,
            "DELETE FROM setting WHERE key = 'coreTemplate'",
            f"INSERT INTO setting (key, value) VALUES ('coreTemplate', '{stored}')",
        )

        reply, api = import_and_wait(server, api, backup)
        (reset,) = reply["obj"]["reset"]
        assert reset.startswith("coreTemplate was reset to its default"), reset
        wait_until(
            lambda: ok(api.get(f"{SERVER}/status"))["core"]["state"] == "running",
            "the core runs after the import",
        )
        log = ok(api.get(f"{SERVER}/getConfigJson"))["log"]
        assert log["access"] == os.path.join(server.data_dir, "core", "access.log")
        assert log["error"] == ""
        with open(os.path.join(server.data_dir, "core", "config.json")) as fh:
            written = fh.read()
        assert "/etc/cron.d/x" not in written and str(outside) not in written
        assert not outside.exists()
        assert "import: coreTemplate was reset to its default" in server.output()
    finally:
        server.stop()


# ---- networked databases --------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(NETWORKED))
def test_networked_backups_are_portable_sqlite_files_that_restore(kind, tmp_path):
    with fresh_database(kind) as url:
        server = start_panel(tmp_path, env={"APPLIANCE_DB": url})
        try:
            api = server.client()
            inbound = add_inbound(api, "Grüße 'networked'")
            kept = {add_client(api, inbound["id"]) for _ in range(3)}
            for path in ("getDb", "getMigration"):
                reply = download(api, path)
                assert reply.headers["Content-Disposition"].endswith('.db"')
                copy = write(tmp_path, f"{kind}-{path}.db", reply.content)
                assert rows(copy, "PRAGMA integrity_check") == [("ok",)]
                assert {row[0] for row in rows(copy, "SELECT email FROM client")} == kept
                assert rows(copy, "SELECT remark, enable FROM inbound") == [
                    ("Grüße 'networked'", 1)
                ]
                assert rows(copy, "SELECT MAX(version) FROM schema_version") == [(LATEST,)]
                assert rows(copy, "PRAGMA foreign_key_check") == []
                # What describes the running panels, not the data, stays behind: restored
                # elsewhere it would list instances that are not there.
                for table in ("panel_instance", "change_log"):
                    assert rows(copy, f"SELECT COUNT(*) FROM {table}") == [(0,)], table
            backup = download(api, "getDb").content

            later = add_client(api, inbound["id"])
            before = emails(api)
            refused(import_db(api, foreign_sqlite(tmp_path)), "no schema_version table")
            assert emails(api) == before

            reply, api = import_and_wait(server, api, backup)
            assert emails(api) == kept and later not in emails(api)
            # Ids go on past the restored rows.
            add_client(api, inbound["id"], "after-restore")
            assert emails(api) == kept | {"after-restore"}
            assert "Traceback" not in server.output(), server.output()
        finally:
            server.stop()
