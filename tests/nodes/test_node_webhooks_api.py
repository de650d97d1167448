"""A node's webhook events, on a central panel and a node as real processes: the node
stopped (node.offline), a change that cannot reach it meanwhile (node.out_of_step), and
the node back (node.online), each once; the first beat after adding it raises nothing."""

from __future__ import annotations

import time

from helpers import create_inbound, free_port, ok
from node_panels import add_node
from panels import start_panel, stop_and_drop
from webhook_receiver import Receiver

SECRET = "a-secret-of-sixteen-or-more"


def test_a_node_down_then_back_raises_offline_out_of_step_and_online(tmp_path):
    receiver = Receiver().start()
    central = start_panel(tmp_path / "central")
    node = start_panel(tmp_path / "node", "--port", str(free_port()))
    try:
        api = central.client()
        hook = {"name": "nodes", "url": receiver.url, "secret": SECRET, "allowPrivate": True}
        events = ["node.online", "node.offline", "node.out_of_step"]
        ok(api.post("/panel/api/webhooks/add", {**hook, "events": events}))
        added = add_node(api, node, "edge")
        time.sleep(7)  # a beat or two: the node is online, as it was when added
        assert receiver.events() == []
        node.stop()
        [offline] = receiver.wait_for(1, timeout=30, event="node.offline")
        assert (offline["data"]["id"], offline["data"]["name"]) == (added["id"], "edge")
        inbound = {"protocol": "vless", "port": free_port(), "settings": {"decryption": "none"}}
        create_inbound(api, {**inbound, "nodeId": added["id"]})
        [step] = receiver.wait_for(1, timeout=30, event="node.out_of_step")
        assert step["data"]["outOfStep"] is True
        node.start()
        [online] = receiver.wait_for(1, timeout=30, event="node.online")
        assert online["data"]["id"] == added["id"]
        time.sleep(6)
        names = [e["event"] for e in receiver.events()]
        assert names == ["node.offline", "node.out_of_step", "node.online"]
    finally:
        receiver.stop()
        stop_and_drop(node)
        stop_and_drop(central)
