"""The Inbounds API over HTTP against the real server: every route of the spec's inbounds
table (except pushClientTraffics), per-protocol payloads, port and tag conflicts, bad
input of every shape, and the `invalidate` push on the WebSocket."""

from __future__ import annotations

import base64
import json
import random
import time
from urllib.parse import urlsplit

import pytest
import websocket
from helpers import (
    REALITY,
    TLS,
    WG_PEER_KEY,
    create_inbound,
    db_rows,
    free_port,
    refused,
    sockets_dir,
)
from panels import start_panel

API = "/panel/api/inbounds"
VLESS_ENC = "mlkem768x25519plus.native.600s.ptjHQxBQxTJ9MWr2cd5qWIflBSACHOevTauCQwa_71U"
HYSTERIA_STREAM = {**TLS, "network": "hysteria"}

# A valid inbound of each protocol, without its port.
SAMPLES = {
    "vless": {"settings": {"decryption": "none"}, "streamSettings": REALITY},
    "vmess": {
        "settings": {},
        "streamSettings": {"network": "ws", "security": "none", "wsSettings": {"path": "/v"}},
    },
    "trojan": {"settings": {}, "streamSettings": TLS},
    "shadowsocks": {"settings": {"method": "2022-blake3-aes-256-gcm", "network": "tcp,udp"}},
    "hysteria": {"settings": {"version": 2}, "streamSettings": HYSTERIA_STREAM},
    "hysteria2": {"settings": {"version": 2}, "streamSettings": HYSTERIA_STREAM},
    "socks": {
        "settings": {"auth": "password", "accounts": [{"user": "u", "pass": "p"}], "udp": True}
    },
    "http": {"settings": {"accounts": [{"user": "u", "pass": "p"}], "allowTransparent": False}},
    "mixed": {"settings": {"auth": "noauth", "udp": False, "ip": "127.0.0.1"}},
    "wireguard": {
        "settings": {"peers": [{"publicKey": WG_PEER_KEY, "allowedIPs": ["10.0.0.2/32"]}]}
    },
    "dokodemo": {"settings": {"address": "1.1.1.1", "port": 53, "network": "tcp,udp"}},
    "tunnel": {"settings": {"rewriteAddress": "example.com", "rewritePort": 80}},
    "mtproto": {"settings": {"adTag": "0123456789abcdef0123456789abcdef", "domain": "a.example"}},
}
CLIENT_PROTOCOLS = {"vless", "vmess", "trojan", "shadowsocks", "hysteria", "hysteria2", "mtproto"}


def next_port() -> int:
    """A port no other test uses: MTProto inbounds are listened on by their proxy, so a
    fixed series could meet one another module's panel holds."""
    return free_port()


def sample(protocol: str, port: int | None = None, **fields) -> dict:
    payload = {"protocol": protocol, "port": port or next_port(), "remark": protocol}
    payload.update(json.loads(json.dumps(SAMPLES[protocol])))
    payload.update(fields)
    return payload


def listing(api) -> list[dict]:
    reply = api.get(f"{API}/list")
    assert reply["success"] is True
    return reply["obj"]


def counters(panel, inbound_id: int, up: int, down: int) -> None:
    db_rows(panel, "UPDATE inbound SET up = ?, down = ? WHERE id = ?", (up, down, inbound_id))


def port_of(url: str) -> int:
    return urlsplit(url).port


# ---- every protocol -------------------------------------------------------------------


@pytest.mark.parametrize("protocol", sorted(SAMPLES))
def test_each_protocol_is_added_and_read_back(api, protocol):
    sent = sample(protocol)
    created = create_inbound(api, sent)
    assert created["protocol"] == protocol
    assert created["port"] == sent["port"]
    assert created["enable"] is True
    got = api.get(f"{API}/get/{created['id']}")
    assert got["success"] is True
    assert got["obj"] == created
    for key, value in sent["settings"].items():
        assert got["obj"]["settings"][key] == value, key
    for key, value in sent.get("streamSettings", {}).items():
        assert got["obj"]["streamSettings"][key] == value, key
    assert got["obj"]["clientStats"] == []
    if protocol in CLIENT_PROTOCOLS:
        assert got["obj"]["settings"]["clients"] == []
    assert [i for i in listing(api) if i["id"] == created["id"]] == [created]


@pytest.mark.parametrize("protocol", sorted(SAMPLES))
def test_each_protocol_survives_sending_back_what_get_returned(api, protocol):
    created = create_inbound(api, sample(protocol))
    reply = api.post(f"{API}/update/{created['id']}", created)
    assert reply["success"] is True, reply
    again = api.get(f"{API}/get/{created['id']}")["obj"]
    assert {**again, "updatedAt": 0} == {**created, "updatedAt": 0}


def test_protocol_defaults_are_filled_in(api):
    ss = create_inbound(
        api, {"protocol": "shadowsocks", "port": next_port(), "settings": {"method": "none"}}
    )
    assert ss["settings"]["network"] == "tcp"
    ss2022 = create_inbound(api, sample("shadowsocks"))
    assert len(base64.b64decode(ss2022["settings"]["password"])) == 32
    wireguard = create_inbound(api, sample("wireguard"))
    assert len(base64.b64decode(wireguard["settings"]["secretKey"])) == 32
    hysteria = create_inbound(api, {"protocol": "hysteria2", "port": next_port()})
    assert hysteria["streamSettings"]["network"] == "hysteria"
    mtproto = create_inbound(api, sample("mtproto", settings={"adTag": "ABCDEF" + "0" * 26}))
    assert mtproto["settings"]["adTag"] == "abcdef" + "0" * 26


def test_json_encoded_sections_are_accepted_and_returned_nested(api):
    sent = sample("vless")
    legacy = {
        **sent,
        "settings": json.dumps(sent["settings"]),
        "streamSettings": json.dumps(sent["streamSettings"]),
        "sniffing": json.dumps({"enabled": True, "destOverride": ["http", "tls"]}),
    }
    created = create_inbound(api, legacy)
    got = api.get(f"{API}/get/{created['id']}")["obj"]
    assert got["settings"] == {"decryption": "none", "clients": []}
    assert got["streamSettings"]["realitySettings"]["serverNames"] == ["example.com"]
    assert got["sniffing"] == {"enabled": True, "destOverride": ["http", "tls"]}


def test_clients_sent_in_settings_are_not_stored(api):
    created = create_inbound(
        api, sample("vmess", settings={"clients": [{"id": "x", "email": "a@b"}]})
    )
    assert created["settings"]["clients"] == []
    assert api.get(f"{API}/get/{created['id']}")["obj"]["settings"]["clients"] == []


BAD_SETTINGS = [
    ("vless", {"settings": {"decryption": "aes"}}, "settings.decryption"),
    ("vmess", {"settings": {"disableInsecureEncryption": "maybe"}}, "disableInsecureEncryption"),
    ("trojan", {"streamSettings": {**REALITY, "realitySettings": {}}}, "realitySettings"),
    ("shadowsocks", {"settings": {}}, "settings.method"),
    ("shadowsocks", {"settings": {"method": "rc4"}}, "settings.method"),
    ("hysteria", {"settings": {"version": 1}}, "settings.version"),
    ("hysteria2", {"streamSettings": {"network": "tcp"}}, "streamSettings.network"),
    ("socks", {"settings": {"auth": "password", "accounts": []}}, "settings.accounts"),
    ("http", {"settings": {"accounts": [{"user": "u"}]}}, "settings.accounts[0].pass"),
    ("mixed", {"settings": {"ip": "not-an-ip"}}, "settings.ip"),
    ("wireguard", {"settings": {"secretKey": "short"}}, "settings.secretKey"),
    ("wireguard", {"settings": {"peers": [{"publicKey": "x"}]}}, "settings.peers[0].publicKey"),
    ("dokodemo", {"settings": {"address": "bad host!", "port": 53}}, "settings.address"),
    ("tunnel", {"settings": {"network": "icmp"}}, "settings.network"),
    ("mtproto", {"settings": {"adTag": "xyz"}}, "settings.adTag"),
    ("vmess", {"streamSettings": {"network": "ws", "wsSettings": {"path": "v"}}}, "path"),
    ("vmess", {"streamSettings": {"network": "carrier-pigeon"}}, "streamSettings.network"),
    ("vmess", {"streamSettings": {"security": "reality"}}, "streamSettings.security"),
    ("trojan", {"streamSettings": {**TLS, "tlsSettings": {"certificates": [{}]}}}, "certificate"),
]


@pytest.mark.parametrize(
    ("protocol", "fields", "field"), BAD_SETTINGS, ids=[f"{p}-{f}" for p, _, f in BAD_SETTINGS]
)
def test_bad_protocol_settings_are_refused_naming_the_field(api, protocol, fields, field):
    before = listing(api)
    payload = {"protocol": protocol, "port": next_port(), **fields}
    refused(api.post(f"{API}/add", payload), field)
    assert listing(api) == before


# ---- reads ----------------------------------------------------------------------------


def test_list_slim_has_the_same_inbounds_as_list(api):
    create_inbound(api, sample("trojan"))
    full = listing(api)
    slim = api.get(f"{API}/list/slim")
    assert slim["success"] is True
    assert [i["id"] for i in slim["obj"]] == [i["id"] for i in full]
    trojan = next(i for i in slim["obj"] if i["protocol"] == "trojan")
    assert trojan["settings"]["clients"] == []


def test_options_compute_tls_flow_capable_and_ss_method(api):
    cases = {
        "reality": (sample("vless"), True),
        "tls": (sample("vless", streamSettings=TLS), True),
        "ws-tls": (sample("vless", streamSettings={**TLS, "network": "ws"}), False),
        "plain": (sample("vless", streamSettings={"network": "tcp"}), False),
        "xhttp-enc": (
            sample(
                "vless", settings={"decryption": VLESS_ENC}, streamSettings={"network": "xhttp"}
            ),
            True,
        ),
        "xhttp": (sample("vless", streamSettings={"network": "xhttp"}), False),
        "vmess-tls": (sample("vmess", streamSettings=TLS), False),
    }
    ids = {
        name: (create_inbound(api, payload)["id"], capable)
        for name, (payload, capable) in cases.items()
    }
    ss = create_inbound(api, sample("shadowsocks"))
    reply = api.get(f"{API}/options")
    assert reply["success"] is True
    options = {option["id"]: option for option in reply["obj"]}
    for name, (inbound_id, capable) in ids.items():
        assert options[inbound_id]["tlsFlowCapable"] is capable, name
        assert options[inbound_id]["ssMethod"] == ""
    assert options[ss["id"]]["ssMethod"] == "2022-blake3-aes-256-gcm"
    assert options[ss["id"]]["tlsFlowCapable"] is False
    assert set(options[ss["id"]]) == {
        "id",
        "remark",
        "tag",
        "protocol",
        "port",
        "nodeId",
        "tlsFlowCapable",
        "ssMethod",
    }
    assert options[ss["id"]]["nodeId"] is None


@pytest.mark.parametrize("bad_id", ["999999", "abc", "0", "-1", "99999999999999999999"])
def test_get_unknown_or_malformed_id_is_refused(api, bad_id):
    refused(api.get(f"{API}/get/{bad_id}"), "inbound")


# ---- ports and tags -------------------------------------------------------------------


def test_tcp_and_udp_inbounds_share_a_port_but_two_tcp_ones_do_not(api):
    port = next_port()
    vless = create_inbound(api, sample("vless", port))
    create_inbound(api, sample("hysteria2", port))
    before = listing(api)
    reply = api.post(f"{API}/add", sample("vmess", port))
    refused(reply, f"port {port}/tcp", f"inbound {vless['id']}")
    assert listing(api) == before


def test_udp_listeners_conflict_with_each_other(api):
    port = next_port()
    hysteria = create_inbound(api, sample("hysteria2", port))
    refused(api.post(f"{API}/add", sample("wireguard", port)), f"inbound {hysteria['id']}")
    refused(api.post(f"{API}/add", sample("shadowsocks", port)), f"inbound {hysteria['id']}")


def test_specific_address_conflicts_with_the_wildcard_but_not_with_another_address(api):
    port = next_port()
    first = create_inbound(api, sample("vmess", port, listen="127.0.0.1"))
    create_inbound(api, sample("vmess", port, listen="127.0.0.2"))
    refused(api.post(f"{API}/add", sample("vmess", port)), f"inbound {first['id']}")
    refused(api.post(f"{API}/add", sample("vmess", port, listen="0.0.0.0")), "already used")
    other_port = next_port()
    wildcard = create_inbound(api, sample("trojan", other_port, listen="::"))
    refused(
        api.post(f"{API}/add", sample("vmess", other_port, listen="10.1.2.3")),
        f"inbound {wildcard['id']}",
    )


def test_same_unix_socket_twice_is_refused(api, panel):
    socket_a, socket_b = f"{sockets_dir(panel)}/test-a.sock", f"{sockets_dir(panel)}/test-b.sock"
    first = create_inbound(api, {"protocol": "socks", "listen": f"{socket_a},0666"})
    assert first["port"] == 0
    refused(
        api.post(f"{API}/add", {"protocol": "http", "listen": socket_a}),
        socket_a,
        f"inbound {first['id']}",
    )
    create_inbound(api, {"protocol": "http", "listen": socket_b})


def test_the_panel_and_subscription_ports_are_refused(api, panel):
    for port in (port_of(panel.url), port_of(panel.sub_url)):
        for listen in ("", "127.0.0.1", "0.0.0.0"):
            reply = api.post(f"{API}/add", sample("vless", port, listen=listen))
            refused(reply, f"port {port}/tcp")
    assert "the panel itself" in api.post(f"{API}/add", sample("vless", port_of(panel.url)))["msg"]
    sub = api.post(f"{API}/add", sample("vless", port_of(panel.sub_url)))
    assert "the subscription server" in sub["msg"]
    # UDP does not touch the panel's TCP listener.
    create_inbound(api, sample("hysteria2", port_of(panel.url)))


def test_explicit_duplicate_tag_is_refused_naming_the_inbound(api):
    first = create_inbound(api, sample("vmess", tag="shared-tag"))
    before = listing(api)
    refused(api.post(f"{API}/add", sample("trojan", tag="shared-tag")), f"inbound {first['id']}")
    assert listing(api) == before


def test_generated_tags_are_unique(api):
    port = next_port()
    tcp = create_inbound(api, sample("vless", port))
    udp = create_inbound(api, sample("hysteria2", port))
    assert tcp["tag"] and udp["tag"] and tcp["tag"] != udp["tag"]
    taker = create_inbound(api, sample("vmess", tag=f"inbound-{port + 1000}"))
    generated = create_inbound(api, sample("vmess", port + 1000))
    assert generated["tag"] != taker["tag"]
    tags = [inbound["tag"] for inbound in listing(api)]
    assert len(tags) == len(set(tags))


def test_generated_tags_follow_one_rule(panel, api):
    """Every address (none, 0.0.0.0, ::) gives `inbound-PORT`, one address gives
    `inbound-ADDRESS:PORT`; a tag stored under the older form stays while port and address
    do."""
    ports = [next_port() for _ in range(4)]
    anywhere = [
        create_inbound(api, sample("vmess", port, listen=listen))
        for port, listen in zip(ports[:3], ("", "0.0.0.0", "::"), strict=True)
    ]
    assert [inbound["tag"] for inbound in anywhere] == [f"inbound-{port}" for port in ports[:3]]
    one = create_inbound(api, sample("vmess", ports[3], listen="127.0.0.1"))
    assert one["tag"] == f"inbound-127.0.0.1:{ports[3]}"

    old = anywhere[1]
    db_rows(
        panel, "UPDATE inbound SET tag = ? WHERE id = ?", (f"inbound-0.0.0.0:{ports[1]}", old["id"])
    )
    kept = api.post(f"{API}/update/{old['id']}", {**old, "remark": "renamed", "tag": ""})
    assert kept["success"] is True, kept
    assert kept["obj"]["tag"] == f"inbound-0.0.0.0:{ports[1]}"


def test_a_generated_tag_is_accepted_when_sent_back(api, panel):
    for listen in (f"{sockets_dir(panel)}/tagged.sock,0666", "@abstract-name", "::1"):
        created = create_inbound(api, {"protocol": "socks", "listen": listen, "port": next_port()})
        reply = api.post(f"{API}/update/{created['id']}", created)
        assert reply["success"] is True, (listen, reply)
        assert reply["obj"]["tag"] == created["tag"]


@pytest.mark.parametrize("tag", ["has space", "a/b", "x" * 65, 5])
def test_malformed_tags_are_refused(api, tag):
    refused(api.post(f"{API}/add", sample("vmess", tag=tag)), "tag")


# ---- update -----------------------------------------------------------------------------


def test_update_keeps_the_id_and_can_move_the_port(api):
    created = create_inbound(api, sample("vmess"))
    new_port = next_port()
    reply = api.post(f"{API}/update/{created['id']}", {**created, "port": new_port, "tag": ""})
    assert reply["success"] is True
    assert reply["msg"]
    got = api.get(f"{API}/get/{created['id']}")["obj"]
    assert got["id"] == created["id"]
    assert got["port"] == new_port
    assert got["tag"] == f"inbound-{new_port}"
    assert got["createdAt"] == created["createdAt"]
    assert len(listing(api)) == len({i["id"] for i in listing(api)})


def test_update_applies_the_conflict_rules_but_not_against_itself(api):
    first = create_inbound(api, sample("vmess"))
    second = create_inbound(api, sample("trojan"))
    same = api.post(f"{API}/update/{first['id']}", {**first, "remark": "renamed"})
    assert same["success"] is True
    assert same["obj"]["remark"] == "renamed"
    before = listing(api)
    clash = api.post(f"{API}/update/{first['id']}", {**first, "port": second["port"]})
    refused(clash, f"inbound {second['id']}")
    refused(api.post(f"{API}/update/{first['id']}", {**first, "tag": second["tag"]}), "tag")
    assert listing(api) == before


def test_update_of_an_unknown_inbound_is_refused(api):
    before = listing(api)
    refused(api.post(f"{API}/update/999999", sample("vmess")), "no inbound with id 999999")
    refused(api.post(f"{API}/update/abc", sample("vmess")), "inbound id")
    refused(api.post(f"{API}/update/999999", {"port": True}), "no inbound with id 999999")
    assert listing(api) == before


# ---- delete, enable, traffic, clients ---------------------------------------------------


def test_delete_removes_the_inbound(api):
    created = create_inbound(api, sample("http"))
    reply = api.post(f"{API}/del/{created['id']}")
    assert reply["success"] is True
    assert created["id"] not in [i["id"] for i in listing(api)]
    refused(api.post(f"{API}/del/{created['id']}"), f"no inbound with id {created['id']}")
    refused(api.get(f"{API}/get/{created['id']}"), "no inbound")


def test_bulk_delete_deletes_existing_and_reports_the_rest(api):
    a, b = create_inbound(api, sample("http")), create_inbound(api, sample("socks"))
    reply = api.post(f"{API}/bulkDel", {"ids": [a["id"], 999999, b["id"], "x"]})
    assert reply["success"] is True
    assert reply["obj"]["deleted"] == 2
    skipped = reply["obj"]["skipped"]
    assert [entry["id"] for entry in skipped] == [999999, "x"]
    assert all(entry["reason"] for entry in skipped)
    assert "999999" in skipped[0]["reason"]
    remaining = {i["id"] for i in listing(api)}
    assert a["id"] not in remaining and b["id"] not in remaining


@pytest.mark.parametrize("body", [{"ids": 3}, {"ids": "1,2"}, {"ids": None}, {}, [1, 2]])
def test_bulk_delete_needs_a_list_of_ids(api, body):
    keep = create_inbound(api, sample("http"))
    reply = api.post(f"{API}/bulkDel", body)
    assert reply["success"] is False
    assert "ids" in reply["msg"] or "JSON object" in reply["msg"]
    assert keep["id"] in {i["id"] for i in listing(api)}


def test_set_enable_flips_the_flag_and_refuses_non_booleans(api):
    created = create_inbound(api, sample("vmess"))
    path = f"{API}/setEnable/{created['id']}"
    assert api.post(path, {"enable": False})["success"] is True
    assert api.get(f"{API}/get/{created['id']}")["obj"]["enable"] is False
    for bad in ({"enable": "false"}, {"enable": 0}, {"enable": None}, {}, None):
        refused(api.post(path, bad), "enable")
    assert api.get(f"{API}/get/{created['id']}")["obj"]["enable"] is False
    assert api.post(path, {"enable": True})["success"] is True
    assert api.get(f"{API}/get/{created['id']}")["obj"]["enable"] is True
    refused(api.post(f"{API}/setEnable/999999", {"enable": True}), "no inbound")


def test_reset_traffic_zeroes_one_inbound(api, panel):
    one, two = create_inbound(api, sample("vmess")), create_inbound(api, sample("trojan"))
    counters(panel, one["id"], 1000, 2000)
    counters(panel, two["id"], 30, 40)
    by_id = {i["id"]: i for i in listing(api)}
    assert (by_id[one["id"]]["up"], by_id[one["id"]]["down"]) == (1000, 2000)
    assert api.post(f"{API}/{one['id']}/resetTraffic")["success"] is True
    by_id = {i["id"]: i for i in listing(api)}
    assert (by_id[one["id"]]["up"], by_id[one["id"]]["down"]) == (0, 0)
    assert (by_id[two["id"]]["up"], by_id[two["id"]]["down"]) == (30, 40)
    refused(api.post(f"{API}/999999/resetTraffic"), "no inbound")


def test_reset_all_traffics_zeroes_every_inbound(api, panel):
    one, two = create_inbound(api, sample("vmess")), create_inbound(api, sample("trojan"))
    counters(panel, one["id"], 5, 6)
    counters(panel, two["id"], 7, 8)
    assert api.post(f"{API}/resetAllTraffics")["success"] is True
    for inbound in listing(api):
        assert (inbound["up"], inbound["down"]) == (0, 0), inbound["id"]


def test_delete_all_clients_reports_zero_and_keeps_the_inbound(api):
    created = create_inbound(api, sample("vless"))
    reply = api.post(f"{API}/{created['id']}/delAllClients")
    assert reply == {"success": True, "msg": "", "obj": {"deleted": 0}}
    assert api.get(f"{API}/get/{created['id']}")["success"] is True
    refused(api.post(f"{API}/999999/delAllClients"), "no inbound with id 999999")


# ---- import -------------------------------------------------------------------------------


def test_import_takes_a_json_encoded_inbound_in_form_field_data(api):
    exported = create_inbound(api, sample("trojan"))
    api.post(f"{API}/del/{exported['id']}")
    data = json.dumps({**exported, "up": 9, "down": 9})
    reply = api.post(f"{API}/import", json=None, data={"data": data})
    assert reply["success"] is True, reply
    imported = reply["obj"]
    assert imported["id"] != exported["id"]
    assert (imported["up"], imported["down"]) == (0, 0)
    assert imported["port"] == exported["port"]
    assert imported["streamSettings"] == exported["streamSettings"]
    assert api.get(f"{API}/get/{imported['id']}")["obj"]["protocol"] == "trojan"


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({"data": "{not json"}, ("data", "JSON")),
        ({"data": "[1, 2]"}, ("data",)),
        ({"data": ""}, ("data",)),
        ({}, ("data",)),
        ({"data": json.dumps({"protocol": "vless", "port": "http"})}, ("port",)),
    ],
)
def test_import_refuses_what_is_not_an_inbound(api, form, words):
    before = listing(api)
    refused(api.post(f"{API}/import", json=None, data=form), *words)
    assert listing(api) == before


def test_import_applies_the_port_rules(api):
    existing = create_inbound(api, sample("vmess"))
    data = json.dumps(sample("trojan", existing["port"]))
    refused(api.post(f"{API}/import", json=None, data={"data": data}), f"inbound {existing['id']}")


# ---- clone --------------------------------------------------------------------------------


def test_clone_copies_the_settings_to_a_new_port_and_tag_without_clients(api):
    source = create_inbound(api, sample("vless", remark="origin"))
    reply = api.post(
        "/panel/api/clients/add",
        {"client": {"email": "clone-origin@ex"}, "inboundIds": [source["id"]]},
    )
    assert reply["success"] is True, reply
    port = next_port()
    reply = api.post(f"{API}/clone/{source['id']}", {"port": port, "remark": "origin copy"})
    assert reply["success"] is True, reply
    copy = api.get(f"{API}/get/{reply['obj']['id']}")["obj"]
    assert copy["id"] != source["id"]
    assert (copy["port"], copy["remark"], copy["protocol"]) == (port, "origin copy", "vless")
    assert copy["tag"] not in ("", source["tag"])
    assert copy["streamSettings"] == source["streamSettings"]
    assert copy["settings"]["clients"] == []
    assert (copy["up"], copy["down"]) == (0, 0)
    original = api.get(f"{API}/get/{source['id']}")["obj"]
    assert [c["email"] for c in original["settings"]["clients"]] == ["clone-origin@ex"]
    kept = api.post(f"{API}/clone/{source['id']}", {"port": next_port()})["obj"]
    assert kept["remark"] == "origin"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, ("port", "required")),
        ({"port": "http"}, ("port",)),
        ({"port": 70000}, ("port",)),
        ({"port": 1234, "tag": "mine"}, ("only port and remark", "tag")),
        ([1], ("JSON object",)),
    ],
)
def test_clone_refuses_bad_bodies_and_changes_nothing(api, body, words):
    source = create_inbound(api, sample("trojan"))
    before = listing(api)
    refused(api.post(f"{API}/clone/{source['id']}", body), *words)
    assert listing(api) == before


def test_clone_applies_the_port_rules_and_needs_an_existing_inbound(api):
    source = create_inbound(api, sample("vmess"))
    refused(api.post(f"{API}/clone/{source['id']}", {"port": source["port"]}), "port")
    refused(api.post(f"{API}/clone/987654", {"port": next_port()}), "987654")


# ---- bad input of every shape --------------------------------------------------------------


def valid(**fields) -> dict:
    return {**sample("vmess"), **fields}


WRONG_TYPES = [
    ("port-string", lambda: valid(port="http"), "port"),
    ("port-bool", lambda: valid(port=True), "port"),
    ("port-huge", lambda: valid(port=10**30), "port"),
    ("port-float", lambda: valid(port=443.5), "port"),
    ("port-range", lambda: valid(port=70000), "port"),
    ("port-zero", lambda: valid(port=0), "port"),
    ("port-list", lambda: valid(port=[443]), "port"),
    ("port-missing", lambda: {"protocol": "vmess"}, "port"),
    ("settings-array", lambda: valid(settings=[1, 2]), "settings"),
    ("settings-number", lambda: valid(settings=5), "settings"),
    ("settings-bad-text", lambda: valid(settings="{oops"), "settings"),
    ("stream-array", lambda: valid(streamSettings=[]), "streamSettings"),
    ("sniffing-bool", lambda: valid(sniffing=True), "sniffing"),
    ("sniffing-override", lambda: valid(sniffing={"destOverride": ["dns"]}), "destOverride"),
    ("protocol-unknown", lambda: valid(protocol="vmess2"), "protocol"),
    ("protocol-number", lambda: valid(protocol=1), "protocol"),
    ("listen-number", lambda: valid(listen=127), "listen"),
    ("listen-hostname", lambda: valid(listen="localhost"), "listen"),
    ("remark-object", lambda: valid(remark={"a": 1}), "remark"),
    ("enable-string", lambda: valid(enable="yes"), "enable"),
    ("expiry-negative", lambda: valid(expiryTime=-1), "expiryTime"),
    ("total-huge", lambda: valid(total=2**64), "total"),
    ("total-bool", lambda: valid(total=False), "total"),
    ("node-unknown", lambda: valid(nodeId=77), "nodeId"),
    ("node-string", lambda: valid(nodeId="x"), "nodeId"),
    ("null-body", lambda: None, "JSON object"),
    ("array-body", lambda: [valid()], "JSON object"),
    ("string-body", lambda: "vmess", "JSON object"),
    ("number-body", lambda: 443, "JSON object"),
]


@pytest.mark.parametrize(("name", "make", "field"), WRONG_TYPES, ids=[w[0] for w in WRONG_TYPES])
def test_wrong_types_are_refused_naming_the_field(api, name, make, field):
    target = create_inbound(api, sample("trojan"))
    before = listing(api)
    payload = make()
    raw = json.dumps(payload)
    headers = {"Content-Type": "application/json"}
    for path in (f"{API}/add", f"{API}/update/{target['id']}"):
        response = api.raw("POST", path, data=raw, headers=headers)
        assert response.status_code == 200
        refused(response.json(), field)
    assert listing(api) == before


def test_a_form_body_is_read_field_by_field(api):
    before = listing(api)
    bad = api.post(f"{API}/add", json=None, data={"protocol": "vmess", "port": "not-a-port"})
    refused(bad, "port")
    bad = api.post(
        f"{API}/add", json=None, data={"protocol": "vmess", "port": "1", "settings": "["}
    )
    refused(bad, "settings")
    assert listing(api) == before
    port = next_port()
    form = {"protocol": "vmess", "port": str(port), "settings": "{}", "enable": "false"}
    created = api.post(f"{API}/add", json=None, data=form)
    assert created["success"] is True
    assert (created["obj"]["port"], created["obj"]["enable"]) == (port, False)


def test_malformed_json_body_is_refused(api):
    before = listing(api)
    response = api.raw(
        "POST", f"{API}/add", data=b"{protocol: vmess", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200
    refused(response.json(), "JSON")
    assert listing(api) == before


def test_deeply_nested_json_is_refused(api):
    before = listing(api)
    nested = '{"protocol": "vmess", "port": 1, "settings": ' + "[" * 5000 + "]" * 5000 + "}"
    for body in (nested, "[" * 5000):
        response = api.raw(
            "POST", f"{API}/add", data=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 200
        assert response.json()["success"] is False
    assert listing(api) == before


def test_http_level_errors(panel, api):
    assert api.raw("GET", f"{API}/add").status_code == 405
    assert api.raw("POST", f"{API}/list").status_code == 405
    assert api.raw("GET", f"{API}/no-such-route/1/2").status_code == 404
    anonymous = panel.client(login=False)
    response = anonymous.raw("GET", f"{API}/list")
    assert response.status_code == 401
    assert response.json()["success"] is False
    no_csrf = api.raw("POST", f"{API}/add", json=sample("vmess"), headers={"X-CSRF-Token": "x"})
    assert no_csrf.status_code == 403


FIELDS = [
    "protocol",
    "port",
    "listen",
    "remark",
    "tag",
    "enable",
    "expiryTime",
    "total",
    "settings",
    "streamSettings",
    "sniffing",
    "nodeId",
]
NASTY = [
    None,
    True,
    False,
    0,
    -1,
    1,
    65535,
    65536,
    2**31,
    2**63,
    10**40,
    -(10**40),
    0.5,
    1e308,
    "",
    " ",
    "443",
    "x" * 300,
    "\u00e9\u0000",
    "{}",
    "[]",
    "null",
    '{"network": 5}',
    [],
    [1, "a"],
    {},
    {"network": "ws"},
    {"security": "reality"},
    {"clients": 5},
    {"method": []},
    {"tlsSettings": {"certificates": [5]}},
]


def random_value(rng: random.Random, depth: int = 0):
    if depth < 3 and rng.random() < 0.2:
        if rng.random() < 0.5:
            return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        keys = rng.sample([*FIELDS, "network", "security", "method", "auth", "peers"], 3)
        return {key: random_value(rng, depth + 1) for key in keys}
    return rng.choice(NASTY + sorted(SAMPLES))


def random_payload(rng: random.Random):
    roll = rng.random()
    if roll < 0.05:
        return random_value(rng)
    if roll < 0.5:
        payload = sample(rng.choice(sorted(SAMPLES)), rng.randint(40000, 40100))
        for key in rng.sample(FIELDS, rng.randint(1, 3)):
            payload[key] = random_value(rng)
        return payload
    return {key: random_value(rng) for key in rng.sample(FIELDS, rng.randint(0, len(FIELDS)))}


def test_fuzzed_payloads_always_get_an_envelope(tmp_path):
    server = start_panel(tmp_path)
    try:
        api = server.client()
        target = create_inbound(api, sample("trojan", free_port()))
        rng = random.Random(20240601)
        answers = {True: 0, False: 0}
        for _ in range(300):
            payload = random_payload(rng)
            path = rng.choice([f"{API}/add", f"{API}/update/{target['id']}"])
            response = api.raw("POST", path, json=payload)
            assert response.status_code < 500, (payload, response.text)
            reply = response.json()
            assert set(reply) == {"success", "msg", "obj"}, reply
            assert isinstance(reply["success"], bool)
            if not reply["success"]:
                assert isinstance(reply["msg"], str) and reply["msg"], (payload, reply)
            answers[reply["success"]] += 1
        # The run exercised both outcomes, and the store still reads back whole.
        assert answers[True] > 0 and answers[False] > 0
        inbounds = listing(api)
        assert api.get(f"{API}/get/{target['id']}")["success"] is True
        assert len({i["tag"] for i in inbounds}) == len(inbounds)
    finally:
        server.stop()


# ---- WebSocket ------------------------------------------------------------------------------


def read_invalidate(ws, deadline: float) -> dict | None:
    while time.monotonic() < deadline:
        try:
            message = json.loads(ws.recv())
        except websocket.WebSocketTimeoutException:
            continue
        if message.get("type") == "invalidate":
            return message
    return None


def test_mutations_push_invalidate_inbounds(panel, api):
    cookie = api.http.cookies.get("appliance_session")
    assert cookie
    ws_url = panel.url.replace("http://", "ws://", 1).rstrip("/") + "/ws"
    ws = websocket.create_connection(
        ws_url, header=[f"Cookie: appliance_session={cookie}"], timeout=2
    )
    try:
        created = create_inbound(api, sample("vmess"))
        message = read_invalidate(ws, time.monotonic() + 15)
        assert message == {"type": "invalidate", "resource": "inbounds"}
        assert api.post(f"{API}/setEnable/{created['id']}", {"enable": False})["success"]
        assert read_invalidate(ws, time.monotonic() + 15) == message
        assert api.post(f"{API}/del/{created['id']}")["success"] is True
        assert read_invalidate(ws, time.monotonic() + 15) == message
    finally:
        ws.close()
