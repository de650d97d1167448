"""A networked database that goes away: at start, between requests, and for a while.

The panel runs on the real local PostgreSQL and MariaDB servers (never stopped here:
others use them). Outages are made two ways: the server ends the panel's connections
(`pg_terminate_backend`, `KILL`), or the panel reaches the server through a small TCP
relay started by the test, which can refuse connections and cut the open ones. Under
load, through such an outage, every request gets an answer in time: a success or the
"database is unavailable" envelope, never a 500 or a hang, and the same process serves
again once the server is back.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests
from db_load import LOAD_TIMEOUT, Load
from db_relay import Relay, via
from helpers import (
    NETWORKED,
    clean_env,
    create_plain_vless,
    end_server_connections,
    free_port,
    fresh_database,
    ok,
)
from panels import start_panel
from pony.orm.core import CommitException, TransactionIntegrityError, UnexpectedError
from pony.orm.dbapiprovider import InterfaceError, OperationalError

from appliance.store import Store

CLIENTS = "/panel/api/clients"
LOAD_WORKERS = 4
# Seconds of load before the outage, and half the time after it.
LOAD_PHASE_SECONDS = 2
# Seconds of outage: long enough that requests begun in it are answered in it too (an
# answer "unavailable" takes up to three seconds, more on a loaded machine).
OUTAGE_SECONDS = 6
# A request that started this long after the relay came back must succeed.
RECONNECT_GRACE = 0.5


@pytest.fixture(params=sorted(NETWORKED))
def database(request):
    """(kind, URL of a fresh database on the local server); dropped afterwards."""
    with fresh_database(request.param) as url:
        yield request.param, url


def add_client(api, inbound_id: int, email: str) -> dict:
    return api.post(f"{CLIENTS}/add", {"client": {"email": email}, "inboundIds": [inbound_id]})


def test_connections_ended_by_the_server_are_replaced(database, tmp_path):
    _, url = database
    server = start_panel(tmp_path, env={"APPLIANCE_DB": url})
    try:
        api = server.client()
        inbound_id = create_plain_vless(api, 32001)
        ok(add_client(api, inbound_id, "before@drop"))
        assert end_server_connections(url) >= 1
        first = api.raw("GET", f"{CLIENTS}/list")
        assert first.status_code != 500
        reply = first.json()
        assert reply["success"] or reply["msg"].startswith("the database is unavailable"), reply
        for n in range(3):
            ok(add_client(api, inbound_id, f"after{n}@drop"))
        emails = {item["email"] for item in ok(api.get(f"{CLIENTS}/list"))}
        assert emails == {"before@drop", "after0@drop", "after1@drop", "after2@drop"}
    finally:
        server.stop()
    assert "Traceback" not in server.output()


def test_an_outage_fails_requests_cleanly_and_the_panel_recovers(database, tmp_path):
    kind, url = database
    relay = Relay(NETWORKED[kind], free_port()).resume()
    server = start_panel(tmp_path, env={"APPLIANCE_DB": via(url, relay.port)})
    try:
        api = server.client()
        inbound_id = create_plain_vless(api, 32002)
        relay.cut()
        during = api.raw(
            "POST", f"{CLIENTS}/add", json={"client": {"email": "x@y"}, "inboundIds": [1]}
        )
        assert during.status_code == 503, during.text
        reply = during.json()
        assert reply["success"] is False and reply["obj"] is None
        assert reply["msg"].startswith("the database is unavailable: "), reply
        listing = api.get(f"{CLIENTS}/list")
        assert listing["success"] is False
        assert "the database is unavailable" in listing["msg"]
        relay.resume()
        ok(add_client(api, inbound_id, "after@outage"))
        assert [c["email"] for c in ok(api.get(f"{CLIENTS}/list"))] == ["after@outage"]
    finally:
        server.stop()
        relay.cut()
    assert "the database is unavailable" in server.output()
    assert "Traceback" not in server.output()


def test_the_subscription_server_says_unavailable_during_an_outage(database, tmp_path):
    kind, url = database
    relay = Relay(NETWORKED[kind], free_port()).resume()
    server = start_panel(tmp_path, env={"APPLIANCE_DB": via(url, relay.port)})
    try:
        api = server.client()
        inbound_id = create_plain_vless(api, 32004)
        sub_id = ok(add_client(api, inbound_id, "sub@outage"))["subId"]
        address = f"{server.sub_url}/sub/{sub_id}"
        assert requests.get(address, timeout=LOAD_TIMEOUT).status_code == 200
        relay.cut()
        during = requests.get(address, timeout=LOAD_TIMEOUT)
        assert during.status_code == 503, during.text
        assert during.text.startswith("the database is unavailable: ")
        assert during.headers["Retry-After"].isdigit()
        relay.resume()
        after = requests.get(address, timeout=LOAD_TIMEOUT)
        assert after.status_code == 200 and after.text
    finally:
        server.stop()
        relay.cut()
    assert "ERROR" not in server.output()


def test_requests_under_load_through_an_outage_succeed_or_say_unavailable(database, tmp_path):
    kind, url = database
    relay = Relay(NETWORKED[kind], free_port()).resume()
    server = start_panel(tmp_path, env={"APPLIANCE_DB": via(url, relay.port)})
    load = None
    try:
        api = server.client()
        inbound_id = create_plain_vless(api, 32003)
        pid = server.process.pid
        load = Load([server], inbound_id, LOAD_WORKERS).start()
        cut_at, resumed_at = load.through_outage(
            relay, LOAD_PHASE_SECONDS, OUTAGE_SECONDS, RECONNECT_GRACE, LOAD_TIMEOUT * 2
        )
        answers = load.stop()

        odd = [a for a in answers if not (a.succeeded or a.unavailable)]
        assert odd == [], (odd[:3], [line for line in server.lines if "ERROR" in line])
        before = [a for a in answers if a.ended < cut_at]
        during = [a for a in answers if cut_at < a.started and a.ended < resumed_at]
        after = [a for a in answers if a.started > resumed_at + RECONNECT_GRACE]
        assert before and all(a.succeeded for a in before)
        assert during and all(a.unavailable for a in during)
        # Recovered by itself: every worker's requests succeed again, in the same process.
        assert {a.worker for a in after} == set(range(LOAD_WORKERS))
        assert [a for a in after if not a.succeeded] == []
        assert server.process.poll() is None and server.process.pid == pid

        # An add that succeeded is stored; one that failed is not, unless it was on its
        # way when the connection was cut (its commit may have reached the server).
        listed = {item["email"] for item in ok(api.get(f"{CLIENTS}/list"))}
        added = {a.email for a in answers if a.email and a.succeeded}
        in_flight = {a.email for a in answers if a.email and a.started < cut_at < a.ended}
        assert added <= listed
        assert listed - added <= in_flight
    finally:
        if load is not None:
            load.stop()
        server.stop()
        relay.cut()
    assert "the database is unavailable" in server.output()
    assert "Traceback" not in server.output()


@pytest.mark.parametrize("kind", sorted(NETWORKED))
def test_a_connection_lost_inside_a_flush_or_commit_reads_as_unavailable(kind):
    """Pony wraps the driver's error when the connection breaks while it writes pending
    objects (UnexpectedError) or commits (CommitException); the load test above meets
    both now and then, this one every time."""
    store = Store(f"{kind}://user@127.0.0.1:1/db")
    refused = OperationalError(store._driver_errors()[0]("could not connect"))
    closed = InterfaceError(store._driver_errors()[1](0, ""))
    flush = UnexpectedError("Object ClientInbound[new:1] cannot be stored", refused)
    commit = CommitException("InterfaceError: 0", [(type(closed), closed, None)])
    assert "could not connect" in store.unavailable(flush).msg
    assert store.unavailable(commit).msg == "the database is unavailable: the connection was lost"
    assert store.unavailable(UnexpectedError("a bug", ValueError("x"))) is None
    assert store.unavailable(TransactionIntegrityError("duplicate", None)) is None


def test_a_database_down_at_start_is_waited_for(database, tmp_path):
    kind, url = database
    port = free_port()
    # The server turns the panel's first connection away, however long the panel takes
    # to get there, and answers from then on.
    relay = Relay(NETWORKED[kind], port)
    relay.turn_away = 1
    relay.resume()
    server = start_panel(tmp_path, env={"APPLIANCE_DB": via(url, port)})
    try:
        assert relay.turn_away == 0
        scheme = "postgres" if kind == "postgres" else "mysql"
        user = "postgres" if kind == "postgres" else "root"
        name = url.rsplit("/", 1)[1]
        line = next(line for line in server.lines if "is unreachable" in line)
        assert f"database at {scheme}://{user}@127.0.0.1:{port}/{name} is unreachable (" in line
        assert line.endswith("; retrying in 2 s"), line
        api = server.client()
        assert ok(api.get(f"{CLIENTS}/list")) == []
    finally:
        server.stop()
    assert "Traceback" not in server.output()


def test_offline_commands_say_the_database_is_unreachable():
    port = free_port()
    url = f"postgresql://postgres:hunter2@127.0.0.1:{port}/panel"
    result = subprocess.run(
        [sys.executable, "-m", "appliance", "admin", "show", "--db", url],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert result.returncode == 1
    assert f"the database at postgres://postgres:***@127.0.0.1:{port}/panel is unreachable (" in (
        result.stderr
    )
    assert "hunter2" not in result.stderr
    assert "Traceback" not in result.stderr
