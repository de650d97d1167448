"""Node records and health against a real second panel: add, test, probe, list, refuse.

The central panel reaches the node over loopback with a token of scope `node`; what the
list shows (status, guid, versions) is what the node's own heartbeat answered.
"""

from __future__ import annotations

import pytest
from helpers import INBOUNDS, create_inbound, free_port, ok, refused
from node_panels import NODES, add_node, connection, node_token
from panels import start_panel, stop_and_drop


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    node = start_panel(tmp_path_factory.mktemp("node"))
    central = start_panel(tmp_path_factory.mktemp("central"))
    yield central, node
    stop_and_drop(central)
    stop_and_drop(node)


def test_a_node_is_added_and_reports_its_identity(pair):
    central, node = pair
    api = central.client()
    added = add_node(api, node, "first")
    assert added["status"] == "online", added
    assert added["apiToken"] == "" and added["hasApiToken"] is True
    node_status = ok(node.client().get("/panel/api/server/status"))
    central_status = ok(api.get("/panel/api/server/status"))
    assert added["guid"] == node_status["guid"]
    assert added["panelVersion"] == node_status["panelVersion"]
    # The node now knows which panel manages it.
    assert node_status["parentGuid"] == central_status["guid"]
    listed = {n["name"]: n for n in ok(api.get(f"{NODES}/list"))}
    assert listed["first"]["status"] == "online"
    assert listed["first"]["inboundCount"] == 0
    history = ok(api.get(f"{NODES}/history/{added['id']}/cpu/2"))
    assert history and {"t", "v"} <= set(history[0])


def test_a_second_panel_does_not_take_a_managed_node(pair, tmp_path):
    """The first managing panel keeps the node while it keeps calling: another panel that
    adds it too is answered, sees the node as managed by another panel, and leaves the
    node's parentGuid alone (tests/nodes/test_managing_panel.py: the takeover after silence)."""
    central, node = pair
    api = central.client()
    central_guid = ok(api.get("/panel/api/server/status"))["guid"]
    if not any(n["name"] == "first" for n in ok(api.get(f"{NODES}/list"))):
        add_node(api, node, "first")
    other = start_panel(tmp_path)
    try:
        other_api = other.client()
        theirs = add_node(other_api, node, "theirs")
        assert theirs["status"] == "error", theirs
        assert "managed by another panel" in theirs["lastError"]
        assert central_guid in theirs["lastError"]
        for _ in range(3):
            ok(other_api.post(f"{NODES}/probe/{theirs['id']}"))
            assert ok(node.client().get("/panel/api/server/status"))["parentGuid"] == central_guid
        ours = {n["name"]: n for n in ok(api.get(f"{NODES}/list"))}["first"]
        assert ok(api.post(f"{NODES}/probe/{ours['id']}"))["status"] == "online"
    finally:
        stop_and_drop(other)


def records(api) -> list[dict]:
    """The stored fields of every node, without what heartbeats change between reads."""
    return [
        {k: v for k, v in n.items() if k in RECORD_FIELDS} for n in ok(api.get(f"{NODES}/list"))
    ]


RECORD_FIELDS = ("id", "name", "remark", "address", "port", "basePath", "enable", "updatedAt")


def test_test_and_inbounds_save_nothing(pair):
    central, node = pair
    api = central.client()
    before = records(api)
    token = node_token(node, "probe-only")
    snapshot = ok(api.post(f"{NODES}/test", connection(node, token)))
    assert snapshot["status"] == "online" and snapshot["guid"]
    assert ok(api.post(f"{NODES}/inbounds", connection(node, token))) == []
    assert records(api) == before


def test_a_wrong_token_is_refused_with_a_sentence(pair):
    central, node = pair
    api = central.client()
    snapshot = ok(api.post(f"{NODES}/test", connection(node, "apl_" + "0" * 43)))
    assert snapshot["status"] == "error"
    assert "refused the API token" in snapshot["lastError"]


def test_loopback_needs_allow_private_address(pair):
    central, node = pair
    api = central.client()
    token = node_token(node, "no-private")
    body = {"name": "private", **connection(node, token, allowPrivateAddress=False)}
    added = ok(api.post(f"{NODES}/add", body))
    assert added["status"] == "offline"
    assert "allowPrivateAddress" in added["lastError"]
    snapshot = ok(api.post(f"{NODES}/test", connection(node, token, allowPrivateAddress=False)))
    assert "allowPrivateAddress" in snapshot["lastError"]
    refused(
        api.post(f"{NODES}/inbounds", connection(node, token, allowPrivateAddress=False)),
        "allowPrivateAddress",
    )


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"address": "http://x"}, ("address",)),
        ({"address": ""}, ("address is required",)),
        ({"port": 0}, ("port",)),
        ({"scheme": "ftp"}, ("scheme",)),
        ({"basePath": "/../etc"}, ("basePath",)),
        ({"apiToken": ""}, ("apiToken",)),
        ({"tlsVerifyMode": "pin"}, ("certFingerprint",)),
        ({"tlsVerifyMode": "skip"}, ("tlsVerifyMode",)),
        ({"certFingerprint": "abc"}, ("certFingerprint",)),
        ({"name": ""}, ("name",)),
        ({"enable": "yes"}, ("enable",)),
    ],
)
def test_bad_records_are_refused_and_change_nothing(pair, fields, words):
    central, node = pair
    api = central.client()
    before = records(api)
    body = {"name": "bad", **connection(node, "apl_x"), **fields}
    refused(api.post(f"{NODES}/add", body), *words)
    assert records(api) == before


def test_update_keeps_the_token_and_delete_says_what_stays(pair):
    central, node = pair
    api = central.client()
    added = add_node(api, node, "editable")
    add_node(api, node, "taken")
    body = {**connection(node, ""), "name": "edited", "remark": "second"}
    updated = ok(api.post(f"{NODES}/update/{added['id']}", body))
    assert updated["name"] == "edited" and updated["status"] == "online"
    refused(api.post(f"{NODES}/update/{added['id']}", {**body, "name": "TAKEN"}), "already")
    disabled = ok(api.post(f"{NODES}/setEnable/{added['id']}", {"enable": False}))
    assert disabled["status"] == "disabled"
    reply = api.post(f"{NODES}/del/{added['id']}")
    assert reply["success"] and "edited" in reply["msg"]
    refused(api.get(f"{NODES}/get/{added['id']}"), "not found")


def test_inbounds_bound_to_a_node_get_its_tag_prefix_and_port_space(pair):
    central, node = pair
    api = central.client()
    added = add_node(api, node, "ports")
    port = free_port()
    base = {"protocol": "vless", "port": port, "settings": {"decryption": "none"}}
    local = create_inbound(api, {**base, "remark": "local", "tag": "same"})
    remote = create_inbound(api, {**base, "remark": "remote", "tag": "same", "nodeId": added["id"]})
    assert local["tag"] == "same" and remote["tag"] == f"n{added['id']}-same"
    refused(
        api.post(f"{INBOUNDS}/add", {**base, "remark": "again", "nodeId": added["id"]}),
        f"port {port}",
    )
    refused(
        api.post(
            f"{INBOUNDS}/add", {"protocol": "mtproto", "port": free_port(), "nodeId": added["id"]}
        ),
        "this host only",
    )
    assert ok(api.get(f"{NODES}/get/{added['id']}"))["inboundCount"] == 1
