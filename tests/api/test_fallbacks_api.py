"""Fallback rules over HTTP: which inbounds may hold them, how `dest` is checked and
rendered into the master's `settings.fallbacks`, whole-list replacement, and what
happens to the rules when the master or a child inbound is deleted."""

from __future__ import annotations

import itertools
import json

import pytest
from helpers import REALITY, TLS, create_inbound, db_rows, ok, sockets_dir

API = "/panel/api/inbounds"

_ports = itertools.count(25000)


def add(api, protocol: str, **fields) -> dict:
    return create_inbound(api, {"protocol": protocol, "port": next(_ports), **fields})


def master(api, protocol: str = "vless", stream: dict = TLS) -> dict:
    return add(api, protocol, streamSettings=stream)


def save(api, master_id: int, rules) -> dict:
    return api.post(f"{API}/{master_id}/fallbacks", {"fallbacks": rules})


def rules_of(api, master_id: int) -> list[dict]:
    return ok(api.get(f"{API}/{master_id}/fallbacks"))


def rendered(api, master_id: int) -> list[dict]:
    """settings.fallbacks as get/:id shows it, checked against what list shows."""
    got = api.get(f"{API}/get/{master_id}")["obj"]["settings"].get("fallbacks", [])
    listed = next(i for i in api.get(f"{API}/list")["obj"] if i["id"] == master_id)
    assert listed["settings"].get("fallbacks", []) == got
    return got


def refused(reply: dict, *words: str) -> None:
    assert reply["success"] is False, reply
    for word in words:
        assert word in reply["msg"], (word, reply["msg"])


def stored_rules(panel) -> list[tuple]:
    return db_rows(panel, "SELECT id, master_id, child_id FROM fallback")


# ---- which inbounds may be masters ----------------------------------------------------------


@pytest.mark.parametrize(
    ("protocol", "stream", "described"),
    [
        ("vless", {"network": "tcp", "security": "none"}, "vless on tcp with security none"),
        ("vless", {**TLS, "network": "ws"}, "vless on ws with security tls"),
        ("vmess", TLS, "vmess on tcp with security tls"),
        ("trojan", {"network": "grpc", "security": "none"}, "trojan on grpc"),
    ],
)
def test_only_vless_or_trojan_on_tcp_with_tls_or_reality_holds_fallbacks(
    api, protocol, stream, described
):
    inbound = add(api, protocol, streamSettings=stream)
    reply = save(api, inbound["id"], [{"dest": 8080}])
    refused(reply, f"inbound {inbound['id']} cannot hold fallbacks", described)
    assert rules_of(api, inbound["id"]) == []


@pytest.mark.parametrize(
    ("protocol", "stream"), [("vless", TLS), ("vless", REALITY), ("trojan", TLS)]
)
def test_masters_accept_rules(api, protocol, stream):
    inbound = master(api, protocol, stream)
    reply = save(api, inbound["id"], [{"dest": 8080, "alpn": "h2", "name": "a.example"}])
    assert reply["success"] is True, reply
    assert rendered(api, inbound["id"]) == [{"dest": 8080, "alpn": "h2", "name": "a.example"}]


def test_unknown_master_is_refused(api):
    refused(save(api, 999999, [{"dest": 80}]), "no inbound with id 999999")
    refused(api.get(f"{API}/999999/fallbacks"), "no inbound with id 999999")


# ---- children and dest ------------------------------------------------------------------------


def test_child_must_exist_and_not_be_the_master(api):
    inbound = master(api)
    refused(save(api, inbound["id"], [{"childId": 999999}]), "fallbacks[0].childId", "999999")
    refused(save(api, inbound["id"], [{"childId": inbound["id"]}]), "fallbacks[0].childId")
    refused(save(api, inbound["id"], [{"childId": "abc"}]), "fallbacks[0].childId")
    refused(save(api, inbound["id"], [{"childId": 2**80}]), "fallbacks[0].childId")
    assert rules_of(api, inbound["id"]) == []


def test_empty_dest_is_rendered_from_the_child_and_follows_it(api, panel):
    inbound = master(api)
    child_socket = f"{sockets_dir(panel)}/child.sock"
    wildcard = add(api, "vless", streamSettings={"network": "ws", "wsSettings": {"path": "/w"}})
    local = add(api, "vmess", listen="127.0.0.1")
    ipv6 = add(api, "vmess", listen="::1")
    socket = add(api, "vless", listen=f"{child_socket},0666")
    rules = [
        {"childId": wildcard["id"], "path": "/w", "xver": 1},
        {"childId": local["id"], "dest": ""},
        {"childId": ipv6["id"], "dest": None},
        {"childId": socket["id"]},
    ]
    reply = save(api, inbound["id"], rules)
    assert reply["success"] is True, reply
    assert [rule["childId"] for rule in reply["obj"]] == [r["childId"] for r in rules]
    assert all(rule["dest"] == "" for rule in reply["obj"])
    assert rendered(api, inbound["id"]) == [
        {"dest": wildcard["port"], "path": "/w", "xver": 1},
        {"dest": f"127.0.0.1:{local['port']}"},
        {"dest": f"[::1]:{ipv6['port']}"},
        {"dest": child_socket},
    ]
    moved = next(_ports)
    update = api.post(f"{API}/update/{local['id']}", {**local, "port": moved})
    assert update["success"] is True
    assert rendered(api, inbound["id"])[1] == {"dest": f"127.0.0.1:{moved}"}


@pytest.mark.parametrize(
    ("dest", "shown"),
    [
        (8080, 8080),
        ("8080", 8080),
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("example.com:80", "example.com:80"),
        ("[::1]:8443", "[::1]:8443"),
        ("SOCKETS/fallback.sock", "SOCKETS/fallback.sock"),
        ("@abstract", "@abstract"),
    ],
)
def test_dest_forms_are_accepted(api, panel, dest, shown):
    if isinstance(dest, str) and dest.startswith("SOCKETS/"):
        dest = shown = dest.replace("SOCKETS", sockets_dir(panel))
    inbound = master(api)
    reply = save(api, inbound["id"], [{"dest": dest}])
    assert reply["success"] is True, reply
    assert rendered(api, inbound["id"]) == [{"dest": shown}]


@pytest.mark.parametrize(
    "dest", ["garbage", "host:99999", "0", "70000", "1:2:3", "http://x:80", True, [80], {}, ""]
)
def test_garbage_dest_is_refused(api, dest):
    inbound = master(api)
    assert save(api, inbound["id"], [{"dest": 8080}])["success"] is True
    refused(save(api, inbound["id"], [{"dest": dest}]), "fallbacks[0]")
    assert rendered(api, inbound["id"]) == [{"dest": 8080}]


@pytest.mark.parametrize(("xver", "stored"), [(0, 0), (1, 1), (2, 2), (None, 0), (1.0, 1)])
def test_xver_from_zero_to_two(api, xver, stored):
    inbound = master(api)
    assert save(api, inbound["id"], [{"dest": 80, "xver": xver}])["success"] is True
    assert rules_of(api, inbound["id"])[0]["xver"] == stored


@pytest.mark.parametrize("xver", [3, -1, True, "two", 1.5, [1]])
def test_xver_outside_zero_to_two_is_refused(api, xver):
    inbound = master(api)
    refused(save(api, inbound["id"], [{"dest": 80, "xver": xver}]), "fallbacks[0].xver")
    assert rules_of(api, inbound["id"]) == []


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"dest": 80, "path": "no-slash"}, "fallbacks[0].path"),
        ({"dest": 80, "name": 5}, "fallbacks[0].name"),
        ({"dest": 80, "alpn": "x" * 100}, "fallbacks[0].alpn"),
        ({"dest": 80, "sortOrder": "first"}, "fallbacks[0].sortOrder"),
        ({"dest": 80, "sortOrder": 2**70}, "fallbacks[0].sortOrder"),
        ({"dest": "/" + "x" * 300}, "fallbacks[0].dest"),
        ({}, "fallbacks[0]"),
        ("rule", "fallbacks[0]"),
    ],
)
def test_bad_rule_fields_are_refused(api, rule, field):
    inbound = master(api)
    refused(save(api, inbound["id"], [rule]), field)
    assert rules_of(api, inbound["id"]) == []


@pytest.mark.parametrize("body", [None, [], {"fallbacks": {}}, {"fallbacks": "[]"}, {}])
def test_body_must_hold_a_list_of_rules(api, body):
    inbound = master(api)
    assert save(api, inbound["id"], [{"dest": 80}])["success"] is True
    reply = api.post(f"{API}/{inbound['id']}/fallbacks", body)
    refused(reply, "fallbacks")
    assert len(rules_of(api, inbound["id"])) == 1


# ---- whole-list replacement and ordering ------------------------------------------------------


def test_post_replaces_the_whole_list(api):
    inbound = master(api)
    first = [{"dest": 81}, {"dest": 82}, {"dest": 83}]
    assert save(api, inbound["id"], first)["success"] is True
    assert [rule["dest"] for rule in rules_of(api, inbound["id"])] == ["81", "82", "83"]
    assert save(api, inbound["id"], [{"dest": 90, "path": "/only"}])["success"] is True
    rules = rules_of(api, inbound["id"])
    assert [(rule["dest"], rule["path"]) for rule in rules] == [("90", "/only")]
    assert rules[0]["masterId"] == inbound["id"]
    assert save(api, inbound["id"], [])["success"] is True
    assert rules_of(api, inbound["id"]) == []
    assert "fallbacks" not in api.get(f"{API}/get/{inbound['id']}")["obj"]["settings"]


def test_a_refused_list_keeps_the_previous_one(api):
    inbound = master(api)
    assert save(api, inbound["id"], [{"dest": 81}])["success"] is True
    refused(save(api, inbound["id"], [{"dest": 82}, {"dest": "bad dest"}]), "fallbacks[1]")
    assert [rule["dest"] for rule in rules_of(api, inbound["id"])] == ["81"]


def test_rules_are_ordered_by_sort_order(api):
    inbound = master(api)
    rules = [{"dest": 81, "sortOrder": 3}, {"dest": 82, "sortOrder": 1}, {"dest": 83}]
    assert save(api, inbound["id"], rules)["success"] is True
    assert [rule["dest"] for rule in rendered(api, inbound["id"])] == [82, 83, 81]


def test_rules_given_in_settings_on_add_are_stored(api):
    child = add(api, "vmess", listen="127.0.0.1")
    settings = {"decryption": "none", "fallbacks": [{"childId": child["id"]}, {"dest": 80}]}
    created = add(api, "vless", settings=json.dumps(settings), streamSettings=TLS)
    assert created["settings"]["fallbacks"] == [
        {"dest": f"127.0.0.1:{child['port']}"},
        {"dest": 80},
    ]
    assert [rule["childId"] for rule in rules_of(api, created["id"])] == [child["id"], None]


# ---- interplay with inbound updates and deletes -------------------------------------------------


def test_a_master_cannot_be_updated_out_of_holding_its_rules(api):
    inbound = master(api)
    assert save(api, inbound["id"], [{"dest": 80}])["success"] is True
    plain = {**inbound, "streamSettings": {"network": "tcp", "security": "none"}}
    refused(api.post(f"{API}/update/{inbound['id']}", plain), "fallback", "remove")
    assert api.get(f"{API}/get/{inbound['id']}")["obj"]["streamSettings"]["security"] == "tls"
    assert save(api, inbound["id"], [])["success"] is True
    assert api.post(f"{API}/update/{inbound['id']}", plain)["success"] is True


def test_deleting_a_child_removes_its_rules(api, panel):
    inbound = master(api)
    child = add(api, "vmess")
    assert save(api, inbound["id"], [{"childId": child["id"]}, {"dest": 80}])["success"] is True
    assert api.post(f"{API}/del/{child['id']}")["success"] is True
    rules = rules_of(api, inbound["id"])
    assert [(rule["childId"], rule["dest"]) for rule in rules] == [(None, "80")]
    assert rendered(api, inbound["id"]) == [{"dest": 80}]
    assert all(row[2] != child["id"] for row in stored_rules(panel))


def test_deleting_the_master_removes_its_rules(api, panel):
    inbound = master(api, "trojan")
    child = add(api, "vmess")
    assert save(api, inbound["id"], [{"childId": child["id"]}, {"dest": 80}])["success"] is True
    assert any(row[1] == inbound["id"] for row in stored_rules(panel))
    assert api.post(f"{API}/del/{inbound['id']}")["success"] is True
    assert all(row[1] != inbound["id"] for row in stored_rules(panel))
    assert api.get(f"{API}/get/{child['id']}")["success"] is True
    refused(api.get(f"{API}/{inbound['id']}/fallbacks"), "no inbound")


def test_bulk_delete_of_master_and_child_leaves_no_rules(api, panel):
    inbound = master(api)
    child = add(api, "vmess")
    assert save(api, inbound["id"], [{"childId": child["id"]}])["success"] is True
    reply = api.post(f"{API}/bulkDel", {"ids": [child["id"], inbound["id"]]})
    assert reply["obj"] == {"deleted": 2, "skipped": []}
    ids = {inbound["id"], child["id"]}
    assert all(row[1] not in ids and row[2] not in ids for row in stored_rules(panel))
