"""Subscription workers: the subscription port served by one process per core.

Most panels here run with two workers always (`APPLIANCE_SUB_WORKERS=2`, whatever this
host has) or with one (the panel serves the port itself); the last ones run as a user's
does by default, with workers started on demand (`auto`) and an idle period of seconds
rather than minutes. Every fetch opens a new connection, as a
client app does, so consecutive fetches land on either worker; a change made through the
API must show in every one of them, so those tests fetch from each worker in turn while
the others are paused. Worker processes are found where a user finds them:
`subWorkers` in `server/status`, and the panel's children in /proc.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from urllib.parse import quote

import pytest
import requests
from db_relay import Relay, via
from helpers import (
    NETWORKED,
    clean_env,
    create_inbound,
    db_path,
    free_port,
    fresh_database,
    ok,
)
from panels import start_panel, stop_and_drop
from pony.orm import db_session

from appliance.links import LinkContext, client_links
from appliance.store import Store

CLIENTS = "/panel/api/clients"
HOSTS = "/panel/api/hosts"
STATUS = "/panel/api/server/status"
FETCHES = 8
RESTART_WAIT = 15
# How SQLite, PostgreSQL and MariaDB word the refusal of a write on a read-only session.
READ_ONLY_REFUSAL = r"(?i)read.only|readonly"


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = start_panel(tmp_path_factory.mktemp("workers"), env={"APPLIANCE_SUB_WORKERS": "2"})
    yield server
    stop_and_drop(server)


@pytest.fixture(scope="module")
def api(panel):
    return panel.client()


def add_inbound(api, port: int, remark: str = "workers") -> dict:
    return create_inbound(
        api,
        {
            "protocol": "vless",
            "remark": remark,
            "port": port,
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )


def add_client(api, inbound_id: int) -> dict:
    client = {"email": f"{uuid.uuid4().hex[:10]}@workers", "subId": uuid.uuid4().hex[:16]}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]}))
    return ok(api.get(f"{CLIENTS}/get/{quote(client['email'])}"))["client"]


def fetch(panel, sub_id: str) -> requests.Response:
    """One request on a new connection (no keep-alive), as a client app polls."""
    return requests.get(
        f"{panel.sub_url}/sub/{sub_id}", timeout=10, headers={"Connection": "close"}
    )


def served(panel, sub_id: str, wanted: list[str], path: str = "/sub/") -> None:
    response = requests.get(
        f"{panel.sub_url}{path}{sub_id}", timeout=10, headers={"Connection": "close"}
    )
    assert response.status_code == 200, response.text
    assert base64.b64decode(response.content).decode().split("\n") == wanted


def not_found(panel, path: str) -> None:
    response = requests.get(f"{panel.sub_url}{path}", timeout=10, headers={"Connection": "close"})
    assert response.status_code == 404


def links_served(panel, sub_id: str) -> list[str]:
    response = fetch(panel, sub_id)
    assert response.status_code == 200, response.text
    return base64.b64decode(response.content).decode().split("\n")


def expected_links(api, client: dict, inbound_id: int) -> list[str]:
    inbound = ok(api.get(f"/panel/api/inbounds/get/{inbound_id}"))
    hosts = [h for h in ok(api.get(f"{HOSTS}/byInbound/{inbound_id}")) if h["enable"]]
    return client_links(inbound, client, hosts, LinkContext("127.0.0.1", "-ieo"))


def worker_pids(api) -> list[int]:
    return ok(api.get(STATUS))["subWorkers"]


def children(pid: int) -> set[int]:
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            found |= {int(child) for child in fh.read().split()}
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def command_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().decode().split("\0")[:-1]


def on_every_worker(api, check) -> None:
    """Run `check` (a fetch on a new connection and what it must show) once per worker,
    with every other worker paused (SIGSTOP): the one left is the only one to accept."""
    pids = worker_pids(api)
    for pid in pids:
        others = [other for other in pids if other != pid]
        for other in others:
            os.kill(other, signal.SIGSTOP)
        try:
            check()
        finally:
            for other in others:
                os.kill(other, signal.SIGCONT)


def wait_for(predicate, timeout: float = RESTART_WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not true within {timeout} s")


# ---- serving -------------------------------------------------------------------------------


def test_the_workers_are_the_panels_children_and_shown_in_its_status(panel, api):
    pids = worker_pids(api)
    assert len(pids) == 2
    assert set(pids) <= children(panel.process.pid)
    for pid in pids:
        assert command_line(pid)[-3:] == ["-m", "appliance", "sub-worker"]
    assert "in 2 worker processes" in panel.output()


def test_a_client_added_a_moment_ago_is_served(panel, api):
    inbound = add_inbound(api, 28101)
    for _ in range(FETCHES):
        client = add_client(api, inbound["id"])
        assert links_served(panel, client["subId"]) == expected_links(api, client, inbound["id"])


def test_a_deleted_client_is_gone_from_every_worker(panel, api):
    inbound = add_inbound(api, 28102)
    client = add_client(api, inbound["id"])
    on_every_worker(api, lambda: links_served(panel, client["subId"]))  # cached by each
    ok(api.post(f"{CLIENTS}/del/{quote(client['email'])}"))
    on_every_worker(api, lambda: not_found(panel, f"/sub/{client['subId']}"))


def test_inbound_host_and_setting_changes_reach_the_next_body(panel, api):
    inbound = add_inbound(api, 28103)
    client = add_client(api, inbound["id"])
    sub_id = client["subId"]
    wanted = expected_links(api, client, inbound["id"])
    on_every_worker(api, lambda: served(panel, sub_id, wanted))

    ok(api.post(f"/panel/api/inbounds/update/{inbound['id']}", {**inbound, "remark": "Renamed"}))
    wanted = expected_links(api, client, inbound["id"])
    assert "Renamed" in wanted[0]
    on_every_worker(api, lambda: served(panel, sub_id, wanted))

    host = {"inboundId": inbound["id"], "remark": "edge", "address": "edge.example.com"}
    ok(api.post(f"{HOSTS}/add", host))
    wanted = expected_links(api, client, inbound["id"])
    assert "edge.example.com" in wanted[0]
    on_every_worker(api, lambda: served(panel, sub_id, wanted))

    ok(api.post("/panel/api/setting/update", {"subPath": "/feed/"}))
    try:
        on_every_worker(api, lambda: served(panel, sub_id, wanted, path="/feed/"))
        on_every_worker(api, lambda: not_found(panel, f"/sub/{sub_id}"))
    finally:
        ok(api.post("/panel/api/setting/update", {"subPath": "/sub/"}))


def test_the_workers_log_through_the_panel(panel, api):
    """A worker's records reach the panel's log file, which only the panel writes,
    marked with the worker's process id (a worker says it serves once it does, which
    may come a moment after the panel started)."""

    def logged() -> bool:
        with open(os.path.join(panel.data_dir, "logs", "panel.log")) as fh:
            text = fh.read()
        return all(
            f"[subscription worker {pid}] serving the subscription port" in text
            for pid in worker_pids(api)
        )

    assert wait_for(logged)


def test_the_workers_store_refuses_every_write(panel, api):
    """What a worker reads the database through (`Store.attach`) cannot write: the
    panel stays the only writer, on each backend, whatever a bug in a worker might try."""
    add_client(api, add_inbound(api, 28107)["id"])
    store = Store(panel.db_url or db_path(panel))
    store.attach()
    try:
        with db_session:
            (count,) = store.rows("SELECT COUNT(*) FROM client")[0]
        assert count >= 1
        with pytest.raises(Exception, match=READ_ONLY_REFUSAL), db_session:
            store.execute("DELETE FROM client")
        connection = store.raw_connect()
        try:
            cursor = connection.cursor()
            with pytest.raises(Exception, match=READ_ONLY_REFUSAL):
                cursor.execute("DELETE FROM client_traffic")
        finally:
            connection.close()
    finally:
        store.close()
    with db_session:
        pass
    assert ok(api.get(f"{CLIENTS}/list"))


# ---- supervision ---------------------------------------------------------------------------


def test_a_killed_worker_is_restarted_and_serves_again(panel, api):
    inbound = add_inbound(api, 28104)
    client = add_client(api, inbound["id"])
    before = worker_pids(api)
    os.kill(before[0], signal.SIGKILL)
    # The other worker serves meanwhile, and the port stays bound: no fetch fails.
    assert links_served(panel, client["subId"])

    def replaced() -> list[int] | None:
        pids = worker_pids(api)
        return pids if len(pids) == 2 and pids != before else None

    after = wait_for(replaced)
    assert before[0] not in after and before[1] in after
    assert set(after) <= children(panel.process.pid)
    assert "exited (signal SIGKILL)" in panel.output()
    for _ in range(FETCHES):
        assert links_served(panel, client["subId"]) == expected_links(api, client, inbound["id"])


@pytest.mark.parametrize("kind", sorted(NETWORKED))
def test_a_worker_started_while_the_database_is_down_waits_for_it(tmp_path, kind):
    """The database server is away when a worker starts (here: the one that replaces a
    killed worker): it says so in the panel's log and serves once the server is back."""
    with fresh_database(kind) as url:
        relay = Relay(NETWORKED[kind], free_port()).resume()
        server = start_panel(
            tmp_path, env={"APPLIANCE_DB": via(url, relay.port), "APPLIANCE_SUB_WORKERS": "2"}
        )
        try:
            api = server.client()
            inbound = add_inbound(api, 28106)
            client = add_client(api, inbound["id"])
            before = worker_pids(api)
            relay.cut()
            os.kill(before[0], signal.SIGKILL)
            waiting = re.compile(
                r"\[subscription worker \d+\] the database is unavailable: .*; trying again in"
            )
            wait_for(lambda: waiting.search(server.output()))
            relay.resume()
            for _ in range(FETCHES):
                assert links_served(server, client["subId"])
            assert wait_for(lambda: len(worker_pids(api)) == 2)
        finally:
            server.stop()
            relay.cut()
        assert "Traceback" not in server.output()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_stopping_the_panel_leaves_no_worker_behind(tmp_path, how):
    """SIGTERM (systemd) and SIGINT (Ctrl-C) stop the workers with the panel; a panel
    killed outright closes their stdin, and they stop by themselves."""
    server = start_panel(tmp_path, env={"APPLIANCE_SUB_WORKERS": "2"})
    try:
        pids = worker_pids(server.client())
        assert len(pids) == 2
        server.process.send_signal(getattr(signal, how))
        code = server.process.wait(10)
        assert code == (-signal.SIGKILL if how == "SIGKILL" else 0)
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10)
    finally:
        stop_and_drop(server)


def test_a_restart_replaces_the_workers(tmp_path):
    server = start_panel(tmp_path, env={"APPLIANCE_SUB_WORKERS": "2"})
    try:
        api = server.client()
        before = worker_pids(api)
        mark = len(server.lines)
        ok(api.post("/panel/api/setting/restartPanel"))
        server.wait_listening(mark, timeout=RESTART_WAIT + 15)
        assert not any(alive(pid) for pid in before)
        after = worker_pids(server.client())
        assert len(after) == 2 and not set(after) & set(before)
        assert fetch(server, "nothing-here").status_code == 404
    finally:
        stop_and_drop(server)


# ---- one process ---------------------------------------------------------------------------


def test_one_worker_means_the_panel_serves_the_port_itself(tmp_path):
    server = start_panel(tmp_path, env={"APPLIANCE_SUB_WORKERS": "1"})
    try:
        api = server.client()
        assert worker_pids(api) == []
        assert not children(server.process.pid)
        assert "in the panel process" in server.output()
        inbound = add_inbound(api, 28105)
        client = add_client(api, inbound["id"])
        assert links_served(server, client["subId"]) == expected_links(api, client, inbound["id"])
    finally:
        stop_and_drop(server)


@pytest.mark.parametrize("value", ["0", "many", "65"])
def test_a_bad_worker_count_is_refused_with_a_sentence(tmp_path, value):
    result = subprocess.run(
        [sys.executable, "-m", "appliance", "run", "--data-dir", str(tmp_path), "--port", "0"],
        env=clean_env(APPLIANCE_SUB_WORKERS=value),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert f"--sub-workers must be auto or a number of processes from 1 to 64 (got '{value}')" in (
        result.stderr
    )
    assert not os.path.exists(tmp_path / "appliance.db")


# ---- on demand -----------------------------------------------------------------------------

IDLE_SECONDS = 4
on_two_cores = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="one core: the panel serves the port alone"
)


def start_auto_panel(tmp_path):
    return start_panel(tmp_path, env={"APPLIANCE_SUB_WORKER_IDLE": str(IDLE_SECONDS)})


def sub_worker_children(pid: int) -> list[int]:
    return [
        child
        for child in children(pid)
        if alive(child) and command_line(child)[-1:] == ["sub-worker"]
    ]


@contextmanager
def burst(panel, sub_id: str, threads: int = 6):
    """Threads fetching one subscription back to back, each on a new connection, until
    the block ends; every answer must be the client's links."""
    stop = threading.Event()
    failures: list[str] = []

    def hammer():
        while not stop.is_set():
            try:
                response = fetch(panel, sub_id)
                if response.status_code != 200:
                    failures.append(f"{response.status_code} {response.text[:200]}")
            except requests.RequestException as exc:
                failures.append(repr(exc))

    workers = [threading.Thread(target=hammer, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join(15)
    assert not failures, failures[:3]


@on_two_cores
def test_an_idle_panel_runs_no_worker(tmp_path):
    server = start_auto_panel(tmp_path)
    try:
        api = server.client()
        inbound = add_inbound(api, 28111)
        client = add_client(api, inbound["id"])
        for _ in range(FETCHES):
            assert links_served(server, client["subId"]) == expected_links(
                api, client, inbound["id"]
            )
        assert worker_pids(api) == []
        assert sub_worker_children(server.process.pid) == []
        assert "in the panel process and up to 2 worker processes on demand" in server.output()
    finally:
        stop_and_drop(server)


@on_two_cores
def test_workers_come_with_demand_serve_and_leave_when_it_ends(tmp_path):
    server = start_auto_panel(tmp_path)
    try:
        api = server.client()
        inbound = add_inbound(api, 28112)
        loaded = add_client(api, inbound["id"])
        with burst(server, loaded["subId"]):
            pids = wait_for(lambda: len(worker_pids(api)) == 2 and worker_pids(api), 30)
            assert set(pids) == set(sub_worker_children(server.process.pid))
            client = add_client(api, inbound["id"])
            wanted = expected_links(api, client, inbound["id"])
            # The panel paused: only the workers accept, and they show the new client.
            os.kill(server.process.pid, signal.SIGSTOP)
            try:
                for _ in range(FETCHES):
                    assert links_served(server, client["subId"]) == wanted
            finally:
                os.kill(server.process.pid, signal.SIGCONT)
            # The workers paused: the panel, which left the port to them, answers nobody.
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                with pytest.raises(requests.Timeout):
                    requests.get(f"{server.sub_url}/sub/{client['subId']}", timeout=1)
                assert ok(api.get(STATUS))  # while the panel's own port answers
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
        wait_for(lambda: worker_pids(api) == [], IDLE_SECONDS * 4)
        wait_for(lambda: not any(alive(pid) for pid in pids), 10)
        assert sub_worker_children(server.process.pid) == []
        # A worker drops out of subWorkers as it exits; its line follows once it is reaped.
        wait_for(lambda: server.output().count("left after") >= 2, 10)
        output = server.output()
        assert output.count("left after") == 2
        assert "exited (" not in output and "starting it again" not in output
        assert "Traceback" not in output and " ERROR " not in output
        # Nothing comes back while it stays quiet, and the panel alone serves.
        time.sleep(2)
        assert worker_pids(api) == []
        assert links_served(server, client["subId"]) == wanted
    finally:
        stop_and_drop(server)


@on_two_cores
def test_a_worker_killed_during_demand_is_restarted_and_sigterm_leaves_none(tmp_path):
    server = start_auto_panel(tmp_path)
    try:
        api = server.client()
        inbound = add_inbound(api, 28113)
        client = add_client(api, inbound["id"])
        with burst(server, client["subId"]):
            before = wait_for(lambda: len(worker_pids(api)) == 2 and worker_pids(api), 30)
            os.kill(before[0], signal.SIGKILL)

            def replaced() -> list[int] | None:
                pids = worker_pids(api)
                return pids if len(pids) == 2 and before[0] not in pids else None

            after = wait_for(replaced)
            assert "exited (signal SIGKILL)" in server.output()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(10) == 0
        wait_for(lambda: not any(alive(pid) for pid in before + after), timeout=10)
    finally:
        stop_and_drop(server)
