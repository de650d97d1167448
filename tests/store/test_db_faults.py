"""A panel killed with SIGKILL in the middle of a bulk create leaves a database it can run on.

`POST /panel/api/clients/bulkCreate` checks every item first, then inserts the clients,
their attachments and their traffic rows with set-based SQL inside one db_session, which
is one transaction committed when the call returns (appliance/services/clients/bulk.py).
So "every committed row" means: every earlier call that answered is in the database in
full, and the call that was killed is in it in full (the commit finished before the
kill) or not at all, never a part of it, and never a client without its traffic row or
attachments.

The kill lands once the killed call is visibly writing: SQLite's write-ahead log has
grown by pages the transaction spilled into it, PostgreSQL and MariaDB show the panel's
connection inserting clients. A second kill point waits until the clients are in and the
call writes attachments and traffic rows, its last statements before the commit. The
panel then starts again on the same database and must serve what is there. Runs on
SQLite, and on PostgreSQL or MariaDB when the suite runs with --db=postgres|mysql.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
import time

import pytest
import requests
from helpers import create_plain_vless, db_path, db_rows, free_port, networked_connection, ok
from panels import start_panel, stop_and_drop

CLIENTS = "/panel/api/clients"
COMMITTED_COUNT = 500
KILLED_COUNT = 20_000
WRITE_WAIT_SECONDS = 120
# A bulk create of the killed size can take over a minute on a loaded two-CPU machine.
BULK_TIMEOUT = 300
# SQLite: growth of the write-ahead log that only the killed call's spilled pages explain
# (the committed batch before it adds a few hundred KiB; the whole killed call about 8 MiB,
# the last 2 MiB of it, SQLite's page cache, at the commit).
WAL_GROWTH_EARLY = 2 * 1024 * 1024
WAL_GROWTH_LATE = 5 * 1024 * 1024
# PostgreSQL and MariaDB: the statement the panel's transaction is running.
EARLY_STATEMENTS = ("INSERT INTO client %",)
LATE_STATEMENTS = ("INSERT INTO client_inbound %", "INSERT INTO client_traffic %")


def bulk_items(prefix: str, count: int, inbound_ids: list[int]) -> list[dict]:
    """Clients `prefix-00000@bulk` ..., every fourth on both inbounds, the rest on one."""
    return [
        {
            "client": {"email": f"{prefix}-{n:05d}@bulk"},
            "inboundIds": inbound_ids if n % 4 == 0 else inbound_ids[:1],
        }
        for n in range(count)
    ]


def emails_of(items: list[dict]) -> set[str]:
    return {item["client"]["email"] for item in items}


def attachments_of(items: list[dict]) -> int:
    return sum(len(item["inboundIds"]) for item in items)


class WriteProbe:
    """Tells from outside the panel how far its open write transaction has come."""

    def __init__(self, server):
        self.server = server
        self.url = server.db_url
        self.wal_before = self._wal_size()

    def reached(self, late: bool) -> bool:
        if not self.url:
            limit = WAL_GROWTH_LATE if late else WAL_GROWTH_EARLY
            return self._wal_size() - self.wal_before >= limit
        # The clients go in first, then their attachments, then their traffic rows.
        statements = LATE_STATEMENTS if late else EARLY_STATEMENTS
        name = self.url.rsplit("/", 1)[1]
        conn = networked_connection(self.url)
        try:
            cur = conn.cursor()
            if self.url.startswith("postgres"):
                # An xid is assigned at a transaction's first write.
                cur.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                    "AND backend_xid IS NOT NULL AND query LIKE ANY(%s)",
                    (name, list(statements)),
                )
            else:
                # Row counts of an open transaction lag behind; the statement shows at once.
                likes = " OR ".join(["info LIKE %s"] * len(statements))
                cur.execute(
                    "SELECT count(*) FROM information_schema.processlist "
                    f"WHERE db = %s AND ({likes})",
                    (name, *statements),
                )
            return cur.fetchone()[0] > 0
        finally:
            conn.close()

    def _wal_size(self) -> int:
        path = db_path(self.server) + "-wal"
        return os.path.getsize(path) if os.path.exists(path) else 0


class BulkCall(threading.Thread):
    """One bulkCreate in the background; `reply` is its envelope if it answered."""

    def __init__(self, server, items: list[dict]):
        super().__init__(daemon=True)
        self.client = server.client()
        self.items = items
        self.reply: dict | None = None

    def run(self) -> None:
        with contextlib.suppress(requests.ConnectionError):  # killed before it answered
            self.reply = self.client.http.post(
                f"{self.client.url}{CLIENTS}/bulkCreate", json=self.items, timeout=BULK_TIMEOUT
            ).json()


def integrity_problems(server) -> list[tuple]:
    """SQLite's own checks of the file (what a crash could have broken); empty when sound.
    A networked server checks its own pages; there the rows are checked below."""
    if server.db_url:
        return []
    db = sqlite3.connect(db_path(server))
    try:
        problems = [row for row in db.execute("PRAGMA integrity_check") if row != ("ok",)]
        return problems + db.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        db.close()


def stored_emails(server) -> set[str]:
    return {row[0] for row in db_rows(server, "SELECT email FROM client")}


@pytest.mark.parametrize("late", [False, True], ids=["while-inserting", "near-commit"])
def test_a_kill_during_bulk_create_keeps_committed_batches_whole(tmp_path, late):
    server = start_panel(tmp_path)
    try:
        api = server.client()
        inbound_ids = [create_plain_vless(api, port) for port in (free_port(), free_port())]
        committed = bulk_items("kept", COMMITTED_COUNT, inbound_ids)
        assert ok(api.post(f"{CLIENTS}/bulkCreate", committed))["created"] == COMMITTED_COUNT

        killed = bulk_items("killed", KILLED_COUNT, inbound_ids)
        probe = WriteProbe(server)
        call = BulkCall(server, killed)
        call.start()
        deadline = time.monotonic() + WRITE_WAIT_SECONDS
        while not probe.reached(late) and call.is_alive():
            assert time.monotonic() < deadline, "the bulk create never started writing"
            time.sleep(0.01)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        call.join(30)
        # The kill landed inside the call, unless the call had already answered.
        answered = call.reply is not None and call.reply.get("success") is True
        if answered:
            assert call.reply["obj"]["created"] == KILLED_COUNT

        assert integrity_problems(server) == []
        emails = stored_emails(server)
        present = [committed, killed] if emails - emails_of(committed) else [committed]
        if answered:
            assert len(present) == 2
        expected = set().union(*map(emails_of, present))
        assert emails == expected, (
            f"{len(emails & emails_of(killed))} of {KILLED_COUNT} clients of the killed call "
            f"were stored; all or none were expected"
        )
        traffic = {row[0] for row in db_rows(server, "SELECT email FROM client_traffic")}
        assert traffic == expected
        attachments = db_rows(
            server,
            "SELECT COUNT(*), COUNT(DISTINCT client_id) FROM client_inbound ci "
            "JOIN client c ON c.id = ci.client_id",
        )
        assert attachments == [(sum(map(attachments_of, present)), len(expected))]
        assert db_rows(server, "SELECT COUNT(*) FROM client_inbound") == [attachments[0][:1]]

        server.start()
        api = server.client()
        page = ok(api.get(f"{CLIENTS}/list/paged?pageSize=5&search=-00004@bulk"))
        assert page["total"] == len(expected)
        assert {row["email"] for row in page["items"]} == {
            email for email in expected if email.endswith("-00004@bulk")
        }
        sample = ok(api.get(f"{CLIENTS}/get/kept-00000@bulk"))
        assert sorted(sample["inboundIds"]) == inbound_ids
        # The panel writes on the database it was killed over: the killed batch, if it
        # was rolled back, goes in now without a clash.
        if len(present) == 1:
            again = ok(api.post(f"{CLIENTS}/bulkCreate", killed, timeout=BULK_TIMEOUT))
            assert again == {"created": KILLED_COUNT, "skipped": []}
            assert ok(api.get(f"{CLIENTS}/list/paged?pageSize=1"))["total"] == (
                COMMITTED_COUNT + KILLED_COUNT
            )
        assert "Traceback" not in server.output()
    finally:
        stop_and_drop(server)
