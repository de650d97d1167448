"""One client edit on the real core: live, without a restart, and never lost.

A change to one client goes to the running core through its API and config.json is
written later (the core reads it only when it starts). What a user must see: the edited
client connects with its new credentials at once and no longer with its old ones, the core
keeps running, config.json holds the edit once the changes pause and once the panel has
stopped, and a core killed right after an edit comes back serving the edit. Traffic goes
through a client core (V2Ray 4.34) to an echo server, as in test_core_e2e.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest
from core_helpers import REFUSED_STREAM
from core_panel import wait_until
from core_traffic import (
    CLIENTS,
    add_client,
    add_inbound,
    client_core,
    core_pid,
    core_state,
    gone,
    in_core,
    passes,
    route,
    traffic_core_panel,
)
from helpers import db_rows, ok

# The panel writes config.json once live changes pause for 5 s; a margin for a busy host.
FILE_WAIT = 20


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = traffic_core_panel(tmp_path_factory.mktemp("core-edits"))
    yield server
    server.stop()


def secret_field(protocol: str) -> str:
    return "password" if protocol == "trojan" else "id"


def edited(api, client: dict, protocol: str) -> dict:
    """`client` saved with a new secret (a new UUID, or a new Trojan password)."""
    field = secret_field(protocol)
    value = uuid.uuid4().hex if field == "password" else str(uuid.uuid4())
    record = {**client, field: value}
    return ok(api.post(f"{CLIENTS}/update/{client['email']}", record))


def file_entries(panel, tag: str) -> dict[str, dict]:
    """email -> client entry of inbound `tag` in config.json as it is on disk (none while
    the file does not name the inbound)."""
    with open(os.path.join(panel.data_dir, "core", "config.json")) as file:
        config = json.load(file)
    inbound = next((i for i in config["inbounds"] if i.get("tag") == tag), {"settings": {}})
    return {entry["email"]: entry for entry in inbound["settings"].get("clients", [])}


def file_holds(panel, tag: str, client: dict, protocol: str) -> bool:
    field = secret_field(protocol)
    entry = file_entries(panel, tag).get(client["email"])
    return entry is not None and entry[field] == client[field]


def restarted(api, panel, pid: int) -> int:
    return wait_until(
        lambda: (
            core_state(api) == "running" and core_pid(panel) not in (0, pid) and core_pid(panel)
        ),
        "the supervisor restarts the core",
    )


@pytest.mark.parametrize("protocol", ["vless", "vmess", "trojan"])
def test_an_edit_goes_live_without_a_restart_and_reaches_the_file(
    api, panel, tmp_path, echo, protocol
):
    inbound = add_inbound(api, protocol)
    client = add_client(api, inbound["id"])
    pid = in_core(api, panel, inbound)
    old_route = route(inbound, client)
    new = edited(api, client, protocol)
    new_route = route(inbound, new)
    with client_core(tmp_path, [old_route, new_route]):
        wait_until(lambda: passes(new_route[0], echo), "the new credentials connect")
        assert not passes(old_route[0], echo), "the old credentials still connect"
        wait_until(
            lambda: file_holds(panel, inbound["tag"], new, protocol),
            "config.json holds the edit",
            timeout=FILE_WAIT,
        )
        assert core_pid(panel) == pid, "the core was restarted"


@pytest.mark.parametrize("wait_live", [True, False], ids=["after-the-live-change", "at-once"])
def test_a_core_killed_right_after_an_edit_comes_back_serving_it(
    api, panel, tmp_path, echo, wait_live
):
    """The core dies after the live change but before config.json is written (that waits
    for the changes to pause), or before the change could even go live."""
    inbound = add_inbound(api, "vless")
    client = add_client(api, inbound["id"])
    dropped = add_client(api, inbound["id"])
    old_route, dropped_route = route(inbound, client), route(inbound, dropped)
    with client_core(tmp_path, [old_route, dropped_route]):
        wait_until(lambda: passes(dropped_route[0], echo), "the client to delete connects")
    new = edited(api, client, "vless")
    ok(api.post(f"{CLIENTS}/del/{dropped['email']}"))
    new_route = route(inbound, new)
    with client_core(tmp_path, [old_route, new_route, dropped_route]):
        if wait_live:
            wait_until(lambda: passes(new_route[0], echo), "the edit goes live")
        pid = core_pid(panel)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: gone(pid), "the core dies")
        restarted(api, panel, pid)
        wait_until(lambda: passes(new_route[0], echo), "the restarted core serves the edit")
        assert not passes(old_route[0], echo), "the old credentials connect again"
        assert not passes(dropped_route[0], echo), "the deleted client connects again"


def test_a_rename_and_a_shadowsocks_edit_reach_the_core(api, panel, tmp_path, echo):
    inbound = add_inbound(api, "vmess")
    client = add_client(api, inbound["id"])
    in_core(api, panel, inbound)
    renamed = ok(
        api.post(
            f"{CLIENTS}/update/{client['email']}", {**client, "email": f"re-{client['email']}"}
        )
    )

    def served() -> set[str]:
        config = ok(api.get("/panel/api/server/getConfigJson"))
        running = next(i for i in config["inbounds"] if i.get("tag") == inbound["tag"])
        return {entry["email"] for entry in running["settings"]["clients"]}

    wait_until(lambda: served() == {renamed["email"]}, "the core runs the new email alone")
    renamed_route = route(inbound, renamed)
    with client_core(tmp_path, [renamed_route]):
        wait_until(lambda: passes(renamed_route[0], echo), "the renamed client connects")

    # A Shadowsocks user cannot change live: its edit costs one restart.
    shadowsocks = add_inbound(api, "shadowsocks")
    user = add_client(api, shadowsocks["id"])
    old_route = route(shadowsocks, user)
    with client_core(tmp_path, [old_route]):
        wait_until(lambda: passes(old_route[0], echo), "the user connects")
    changed = ok(
        api.post(f"{CLIENTS}/update/{user['email']}", {**user, "password": uuid.uuid4().hex})
    )
    new_route = route(shadowsocks, changed)
    with client_core(tmp_path, [old_route, new_route]):
        wait_until(lambda: passes(new_route[0], echo), "the new password connects")
        assert not passes(old_route[0], echo), "the old password still connects"


def test_config_json_holds_an_edit_once_the_panel_stopped(tmp_path):
    panel = traffic_core_panel(tmp_path)
    try:
        api = panel.client()
        inbound = add_inbound(api, "trojan")
        client = add_client(api, inbound["id"])
        wait_until(
            lambda: file_holds(panel, inbound["tag"], client, "trojan"),
            "the client is in config.json",
            timeout=FILE_WAIT,
        )
        new = edited(api, client, "trojan")
        time.sleep(1)  # the live change is made; config.json waits for the changes to pause
        pid = core_pid(panel)
    finally:
        panel.stop()
    assert gone(pid)
    assert file_holds(panel, inbound["tag"], new, "trojan")


def test_config_json_keeps_what_the_core_ran_when_the_store_moved_away_from_it(tmp_path):
    """A live edit, then the stored inbound changed behind the panel's back into one the
    core cannot run (a database restored from a newer V2Ray's panel), then the panel stops before
    config.json was rewritten: the file holds the edit on the inbound the core ran."""
    panel = traffic_core_panel(tmp_path)
    try:
        api = panel.client()
        inbound = add_inbound(api, "vless")
        client = add_client(api, inbound["id"])
        in_core(api, panel, inbound)
        new = edited(api, client, "vless")
        time.sleep(1)  # the live change is made; config.json waits for the changes to pause
        stream = json.dumps(REFUSED_STREAM)
        db_rows(
            panel, "UPDATE inbound SET stream_settings = ? WHERE id = ?", (stream, inbound["id"])
        )
    finally:
        panel.stop()
    assert file_holds(panel, inbound["tag"], new, "vless")
    with open(os.path.join(panel.data_dir, "core", "config.json")) as file:
        written = next(i for i in json.load(file)["inbounds"] if i.get("tag") == inbound["tag"])
    assert written["streamSettings"]["network"] == "tcp"
