"""Traffic across nodes: bytes a node's core carries are counted once on the central panel.

A node panel runs the real core (V2Ray 4.34); the central panel runs none and has an
inbound bound to the node, whose node side (same tag without the `n<id>-` prefix, same
clients) `mirror_on_node` makes. A V2Ray client pushes bytes through the node's inbound
to an echo server; the node also has an inbound and a client of its own, made there by
hand, which the central panel neither deploys nor counts. The central panel polls the
node's counters every second; what is checked is what a user reads: the central client's
and inbound's counters equal the node's own (which the core tests prove count the bytes
once), after node and central kills, restarts, polls repeated after a timeout (a proxy
loses the node's answers) and polls that get every counter again; the totals pushed down
and the node's quota check by them; and where each client is online.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import uuid

import pytest
import requests
from core_helpers import LOOPBACK, client_config, echo_server, running_core, socks_echo
from core_panel import wait_until
from helpers import INBOUNDS, create_inbound, free_port, ok, refused
from node_panels import NODES, add_node, core_node, mirror_on_node, node_token, with_interval
from panels import start_panel, stop_and_drop

CLIENTS = "/panel/api/clients"
PLAIN = {"network": "tcp", "security": "none"}
WAIT = 30
# Per-client counters are payload bytes plus the small probes sent while a route opens.
PROBES = 4096


# ---- the world: a node on the real core, a central panel, a client core ----------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    node = core_node(tmp_path_factory.mktemp("node"))
    central = with_interval(start_panel(tmp_path_factory.mktemp("central")))
    api = central.client()
    record = add_node(api, node, "edge")
    assert record["status"] == "online", record
    central_inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "remark": "edge-vless",
            "listen": LOOPBACK,
            "port": free_port(),
            "tag": "edge",
            "nodeId": record["id"],
            "settings": {"decryption": "none"},
            "streamSettings": PLAIN,
        },
    )
    users = {name: new_client(name) for name in ("alice", "carol", "capped")}
    users["capped"]["totalGB"] = 50_000
    for client in users.values():
        ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [central_inbound["id"]]}))
    node_inbound = mirror_on_node(node.client(), central_inbound, list(users.values()))
    # The node's own inbound and client, made there by hand: the central panel knows
    # neither, and its deployments leave them alone.
    own_inbound = create_inbound(
        node.client(),
        {
            "protocol": "vless",
            "remark": "node-own",
            "listen": LOOPBACK,
            "port": free_port(),
            "tag": "node-own",
            "settings": {"decryption": "none"},
            "streamSettings": PLAIN,
        },
    )
    solo = new_client("solo")
    ok(node.client().post(f"{CLIENTS}/add", {"client": solo, "inboundIds": [own_inbound["id"]]}))
    routes = {name: (free_port(), "vless", central_inbound["port"], c) for name, c in users.items()}
    users["solo"] = solo
    routes["solo"] = (free_port(), "vless", own_inbound["port"], solo)
    tmp = tmp_path_factory.mktemp("client-core")
    with (
        echo_server() as echo,
        running_core(
            tmp, client_config(list(routes.values())), max(port for port, *_ in routes.values())
        ),
    ):
        for name in routes:
            wait_until(lambda n=name: passes(routes[n][0], echo), f"{name} connects", WAIT)
        yield {
            "node": node,
            "central": central,
            "record": record,
            "inbound": central_inbound,
            "node_inbound": node_inbound,
            "own_inbound": own_inbound,
            "users": users,
            "routes": routes,
            "echo": echo,
        }
    stop_and_drop(central)
    stop_and_drop(node)


def new_client(name: str) -> dict:
    return {"email": f"{name}-{uuid.uuid4().hex[:6]}@edge", "id": str(uuid.uuid4())}


def passes(socks_port: int, echo_port: int) -> bool:
    try:
        return socks_echo(socks_port, echo_port, b"ping" * 64) == b"ping" * 64
    except OSError:
        return False


def push(world, name: str, size: int) -> None:
    payload = os.urandom(size)
    got = socks_echo(world["routes"][name][0], world["echo"], payload, timeout=10)
    assert got == payload


def traffic(panel, email: str) -> dict:
    return ok(panel.client().get(f"{CLIENTS}/traffic/{email}"))


def pair(panel, email: str) -> tuple[int, int]:
    record = traffic(panel, email)
    return record["up"], record["down"]


def settled(world, name: str, at_least: int) -> tuple[int, int]:
    """The client's counters once the central panel's equal the node's own and hold
    still across several polls; they must reach `at_least` bytes down."""
    email = world["users"][name]["email"]

    def same() -> tuple[int, int] | None:
        node_side = pair(world["node"], email)
        if node_side[1] < at_least or pair(world["central"], email) != node_side:
            return None
        time.sleep(2.5)
        again = pair(world["central"], email)
        return again if again == node_side == pair(world["node"], email) else None

    return wait_until(same, f"the central panel counts {name}'s bytes as the node does", WAIT)


def assert_once(value: int, sent: int) -> None:
    assert sent <= value <= sent + PROBES, (value, sent)


def central_inbound_counters(world) -> tuple[int, int]:
    found = ok(world["central"].client().get(f"{INBOUNDS}/get/{world['inbound']['id']}"))
    return found["up"], found["down"]


def node_inbound_counters(world) -> tuple[int, int]:
    found = ok(world["node"].client().get(f"{INBOUNDS}/get/{world['node_inbound']['id']}"))
    return found["up"], found["down"]


def kill(panel) -> None:
    panel.process.send_signal(signal.SIGKILL)
    panel.process.wait()


# ---- counted once -------------------------------------------------------------------------


def test_bytes_through_the_nodes_core_are_counted_once_on_the_central_panel(world):
    size = 200_000
    push(world, "alice", size)
    up, down = settled(world, "alice", size)
    assert_once(up, size)
    assert_once(down, size)
    # Carol sent only the probes that waited for the route to open.
    carol = pair(world["central"], world["users"]["carol"]["email"])
    assert carol == pair(world["node"], world["users"]["carol"]["email"])
    assert max(carol) <= PROBES
    # The inbound's counters too, under its central tag.
    wait_until(
        lambda: (
            central_inbound_counters(world) == node_inbound_counters(world)
            and central_inbound_counters(world)[1] >= size
        ),
        "the central inbound counts what the node's inbound did",
        WAIT,
    )
    # The central panel's history holds what its totals gained, client and inbound.
    central = world["central"].client()
    email = world["users"]["alice"]["email"]
    history = ok(central.get(f"{CLIENTS}/history/{email}"))
    assert (history["up"], history["down"]) == pair(world["central"], email)
    history = ok(central.get(f"{INBOUNDS}/{world['inbound']['id']}/history"))
    assert (history["up"], history["down"]) == central_inbound_counters(world)
    # The node's own client is not the central panel's: nothing of it lands there.
    assert world["users"]["solo"]["email"] not in {
        c["email"] for c in ok(world["central"].client().get(f"{CLIENTS}/list"))
    }


def test_a_repeated_poll_adds_nothing(world):
    """Disabling and enabling the node forgets the cursor: the next poll gets every counter
    again, all of them already counted."""
    push(world, "carol", 120_000)
    before = settled(world, "carol", 120_000)
    alice = pair(world["central"], world["users"]["alice"]["email"])
    api = world["central"].client()
    node_id = world["record"]["id"]
    ok(api.post(f"{NODES}/setEnable/{node_id}", {"enable": False}))
    time.sleep(2.5)
    ok(api.post(f"{NODES}/setEnable/{node_id}", {"enable": True}))
    wait_until(
        lambda: ok(api.get(f"{NODES}/get/{node_id}"))["status"] == "online", "node online", WAIT
    )
    time.sleep(4)
    # Counted again, the central counters would now be past the node's own.
    assert settled(world, "carol", before[1]) == before
    assert settled(world, "alice", alice[1]) == alice


@contextlib.contextmanager
def answer_losing_proxy(port: int):
    """A TCP proxy on loopback to the panel on `port`. While `losing` is set, the node
    still gets and answers every counters poll, but the answer is held back until the
    central panel gives up waiting: a poll that timed out after the node answered it."""
    listener = socket.create_server((LOOPBACK, 0))
    state = {"losing": False, "lost": 0}

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def serve(conn: socket.socket) -> None:
        with conn, socket.create_connection((LOOPBACK, port)) as upstream:
            head = conn.recv(65536)
            upstream.sendall(head)
            if state["losing"] and b"/clients/counters" in head.split(b"\r\n", 1)[0]:
                with contextlib.suppress(OSError):
                    upstream.recv(65536)  # the node answered; the answer goes nowhere
                    state["lost"] += 1
                    conn.recv(1)  # until the central panel hangs up
                return
            back = threading.Thread(target=pipe, args=(upstream, conn), daemon=True)
            back.start()
            pipe(conn, upstream)
            back.join()

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], state
    finally:
        listener.close()


def test_a_poll_repeated_after_a_timeout_counts_once(world):
    api = world["central"].client()
    node_id = world["record"]["id"]
    node_port = world["record"]["port"]
    email = world["users"]["carol"]["email"]
    start = settled(world, "carol", 1)
    with answer_losing_proxy(node_port) as (port, proxy):
        moved = ok(api.post(f"{NODES}/update/{node_id}", {**connection_of(world), "port": port}))
        assert moved["status"] == "online", moved
        try:
            proxy["losing"] = True
            push(world, "carol", 60_000)
            wait_until(lambda: pair(world["node"], email)[1] >= start[1] + 60_000, "tick", WAIT)
            # Each lost answer holds its poll until the poll times out (10 s).
            wait_until(lambda: proxy["lost"] >= 2, "two polls answered and lost", 3 * WAIT)
            assert pair(world["central"], email) == start
            proxy["losing"] = False
            up, down = settled(world, "carol", start[1] + 60_000)
        finally:
            ok(api.post(f"{NODES}/update/{node_id}", connection_of(world)))
    assert_once(up - start[0], 60_000)
    assert_once(down - start[1], 60_000)


def connection_of(world) -> dict:
    """The node record's connection as stored (an empty token keeps the saved one)."""
    record = world["record"]
    fields = ("name", "scheme", "address", "port", "basePath", "allowPrivateAddress")
    return {**{k: record[k] for k in fields}, "apiToken": ""}


def test_a_node_killed_between_polls_loses_and_doubles_nothing(world):
    email = world["users"]["alice"]["email"]
    start = settled(world, "alice", 1)
    first, second = 150_000, 90_000
    push(world, "alice", first)
    wait_until(lambda: pair(world["central"], email)[1] >= start[1] + first, "a poll", WAIT)
    push(world, "alice", second)
    kill(world["node"])
    world["node"].start()
    up, down = settled(world, "alice", start[1] + first + second)
    assert_once(up - start[0], first + second)
    assert_once(down - start[1], first + second)


def test_the_central_panel_killed_between_polls_loses_and_doubles_nothing(world):
    email = world["users"]["carol"]["email"]
    start = settled(world, "carol", 1)
    first, second = 110_000, 70_000
    push(world, "carol", first)
    wait_until(lambda: pair(world["central"], email)[1] >= start[1] + first, "a poll", WAIT)
    push(world, "carol", second)
    # The node counts the second push before the central panel goes.
    wait_until(lambda: pair(world["node"], email)[1] >= start[1] + first + second, "tick", WAIT)
    kill(world["central"])
    world["central"].start()
    up, down = settled(world, "carol", start[1] + first + second)
    assert_once(up - start[0], first + second)
    assert_once(down - start[1], first + second)


# ---- quotas, presence, counts ---------------------------------------------------------------


def test_node_traffic_counts_toward_the_central_quota(world):
    email = world["users"]["capped"]["email"]
    push(world, "capped", 80_000)
    api = world["central"].client()
    client = wait_until(
        lambda: (c := ok(api.get(f"{CLIENTS}/get/{email}"))["client"])["enable"] is False and c,
        "the central sweep disables the client its node traffic took past its quota",
        WAIT,
    )
    assert client["totalGB"] == 50_000
    wait_until(
        lambda: traffic(world["central"], email)["down"] >= 80_000, "every byte counted", WAIT
    )
    listed = {n["id"]: n for n in ok(api.get(f"{NODES}/list"))}[world["record"]["id"]]
    assert listed["depletedCount"] == 1
    assert listed["clientCount"] == 3


def test_who_is_online_is_said_per_node_guid(world):
    push(world, "alice", 30_000)
    api = world["central"].client()
    node_guid = ok(world["node"].client().get("/panel/api/server/status"))["guid"]
    own_guid = ok(api.get("/panel/api/server/status"))["guid"]
    email = world["users"]["alice"]["email"]
    by_guid = wait_until(
        lambda: email in (m := ok(api.post(f"{CLIENTS}/onlinesByGuid"))).get(node_guid, []) and m,
        "the central panel sees alice online on the node",
        WAIT,
    )
    assert by_guid[own_guid] == []
    assert email in ok(api.post(f"{CLIENTS}/onlines"))
    active = ok(api.post(f"{CLIENTS}/activeInbounds"))
    assert active[own_guid] == []
    assert world["inbound"]["tag"] in active[node_guid]
    assert ok(api.post(f"{CLIENTS}/lastOnline"))[email] > 0
    assert node_guid in ok(api.post(f"{CLIENTS}/clientIpsByGuid"))
    listed = {n["id"]: n for n in ok(api.get(f"{NODES}/list"))}[world["record"]["id"]]
    assert listed["onlineCount"] >= 1
    # A node that is disabled no longer reports: its part goes.
    ok(api.post(f"{NODES}/setEnable/{world['record']['id']}", {"enable": False}))
    wait_until(
        lambda: node_guid not in ok(api.post(f"{CLIENTS}/activeInbounds")),
        "the disabled node's part is gone",
        WAIT,
    )
    assert email not in ok(api.post(f"{CLIENTS}/onlines"))
    ok(api.post(f"{NODES}/setEnable/{world['record']['id']}", {"enable": True}))


# ---- totals pushed down ---------------------------------------------------------------------


def test_the_central_totals_reach_the_node_beside_its_own_counters(world):
    email = world["users"]["alice"]["email"]
    totals = settled(world, "alice", 1)
    record = wait_until(
        lambda: (
            (t := traffic(world["node"], email))["masterTraffic"]
            and (t["masterTraffic"]["up"], t["masterTraffic"]["down"]) == totals
            and t
        ),
        "the node shows the central panel's totals",
        WAIT,
    )
    central_guid = ok(world["central"].client().get("/panel/api/server/status"))["guid"]
    assert record["masterTraffic"]["masterGuid"] == central_guid
    assert (record["up"], record["down"]) == totals


def test_a_push_never_changes_what_the_central_panel_polls(world):
    node_api = world["node"].client()
    central_guid = ok(world["central"].client().get("/panel/api/server/status"))["guid"]
    token = node_token(world["node"], "pusher")
    email = world["users"]["carol"]["email"]
    before = settled(world, "carol", 1)
    polled = ok(node_api.post(f"{CLIENTS}/counters", {"cursor": ""}))
    pushed = {"masterGuid": central_guid, "traffics": [{"email": email, "up": 7, "down": 10**12}]}
    reply = bearer(world["node"], token, f"{INBOUNDS}/pushClientTraffics", pushed)
    assert ok(reply) == {"stored": 1, "skipped": []}
    assert traffic(world["node"], email)["masterTraffic"]["down"] == 10**12
    after = ok(node_api.post(f"{CLIENTS}/counters", {"cursor": ""}))
    assert after["clients"] == polled["clients"]
    assert pair(world["node"], email) == before
    time.sleep(3)
    assert pair(world["central"], email) == before


def test_pushes_are_audited_only_when_refused(world):
    """A managing panel pushes every ten seconds: an entry each would bury the admins'
    own; a refused push (a wrong body, a wrong token) is still written down."""
    node_api = world["node"].client()
    central_guid = ok(world["central"].client().get("/panel/api/server/status"))["guid"]
    token = node_token(world["node"], "audited")
    email = world["users"]["carol"]["email"]

    def pushes() -> list[dict]:
        listed = ok(node_api.get("/panel/api/audit/list", params={"pageSize": 200}))
        return [e for e in listed["items"] if e["route"].endswith("/pushClientTraffics")]

    before = pushes()
    good = {"masterGuid": central_guid, "traffics": [{"email": email, "up": 1, "down": 2}]}
    for _ in range(3):
        assert ok(bearer(world["node"], token, f"{INBOUNDS}/pushClientTraffics", good))
    assert pushes() == before
    bad = {"masterGuid": central_guid, "traffics": {}}
    refused(bearer(world["node"], token, f"{INBOUNDS}/pushClientTraffics", bad), "traffics")
    written = pushes()
    assert len(written) == len(before) + 1
    assert written[0]["success"] is False and "traffics" in written[0]["msg"]
    assert written[0]["actorKind"] == "token"


def bearer(panel, token: str, path: str, body) -> dict:
    reply = requests.post(
        panel.url + path, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    return reply.json()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ([], ("JSON object",)),
        ({"masterGuid": "nope", "traffics": []}, ("masterGuid",)),
        ({"masterGuid": str(uuid.uuid4()), "traffics": {}}, ("traffics",)),
        ({"masterGuid": str(uuid.uuid4()), "traffics": [1]}, ("traffics[0]",)),
        (
            {"masterGuid": str(uuid.uuid4()), "traffics": [{"email": "a", "up": -1, "down": 0}]},
            ("traffics[0].up",),
        ),
        (
            {"masterGuid": str(uuid.uuid4()), "traffics": [{"email": "", "up": 1, "down": 0}]},
            ("traffics[0].email",),
        ),
    ],
)
def test_a_bad_push_is_refused_and_changes_nothing(world, body, words):
    node_api = world["node"].client()
    email = world["users"]["alice"]["email"]
    before = traffic(world["node"], email)["masterTraffic"]
    refused(node_api.post(f"{INBOUNDS}/pushClientTraffics", body), *words)
    assert traffic(world["node"], email)["masterTraffic"] == before


def test_the_node_judges_a_managed_clients_quota_by_the_central_totals(world):
    """The node's own client `solo` (the central panel pushes nothing for it) gets totals
    pushed under the central panel's guid: within its quota they keep it on though its
    own counters are past it; past it they cut it off, with the central panel away."""
    node, node_api = world["node"], world["node"].client()
    solo = world["users"]["solo"]
    push(world, "solo", 60_000)
    wait_until(lambda: pair(node, solo["email"])[1] >= 60_000, "the node counts solo", WAIT)
    central_guid = ok(world["central"].client().get("/panel/api/server/status"))["guid"]

    def totals(down: int) -> None:
        body = {
            "masterGuid": central_guid,
            "traffics": [{"email": solo["email"], "up": 0, "down": down}],
        }
        assert ok(node_api.post(f"{INBOUNDS}/pushClientTraffics", body))["stored"] == 1

    # The totals first: a sweep between a quota and totals under it would rightly cut the
    # client off on its own counters.
    totals(1_000)
    record = ok(node_api.get(f"{CLIENTS}/get/{solo['email']}"))["client"]
    ok(node_api.post(f"{CLIENTS}/update/{solo['email']}", {**record, "totalGB": 30_000}))
    time.sleep(3)  # three of the node's sweeps
    assert ok(node_api.get(f"{CLIENTS}/get/{solo['email']}"))["client"]["enable"] is True
    world["central"].stop()
    try:
        totals(40_000)
        wait_until(
            lambda: ok(node_api.get(f"{CLIENTS}/get/{solo['email']}"))["client"]["enable"] is False,
            "the node cuts off the client the central totals took past its quota",
            WAIT,
        )
    finally:
        world["central"].start()


def test_the_counters_route_answers_only_what_moved_since_its_cursor(world):
    node_api = world["node"].client()
    idle = new_client("idle")  # on the node, never carrying a byte
    ok(
        node_api.post(
            f"{CLIENTS}/add", {"client": idle, "inboundIds": [world["own_inbound"]["id"]]}
        )
    )
    full = ok(node_api.post(f"{CLIENTS}/counters", {"cursor": ""}))
    assert full["full"] is True
    emails = {c["email"] for c in full["clients"]}
    assert {u["email"] for u in world["users"].values()} | {idle["email"]} <= emails
    assert world["node_inbound"]["tag"] in {i["tag"] for i in full["inbounds"]}
    push(world, "carol", 10_000)
    email = world["users"]["carol"]["email"]

    def carol_moved() -> dict | None:
        answer = ok(node_api.post(f"{CLIENTS}/counters", {"cursor": full["cursor"]}))
        return answer if email in {c["email"] for c in answer["clients"]} else None

    moved = wait_until(carol_moved, "the node's tick moves carol's counters", WAIT)
    assert moved["full"] is False
    assert idle["email"] not in {c["email"] for c in moved["clients"]}
    assert moved["inbounds"] and len(moved["clients"]) < len(full["clients"])
    refused(node_api.post(f"{CLIENTS}/counters", {"cursor": 5}), "cursor")
    # A client deleted since the cursor is answered as zero, under its email key.
    before = moved["cursor"]
    ok(node_api.post(f"{CLIENTS}/del/{idle['email']}"))
    after = ok(node_api.post(f"{CLIENTS}/counters", {"cursor": before}))
    assert {"email": idle["email"].casefold(), "up": 0, "down": 0} in after["clients"]
