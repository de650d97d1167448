"""A client's IP limit judged on the addresses of every node, and refused where it was
seen: a central panel managing two node panels, all real processes on loopback.

Each node's sightings are merged into it through `server/clientIps` with times taken
when the test runs (the node's own record of what its core saw). Client `alice` (limit 1)
is attached to an inbound on each node; the central panel's polls read each node's recent
addresses, and the node that saw the extra address writes its ip-limit.log line.
"""

from __future__ import annotations

import os
import time

import pytest
from core_panel import wait_until
from helpers import create_inbound, free_port, ok, refused
from node_panels import add_node, with_interval
from panels import start_panel, stop_and_drop

CLIENTS = "/panel/api/clients"
WAIT = 30
ALICE = "alice@fleet"
FIRST, EXTRA, LATER = "198.51.100.7", "203.0.113.9", "198.51.100.8"


def vless(remark: str, node_id: int) -> dict:
    return {
        "protocol": "vless",
        "remark": remark,
        "listen": "127.0.0.1",
        "port": free_port(),
        "tag": remark,
        "nodeId": node_id,
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "none"},
    }


def limit_log(panel) -> str:
    path = os.path.join(panel.data_dir, "logs", "ip-limit.log")
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def seen_on(node, email: str, ip: str) -> None:
    """The node's core saw `email` at `ip` just now."""
    entry = {"email": email, "ips": [{"ip": ip, "timestamp": int(time.time())}]}
    ok(node.client().post("/panel/api/server/clientIps", {"ips": [entry]}))


def seen_by(central, email: str) -> dict[str, set]:
    """ip -> node ids that saw it, as the central panel lists a client's addresses."""
    reply = central.client().post(f"{CLIENTS}/ips/{email}")
    assert reply["success"], reply
    found: dict[str, set] = {}
    for entry in reply["seenBy"]:
        found.setdefault(entry["ip"], set()).add(entry["nodeId"])
    return found


def stamp_of(central, email: str, ip: str) -> int:
    reply = central.client().post(f"{CLIENTS}/ips/{email}")
    return max((e["timestamp"] for e in reply["seenBy"] if e["ip"] == ip), default=0)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    one = start_panel(tmp_path_factory.mktemp("node-one"))
    two = start_panel(tmp_path_factory.mktemp("node-two"))
    central = start_panel(tmp_path_factory.mktemp("central"))
    try:
        api = central.client()
        ok(api.post("/panel/api/setting/update", {"ipLimitEnable": True}))
        with_interval(central)
        api = central.client()
        nodes = {"one": add_node(api, one, "one"), "two": add_node(api, two, "two")}
        inbounds = [create_inbound(api, vless(name, n["id"])) for name, n in nodes.items()]
        client = {"email": ALICE, "limitIp": 1}
        ok(
            api.post(
                f"{CLIENTS}/add", {"client": client, "inboundIds": [i["id"] for i in inbounds]}
            )
        )
        for node in (one, two):
            wait_until(
                lambda node=node: node.client().get(f"{CLIENTS}/get/{ALICE}")["success"],
                "the client is deployed on the node",
                WAIT,
            )
        yield {"central": central, "one": one, "two": two, "nodes": nodes}
    finally:
        for server in (central, one, two):
            stop_and_drop(server)


def test_the_node_that_saw_the_extra_address_refuses_it(world):
    central, one, two, nodes = world["central"], world["one"], world["two"], world["nodes"]
    seen_on(one, ALICE, FIRST)
    wait_until(
        lambda: nodes["one"]["id"] in seen_by(central, ALICE).get(FIRST, set()),
        "the central panel records what node one saw",
        WAIT,
    )
    seen_on(two, ALICE, EXTRA)
    wait_until(lambda: EXTRA in limit_log(two), "node two writes the ban line", WAIT)
    line = next(x for x in limit_log(two).splitlines() if EXTRA in x)
    assert line.endswith(f"[LIMIT_IP] Email = {ALICE} || SRC = {EXTRA}"), line
    assert seen_by(central, ALICE)[EXTRA] == {nodes["two"]["id"]}
    assert limit_log(one) == ""
    assert limit_log(central) == ""
    listed = ok(central.client().post(f"{CLIENTS}/ips/{ALICE}"))
    assert sorted(x.split(" ")[0] for x in listed) == sorted([FIRST, EXTRA])


def test_a_ban_is_not_sent_again_within_the_window(world):
    central, two = world["central"], world["two"]
    wait_until(lambda: EXTRA in limit_log(two), "node two writes the ban line", WAIT)
    # Two later sightings, each waited for: a node is polled one round at a time, so
    # the round that judged the first has sent whatever it sends by the second.
    for _ in range(2):
        time.sleep(1.1)
        again = int(time.time())
        seen_on(two, ALICE, EXTRA)
        wait_until(
            lambda again=again: stamp_of(central, ALICE, EXTRA) >= again,
            "the central panel judges node two's later sighting",
            WAIT,
        )
    assert limit_log(two).count(EXTRA) == 1


@pytest.mark.parametrize(
    "entry, words",
    [
        ({"email": "nobody@fleet", "ip": "192.0.2.1"}, "no client has this email"),
        ({"email": ALICE, "ip": "not-an-address"}, "not an IP address"),
        ({"email": ALICE, "ip": "127.0.0.1"}, "this host's own"),
        ({"ip": "192.0.2.1"}, "needs an email"),
    ],
)
def test_a_bad_ban_entry_is_refused_and_nothing_is_written_for_it(world, entry, words):
    one = world["one"]
    before = limit_log(one)
    answer = ok(one.client().post(f"{CLIENTS}/refuseIps", {"bans": [entry]}))
    assert answer["written"] == 0
    assert [r["entry"] for r in answer["refused"]] == [1]
    assert words in answer["refused"][0]["reason"]
    assert limit_log(one) == before


def test_a_ban_body_that_is_not_a_list_is_refused(world):
    one = world["one"]
    refused(one.client().post(f"{CLIENTS}/refuseIps", {"bans": "192.0.2.1"}), "list")
    refused(one.client().post(f"{CLIENTS}/refuseIps", {}), "bans")


def test_a_good_ban_among_bad_ones_is_written(world):
    one = world["one"]
    bans = [{"email": "nobody@fleet", "ip": "192.0.2.2"}, {"email": ALICE, "ip": "192.0.2.3"}]
    answer = ok(one.client().post(f"{CLIENTS}/refuseIps", {"bans": bans}))
    assert answer["written"] == 1
    assert [r["entry"] for r in answer["refused"]] == [1]
    assert "192.0.2.3" in limit_log(one) and "192.0.2.2" not in limit_log(one)


def test_recent_ips_lists_only_the_window(world):
    one = world["one"]
    old = {"email": ALICE, "ips": [{"ip": "192.0.2.40", "timestamp": int(time.time()) - 3600}]}
    ok(one.client().post("/panel/api/server/clientIps", {"ips": [old]}))
    recent = ok(one.client().post(f"{CLIENTS}/recentIps"))
    assert FIRST in recent[ALICE] and "192.0.2.40" not in recent[ALICE]


def test_a_node_that_is_down_is_skipped(world):
    """Node two stops; node one is still polled and judged, on the union that still
    holds node two's address from within the window."""
    central, one, nodes = world["central"], world["one"], world["nodes"]
    world["two"].stop()
    seen_on(one, ALICE, LATER)
    wait_until(lambda: LATER in limit_log(one), "node one writes the ban line", WAIT)
    assert seen_by(central, ALICE)[LATER] == {nodes["one"]["id"]}
    assert FIRST not in limit_log(one)


def test_a_deleted_node_takes_the_addresses_it_saw_along(world):
    """Last in the file: node two is deleted. Its address leaves the client's list, so no
    limit is judged on a server that is gone; node one's stay."""
    central, nodes = world["central"], world["nodes"]
    assert EXTRA in seen_by(central, ALICE)
    ok(central.client().post(f"/panel/api/nodes/del/{nodes['two']['id']}"))
    seen = seen_by(central, ALICE)
    assert EXTRA not in seen
    assert seen[FIRST] == {nodes["one"]["id"]}
