"""Which config changes the running core can take without a restart."""

from __future__ import annotations

import copy

from appliance.core.live import PAUSE_EVERY, UserOp, live_changes, running, took, with_ops


def config(*inbounds: dict) -> dict:
    return {"log": {"loglevel": "warning"}, "inbounds": list(inbounds), "outbounds": []}


def inbound(tag: str, protocol: str, *clients: dict, port: int = 443) -> dict:
    return {"tag": tag, "protocol": protocol, "port": port, "settings": {"clients": list(clients)}}


ALICE = {"id": "11111111-1111-4111-8111-111111111111", "email": "alice"}
BOB = {"id": "22222222-2222-4222-8222-222222222222", "email": "bob"}


def test_an_identical_config_needs_nothing():
    current = config(inbound("a", "vless", ALICE))
    assert live_changes(running(current), copy.deepcopy(current)) == []


def test_added_and_removed_users_of_vless_vmess_trojan_go_live():
    current = config(inbound("a", "vless", ALICE), inbound("b", "vmess", BOB, port=8443))
    wanted = config(inbound("a", "vless", ALICE, BOB), inbound("b", "vmess", port=8443))
    assert live_changes(running(current), wanted) == [
        UserOp("remove", "b", "vmess", "bob"),
        UserOp("add", "a", "vless", "bob", BOB),
    ]


def test_a_changed_entry_is_removed_then_added():
    changed = {**ALICE, "flow": "xtls-rprx-vision"}
    ops = live_changes(
        running(config(inbound("a", "vless", ALICE))), config(inbound("a", "vless", changed))
    )
    assert ops == [
        UserOp("remove", "a", "vless", "alice"),
        UserOp("add", "a", "vless", "alice", changed),
    ]


def test_shadowsocks_users_need_a_restart():
    user = {"password": "x", "method": "aes-256-gcm", "email": "alice"}
    assert (
        live_changes(
            running(config(inbound("s", "shadowsocks"))),
            config(inbound("s", "shadowsocks", user)),
        )
        is None
    )


def test_anything_besides_clients_needs_a_restart():
    current = config(inbound("a", "vless", ALICE))
    kept = running(current)
    assert live_changes(kept, config(inbound("a", "vless", ALICE, port=444))) is None
    assert live_changes(kept, config(inbound("a", "vless", ALICE), inbound("b", "vless"))) is None
    routed = copy.deepcopy(current)
    routed["routing"] = {"rules": []}
    assert live_changes(kept, routed) is None


def test_a_change_inside_a_nested_field_of_an_entry_is_seen():
    reverse = {**ALICE, "reverse": {"tag": "r1"}}
    moved = {**ALICE, "reverse": {"tag": "r2"}}
    kept = running(config(inbound("a", "vless", reverse)))
    assert live_changes(kept, config(inbound("a", "vless", copy.deepcopy(reverse)))) == []
    assert live_changes(kept, config(inbound("a", "vless", moved))) == [
        UserOp("remove", "a", "vless", "alice"),
        UserOp("add", "a", "vless", "alice", moved),
    ]


def test_neither_config_is_modified():
    current = config(inbound("a", "vless", ALICE))
    wanted = config(inbound("a", "vless"))
    kept_current, kept_wanted = copy.deepcopy(current), copy.deepcopy(wanted)
    live_changes(running(current), wanted)
    assert current == kept_current and wanted == kept_wanted


def test_a_large_comparison_pauses_between_slices_and_finds_the_same_changes():
    """The panel's sync lets other requests run at each pause; pausing must change
    nothing in what is found."""
    many = [{"id": f"{n:08d}-0000-4000-8000-000000000000", "email": f"u{n}"} for n in range(12_000)]
    current = config(inbound("a", "vless", *many))
    wanted = config(inbound("a", "vless", *many[1:], {**many[0], "flow": "xtls-rprx-vision"}))
    pauses = []
    slices = -(-len(many) // PAUSE_EVERY)  # a pause after each slice, the last one too
    assert slices > 1
    kept = running(current, pause=lambda: pauses.append("running"))
    assert pauses == ["running"] * slices
    target = running(wanted, pause=lambda: pauses.append("compare"))
    assert pauses.count("compare") == slices
    compared = []
    found = live_changes(kept, wanted, target, pause=lambda: compared.append(1))
    assert len(compared) == 2 * (len(many) // PAUSE_EVERY)  # the entries before and after
    assert found == live_changes(running(current), wanted)
    assert [(op.action, op.email) for op in found] == [("remove", "u0"), ("add", "u0")]


def test_what_is_kept_of_the_running_config_follows_the_operations_the_core_took():
    current = config(inbound("a", "vless", ALICE), inbound("b", "vmess", BOB, port=8443))
    wanted = config(
        inbound("a", "vless", {**ALICE, "flow": "xtls-rprx-vision"}, BOB),
        inbound("b", "vmess", port=8443),
    )
    kept = running(current)
    took(kept, live_changes(kept, wanted))
    assert kept == running(wanted)
    assert live_changes(kept, wanted) == []


def test_operations_written_into_a_config_read_back_give_the_wanted_clients():
    current = config(inbound("a", "vless", ALICE), inbound("b", "vmess", BOB, port=8443))
    changed = {**ALICE, "flow": "xtls-rprx-vision"}
    operations = [
        UserOp("remove", "a", "vless", "alice"),
        UserOp("remove", "b", "vmess", "bob"),
        UserOp("add", "a", "vless", "bob", BOB),
        UserOp("add", "a", "vless", "alice", changed),
    ]
    written = with_ops(copy.deepcopy(current), operations)
    clients = {i["tag"]: i["settings"]["clients"] for i in written["inbounds"]}
    assert clients == {"a": [BOB, changed], "b": []}
    assert written["outbounds"] == current["outbounds"]
