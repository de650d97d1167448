"""Several panels on one database driving a node: the leader polls the node's traffic,
and when it is killed another instance takes the polls over within 30 s, every byte the
node counted added to the shared totals once across the handover.

The node runs the stand-in Xray (fake_xray.py), whose counters its state file names.
"""

from __future__ import annotations

import time
import uuid

import pytest
from cluster_panels import three_instances
from core_panel import wait_until
from fake_xray_panel import counting, fake_xray_env, in_config, write_state
from helpers import create_inbound, free_port, ok
from node_panels import add_node, with_interval
from panels import start_panel, stop_and_drop

CLIENTS = "/panel/api/clients"
CLUSTER = "/panel/api/server/cluster"
WAIT = 30
FAILOVER_SECONDS = 30


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Three instances polling every second, and a node on the stand-in core."""
    with three_instances(tmp_path_factory, prepare=with_interval) as servers:
        place = tmp_path_factory.mktemp("node")
        node = start_panel(place, "--port", str(free_port()), env=fake_xray_env(place))
        try:
            yield servers, with_interval(node), place
        finally:
            stop_and_drop(node)


def down(server, email: str) -> int:
    return ok(server.client().get(f"{CLIENTS}/traffic/{email}"))["down"]


def runs(api, email: str) -> bool:
    """The core runs with the client in its config."""
    running = ok(api.get("/panel/api/server/status"))["core"]["state"] == "running"
    return running and in_config(api, email)


def leader_of(servers):
    """The instance every instance names as the leader."""
    by_guid = {}
    for server in servers:
        members = ok(server.client().get(CLUSTER))
        by_guid[next(m["guid"] for m in members if m["self"])] = server
    (guid,) = [m["guid"] for m in members if m["leader"]]
    return by_guid[guid]


def test_the_leader_killed_hands_the_node_polls_over_and_counts_every_byte_once(world):
    servers, node, place = world
    api = servers[0].client()
    record = add_node(api, node, "edge")
    assert record["status"] == "online", record
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": free_port(),
            "tag": "edge",
            "nodeId": record["id"],
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )
    email = f"{uuid.uuid4().hex[:8]}@edge"
    ok(api.post(f"{CLIENTS}/add", {"client": {"email": email}, "inboundIds": [inbound["id"]]}))
    node_api = node.client()
    wait_until(lambda: runs(node_api, email), "the node's core runs the client", WAIT)
    counting(place)
    counter = f"user>>>{email}>>>traffic>>>downlink"
    write_state(place / "state.json", counters={counter: 100_000})
    wait_until(lambda: down(servers[0], email) == 100_000, "the leader counts the node", WAIT)

    leader = leader_of(servers)
    leader.process.kill()
    leader.process.wait()
    # The node counts on while no instance leads.
    write_state(place / "state.json", counters={counter: 170_000})
    survivors = [server for server in servers if server is not leader]
    wait_until(
        lambda: down(survivors[0], email) >= 170_000,
        "another instance polling the node",
        FAILOVER_SECONDS + WAIT,
    )
    time.sleep(3)  # polls after it add nothing
    assert [down(server, email) for server in survivors] == [170_000, 170_000]
    assert leader_of(survivors) in survivors
    for server in survivors:
        assert "Traceback" not in server.output()
