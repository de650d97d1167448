"""Node API tokens at rest, against real panels on loopback.

A central panel started with no key in its environment seals every node token it stores
with the key file it made in its data directory; the token is nowhere in the database
or in the backups `server/getDb` and `server/getMigration` hand out, and neither is the
key. After a restart the node is still driven; a token stored in plaintext (by a panel
from before sealing was the default) is sealed at start; `APPLIANCE_NODE_KEY` overrides
the key file. A backup restored on a panel with another key shows each node as needing
its token again, with a sentence that says so, until it is entered again.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from helpers import database_bytes, db_rows, ok
from node_panels import NODES, add_node, connection, node_token
from panels import PanelServer, start_panel, stop_and_drop

SERVER = "/panel/api/server"
KEY_FILE = "node-token.key"
RESTART_WAIT = 40


def started_again(server: PanelServer, **env: str) -> PanelServer:
    """`server` stopped and started on the same data and database, with `env` changed."""
    server.stop()
    again = PanelServer(
        server.data_dir,
        server.args,
        {**server.env, **env},
        db_url=server.db_url,
        username=server.username,
        password=server.password,
    )
    return again.start()


def stored_tokens(server: PanelServer) -> dict[str, str]:
    return dict(db_rows(server, "SELECT name, api_token FROM node"))


def backups(server: PanelServer) -> dict[str, bytes]:
    api = server.client()
    found = {}
    for path in ("getDb", "getMigration"):
        reply = api.raw("GET", f"{SERVER}/{path}")
        assert reply.status_code == 200, reply.text
        found[path] = reply.content
    return found


def listed(api, name: str) -> dict:
    return next(n for n in ok(api.get(f"{NODES}/list")) if n["name"] == name)


def test_a_fresh_panel_seals_node_tokens_with_a_key_outside_the_database(tmp_path_factory):
    node = start_panel(tmp_path_factory.mktemp("sealed-node"))
    central = start_panel(tmp_path_factory.mktemp("sealing-central"))
    try:
        key_path = os.path.join(central.data_dir, KEY_FILE)
        assert os.path.exists(key_path)  # made at the first start, before any node
        token = node_token(node, "sealed")
        added = add_node(central.client(), node, "edge", token)
        assert added["status"] == "online" and added["hasApiToken"] is True
        stored = stored_tokens(central)
        assert stored["edge"].startswith("sealed:v1:") and token not in stored["edge"]
        assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
        key = Path(key_path).read_bytes().strip()
        assert len(key) >= 32
        for name, content in {"database": database_bytes(central), **backups(central)}.items():
            assert token.encode() not in content, name
            assert key not in content, name
        # After a restart, the same key opens the token: the node is still driven.
        central = started_again(central)
        assert Path(key_path).read_bytes().strip() == key
        assert ok(central.client().post(f"{NODES}/probe/{added['id']}"))["status"] == "online"
        assert stored_tokens(central) == stored
    finally:
        stop_and_drop(central)
        stop_and_drop(node)


def test_tokens_stored_in_plaintext_are_sealed_at_start(tmp_path_factory):
    node = start_panel(tmp_path_factory.mktemp("plain-node"))
    central = start_panel(tmp_path_factory.mktemp("plain-central"))
    try:
        token = node_token(node, "plain")
        added = add_node(central.client(), node, "older", token)
        # What a panel from before sealing was the default stored.
        db_rows(central, "UPDATE node SET api_token = ? WHERE id = ?", (token, added["id"]))
        central = started_again(central)
        assert "1 node API token(s) sealed at rest" in central.output()
        stored = stored_tokens(central)["older"]
        assert stored.startswith("sealed:v1:") and token not in stored
        assert ok(central.client().post(f"{NODES}/probe/{added['id']}"))["status"] == "online"
    finally:
        stop_and_drop(central)
        stop_and_drop(node)


def test_the_environment_key_overrides_the_key_file(tmp_path_factory):
    node = start_panel(tmp_path_factory.mktemp("env-node"))
    central = start_panel(
        tmp_path_factory.mktemp("env-central"), env={"APPLIANCE_NODE_KEY": "env key " + "k" * 32}
    )
    try:
        added = add_node(central.client(), node, "edge")
        assert not os.path.exists(os.path.join(central.data_dir, KEY_FILE))
        # The key file made by a start without it does not open what the variable sealed.
        central = started_again(central, APPLIANCE_NODE_KEY="")
        assert os.path.exists(os.path.join(central.data_dir, KEY_FILE))
        assert ok(central.client().post(f"{NODES}/probe/{added['id']}"))["status"] == "error"
        central = started_again(central, APPLIANCE_NODE_KEY="env key " + "k" * 32)
        assert ok(central.client().post(f"{NODES}/probe/{added['id']}"))["status"] == "online"
    finally:
        stop_and_drop(central)
        stop_and_drop(node)


def test_a_backup_restored_on_another_host_asks_for_each_node_token_again(tmp_path_factory):
    node = start_panel(tmp_path_factory.mktemp("restored-node"))
    first = start_panel(tmp_path_factory.mktemp("first-host"))
    second = start_panel(tmp_path_factory.mktemp("second-host"))
    try:
        added = add_node(first.client(), node, "edge", node_token(node, "first"))
        backup = backups(first)["getDb"]
        api = second.client()
        mark = len(second.lines)
        reply = api.raw("POST", f"{SERVER}/importDB", files={"db": ("backup.db", backup)})
        assert reply.status_code == 200 and reply.json()["success"] is True, reply.text
        second.wait_listening(mark, timeout=RESTART_WAIT)
        # The restored database brings the first host's admin.
        second.username, second.password = first.username, first.password
        assert "the API tokens of node(s) edge are sealed with a key" in second.output()
        api = second.client()
        shown = listed(api, "edge")
        assert shown["hasApiToken"] is False and shown["status"] == "error", shown
        assert "enter the node's API token again" in shown["lastError"], shown
        probed = api.post(f"{NODES}/probe/{added['id']}")
        assert probed["success"] is True and probed["obj"]["status"] == "error", probed
        # Nothing reached the node under the token it could not open.
        assert "Nothing was sent" in probed["obj"]["lastError"]
        again = {**connection(node, node_token(node, "second")), "name": "edge"}
        updated = ok(api.post(f"{NODES}/update/{added['id']}", again))
        assert updated["status"] == "online" and updated["hasApiToken"] is True
    finally:
        for server in (second, first, node):
            stop_and_drop(server)
