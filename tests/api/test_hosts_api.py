"""Hosts over HTTP: the records, their order within an inbound, tags, bulk changes, every
refusal with the field it names, what deleting an inbound does to its hosts, and the
`invalidate` push that tells open browsers (and drops subscription caches)."""

from __future__ import annotations

import itertools
import json
import time

import pytest
import websocket
from helpers import create_inbound, db_rows, ok, refused

API = "/panel/api/hosts"
_ports = itertools.count(26000)


def inbound(api) -> dict:
    return create_inbound(
        api, {"protocol": "vless", "port": next(_ports), "settings": {"decryption": "none"}}
    )


def add(api, inbound_id: int, **fields) -> dict:
    return ok(api.post(f"{API}/add", {"inboundId": inbound_id, "remark": "cdn", **fields}))


def by_inbound(api, inbound_id: int) -> list[dict]:
    return ok(api.get(f"{API}/byInbound/{inbound_id}"))


def host_rows(panel) -> list[tuple]:
    return db_rows(panel, "SELECT id, inbound_id, remark, sort_order, enable FROM host ORDER BY id")


# ---- the record -----------------------------------------------------------------------------


def test_add_returns_the_record_with_defaults(api, panel):
    owner = inbound(api)
    host = add(api, owner["id"], remark="Frankfurt CDN")
    assert host == {
        "id": host["id"],
        "inboundId": owner["id"],
        "remark": "Frankfurt CDN",
        "address": "",
        "port": 0,
        "security": "same",
        "sni": "",
        "tags": [],
        "enable": True,
        "sortOrder": 0,
    }
    assert ok(api.get(f"{API}/get/{host['id']}")) == host
    assert (host["id"], owner["id"], "Frankfurt CDN", 0, 1) in host_rows(panel)


def test_add_keeps_every_field(api):
    owner = inbound(api)
    host = add(
        api,
        owner["id"],
        address="cdn.example.com",
        port="8443",
        security="tls",
        sni="front.example.com",
        tags=["cdn", " eu ", "cdn", ""],
        enable=False,
    )
    assert host["address"] == "cdn.example.com"
    assert host["port"] == 8443
    assert (host["security"], host["sni"]) == ("tls", "front.example.com")
    assert host["tags"] == ["cdn", "eu"]
    assert host["enable"] is False
    assert add(api, owner["id"], address="[2001:db8::1]")["address"] == "2001:db8::1"
    assert add(api, owner["id"], address="2001:db8::2")["address"] == "2001:db8::2"


def test_new_hosts_go_to_the_end_of_their_inbound(api):
    owner, other = inbound(api), inbound(api)
    first, second = add(api, owner["id"]), add(api, owner["id"])
    elsewhere = add(api, other["id"])
    assert (first["sortOrder"], second["sortOrder"], elsewhere["sortOrder"]) == (0, 1, 0)


def test_update_replaces_fields_but_not_inbound_or_position(api):
    owner, other = inbound(api), inbound(api)
    add(api, owner["id"])
    host = add(api, owner["id"], address="a.example.com", tags=["x"], enable=False)
    updated = ok(
        api.post(
            f"{API}/update/{host['id']}",
            {
                "inboundId": other["id"],
                "sortOrder": 9,
                "remark": "renamed",
                "address": "b.example.com",
                "port": 443,
                "security": "reality",
                "sni": "",
                "tags": ["y"],
            },
        )
    )
    assert updated["inboundId"] == owner["id"]
    assert updated["sortOrder"] == 1
    assert (updated["remark"], updated["address"], updated["port"]) == (
        "renamed",
        "b.example.com",
        443,
    )
    assert (updated["security"], updated["tags"]) == ("reality", ["y"])
    assert updated["enable"] is False, "enable is kept when not sent"
    assert ok(api.get(f"{API}/get/{host['id']}")) == updated


def test_delete_and_set_enable(api):
    owner = inbound(api)
    host = add(api, owner["id"])
    ok(api.post(f"{API}/setEnable/{host['id']}", {"enable": False}))
    assert ok(api.get(f"{API}/get/{host['id']}"))["enable"] is False
    ok(api.post(f"{API}/del/{host['id']}"))
    refused(api.get(f"{API}/get/{host['id']}"), f"no host with id {host['id']}")
    refused(api.post(f"{API}/del/{host['id']}"), "no host")


# ---- lists ------------------------------------------------------------------------------------


def test_list_is_by_inbound_then_sort_order(api):
    later, earlier = inbound(api), inbound(api)
    hosts = [add(api, earlier["id"], remark=f"e{n}") for n in range(3)]
    add(api, later["id"], remark="l0")
    ok(api.post(f"{API}/reorder", {"ids": [hosts[2]["id"], hosts[0]["id"], hosts[1]["id"]]}))
    listed = [
        (h["inboundId"], h["remark"])
        for h in ok(api.get(f"{API}/list"))
        if h["inboundId"] in (later["id"], earlier["id"])
    ]
    assert listed == [(later["id"], "l0"), (earlier["id"], "e2"), (earlier["id"], "e0"),
                      (earlier["id"], "e1")]  # fmt: skip
    whole = [(h["inboundId"], h["sortOrder"], h["id"]) for h in ok(api.get(f"{API}/list"))]
    assert whole == sorted(whole)


def test_by_inbound_is_in_sort_order(api):
    owner = inbound(api)
    a, b, c = (add(api, owner["id"], remark=name) for name in "abc")
    ok(api.post(f"{API}/reorder", {"ids": [c["id"], a["id"], b["id"]]}))
    assert [(h["remark"], h["sortOrder"]) for h in by_inbound(api, owner["id"])] == [
        ("c", 0),
        ("a", 1),
        ("b", 2),
    ]
    assert by_inbound(api, inbound(api)["id"]) == []
    refused(api.get(f"{API}/byInbound/999999"), "no inbound with that id")
    refused(api.get(f"{API}/byInbound/abc"), "inboundId must be a positive integer")


def test_tags_are_distinct_and_sorted(api):
    owner = inbound(api)
    add(api, owner["id"], tags=["zeta", "alpha"])
    add(api, owner["id"], tags=["alpha", "Mid"])
    tags = ok(api.get(f"{API}/tags"))
    assert tags == sorted(set(tags))
    assert {"zeta", "alpha", "Mid"} <= set(tags)


# ---- reorder ------------------------------------------------------------------------------------


def test_reorder_refusals_change_nothing(api):
    owner, other = inbound(api), inbound(api)
    a, b = add(api, owner["id"]), add(api, owner["id"])
    stranger = add(api, other["id"])
    before = by_inbound(api, owner["id"])
    refused(api.post(f"{API}/reorder", {"ids": [b["id"]]}), "every host", str(a["id"]))
    refused(api.post(f"{API}/reorder", {"ids": [b["id"], a["id"], b["id"]]}), "more than once")
    refused(
        api.post(f"{API}/reorder", {"ids": [b["id"], a["id"], stranger["id"]]}),
        "one inbound",
        str(other["id"]),
    )
    refused(api.post(f"{API}/reorder", {"ids": [b["id"], 999999]}), "no host with id 999999")
    refused(api.post(f"{API}/reorder", {"ids": []}), "ids must list")
    refused(api.post(f"{API}/reorder", {"ids": "1,2"}), "ids must be an array")
    refused(api.post(f"{API}/reorder", {"ids": [b["id"], "x"]}), "positive integer")
    assert by_inbound(api, owner["id"]) == before


# ---- bulk ---------------------------------------------------------------------------------------


def test_bulk_set_enable_skips_unknown_ids(api):
    owner = inbound(api)
    a, b = add(api, owner["id"]), add(api, owner["id"])
    reply = ok(
        api.post(f"{API}/bulk/setEnable", {"ids": [a["id"], 999998, b["id"]], "enable": False})
    )
    assert reply == {"affected": 2, "skipped": [{"id": 999998, "reason": "no host with id 999998"}]}
    assert [h["enable"] for h in by_inbound(api, owner["id"])] == [False, False]
    refused(api.post(f"{API}/bulk/setEnable", {"ids": [a["id"]], "enable": "yes"}), "enable")
    refused(api.post(f"{API}/bulk/setEnable", {"enable": True}), "ids must be an array")
    assert [h["enable"] for h in by_inbound(api, owner["id"])] == [False, False]


def test_bulk_delete_skips_unknown_ids(api, panel):
    owner = inbound(api)
    a, b, keep = add(api, owner["id"]), add(api, owner["id"]), add(api, owner["id"])
    reply = ok(api.post(f"{API}/bulk/del", {"ids": [a["id"], b["id"], 999997]}))
    assert reply["deleted"] == 2
    assert reply["skipped"] == [{"id": 999997, "reason": "no host with id 999997"}]
    assert [h["id"] for h in by_inbound(api, owner["id"])] == [keep["id"]]
    assert {row[0] for row in host_rows(panel)} & {a["id"], b["id"]} == set()
    refused(api.post(f"{API}/bulk/del", {"ids": [keep["id"], -1]}), "positive integer")
    assert [h["id"] for h in by_inbound(api, owner["id"])] == [keep["id"]]


# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"remark": ""}, ("remark is required",)),
        ({"remark": "   "}, ("remark is required",)),
        ({"remark": None}, ("remark is required",)),
        ({"remark": "x" * 256}, ("remark", "255")),
        ({"port": 65536}, ("port must be from 1 to 65535",)),
        ({"port": -1}, ("port",)),
        ({"port": "443a"}, ("port",)),
        ({"port": True}, ("port",)),
        ({"port": 1.5}, ("port",)),
        ({"security": "xtls"}, ("security must be one of same, none, tls, reality",)),
        ({"security": 1}, ("security",)),
        ({"tags": "cdn"}, ("tags must be an array of strings",)),
        ({"tags": [1]}, ("tags must be an array of strings",)),
        ({"tags": ["x" * 33]}, ("longer than 32",)),
        ({"tags": [f"t{n}" for n in range(17)]}, ("at most 16 tags",)),
        ({"address": "a b.example.com"}, ("address must be a domain name",)),
        ({"address": "evil.com/#"}, ("address",)),
        ({"address": 5}, ("address must be a string",)),
        ({"sni": "a:b"}, ("sni must be a domain name",)),
        ({"enable": "true"}, ("enable must be true or false",)),
    ],
)
def test_bad_fields_are_refused_on_add_and_update(api, panel, fields, words):
    owner = inbound(api)
    host = add(api, owner["id"], remark="kept")
    count = len(host_rows(panel))
    refused(api.post(f"{API}/add", {"inboundId": owner["id"], "remark": "r", **fields}), *words)
    assert len(host_rows(panel)) == count
    refused(api.post(f"{API}/update/{host['id']}", {"remark": "r", **fields}), *words)
    assert ok(api.get(f"{API}/get/{host['id']}")) == host


def test_inbound_id_is_required_and_must_exist(api, panel):
    count = len(host_rows(panel))
    refused(api.post(f"{API}/add", {"remark": "r"}), "inboundId is required")
    refused(api.post(f"{API}/add", {"inboundId": 999999, "remark": "r"}), "no inbound with that id")
    refused(api.post(f"{API}/add", {"inboundId": "one", "remark": "r"}), "inboundId")
    refused(api.post(f"{API}/add", [1, 2]), "JSON object")
    refused(api.post(f"{API}/add", data="{", headers={"Content-Type": "application/json"}), "JSON")
    assert len(host_rows(panel)) == count


def test_unknown_ids_in_paths_are_refused(api):
    for method, path, body in [
        ("GET", "/get/999999", None),
        ("POST", "/update/999999", {"remark": "r"}),
        ("POST", "/setEnable/999999", {"enable": True}),
        ("GET", "/get/0", None),
        ("GET", "/get/x", None),
    ]:
        response = api.raw(method, API + path, json=body)
        assert response.status_code == 200
        refused(response.json(), "host id" if "/0" in path or "/x" in path else "no host")
    refused(api.post(f"{API}/setEnable/1", {"enable": 1}), "enable must be true or false")


def test_hosts_need_a_signed_in_caller(panel):
    anonymous = panel.client(login=False)
    response = anonymous.raw("GET", f"{API}/list")
    assert response.status_code == 401
    assert anonymous.raw("POST", f"{API}/add", json={}).status_code == 401


# ---- inbound deletion, pushes -------------------------------------------------------------


def test_deleting_an_inbound_deletes_its_hosts(api, panel):
    owner, other = inbound(api), inbound(api)
    gone = [add(api, owner["id"]), add(api, owner["id"])]
    kept = add(api, other["id"])
    ok(api.post(f"/panel/api/inbounds/del/{owner['id']}"))
    ids = {row[0] for row in host_rows(panel)}
    assert not ids & {host["id"] for host in gone}
    assert kept["id"] in ids
    refused(api.get(f"{API}/get/{gone[0]['id']}"), "no host")


def test_every_change_pushes_invalidate_hosts(api, panel):
    owner = inbound(api)
    host, second = add(api, owner["id"]), add(api, owner["id"])
    cookie = "; ".join(f"{k}={v}" for k, v in api.http.cookies.items())
    ws = websocket.create_connection(panel.url.replace("http", "ws", 1) + "/ws", cookie=cookie)
    try:
        calls = [
            (f"{API}/update/{host['id']}", {"remark": "pushed"}),
            (f"{API}/setEnable/{host['id']}", {"enable": False}),
            (f"{API}/reorder", {"ids": [host["id"], second["id"]]}),
            (f"{API}/bulk/setEnable", {"ids": [host["id"]], "enable": True}),
            (f"{API}/del/{host['id']}", None),
            (f"{API}/bulk/del", {"ids": [second["id"]]}),
            (f"{API}/add", {"inboundId": owner["id"], "remark": "pushed"}),
        ]
        for path, body in calls:
            ok(api.post(path, body))
            assert wait_invalidate(ws, "hosts"), path
        refused(api.post(f"{API}/del/{host['id']}"))
        assert not wait_invalidate(ws, "hosts", 1.0), "a refused call pushes nothing"
        ok(api.post(f"/panel/api/inbounds/del/{owner['id']}"))
        assert wait_invalidate(ws, "hosts"), "deleting an inbound deletes its hosts"
    finally:
        ws.close()


def wait_invalidate(ws, resource: str, seconds: float = 5.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        ws.settimeout(max(deadline - time.time(), 0.05))
        try:
            message = json.loads(ws.recv())
        except websocket.WebSocketTimeoutException:
            return False
        if message.get("type") == "invalidate" and message.get("resource") == resource:
            return True
    return False
