"""Inbounds bound to a node run on that node: a central panel and a node panel on the real
core, both real processes on loopback.

What is looked at is what the admin and the users see: the node's own inbound and client
lists (tags without the `n<id>-` prefix), the config its core runs, bytes through its
core with the credentials the central panel made, the central node list's `outOfStep`
while the node is down and after it is back, and the central subscription's links, which
point at the node. The node is added under the name `localhost` so its links can be told
from those to the central panel (reached at 127.0.0.1).
"""

from __future__ import annotations

import base64
import json
import socket
import uuid
from urllib.parse import urlsplit

import pytest
import requests
from core_helpers import LOOPBACK, client_config, echo_server, running_core, socks_echo
from core_panel import CORE_ENV, loopback_template, use_template, wait_until
from helpers import INBOUNDS, free_port, ok, refused
from node_panels import NODES, add_node
from panels import start_panel, stop_and_drop

CLIENTS = "/panel/api/clients"
PAYLOAD = b"through the node" * 32
WAIT = 20


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    node = start_panel(tmp_path_factory.mktemp("node"), env=CORE_ENV)
    node_api = node.client()
    use_template(node_api, loopback_template(node_api))
    # The central panel runs a core too: its sweep cuts off clients by their quota.
    central = start_panel(tmp_path_factory.mktemp("central"), env=CORE_ENV)
    api = central.client()
    ok(api.post("/panel/api/setting/update", {"subJsonEnable": True, "subYamlEnable": True}))
    record = add_node(api, node, "edge", address="localhost")
    assert record["status"] == "online", record
    yield central, node, record["id"]
    stop_and_drop(central)
    stop_and_drop(node)


def vless_inbound(node_id: int, port: int, tag: str, **fields) -> dict:
    return {
        "remark": tag,
        "tag": tag,
        "protocol": "vless",
        "listen": LOOPBACK,
        "port": port,
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "none"},
        "nodeId": node_id,
        **fields,
    }


def node_inbound(node, tag: str) -> dict | None:
    listed = ok(node.client().get(f"{INBOUNDS}/list"))
    return next((row for row in listed if row["tag"] == tag), None)


def node_client(node, email: str) -> dict | None:
    reply = node.client().get(f"{CLIENTS}/get/{email}")
    return reply["obj"] if reply["success"] else None


def core_users(node, tag: str) -> list[str] | None:
    """Emails the node's running core serves on `tag`; None while it runs no such inbound."""
    api = node.client()
    if ok(api.get("/panel/api/server/status"))["core"]["state"] != "running":
        return None
    config = ok(api.get("/panel/api/server/getConfigJson"))
    for inbound in config.get("inbounds", []):
        if inbound.get("tag") == tag:
            return [c["email"] for c in inbound["settings"].get("clients", [])]
    return None


def out_of_step(central, node_id: int) -> bool:
    nodes = ok(central.client().get(f"{NODES}/list"))
    return next(n for n in nodes if n["id"] == node_id)["outOfStep"]


def restart_later(node):
    """Stop `node` (its data directory kept); the returned call starts it again on the
    same ports."""
    ports = (urlsplit(node.url).port, urlsplit(node.sub_url).port)
    node.stop()

    def start() -> None:
        node.args = [
            "--listen", LOOPBACK, "--port", str(ports[0]), "--sub-port", str(ports[1])
        ]  # fmt: skip
        node.start()

    return start


def through(port: int, user_id: str, tmp_path) -> bytes:
    """Bytes sent through the node's inbound on `port` as the VLESS user `user_id`."""
    socks = free_port()
    config = client_config([(socks, "vless", port, {"id": user_id})])
    with echo_server() as echo, running_core(tmp_path, config, socks):
        return socks_echo(socks, echo, PAYLOAD)


def test_an_inbound_runs_in_the_node_core_and_carries_a_central_client(fleet, tmp_path):
    central, node, node_id = fleet
    api = central.client()
    port = free_port()
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, port, "edge-in")))
    assert created["tag"] == f"n{node_id}-edge-in"
    assert created["nodeStatus"] == "online" and created["nodeOutOfStep"] is False
    on_node = node_inbound(node, "edge-in")
    assert on_node is not None and on_node["port"] == port and on_node["nodeId"] is None
    user = str(uuid.uuid4())
    client = {"email": "roamer@example.com", "id": user, "subId": "roamer-sub"}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [created["id"]]}))
    held = node_client(node, "roamer@example.com")
    assert held is not None and held["client"]["id"] == user
    assert held["inboundIds"] == [on_node["id"]]
    wait_until(
        lambda: "roamer@example.com" in (core_users(node, "edge-in") or []),
        "the node's core serves the client",
        WAIT,
    )
    assert through(port, user, tmp_path) == PAYLOAD

    # An edit, a disable and a delete made centrally take effect on the node.
    edited = {**client, "comment": "moved", "totalGB": 5 << 30}
    ok(api.post(f"{CLIENTS}/update/roamer@example.com", edited))
    held = node_client(node, "roamer@example.com")["client"]
    assert held["comment"] == "moved" and held["totalGB"] == 5 << 30
    ok(api.post(f"{CLIENTS}/update/roamer@example.com", {**edited, "enable": False}))
    assert node_client(node, "roamer@example.com")["client"]["enable"] is False
    wait_until(
        lambda: core_users(node, "edge-in") == [],
        "the node's core drops the disabled client",
        WAIT,
    )
    assert through(port, user, tmp_path) == b""
    ok(api.post(f"{CLIENTS}/update/roamer@example.com", {**edited, "enable": True}))
    wait_until(
        lambda: core_users(node, "edge-in") == ["roamer@example.com"],
        "the node's core serves the client again",
        WAIT,
    )
    ok(api.post(f"{CLIENTS}/del/roamer@example.com"))
    assert node_client(node, "roamer@example.com") is None
    ok(api.post(f"{INBOUNDS}/setEnable/{created['id']}", {"enable": False}))
    assert node_inbound(node, "edge-in")["enable"] is False
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))
    assert node_inbound(node, "edge-in") is None


def test_a_node_refusal_fails_the_central_save_and_changes_nothing(fleet):
    central, node, node_id = fleet
    api = central.client()
    before = ok(api.get(f"{INBOUNDS}/list"))
    with socket.socket() as holder:
        holder.bind((LOOPBACK, 0))
        holder.listen()
        busy = holder.getsockname()[1]
        refused(
            api.post(f"{INBOUNDS}/add", vless_inbound(node_id, busy, "taken")),
            "edge",
            f"port {busy}",
        )
    assert ok(api.get(f"{INBOUNDS}/list")) == before
    assert node_inbound(node, "taken") is None
    assert out_of_step(central, node_id) is False
    # An edit the node refuses leaves the central inbound as it was too.
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "kept")))
    with socket.socket() as holder:
        holder.bind((LOOPBACK, 0))
        holder.listen()
        busy = holder.getsockname()[1]
        refused(
            api.post(f"{INBOUNDS}/update/{created['id']}", vless_inbound(node_id, busy, "kept")),
            f"port {busy}",
        )
    assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["port"] == created["port"]
    assert node_inbound(node, "kept")["port"] == created["port"]
    # Fallback rules name this panel's inbounds: they are refused, not silently dropped.
    refused(
        api.post(f"{INBOUNDS}/{created['id']}/fallbacks", {"fallbacks": [{"dest": "8080"}]}),
        "not deployed to nodes",
    )
    # Refused here after the node took it: the node is brought back in step.
    with_rules = vless_inbound(node_id, free_port(), "ruled")
    with_rules["settings"] = {"decryption": "none", "fallbacks": [{"dest": "8080"}]}
    refused(api.post(f"{INBOUNDS}/add", with_rules), "not deployed to nodes")
    assert not [i for i in ok(api.get(f"{INBOUNDS}/list")) if i["remark"] == "ruled"]
    wait_until(lambda: node_inbound(node, "ruled") is None, "the node drops it again", WAIT)
    wait_until(lambda: not out_of_step(central, node_id), "the node is in step", WAIT)
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_a_node_client_and_inbound_of_the_same_name_are_adopted(fleet):
    central, node, node_id = fleet
    api, node_api = central.client(), node.client()
    port = free_port()
    made = ok(
        node_api.post(f"{INBOUNDS}/add", {**vless_inbound(None, port, "adopt"), "remark": "x"})
    )
    ok(
        node_api.post(
            f"{CLIENTS}/add",
            {
                "client": {"email": "twin@example.com", "comment": "by hand"},
                "inboundIds": [made["id"]],
            },
        )
    )
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, port, "adopt")))
    adopted = node_inbound(node, "adopt")
    assert adopted["id"] == made["id"] and adopted["remark"] == "adopt"
    user = str(uuid.uuid4())
    client = {"email": "twin@example.com", "id": user, "comment": "central"}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [created["id"]]}))
    held = node_client(node, "twin@example.com")["client"]
    assert held["id"] == user and held["comment"] == "central"
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))
    ok(api.post(f"{CLIENTS}/del/twin@example.com"))


def test_a_node_down_during_three_edits_converges_when_back(fleet):
    central, node, node_id = fleet
    api = central.client()
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "steady")))
    gone = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "doomed")))
    base = {"email": "sleeper@example.com", "id": str(uuid.uuid4())}
    ok(api.post(f"{CLIENTS}/add", {"client": base, "inboundIds": [created["id"]]}))
    orphan = {"email": "orphan@example.com"}
    ok(api.post(f"{CLIENTS}/add", {"client": orphan, "inboundIds": [gone["id"]]}))
    assert node_client(node, "sleeper@example.com") is not None
    assert node_client(node, "orphan@example.com") is not None
    steady_id = node_inbound(node, "steady")["id"]

    start_again = restart_later(node)
    try:
        # Three edits while the node is down: all saved here, none lost there.
        ok(api.post(f"{CLIENTS}/update/sleeper@example.com", {**base, "comment": "while down"}))
        ok(
            api.post(
                f"{INBOUNDS}/update/{created['id']}",
                {**vless_inbound(node_id, created["port"], "steadier"), "remark": "renamed"},
            )
        )
        ok(api.post(f"{INBOUNDS}/del/{gone['id']}"))
        late = {"email": "late@example.com", "id": str(uuid.uuid4())}
        ok(api.post(f"{CLIENTS}/add", {"client": late, "inboundIds": [created["id"]]}))
        assert out_of_step(central, node_id) is True
        view = ok(api.get(f"{INBOUNDS}/get/{created['id']}"))
        assert view["nodeOutOfStep"] is True
        assert view["remark"] == "renamed"
    finally:
        start_again()

    wait_until(lambda: not out_of_step(central, node_id), "the node is back in step", WAIT)
    # The renamed inbound is the same one there; the deleted one and the client left on
    # it alone are gone.
    assert node_inbound(node, "steadier")["remark"] == "renamed"
    assert node_inbound(node, "steadier")["id"] == steady_id
    assert node_inbound(node, "steady") is None
    assert node_inbound(node, "doomed") is None
    assert node_client(node, "orphan@example.com") is None
    assert node_client(node, "sleeper@example.com")["client"]["comment"] == "while down"
    assert node_client(node, "late@example.com") is not None
    wait_until(
        lambda: (
            sorted(core_users(node, "steadier") or [])
            == ["late@example.com", "sleeper@example.com"]
        ),
        "the node's core serves both clients",
        WAIT,
    )
    assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["nodeOutOfStep"] is False
    leaving = ["sleeper@example.com", "late@example.com", "orphan@example.com"]
    ok(api.post(f"{CLIENTS}/bulkDel", {"emails": leaving}))
    assert node_client(node, "late@example.com") is None
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_a_change_the_node_refuses_on_its_return_stays_visible(fleet):
    central, node, node_id = fleet
    api = central.client()
    start_again = restart_later(node)
    holder = socket.socket()
    try:
        holder.bind((LOOPBACK, 0))
        holder.listen()
        busy = holder.getsockname()[1]
        # Saved here while the node is away; on its return, its port is taken there.
        created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, busy, "contested")))
    finally:
        start_again()
    try:
        view = wait_until(
            lambda: (
                f"port {busy}" in (v := ok(api.get(f"{INBOUNDS}/get/{created['id']}")))["nodeError"]
                and v
            ),
            "the inbound says why its node is out of step",
            WAIT,
        )
        assert view["nodeOutOfStep"] is True
        assert out_of_step(central, node_id) is True
        assert node_inbound(node, "contested") is None
    finally:
        holder.close()
    wait_until(lambda: not out_of_step(central, node_id), "the node is back in step", WAIT)
    assert node_inbound(node, "contested")["port"] == busy
    assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["nodeError"] == ""
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_the_central_panel_reconciles_its_nodes_when_it_starts(fleet):
    central, node, node_id = fleet
    api = central.client()
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "restored")))
    client = {"email": "keeper@example.com"}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [created["id"]]}))
    central.stop()
    # Meanwhile someone deletes the deployed client and changes the inbound on the node.
    node_api = node.client()
    ok(node_api.post(f"{CLIENTS}/del/keeper@example.com"))
    on_node = node_inbound(node, "restored")
    ok(node_api.post(f"{INBOUNDS}/update/{on_node['id']}", {**on_node, "remark": "changed"}))
    central.start()
    wait_until(
        lambda: node_client(node, "keeper@example.com") is not None,
        "the central panel puts the client back when it starts",
        WAIT,
    )
    assert node_inbound(node, "restored")["remark"] == "restored"
    api = central.client()
    ok(api.post(f"{CLIENTS}/del/keeper@example.com"))
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_bulk_changes_reach_the_node_in_batches(fleet):
    central, node, node_id = fleet
    api = central.client()
    first = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "many")))
    second = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "more")))
    emails = [f"crowd{n}@example.com" for n in range(60)]
    items = [{"client": {"email": e}, "inboundIds": [first["id"]]} for e in emails]
    assert ok(api.post(f"{CLIENTS}/bulkCreate", items))["created"] == 60
    on_node = {c["email"] for c in ok(node.client().get(f"{CLIENTS}/list"))}
    assert set(emails) <= on_node
    ok(api.post(f"{CLIENTS}/bulkAttach", {"emails": emails[:10], "inboundIds": [second["id"]]}))
    node_second = node_inbound(node, "more")["id"]
    assert node_client(node, emails[0])["inboundIds"] == sorted(
        [node_inbound(node, "many")["id"], node_second]
    )
    ok(api.post(f"{CLIENTS}/bulkAdjust", {"emails": emails, "addDays": 0, "addBytes": 0}))
    ok(api.post(f"{CLIENTS}/groups/bulkAdd", {"emails": emails[:5], "group": "team"}))
    assert node_client(node, emails[0])["client"]["group"] == "team"
    # A cut-off and a reset that re-enables reach the node too.
    ok(api.post(f"{CLIENTS}/update/{emails[1]}", {"email": emails[1], "enable": False}))
    assert node_client(node, emails[1])["client"]["enable"] is False
    ok(api.post(f"{CLIENTS}/resetTraffic/{emails[1]}"))
    assert node_client(node, emails[1])["client"]["enable"] is True
    assert ok(api.post(f"{INBOUNDS}/{first['id']}/delAllClients"))["deleted"] == 60
    on_node = {c["email"] for c in ok(node.client().get(f"{CLIENTS}/list"))}
    # Those attached to the other inbound too are only detached from this one.
    assert not set(emails[10:]) & on_node
    assert node_client(node, emails[0])["inboundIds"] == [node_second]
    copy_port = free_port()
    copy = ok(api.post(f"{INBOUNDS}/clone/{first['id']}", {"port": copy_port}))
    assert copy["nodeId"] == node_id and copy["tag"].startswith(f"n{node_id}-")
    copied = node_inbound(node, copy["tag"].removeprefix(f"n{node_id}-"))
    assert copied is not None and copied["port"] == copy_port
    ids = [first["id"], second["id"], copy["id"]]
    assert ok(api.post(f"{INBOUNDS}/bulkDel", {"ids": ids}))["deleted"] == 3
    assert node_inbound(node, "many") is None and node_inbound(node, "more") is None
    assert node_inbound(node, copied["tag"]) is None


def test_the_central_sweep_cut_off_and_a_rename_reach_the_node(fleet):
    central, node, node_id = fleet
    api = central.client()
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "metered")))
    client = {"email": "heavy@example.com", "totalGB": 1024}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [created["id"]]}))
    assert node_client(node, "heavy@example.com")["client"]["enable"] is True
    ok(api.post(f"{CLIENTS}/updateTraffic/heavy@example.com", {"upload": 4096, "download": 0}))
    wait_until(
        lambda: node_client(node, "heavy@example.com")["client"]["enable"] is False,
        "the node cuts off the client the central sweep disabled",
        WAIT,
    )
    ok(api.post(f"{CLIENTS}/resetTraffic/heavy@example.com"))
    assert node_client(node, "heavy@example.com")["client"]["enable"] is True
    renamed = {"email": "light@example.com", "totalGB": 0}
    ok(api.post(f"{CLIENTS}/update/heavy@example.com", renamed))
    assert node_client(node, "heavy@example.com") is None
    assert node_client(node, "light@example.com") is not None
    ok(api.post(f"{CLIENTS}/del/light@example.com"))
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_an_inbound_moved_between_here_and_the_node_takes_its_clients(fleet):
    central, node, node_id = fleet
    api = central.client()
    port = free_port()
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(None, port, "mover")))
    emails = [f"mover{n}@example.com" for n in range(3)]
    items = [{"client": {"email": e}, "inboundIds": [created["id"]]} for e in emails]
    ok(api.post(f"{CLIENTS}/bulkCreate", items))
    assert node_inbound(node, "mover") is None
    # Another port: this host's core may still hold the first while it takes the change.
    away = free_port()
    ok(api.post(f"{INBOUNDS}/update/{created['id']}", vless_inbound(node_id, away, "mover")))
    on_node = node_inbound(node, "mover")
    assert on_node is not None
    assert sorted(c["email"] for c in on_node["settings"]["clients"]) == emails
    wait_until(
        lambda: sorted(core_users(node, "mover") or []) == emails,
        "the node's core serves the moved inbound's clients",
        WAIT,
    )
    ok(api.post(f"{INBOUNDS}/update/{created['id']}", vless_inbound(None, port, "mover")))
    assert node_inbound(node, "mover") is None
    assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["tag"] == "mover"
    assert all(node_client(node, e) is None for e in emails)
    ok(api.post(f"{CLIENTS}/bulkDel", {"emails": emails}))
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_a_disabled_node_is_paused_and_caught_up_when_enabled(fleet):
    central, node, node_id = fleet
    api = central.client()
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "paused")))
    ok(api.post(f"{NODES}/setEnable/{node_id}", {"enable": False}))
    try:
        client = {"email": "patient@example.com"}
        ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [created["id"]]}))
        assert node_client(node, "patient@example.com") is None
        assert out_of_step(central, node_id) is True
        assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["nodeStatus"] == "disabled"
    finally:
        ok(api.post(f"{NODES}/setEnable/{node_id}", {"enable": True}))
    wait_until(lambda: not out_of_step(central, node_id), "the node is back in step", WAIT)
    assert node_client(node, "patient@example.com") is not None
    ok(api.post(f"{CLIENTS}/del/patient@example.com"))
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_what_an_admin_made_on_the_node_by_hand_is_left_alone(fleet):
    central, node, node_id = fleet
    api, node_api = central.client(), node.client()
    made = ok(node_api.post(f"{INBOUNDS}/add", vless_inbound(None, free_port(), "by-hand")))
    local = {"email": "local@example.com"}
    ok(node_api.post(f"{CLIENTS}/add", {"client": local, "inboundIds": [made["id"]]}))
    bound = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, free_port(), "central")))
    # A bulk change compares every client, a re-enabled node replays everything.
    ok(api.post(f"{CLIENTS}/bulkDel", {"emails": ["nobody@example.com"]}))
    ok(api.post(f"{NODES}/setEnable/{node_id}", {"enable": False}))
    ok(api.post(f"{CLIENTS}/bulkDel", {"emails": ["nobody@example.com"]}))
    assert out_of_step(central, node_id) is True
    ok(api.post(f"{NODES}/setEnable/{node_id}", {"enable": True}))
    wait_until(lambda: not out_of_step(central, node_id), "the node is back in step", WAIT)
    assert node_inbound(node, "by-hand") is not None
    assert node_client(node, "local@example.com")["inboundIds"] == [made["id"]]
    assert node_inbound(node, "central") is not None
    ok(node_api.post(f"{CLIENTS}/del/local@example.com"))
    ok(node_api.post(f"{INBOUNDS}/del/{made['id']}"))
    ok(api.post(f"{INBOUNDS}/del/{bound['id']}"))


def test_subscriptions_of_node_inbounds_point_at_the_node(fleet):
    central, _, node_id = fleet
    api = central.client()
    port = free_port()
    created = ok(api.post(f"{INBOUNDS}/add", vless_inbound(node_id, port, "subbed")))
    local = ok(
        api.post(
            f"{INBOUNDS}/add",
            {**vless_inbound(None, free_port(), "at-home"), "nodeId": None},
        )
    )
    client = {"email": "reader@example.com", "subId": "reader-sub"}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [created["id"], local["id"]]}))
    links = base64.b64decode(requests.get(f"{central.sub_url}/sub/reader-sub", timeout=10).content)
    lines = links.decode().splitlines()
    assert any(f"@localhost:{port}" in line for line in lines), lines
    assert any(f"@127.0.0.1:{local['port']}" in line for line in lines), lines
    configs = requests.get(f"{central.sub_url}/json/reader-sub", timeout=10).json()
    addresses = {json.dumps(c["outbounds"][0]["settings"]).count("localhost") > 0 for c in configs}
    assert addresses == {True, False}
    yaml_text = requests.get(f"{central.sub_url}/yaml/reader-sub", timeout=10).text
    assert "server: localhost" in yaml_text and "server: 127.0.0.1" in yaml_text
    # A host still overrides the node's address.
    ok(
        api.post(
            "/panel/api/hosts/add",
            {"inboundId": created["id"], "remark": "cdn", "address": "cdn.example.net"},
        )
    )
    links = base64.b64decode(requests.get(f"{central.sub_url}/sub/reader-sub", timeout=10).content)
    assert f"@cdn.example.net:{port}" in links.decode()
    assert "@localhost:" not in links.decode()
    ok(api.post(f"{CLIENTS}/del/reader@example.com"))
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))
    ok(api.post(f"{INBOUNDS}/del/{local['id']}"))
