"""Node traffic on the central panel against a real SQLite store: each answer a node
gives is counted once, whatever happens between polls.

`NodeTraffic` is handed node answers directly (as its poll checks them); the end-to-end
path, with real panels and bytes through a node's core, is tests/nodes/test_nodes_traffic_api.py.
"""

from __future__ import annotations

import pytest
from helpers import runs_every_feature, without_core_or_nodes
from pony.orm import db_session

from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.clients.bulk import ClientBulk
from appliance.services.clients.counters import CounterJournal
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.clients.records import Clients
from appliance.services.inbounds.records import Inbounds
from appliance.services.nodes.health import NodeHealth
from appliance.services.nodes.link import Identity
from appliance.services.nodes.records import Nodes
from appliance.services.nodes.sealing import TokenSeal
from appliance.services.nodes.traffic import NodeTraffic, _checked
from appliance.services.webhooks.outbox import Outbox
from appliance.store import Store

NOW = 1_800_000_000.0
IDENTITY = Identity("00000000-0000-4000-8000-000000000001")


@pytest.fixture
def world(tmp_path):
    """A node (id 1) with inbound `n1-edge` here, clients Alice and bob on it."""
    store = Store(str(tmp_path / "panel.db"))
    store.open()
    notice = ChangeNotice()
    settings = Settings(store, FilePlaces(str(tmp_path)), notice)
    settings.load()
    presence = Presence(clock=lambda: NOW)
    query = ClientQuery(store, settings, presence, clock=lambda: NOW)
    nodes = Nodes(store, TokenSeal(lambda: "a test key"), notice, Outbox(store))
    node = nodes.add({"name": "edge", "address": "node.example", "port": 2053, "apiToken": "t"})
    inbounds = Inbounds(
        store,
        lambda: [],
        query.by_inbound,
        places=settings.places,
        notice=notice,
        **without_core_or_nodes(),
    )
    inbound = inbounds.add({"protocol": "vless", "port": 4431, "tag": "edge", "nodeId": node["id"]})
    clients = Clients(store, notice, runs_every_feature, Outbox(store))
    for email, total in (("Alice", 0), ("bob", 1000)):
        clients.add({"client": {"email": email, "totalGB": total}, "inboundIds": [inbound["id"]]})
    bulk = ClientBulk(clients, query)
    yield store, nodes, presence, query, clients, inbounds, bulk
    store.close()


def counting(world) -> NodeTraffic:
    """The central panel's node traffic, as a (re)started process builds it."""
    store, nodes, presence, query, _, _, bulk = world
    return NodeTraffic(
        nodes,
        NodeHealth(nodes, lambda: IDENTITY, ChangeNotice(), Outbox(store)),
        lambda: IDENTITY,
        presence,
        query,
        CounterJournal(),
        sweep=bulk.disable_depleted,
        clock=lambda: NOW,
    )


def answer(clients: dict, inbound=(0, 0), full: bool = False, cursor: str = "b:1"):
    return _checked(
        {
            "cursor": cursor,
            "full": full,
            "clients": [{"email": e, "up": u, "down": d} for e, (u, d) in clients.items()],
            "inbounds": [{"tag": "edge", "up": inbound[0], "down": inbound[1]}],
        },
        "node 'edge'",
    )


def traffic(world, email: str) -> tuple[int, int]:
    record = world[4].traffic(email)
    return record["up"], record["down"]


def test_an_answer_counted_twice_adds_once(world):
    nodes = counting(world)
    nodes._count(1, answer({"alice": (100, 1000)}, inbound=(110, 1010)))
    nodes._count(1, answer({"alice": (100, 1000)}, inbound=(110, 1010)))
    assert traffic(world, "Alice") == (100, 1000)
    inbound = world[5].get(1)
    assert (inbound["up"], inbound["down"]) == (110, 1010)


def test_differences_only_and_a_lower_counter_was_reset_on_the_node(world):
    nodes = counting(world)
    nodes._count(1, answer({"Alice": (100, 1000)}))
    nodes._count(1, answer({"Alice": (150, 1400)}))
    assert traffic(world, "Alice") == (150, 1400)
    nodes._count(1, answer({"Alice": (30, 1400)}))  # up reset on the node, down did not move
    assert traffic(world, "Alice") == (180, 1400)


def test_a_restarted_central_panel_reads_the_kept_values(world):
    counting(world)._count(1, answer({"Alice": (100, 1000)}, full=True))
    restarted = counting(world)
    restarted._count(1, answer({"Alice": (100, 1000)}, full=True))
    restarted._count(1, answer({"Alice": (300, 1000)}))
    assert traffic(world, "Alice") == (300, 1000)


def test_a_full_answer_forgets_counters_the_node_no_longer_has(world):
    nodes = counting(world)
    nodes._count(1, answer({"Alice": (100, 100), "bob": (5, 5)}, full=True))
    nodes._count(1, answer({"Alice": (100, 100)}, full=True))  # bob deleted on the node
    nodes._count(1, answer({"Alice": (100, 100), "bob": (7, 7)}))  # and made again there
    assert traffic(world, "bob") == (12, 12)
    with db_session:
        names = world[0].rows("SELECT name FROM node_counter WHERE node_id = 1 ORDER BY name")
    # A counter still at zero needs no kept value: zero is what an unknown one starts at.
    assert [n for (n,) in names] == ["user>>>alice", "user>>>bob"]


def test_emails_the_central_panel_does_not_know_change_nothing_here(world):
    nodes = counting(world)
    nodes._count(1, answer({"stranger": (5, 5)}))
    assert traffic(world, "Alice") == (0, 0)


def test_node_traffic_past_a_quota_is_swept(world):
    nodes = counting(world)
    nodes._count(1, answer({"bob": (400, 700)}))
    assert nodes.sweep() == ["bob"]
    assert world[4].get("bob")["client"]["enable"] is False


def test_a_client_bound_to_the_node_later_is_charged_from_then_on(world):
    """What a node reported for a client while it was not bound there is never charged:
    neither then, nor once the client is bound to it."""
    _, _, _, _, clients, inbounds, _ = world
    home = inbounds.add({"protocol": "vless", "port": 4432, "tag": "home"})
    clients.add({"client": {"email": "carol"}, "inboundIds": [home["id"]]})
    nodes = counting(world)
    nodes._count(1, answer({"carol": (100, 1000)}))
    assert traffic(world, "carol") == (0, 0)
    assert nodes.ignored.view(1) == {"count": 1, "clients": ["carol"], "inbounds": []}
    clients.attach("carol", {"inboundIds": [1]})
    nodes._count(1, answer({"carol": (150, 1600)}))
    assert traffic(world, "carol") == (50, 600)
