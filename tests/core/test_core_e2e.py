"""The panel and the real core together, driven over HTTP the way a user drives them.

Each panel here runs Debian's V2Ray 4.34 as its core, with `trafficInterval` 1 stored and
applied by a panel restart, and a core template without the default rule that blackholes
private addresses (the traffic of these tests goes to an echo server on 127.0.0.1). A
second V2Ray process plays the user's client: its local SOCKS ports lead, as one panel
client each, through the panel's inbounds to the echo server. What the tests look at is
what a user sees: the counters and flags the API reports, whether bytes come back, the
core's process id (from the core-state.json the panel keeps and from the panel's child
processes), its output and the WebSocket pushes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from contextlib import closing

import pytest
import websocket
from core_helpers import (
    LOOPBACK,
)
from core_panel import CORE_ENV, WAIT, loopback_template, wait_until
from core_traffic import (
    CLIENTS,
    INBOUNDS,
    STARTED_LINE,
    add_client,
    add_inbound,
    add_refused_inbound,
    assert_counted,
    client_core,
    core_pid,
    core_processes,
    core_state,
    gone,
    in_core,
    inbound_counters,
    open_tunnel,
    passes,
    push,
    round_trip,
    route,
    settled_started_count,
    started_count,
    traffic,
    traffic_core_panel,
)
from helpers import free_port, ok
from panels import start_panel

COUNT_WAIT = 2 * WAIT
# ---- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = traffic_core_panel(tmp_path_factory.mktemp("core-e2e"))
    yield server
    server.stop()


# ---- 1. traffic lands on the right counters -------------------------------------------------


def test_traffic_of_every_protocol_is_counted_on_its_client_and_inbound(api, tmp_path, echo):
    protocols = ["vless", "vmess", "trojan", "shadowsocks", "socks", "http"]
    inbounds = {protocol: add_inbound(api, protocol) for protocol in protocols}
    users, idle = {}, []
    for protocol in ("vless", "vmess", "trojan", "shadowsocks"):
        users[protocol] = add_client(api, inbounds[protocol]["id"])
        if protocol != "shadowsocks":  # V2Ray 4.34 serves one Shadowsocks user
            idle.append(add_client(api, inbounds[protocol]["id"]))
    routes = {protocol: route(inbounds[protocol], users.get(protocol)) for protocol in protocols}
    # A different size per inbound, so bytes counted on the wrong one would show.
    sizes = {protocol: 100_000 + index * 37_000 for index, protocol in enumerate(protocols)}
    before = inbound_counters(api)
    with client_core(tmp_path, list(routes.values())):
        for protocol in protocols:
            wait_until(lambda p=protocol: passes(routes[p][0], echo), f"{protocol} carries bytes")
            push(routes[protocol][0], echo, sizes[protocol])
        for protocol, client in users.items():
            counted = wait_until(
                lambda c=client, p=protocol: (
                    (t := traffic(api, c["email"]))["down"] >= sizes[p] and t
                ),
                f"the {protocol} client's bytes are counted",
                # Six protocols pushed one after the other on a loaded machine: the
                # first one's bytes wait for the core's counters and a tick after them.
                COUNT_WAIT,
            )
            # Payload of the push plus the probes that waited for the inbound.
            assert_counted(counted["up"], sizes[protocol], overhead=0)
            assert_counted(counted["down"], sizes[protocol], overhead=0)
        after = wait_until(
            lambda: (
                all(
                    (c := inbound_counters(api))[inbounds[p]["id"]][1] >= sizes[p]
                    for p in protocols
                )
                and c
            ),
            "every inbound counted its bytes",
        )
    for protocol in protocols:
        inbound_id = inbounds[protocol]["id"]
        up, down = after[inbound_id]
        assert_counted(up - before.get(inbound_id, (0, 0))[0], sizes[protocol])
        assert_counted(down - before.get(inbound_id, (0, 0))[1], sizes[protocol])
    for client in idle:
        counted = traffic(api, client["email"])
        assert (counted["up"], counted["down"]) == (0, 0), client["email"]


# ---- 2. a client over quota is cut off, and back after a reset -------------------------------


def client_record(api, email: str) -> dict:
    return ok(api.get(f"{CLIENTS}/get/{email}"))["client"]


def depleted(api) -> list[str]:
    return ok(api.get(f"{CLIENTS}/list/paged", params={"filter": "depleted"}))["summary"][
        "depleted"
    ]


@pytest.mark.parametrize("protocol", ["vless", "vmess", "trojan"])
def test_a_client_over_quota_is_cut_off_live_and_back_after_a_reset(
    api, panel, tmp_path, echo, protocol
):
    inbound = add_inbound(api, protocol)
    capped = add_client(api, inbound["id"], totalGB=50_000)
    other = add_client(api, inbound["id"])
    capped_route, other_route = route(inbound, capped), route(inbound, other)
    with client_core(tmp_path, [capped_route, other_route]):
        wait_until(lambda: passes(capped_route[0], echo), "the capped client connects")
        wait_until(lambda: passes(other_route[0], echo), "the other client connects")
        pid = core_pid(panel)
        with closing(open_tunnel(other_route[0], echo)) as open_connection:
            push(capped_route[0], echo, 100_000)
            wait_until(
                lambda: not client_record(api, capped["email"])["enable"],
                "the sweep disables the client over quota",
            )
            assert traffic(api, capped["email"])["enable"] is False
            assert capped["email"] in depleted(api)
            wait_until(
                lambda: not passes(capped_route[0], echo), "the client's connections are refused"
            )
            assert round_trip(open_connection), "another client's open connection broke"
            assert passes(other_route[0], echo)
            assert client_record(api, other["email"])["enable"] is True

            ok(api.post(f"{CLIENTS}/resetTraffic/{capped['email']}"))
            reset = traffic(api, capped["email"])
            assert (reset["up"], reset["down"], reset["enable"]) == (0, 0, True)
            assert client_record(api, capped["email"])["enable"] is True
            wait_until(lambda: passes(capped_route[0], echo), "the reset client connects again")
            assert round_trip(open_connection), "another client's open connection broke"
        assert core_pid(panel) == pid, "the core was restarted"
    assert capped["email"] not in depleted(api)


# ---- 3. a client added to a running inbound works without a restart ---------------------------


def test_a_client_added_to_a_running_vless_inbound_works_at_once(api, panel, tmp_path, echo):
    inbound = add_inbound(api, "vless")
    present = add_client(api, inbound["id"])
    newcomer = {"email": f"{uuid.uuid4().hex[:10]}@e2e", "id": str(uuid.uuid4())}
    present_route, newcomer_route = route(inbound, present), route(inbound, newcomer)
    with client_core(tmp_path, [present_route, newcomer_route]):
        wait_until(lambda: passes(present_route[0], echo), "the present client connects")
        assert not passes(newcomer_route[0], echo), "a client the panel does not know got in"
        pid = core_pid(panel)
        with closing(open_tunnel(present_route[0], echo)) as open_connection:
            ok(api.post(f"{CLIENTS}/add", {"client": newcomer, "inboundIds": [inbound["id"]]}))
            wait_until(lambda: passes(newcomer_route[0], echo), "the new client connects")
            assert round_trip(open_connection), "another client's open connection broke"
        assert core_pid(panel) == pid, "the core was restarted"
        running = ok(api.get("/panel/api/server/getConfigJson"))
        served = next(i for i in running["inbounds"] if i.get("tag") == inbound["tag"])
        assert newcomer["email"] in [c["email"] for c in served["settings"]["clients"]]
        # The supervisor restarts a crashed core from its config file: the live change
        # must be in it, or the newcomer would be locked out again.
        os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: core_state(api) == "running" and core_pid(panel) not in (0, pid),
            "the supervisor restarts the core",
        )
        wait_until(lambda: passes(newcomer_route[0], echo), "the newcomer connects again")


# ---- 4. a killed core comes back, and its bytes are counted once -------------------------------


def test_a_killed_core_is_restarted_and_nothing_is_counted_twice(api, panel, tmp_path, echo):
    inbound = add_inbound(api, "vless")
    client = add_client(api, inbound["id"])
    client_route = route(inbound, client)
    first, second = 300_000, 100_000
    with client_core(tmp_path, [client_route]):
        wait_until(lambda: passes(client_route[0], echo), "the client connects")
        push(client_route[0], echo, first)
        # Both ways counted before the kill: what the core holds uncounted dies with it.
        wait_until(
            lambda: min(traffic(api, client["email"])[k] for k in ("up", "down")) >= first,
            "a tick counts",
        )
        pid = core_pid(panel)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: gone(pid), "the core dies")
        new_pid = wait_until(
            lambda: (
                core_state(api) == "running" and core_pid(panel) not in (0, pid) and core_pid(panel)
            ),
            "the supervisor restarts the core",
        )
        assert gone(pid)
        wait_until(lambda: passes(client_route[0], echo), "the restarted core carries bytes")
        push(client_route[0], echo, second)
        wait_until(
            lambda: traffic(api, client["email"])["up"] >= first + second, "a tick counts again"
        )
        time.sleep(2.5)  # two more ticks: a double count would show by now
        counted = traffic(api, client["email"])
        assert core_pid(panel) == new_pid
    assert_counted(counted["up"], first + second, overhead=0)
    assert_counted(counted["down"], first + second, overhead=0)


# ---- 5. a killed panel: the orphaned core's last bytes are collected once -------------------


def test_a_killed_panel_collects_the_orphaned_cores_counters_once(tmp_path, echo):
    # Ticks 3 s apart: bytes sent right after one tick are surely not counted before the kill.
    server = traffic_core_panel(tmp_path, interval=3)
    try:
        api = server.client()
        inbound = add_inbound(api, "vless")
        client = add_client(api, inbound["id"])
        idle = add_client(api, inbound["id"])
        client_route = route(inbound, client)
        first, second = 300_000, 100_000
        with client_core(tmp_path, [client_route]):
            wait_until(lambda: passes(client_route[0], echo), "the client connects")
            push(client_route[0], echo, first)
            wait_until(lambda: traffic(api, client["email"])["up"] >= first, "a tick counts")
            push(client_route[0], echo, second)
            before = traffic(api, client["email"])
            orphan = core_pid(server)
            server.process.kill()
            server.process.wait()
        assert not gone(orphan), "the core died with the panel"
        assert not answers(api), "the killed panel still answers"

        server.start()
        api = server.client()
        wait_until(lambda: gone(orphan), "the orphaned core is ended")
        new_pid = wait_until(lambda: core_pid(server), "the new panel runs its own core")
        assert new_pid != orphan
        assert [process.pid for process in core_processes(server)] == [new_pid]
        assert before["up"] < first + second, "a tick came between the push and the kill"
        counted = traffic(api, client["email"])
        assert_counted(counted["up"], first + second, overhead=0)
        assert_counted(counted["down"], first + second, overhead=0)
        idle_counted = traffic(api, idle["email"])
        assert (idle_counted["up"], idle_counted["down"]) == (0, 0)
    finally:
        server.stop()


def test_a_stale_state_file_never_ends_a_process_that_is_not_the_core(tmp_path):
    """After a reboot the pid in core-state.json may be anyone's."""
    server = start_panel(tmp_path, env=CORE_ENV)
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        wait_until(lambda: core_pid(server), "the core runs")
        server.stop()
        stale = {"pid": bystander.pid, "apiPort": free_port(), "generation": 1, "prefix": "x"}
        with open(os.path.join(server.data_dir, "core", "core-state.json"), "w") as fh:
            json.dump(stale, fh)
        server.start()
        wait_until(lambda: core_pid(server), "the core runs again")
        assert bystander.poll() is None, "the panel ended a process that was not its core"
    finally:
        bystander.kill()
        bystander.wait()
        server.stop()


def answers(api) -> bool:
    try:
        api.get(f"{CLIENTS}/list")
    except OSError:
        return False
    return True


# ---- 6. a bulk call restarts the core at most once -------------------------------------------


def bulk_items(inbound_id: int, count: int, label: str) -> list[dict]:
    return [
        {
            "client": {"email": f"bulk-{label}-{n}@e2e", "id": str(uuid.uuid4())},
            "inboundIds": [inbound_id],
        }
        for n in range(count)
    ]


def test_a_bulk_create_on_vless_inbounds_restarts_nothing(api, panel, tmp_path, echo):
    vless = [add_inbound(api, "vless") for _ in range(2)]
    items = bulk_items(vless[0]["id"], 500, "live-a") + bulk_items(vless[1]["id"], 500, "live-b")
    last = items[-1]["client"]
    last_route = route(vless[1], last)
    with client_core(tmp_path, [last_route]):
        pid, starts = in_core(api, panel, *vless), settled_started_count(api)
        assert ok(api.post(f"{CLIENTS}/bulkCreate", items)) == {"created": 1000, "skipped": []}
        wait_until(lambda: passes(last_route[0], echo), "the last client created connects")
    assert core_pid(panel) == pid, "the core was restarted"
    assert started_count(api) == starts


def test_a_bulk_create_that_needs_a_restart_restarts_once(api, panel, tmp_path, echo):
    vless = add_inbound(api, "vless")
    # V2Ray 4.34 serves a Shadowsocks inbound only with its one user: the inbound stays out
    # of the config until the bulk call gives it its client, which needs a restart.
    shadowsocks = add_inbound(api, "shadowsocks")
    pid = in_core(api, panel, vless)
    items = bulk_items(vless["id"], 999, "mixed")
    ss_client = {"email": f"bulk-ss-{uuid.uuid4().hex[:8]}@e2e", "password": uuid.uuid4().hex}
    items.insert(500, {"client": ss_client, "inboundIds": [shadowsocks["id"]]})
    ss_route = route(shadowsocks, {**ss_client, "method": "aes-256-gcm"})
    vless_route = route(vless, items[-1]["client"])
    with client_core(tmp_path, [ss_route, vless_route]):
        assert core_pid(panel) == pid
        starts = settled_started_count(api)
        assert ok(api.post(f"{CLIENTS}/bulkCreate", items)) == {"created": 1000, "skipped": []}
        new_pid = wait_until(
            lambda: core_pid(panel) not in (0, pid) and core_pid(panel), "the core restarts"
        )
        wait_until(lambda: passes(ss_route[0], echo), "the Shadowsocks client connects")
        assert passes(vless_route[0], echo)
    assert core_pid(panel) == new_pid, "the core was restarted more than once"
    assert started_count(api) == starts + 1


# ---- 7. refused configs, stop and restart, what the core routes show --------------------------


def core_socket(panel, api) -> websocket.WebSocket:
    cookie = "; ".join(f"{name}={value}" for name, value in api.http.cookies.items())
    url = panel.url.replace("http", "ws", 1) + "/ws"
    return websocket.create_connection(url, timeout=WAIT, cookie=cookie)


def next_core_state(ws) -> str:
    """The next coreState push, skipping the status and other messages between."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ws.settimeout(max(deadline - time.monotonic(), 0.1))
        message = json.loads(ws.recv())
        if message.get("type") == "coreState":
            return message["data"]
    raise AssertionError("no coreState message")


def test_a_template_the_core_refuses_is_not_saved_and_the_core_keeps_running(api, panel):
    pid = core_pid(panel)
    saved = ok(api.post("/panel/api/core/"))["coreSetting"]
    template = loopback_template(api)
    template["outbounds"].append({"tag": "broken", "protocol": "no-such-protocol"})
    reply = api.post("/panel/api/core/update", {"coreSetting": json.dumps(template)})
    assert reply["success"] is False
    assert reply["msg"].startswith("the core refused the config: ")
    assert "no-such-protocol" in reply["msg"]
    assert ok(api.post("/panel/api/core/"))["coreSetting"] == saved
    assert core_state(api) == "running"
    assert core_pid(panel) == pid
    running = ok(api.get("/panel/api/server/getConfigJson"))
    assert "broken" not in [outbound["tag"] for outbound in running["outbounds"]]


def test_a_restart_into_a_config_the_core_refuses_keeps_the_core_running(api, panel):
    empty = add_refused_inbound(api, panel)
    pid = core_pid(panel)
    try:
        reply = api.post("/panel/api/server/restartCoreService")
        assert reply["success"] is False
        assert "the core refused the config" in reply["msg"]
        assert "meek" in reply["msg"]
        assert core_state(api) == "running"
        assert core_pid(panel) == pid
    finally:
        ok(api.post(f"{INBOUNDS}/del/{empty['id']}"))


def test_a_core_refused_at_start_starts_once_a_change_fixes_its_config(tmp_path):
    server = start_panel(tmp_path, env=CORE_ENV)
    try:
        api = server.client()
        wait_until(lambda: core_pid(server), "the core runs")
        refused = add_refused_inbound(api, server)
        server.stop()
        server.start()
        api = server.client()
        status = wait_until(
            lambda: (core := ok(api.get("/panel/api/server/status"))["core"])["errorMsg"] and core,
            "the core refuses its config at start",
        )
        assert status["state"] == "stop"
        assert "meek" in status["errorMsg"]
        assert core_processes(server) == []

        ok(api.post(f"{INBOUNDS}/del/{refused['id']}"))
        wait_until(lambda: core_pid(server), "the core starts after the fix")
        status = ok(api.get("/panel/api/server/status"))["core"]
        assert (status["state"], status["errorMsg"]) == ("running", "")

        ok(api.post("/panel/api/server/stopCoreService"))
        add_client(api, add_inbound(api, "vless")["id"])
        time.sleep(2)
        assert core_state(api) == "stop", "a change started the core the user stopped"
        assert core_processes(server) == []
    finally:
        server.stop()


def test_stop_and_restart_of_the_core_reach_the_process_and_the_websocket(api, panel):
    pid = core_pid(panel)
    output = ok(api.get("/panel/api/core/getCoreResult"))
    assert "V2Ray 4.34" in output and STARTED_LINE in output
    config = ok(api.get("/panel/api/server/getConfigJson"))
    assert config["inbounds"][0]["tag"] == "api"
    assert config["inbounds"][0]["listen"] == LOOPBACK
    with closing(core_socket(panel, api)) as ws:
        reply = api.post("/panel/api/server/restartCoreService")
        assert reply == {"success": True, "msg": "core restarted", "obj": None}
        restarted = wait_until(
            lambda: core_pid(panel) not in (0, pid) and core_pid(panel), "a new core"
        )
        assert gone(pid)
        assert core_state(api) == "running"

        assert api.post("/panel/api/server/stopCoreService")["success"] is True
        assert next_core_state(ws) == "stop"
        assert core_state(api) == "stop"
        assert gone(restarted)
        assert core_processes(panel) == []
        again = api.post("/panel/api/server/stopCoreService")
        assert again == {"success": False, "msg": "the core is not running", "obj": None}
        assert ok(api.get("/panel/api/server/getConfigJson"))["inbounds"][0]["tag"] == "api"

        assert api.post("/panel/api/server/restartCoreService")["success"] is True
        assert next_core_state(ws) == "running"
        assert core_state(api) == "running"
        assert wait_until(lambda: core_pid(panel), "the core runs again") not in (pid, restarted)
