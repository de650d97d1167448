"""The SQLite file locked by another program or made read-only under a running panel.

The lock is a real `BEGIN EXCLUSIVE` held from this process on the panel's file, as a
`sqlite3` shell would hold it. Read-only is `chattr +i` on the file or its write-ahead
log: the tests run as root, whom permission bits do not stop, while the immutable flag
refuses writing opens to root too (SQLite then opens the file read-only and reports
"attempt to write a readonly database", or fails writing the log with a disk I/O
error). Making the folder immutable is no fault while the panel has the file open, and a
read-only mount is out of reach here.

During either fault a write and a sign-in answer 503 "the database is unavailable" with
a sentence, in bounded time; the panel keeps serving what needs no write; the very next
request after the fault is lifted succeeds; and the log has a warning line, no traceback.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import requests
from helpers import (
    create_plain_vless,
    db_path,
    db_rows,
    locked_externally,
    ok,
    write_protected,
)
from panels import skip_unless_sqlite, start_panel

CLIENTS = "/panel/api/clients"
UNAVAILABLE = "the database is unavailable: "
LOCKED = UNAVAILABLE + "the database file is locked by another program"
NOT_WRITABLE = UNAVAILABLE + "the database file cannot be"
# Generous: the panel gives up waiting for the lock after a few seconds (it used to wait
# five per write with the whole process frozen, and nine and a half for a sign-in).
ANSWER_BOUND = 10
# What the README promises: a request that needs the locked file is answered within this.
ANSWER_WITHIN = 3.0
# SECURITY-CASES 27: the lock is held this long at least.
LOCK_SECONDS = 15
# Sign-ins during the fault: more than the brute-force limiter allows to fail.
SIGN_INS = 6


@pytest.fixture
def server(tmp_path):
    skip_unless_sqlite("these faults are of the SQLite file")
    server = start_panel(tmp_path)
    yield server
    server.stop()


def add_client(api, inbound_id: int, email: str) -> requests.Response:
    return api.http.post(
        f"{api.url}{CLIENTS}/add",
        json={"client": {"email": email}, "inboundIds": [inbound_id]},
        timeout=ANSWER_BOUND,
    )


def sign_in(server, http: requests.Session | None = None) -> requests.Response:
    http = http or requests.Session()
    return http.post(
        f"{server.url}/login",
        json={"username": server.username, "password": server.password},
        timeout=ANSWER_BOUND,
    )


def assert_unavailable(reply: requests.Response, prefix: str) -> None:
    assert reply.status_code == 503, reply.text
    body = reply.json()
    assert body["success"] is False and body["obj"] is None, body
    assert body["msg"].startswith(prefix), body


def assert_logged_as_warning(server) -> None:
    assert any("WARNING" in line and UNAVAILABLE in line for line in server.lines)
    assert "Traceback" not in server.output()
    assert not [line for line in server.lines if " ERROR " in line]


def stored_emails(server) -> set[str]:
    return {row[0] for row in db_rows(server, "SELECT email FROM client")}


def test_a_locked_database_answers_unavailable_and_serves_again_once_released(server):
    api = server.client()
    inbound_id = create_plain_vless(api, 32601)
    ok(add_client(api, inbound_id, "before@lock").json())
    locked_at = time.monotonic()
    with locked_externally(db_path(server)):
        assert_unavailable(add_client(api, inbound_id, "during@lock"), LOCKED)
        # At once, from browsers that are not signed in: every one gets the sentence,
        # none waits behind the others, and none counts as a failed sign-in.
        replies: list[requests.Response] = []
        threads = [
            threading.Thread(target=lambda: replies.append(sign_in(server)))
            for _ in range(SIGN_INS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(replies) == SIGN_INS
        for reply in replies:
            assert_unavailable(reply, LOCKED)
        # What needs no write is served as usual: a list, the UI page.
        emails = [client["email"] for client in ok(api.get(f"{CLIENTS}/list"))]
        assert emails == ["before@lock"]
        assert api.http.get(f"{server.url}/panel/clients", timeout=ANSWER_BOUND).status_code == 200
        time.sleep(max(0.0, LOCK_SECONDS - (time.monotonic() - locked_at)))
        assert_unavailable(add_client(api, inbound_id, "late@lock"), LOCKED)
        assert server.process.poll() is None
    ok(add_client(api, inbound_id, "after@lock").json())
    reply = sign_in(server)
    assert reply.status_code == 200 and reply.json()["success"] is True, reply.text
    assert stored_emails(server) == {"before@lock", "after@lock"}
    assert_logged_as_warning(server)


def test_a_write_and_a_sign_in_under_the_lock_are_answered_within_three_seconds(server):
    """The README's bound, loosely: the whole answer, not only the wait for the lock (a
    refused write is also written to the audit log, which waits for the same lock)."""
    api = server.client()
    inbound_id = create_plain_vless(api, 32604)
    with locked_externally(db_path(server)):
        for attempt in (lambda: add_client(api, inbound_id, "w@lock"), lambda: sign_in(server)):
            started = time.monotonic()
            reply = attempt()
            elapsed = time.monotonic() - started
            assert_unavailable(reply, LOCKED)
            assert elapsed < ANSWER_WITHIN, f"the answer came after {elapsed:.1f} s"


def test_the_panel_serves_others_while_a_write_waits_for_the_lock(server):
    """A write waiting for another program's lock leaves the process free: a
    subscription and a read started after it are answered before it gives up."""
    api = server.client()
    inbound_id = create_plain_vless(api, 32602)
    sub_id = ok(add_client(api, inbound_id, "sub@lock").json())["subId"]
    other = server.client()
    writes: list[requests.Response] = []
    with locked_externally(db_path(server)):
        writer = threading.Thread(
            target=lambda: writes.append(add_client(other, inbound_id, "w@lock"))
        )
        writer.start()
        time.sleep(0.3)  # for the write to reach the lock
        subscription = requests.get(f"{server.sub_url}/sub/{sub_id}", timeout=ANSWER_BOUND)
        listing = api.get(f"{CLIENTS}/list")
        still_waiting = writer.is_alive()
        writer.join()
    assert subscription.status_code == 200 and subscription.text
    assert [client["email"] for client in ok(listing)] == ["sub@lock"]
    assert still_waiting, "the subscription and the read waited for the write to give up"
    assert_unavailable(writes[0], LOCKED)


@pytest.mark.parametrize("suffix", ["", "-wal"], ids=["file", "wal"])
def test_a_read_only_database_answers_unavailable_and_recovers_at_once(server, suffix):
    api = server.client()
    inbound_id = create_plain_vless(api, 32603)
    path = db_path(server) + suffix
    assert os.path.exists(path)
    browser = requests.Session()  # one HTTP connection, opened during the fault
    with write_protected(path):
        assert_unavailable(sign_in(server, browser), NOT_WRITABLE)
        if suffix:
            # Every write goes through the log, on old connections as on new ones.
            assert_unavailable(add_client(api, inbound_id, "during@ro"), NOT_WRITABLE)
        assert [client["email"] for client in ok(api.get(f"{CLIENTS}/list"))] == []
    # The next request on the same connection succeeds: nothing stays read-only.
    reply = sign_in(server, browser)
    assert reply.status_code == 200 and reply.json()["success"] is True, reply.text
    ok(add_client(api, inbound_id, "after@ro").json())
    assert stored_emails(server) == {"after@ro"}
    assert_logged_as_warning(server)
