"""A full disk: every write that needs room fails with a sentence, and nothing is half-done.

The disk fills without mounting anything: the panel's file size limit (RLIMIT_FSIZE,
lowered on the running process) makes every write past it fail with EFBIG, as a full
disk fails writes with ENOSPC. Python ignores the SIGXFSZ that comes with it, so the
panel lives on. The write-ahead log is emptied into the database file before, so the
limit bounds what the database may grow by. Under it, a bulk create that needs more room
is refused as the database being unavailable, adding an inbound fails on writing the
core's config (config.json stays as it was, no partial file stays beside it), and a
backup fails on its scratch copy (none stays in `<data dir>/backups`). Once the limit is
lifted, the same calls work.
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3

import pytest
from core_panel import core_panel, wait_until
from helpers import create_plain_vless, db_path, db_rows, free_port, ok
from panels import skip_unless_sqlite

pytestmark = pytest.mark.slow

CLIENTS = "/panel/api/clients"
SERVER = "/panel/api/server"
# Room for the small transactions of a sign-in, an inbound and the audit log, not for a
# bulk create, the core's config with these clients, or a copy of the database.
LIMIT_BYTES = 128 * 1024
CLIENT_COUNT = 3000


def set_file_size_limit(server, limit: int) -> None:
    resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def bulk(prefix: str, inbound_id: int) -> list[dict]:
    return [
        {"client": {"email": f"{prefix}-{n:05d}@disk"}, "inboundIds": [inbound_id]}
        for n in range(CLIENT_COUNT)
    ]


def files_under(directory: str) -> dict[str, bytes]:
    found = {}
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                found[os.path.relpath(path, directory)] = fh.read()
    return found


def core_tags(api) -> set[str]:
    return {inbound.get("tag") for inbound in ok(api.get(f"{SERVER}/getConfigJson"))["inbounds"]}


def settled_config(core_dir: str) -> bytes | None:
    """config.json once it lists CLIENT_COUNT clients and is the only config file there."""
    files = files_under(core_dir)
    if [name for name in files if name.startswith("config.")] != ["config.json"]:
        return None
    inbounds = json.loads(files["config.json"])["inbounds"]
    counts = [len(inbound["settings"].get("clients", [])) for inbound in inbounds]
    return files["config.json"] if CLIENT_COUNT in counts else None


def client_count(server) -> int:
    return db_rows(server, "SELECT COUNT(*) FROM client")[0][0]


def test_a_full_disk_fails_writes_with_a_sentence_and_leaves_no_partial_files(tmp_path):
    skip_unless_sqlite("the limit bounds the growth of the SQLite file")
    server = core_panel(tmp_path)
    try:
        api = server.client()
        port, second_port = free_port(), free_port()
        inbound_id = create_plain_vless(api, port)
        assert ok(api.post(f"{CLIENTS}/bulkCreate", bulk("kept", inbound_id)))["created"] == (
            CLIENT_COUNT
        )
        core_dir = os.path.join(server.data_dir, "core")
        backups = os.path.join(server.data_dir, "backups")
        os.makedirs(backups, exist_ok=True)
        db = sqlite3.connect(db_path(server))
        try:
            assert db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        finally:
            db.close()
        # The core takes the new clients after the call answered; the files are compared
        # once config.json holds them and no candidate is being written beside it.
        config_before = wait_until(lambda: settled_config(core_dir), "the core has the clients")
        set_file_size_limit(server, LIMIT_BYTES)

        reply = api.raw("POST", f"{CLIENTS}/bulkCreate", json=bulk("full", inbound_id))
        assert reply.status_code == 503, reply.text
        assert reply.json()["success"] is False
        assert reply.json()["msg"].startswith("the database is unavailable: ")
        assert client_count(server) == CLIENT_COUNT

        reply = api.raw(
            "POST",
            "/panel/api/inbounds/add",
            json={"protocol": "socks", "port": second_port, "settings": {"auth": "noauth"}},
        )
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert answer["success"] is False
        assert "core's config could not be written" in answer["msg"]
        assert "File too large" in answer["msg"]
        assert [i["port"] for i in ok(api.get("/panel/api/inbounds/list"))] == [port]
        core_files = files_under(core_dir)
        assert core_files["config.json"] == config_before
        assert [name for name in core_files if name.startswith("config.")] == ["config.json"]

        reply = api.raw("GET", f"{SERVER}/getDb")
        assert reply.status_code == 503, reply.text[:300]
        assert reply.json()["msg"].startswith("the database is unavailable: ")
        assert os.listdir(backups) == []

        assert ok(api.get("/panel/api/server/status"))["core"]["state"] == "running"
        assert "Traceback" not in server.output()

        set_file_size_limit(server, resource.RLIM_INFINITY)
        assert ok(api.post(f"{CLIENTS}/bulkCreate", bulk("full", inbound_id)))["created"] == (
            CLIENT_COUNT
        )
        added = ok(
            api.post(
                "/panel/api/inbounds/add",
                {"protocol": "socks", "port": second_port, "settings": {"auth": "noauth"}},
            )
        )
        wait_until(
            lambda: added["tag"] in core_tags(api),
            "the core runs the new inbound",
        )
        backup = api.raw("GET", f"{SERVER}/getDb")
        assert backup.status_code == 200
        path = tmp_path / "after.db"
        path.write_bytes(backup.content)
        copy = sqlite3.connect(path)
        try:
            assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert copy.execute("SELECT COUNT(*) FROM client").fetchone()[0] == 2 * CLIENT_COUNT
        finally:
            copy.close()
        assert os.listdir(backups) == []
    finally:
        server.stop()
