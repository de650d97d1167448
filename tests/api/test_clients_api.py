"""The single-client API over HTTP against the real server: every route of the clients table
that works on one client, the per-protocol client rules as a user observes them (in the
client record and in the inbounds' settings.clients), the inbound views clients bring to
life, the `invalidate` push, and concurrent adds of one email.

Email uniqueness: emails are compared after Unicode NFKC normalisation and case folding,
so "Bob" and "bob", or the fullwidth "\uff42\uff4f\uff42" and "bob", are the same email;
the second to arrive is refused as already in use, and any of the spellings finds the
client in a path.

Counters, IP logs and last-online times come from traffic accounting, which does not
exist yet: tests write them into the SQLite file directly, as accounting will.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import time
import uuid
from urllib.parse import quote

import pytest
import requests
import websocket
from helpers import (
    INBOUNDS,
    REALITY,
    TLS,
    WG_PEER_KEY,
    create_inbound,
    db_rows,
    free_port,
    ok,
    post_at_once,
    refused,
)

API = "/panel/api/clients"
PUSH_WAIT = 10

WS = {"network": "ws", "security": "none", "wsSettings": {"path": "/ws"}}

# A valid inbound of each protocol, without its port.
SAMPLES = {
    "vless": {"settings": {"decryption": "none"}, "streamSettings": REALITY},
    "vless-ws": {"protocol": "vless", "settings": {"decryption": "none"}, "streamSettings": WS},
    "vmess": {"settings": {}, "streamSettings": WS},
    "trojan": {"settings": {}, "streamSettings": TLS},
    "shadowsocks": {"settings": {"method": "aes-256-gcm"}},
    "hysteria": {"settings": {"version": 2}, "streamSettings": {**TLS, "network": "hysteria"}},
    "hysteria2": {"settings": {"version": 2}, "streamSettings": {**TLS, "network": "hysteria"}},
    "socks": {"settings": {"auth": "noauth"}},
    "http": {"settings": {"accounts": [{"user": "u", "pass": "p"}]}},
    "mixed": {"settings": {"auth": "noauth"}},
    "dokodemo": {"settings": {"address": "1.1.1.1", "port": 53, "network": "tcp"}},
    "tunnel": {"settings": {"rewriteAddress": "example.com", "rewritePort": 80}},
    "wireguard": {
        "settings": {"peers": [{"publicKey": WG_PEER_KEY, "allowedIPs": ["10.0.0.2/32"]}]}
    },
    "mtproto": {"settings": {"domain": "a.example"}},
}
NO_CLIENTS = ("socks", "http", "mixed", "dokodemo", "tunnel", "wireguard")
AD_TAG = "0123456789abcdef0123456789abcdef"


# ---- helpers ------------------------------------------------------------------------------


def unique(prefix: str = "c") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def path_of(email: str) -> str:
    return quote(email, safe="")


def add_inbound(api, kind: str, **settings) -> dict:
    sample = json.loads(json.dumps(SAMPLES[kind]))
    payload = {"protocol": kind, "port": free_port(), "remark": kind, **sample}
    payload["settings"].update(settings)
    return create_inbound(api, payload)


def add_client(api, inbound_ids: list[int], **fields) -> dict:
    client = {"email": unique(), **fields}
    return ok(api.post(f"{API}/add", {"client": client, "inboundIds": inbound_ids}))


def get_client(api, email: str) -> dict:
    return ok(api.get(f"{API}/get/{path_of(email)}"))


def inbound(api, inbound_id: int) -> dict:
    return ok(api.get(f"{INBOUNDS}/get/{inbound_id}"))


def entry_of(api, inbound_id: int, email: str) -> dict | None:
    """The settings.clients entry of `email` in an inbound, or None."""
    entries = [e for e in inbound(api, inbound_id)["settings"]["clients"] if e["email"] == email]
    assert len(entries) <= 1
    return entries[0] if entries else None


def listed(api, inbound_id: int, slim: bool = False) -> dict:
    rows = ok(api.get(f"{INBOUNDS}/list" + ("/slim" if slim else "")))
    return next(row for row in rows if row["id"] == inbound_id)


def log_ip(panel, key: str, ip: str, seen_at: int) -> None:
    """An IP sighting as IP accounting will record it."""
    db_rows(
        panel, "INSERT INTO client_ip (email_key, ip, seen_at) VALUES (?, ?, ?)", (key, ip, seen_at)
    )


def key_bytes(text: str) -> int:
    return len(base64.b64decode(text, validate=True))


@pytest.fixture(scope="module")
def vless(panel) -> int:
    """A VLESS REALITY inbound shared by tests that need any client-bearing inbound."""
    return add_inbound(panel.client(), "vless")["id"]


# ---- routes: add, get, list ---------------------------------------------------------------


def test_add_get_and_list(api, vless):
    other = add_inbound(api, "vmess")["id"]
    email = unique("full")
    sent = {
        "email": email,
        "id": "1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed",
        "subId": "sub-" + email[-10:],
        "security": "chacha20-poly1305",
        "totalGB": 5 * 1024**3,
        "expiryTime": 1_900_000_000_000,
        "limitIp": 2,
        "reset": 30,
        "tgId": 42,
        "comment": "first",
        "enable": True,
        "group": "team",
    }
    created = ok(api.post(f"{API}/add", {"client": sent, "inboundIds": [other, vless]}))
    for field, value in sent.items():
        assert created[field] == value, field
    assert created["inboundIds"] == sorted([vless, other])
    assert created["traffic"] == {"up": 0, "down": 0, "enable": True}
    assert created["createdAt"] > 0 and created["updatedAt"] == created["createdAt"]

    got = get_client(api, email)
    assert set(got) == {"client", "inboundIds", "externalLinks", "subUrl"}
    assert got["inboundIds"] == sorted([vless, other])
    assert got["externalLinks"] == []
    assert got["client"] == created

    rows = [c for c in ok(api.get(f"{API}/list")) if c["email"] == email]
    assert rows == [created]


@pytest.mark.parametrize("ids", [{}, {"inboundIds": []}, {"inboundIds": None}])
def test_add_needs_at_least_one_inbound(api, ids):
    email = unique("noinb")
    refused(api.post(f"{API}/add", {"client": {"email": email}, **ids}), "inboundIds")
    refused(api.get(f"{API}/get/{email}"), "no client")


def test_add_to_unknown_inbound_changes_nothing(api, vless):
    email = unique("unknown")
    reply = api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [vless, 999999]})
    refused(reply, "no inbound with id 999999")
    refused(api.get(f"{API}/get/{email}"), "no client")
    assert entry_of(api, vless, email) is None


@pytest.mark.parametrize("protocol", NO_CLIENTS)
def test_protocols_without_clients_are_refused(api, vless, protocol):
    target = add_inbound(api, protocol)["id"]
    email = unique("noclients")
    reply = api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [target]})
    refused(reply, f"inbound {target} is {protocol}", "takes no clients")
    refused(api.get(f"{API}/get/{email}"), "no client")

    client = add_client(api, [vless])
    refused(
        api.post(f"{API}/{client['email']}/attach", {"inboundIds": [target]}), "takes no clients"
    )
    assert get_client(api, client["email"])["inboundIds"] == [vless]


@pytest.mark.parametrize("route", ["get/{}", "traffic/{}"])
def test_unknown_email_reads(api, route):
    refused(api.get(f"{API}/{route.format('nobody-here')}"), "no client with email 'nobody-here'")


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("update/{}", {"email": "nobody-here"}),
        ("del/{}", None),
        ("{}/attach", {"inboundIds": [1]}),
        ("{}/detach", {"inboundIds": [1]}),
        ("{}/externalLinks", {"externalLinks": []}),
        ("resetTraffic/{}", None),
        ("updateTraffic/{}", {"upload": 1, "download": 1}),
        ("ips/{}", None),
        ("clearIps/{}", None),
    ],
)
def test_unknown_email_writes(api, vless, route, body):
    refused(api.post(f"{API}/{route.format('nobody-here')}", body), "no client")


def test_auth_and_methods(panel, api):
    anonymous = panel.client(login=False)
    assert anonymous.raw("GET", f"{API}/list").status_code == 401
    assert anonymous.raw("POST", f"{API}/add", json={}).status_code == 401
    no_csrf = requests.post(
        panel.url + f"{API}/add", json={}, cookies=api.http.cookies.get_dict(), timeout=10
    )
    assert no_csrf.status_code == 403
    assert api.raw("GET", f"{API}/add").status_code == 405
    assert api.raw("POST", f"{API}/get/x").status_code == 405


# ---- update ---------------------------------------------------------------------------------


def test_update_replaces_the_record_and_keeps_attachments(api, vless):
    vmess = add_inbound(api, "vmess")["id"]
    created = add_client(
        api,
        [vless, vmess],
        comment="keep me?",
        totalGB=1000,
        limitIp=4,
        group="g1",
        tgId=7,
        reset=10,
        security="aes-128-gcm",
        expiryTime=1_900_000_000_000,
    )
    email = created["email"]
    new_uuid = str(uuid.uuid4())
    updated = ok(api.post(f"{API}/update/{email}", {"email": email, "id": new_uuid, "totalGB": 5}))
    assert updated["id"] == new_uuid
    assert updated["totalGB"] == 5
    for field, default in (
        ("comment", ""),
        ("limitIp", 0),
        ("group", ""),
        ("tgId", 0),
        ("reset", 0),
        ("expiryTime", 0),
        ("security", "auto"),
        ("enable", True),
    ):
        assert updated[field] == default, field
    assert updated["createdAt"] == created["createdAt"]
    assert updated["updatedAt"] >= created["updatedAt"]
    assert updated["inboundIds"] == sorted([vless, vmess])
    assert entry_of(api, vless, email) == {"email": email, "id": new_uuid}
    assert entry_of(api, vmess, email) == {"email": email, "id": new_uuid, "security": "auto"}
    assert get_client(api, email)["client"] == updated


def test_update_accepts_the_client_wrapped(api, vless):
    email = add_client(api, [vless])["email"]
    updated = ok(api.post(f"{API}/update/{email}", {"client": {"email": email, "comment": "w"}}))
    assert updated["comment"] == "w"


def test_rename_moves_traffic_ips_and_entries(panel, api, vless):
    trojan = add_inbound(api, "trojan")["id"]
    old = add_client(api, [vless, trojan])
    ok(api.post(f"{API}/updateTraffic/{old['email']}", {"upload": 111, "download": 222}))
    key = old["email"].casefold()
    log_ip(panel, key, "10.1.1.1", 5)
    db_rows(
        panel, "UPDATE client_traffic SET last_online = 1700000000000 WHERE email_key = ?", (key,)
    )
    new_email = unique("renamed").upper()
    renamed = ok(
        api.post(f"{API}/update/{old['email']}", {**old, "email": new_email, "comment": "moved"})
    )
    assert renamed["email"] == new_email
    assert renamed["traffic"] == {"up": 111, "down": 222, "enable": True}
    refused(api.get(f"{API}/get/{old['email']}"), "no client")
    assert get_client(api, new_email)["inboundIds"] == sorted([vless, trojan])
    assert ok(api.get(f"{API}/traffic/{new_email}"))["up"] == 111
    assert ok(api.post(f"{API}/ips/{new_email}")) == ["10.1.1.1 (5)"]
    assert entry_of(api, vless, old["email"]) is None
    assert entry_of(api, vless, new_email)["id"] == old["id"]
    assert entry_of(api, trojan, new_email)["password"] == old["password"]
    last = ok(api.post(f"{API}/lastOnline"))
    assert last.get(new_email) == 1_700_000_000
    assert old["email"] not in last
    stats = [s for s in listed(api, trojan)["clientStats"] if s["email"] == new_email]
    assert [(s["up"], s["down"]) for s in stats] == [(111, 222)]


def test_case_only_rename_keeps_the_record(api, vless):
    created = add_client(api, [vless])
    ok(api.post(f"{API}/updateTraffic/{created['email']}", {"upload": 5, "download": 6}))
    upper = created["email"].upper()
    renamed = ok(api.post(f"{API}/update/{created['email']}", {**created, "email": upper}))
    assert renamed["email"] == upper
    assert renamed["traffic"]["up"] == 5
    assert ok(api.get(f"{API}/traffic/{created['email']}"))["email"] == upper


def test_rename_onto_an_email_in_use_changes_nothing(api, vless):
    first = add_client(api, [vless])
    second = add_client(api, [vless], comment="second")
    taken = first["email"].upper()
    reply = api.post(f"{API}/update/{second['email']}", {"email": taken, "comment": "x"})
    refused(reply, f"email '{taken}' is already in use")
    assert get_client(api, second["email"])["client"] == second
    assert get_client(api, first["email"])["client"] == first


def test_rename_onto_kept_traffic_merges_counters_and_ip_log(panel, api, vless):
    gone = add_client(api, [vless])
    ok(api.post(f"{API}/updateTraffic/{gone['email']}", {"upload": 10, "download": 20}))
    gone_key = gone["email"].casefold()
    log_ip(panel, gone_key, "10.9.9.9", 100)
    ok(api.post(f"{API}/del/{gone['email']}?keepTraffic=1"))

    other = add_client(api, [vless])
    ok(api.post(f"{API}/updateTraffic/{other['email']}", {"upload": 1, "download": 2}))
    other_key = other["email"].casefold()
    log_ip(panel, other_key, "10.9.9.9", 300)
    log_ip(panel, other_key, "10.8.8.8", 200)

    renamed = ok(api.post(f"{API}/update/{other['email']}", {**other, "email": gone["email"]}))
    assert renamed["traffic"]["up"] == 11 and renamed["traffic"]["down"] == 22
    assert ok(api.post(f"{API}/ips/{gone['email']}")) == ["10.9.9.9 (300)", "10.8.8.8 (200)"]


def test_update_with_bad_payload_changes_nothing(api, vless):
    created = add_client(api, [vless], comment="before")
    email = created["email"]
    for body in ({"email": email, "totalGB": "lots"}, {"email": email, "adTag": "xyz"}, {}):
        refused(api.post(f"{API}/update/{email}", body))
    refused(
        api.raw(
            "POST",
            f"{API}/update/{email}",
            data="null",
            headers={"Content-Type": "application/json"},
        ).json(),
        "JSON object",
    )
    assert get_client(api, email)["client"] == created


# ---- delete -----------------------------------------------------------------------------------


def test_delete_drops_traffic_and_ip_log(panel, api, vless):
    created = add_client(api, [vless])
    email, key = created["email"], created["email"].casefold()
    ok(api.post(f"{API}/updateTraffic/{email}", {"upload": 7, "download": 8}))
    log_ip(panel, key, "10.2.2.2", 1)
    ok(api.post(f"{API}/del/{email}"))
    refused(api.get(f"{API}/get/{email}"), "no client")
    assert entry_of(api, vless, email) is None
    assert db_rows(panel, "SELECT COUNT(*) FROM client_traffic WHERE email_key = ?", (key,)) == [
        (0,)
    ]
    assert db_rows(panel, "SELECT COUNT(*) FROM client_ip WHERE email_key = ?", (key,)) == [(0,)]
    again = ok(api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [vless]}))
    assert again["traffic"] == {"up": 0, "down": 0, "enable": True}


@pytest.mark.parametrize("keep", ["1", "true"])
def test_delete_keeping_traffic(panel, api, vless, keep):
    created = add_client(api, [vless])
    email = created["email"]
    ok(api.post(f"{API}/updateTraffic/{email}", {"upload": 70, "download": 80}))
    ok(api.post(f"{API}/del/{email}?keepTraffic={keep}"))
    refused(api.get(f"{API}/get/{email}"), "no client")
    assert db_rows(
        panel, "SELECT up, down FROM client_traffic WHERE email_key = ?", (email.casefold(),)
    ) == [(70, 80)]
    again = ok(api.post(f"{API}/add", {"client": {"email": email.upper()}, "inboundIds": [vless]}))
    assert again["traffic"] == {"up": 70, "down": 80, "enable": True}
    assert ok(api.get(f"{API}/traffic/{email}"))["email"] == email.upper()


def test_delete_with_a_bad_keep_traffic_changes_nothing(api, vless):
    email = add_client(api, [vless])["email"]
    refused(api.post(f"{API}/del/{email}?keepTraffic=yes"), "keepTraffic")
    assert get_client(api, email)["inboundIds"] == [vless]


# ---- attach and detach -------------------------------------------------------------------------


def test_attach_and_detach(api, vless):
    vmess = add_inbound(api, "vmess")["id"]
    trojan = add_inbound(api, "trojan")["id"]
    created = add_client(api, [vless])
    email = created["email"]
    assert ok(api.post(f"{API}/{email}/attach", {"inboundIds": [vmess, trojan, vless]})) == sorted(
        [vless, vmess, trojan]
    )
    assert get_client(api, email)["inboundIds"] == sorted([vless, vmess, trojan])
    assert entry_of(api, trojan, email) == {"email": email, "password": created["password"]}

    ok(api.post(f"{API}/{email}/detach", {"inboundIds": [vmess]}))
    assert get_client(api, email)["inboundIds"] == sorted([vless, trojan])
    assert entry_of(api, vmess, email) is None
    ok(api.post(f"{API}/{email}/detach", {"inboundIds": [vless, trojan]}))
    kept = get_client(api, email)
    assert kept["inboundIds"] == []
    assert kept["client"]["id"] == created["id"]
    ok(api.post(f"{API}/{email}/attach", {"inboundIds": [vless]}))
    assert entry_of(api, vless, email) == {"email": email, "id": created["id"]}


def test_attach_to_an_unknown_inbound_changes_nothing(api, vless):
    vmess = add_inbound(api, "vmess")["id"]
    email = add_client(api, [vless])["email"]
    reply = api.post(f"{API}/{email}/attach", {"inboundIds": [vmess, 999999]})
    refused(reply, "no inbound with id 999999")
    assert get_client(api, email)["inboundIds"] == [vless]
    assert entry_of(api, vmess, email) is None


@pytest.mark.parametrize("action", ["attach", "detach"])
@pytest.mark.parametrize(
    "body",
    [{}, {"inboundIds": "1"}, {"inboundIds": [1.5]}, {"inboundIds": [True]}, {"inboundIds": [{}]}],
)
def test_attach_and_detach_refuse_bad_ids(api, vless, action, body):
    email = add_client(api, [vless])["email"]
    refused(api.post(f"{API}/{email}/{action}", body), "inboundIds")
    assert get_client(api, email)["inboundIds"] == [vless]


# ---- external links ---------------------------------------------------------------------------


def test_external_links_replace_the_whole_set(api, vless):
    email = add_client(api, [vless])["email"]
    links = [
        {"kind": "link", "value": "vless://abc@example.com:443?type=tcp#one", "remark": "one"},
        {"kind": "subscription", "value": "https://sub.example.com/s/abc", "remark": ""},
        {"kind": "link", "value": "ss://YWVzLTI1Ni1nY206cGFzcw@example.com:8388", "remark": "ss"},
    ]
    ok(api.post(f"{API}/{email}/externalLinks", {"externalLinks": links}))
    assert get_client(api, email)["externalLinks"] == links
    replacement = [{"kind": "subscription", "value": "http://other.example/x", "remark": "r"}]
    ok(api.post(f"{API}/{email}/externalLinks", {"externalLinks": replacement}))
    assert get_client(api, email)["externalLinks"] == replacement
    ok(api.post(f"{API}/{email}/externalLinks", {"externalLinks": []}))
    assert get_client(api, email)["externalLinks"] == []


@pytest.mark.parametrize(
    ("link", "words"),
    [
        ({"kind": "url", "value": "https://a.example"}, ["externalLinks[1].kind"]),
        ({"kind": None, "value": "https://a.example"}, ["kind"]),
        ({"kind": "link", "value": "https://a.example/x"}, ["share link"]),
        ({"kind": "link", "value": "vless://"}, ["share link"]),
        ({"kind": "link", "value": "vless://a b@c:1"}, ["share link"]),
        ({"kind": "subscription", "value": "vless://abc@example.com:443"}, ["http(s) URL"]),
        ({"kind": "subscription", "value": "ftp://example.com/x"}, ["http(s) URL"]),
        ({"kind": "subscription", "value": "https://"}, ["http(s) URL"]),
        ({"kind": "subscription", "value": "http://[::1"}, ["http(s) URL"]),
        ({"kind": "subscription", "value": ""}, ["value"]),
        ({"kind": "subscription", "value": 5}, ["value"]),
        ({"kind": "link", "value": "trojan://p@h:1", "remark": 5}, ["remark"]),
        ("vless://abc@example.com:443", ["externalLinks[1]"]),
    ],
)
def test_bad_external_links_change_nothing(api, vless, link, words):
    email = add_client(api, [vless])["email"]
    good = [{"kind": "link", "value": "trojan://secret@example.com:443", "remark": "t"}]
    ok(api.post(f"{API}/{email}/externalLinks", {"externalLinks": good}))
    reply = api.post(f"{API}/{email}/externalLinks", {"externalLinks": [*good, link]})
    refused(reply, *words)
    assert get_client(api, email)["externalLinks"] == good


@pytest.mark.parametrize("body", [{}, {"externalLinks": {"kind": "link"}}, {"externalLinks": "x"}])
def test_external_links_must_be_an_array(api, vless, body):
    email = add_client(api, [vless])["email"]
    refused(api.post(f"{API}/{email}/externalLinks", body), "externalLinks must be an array")


# ---- traffic ----------------------------------------------------------------------------------


def test_update_traffic_and_traffic_record(api, vless):
    created = add_client(api, [vless], totalGB=1000, expiryTime=1_900_000_000_000)
    email = created["email"]
    ok(api.post(f"{API}/updateTraffic/{email}", {"upload": 300, "download": 400}))
    assert ok(api.get(f"{API}/traffic/{email}")) == {
        "email": email,
        "up": 300,
        "down": 400,
        "total": 1000,
        "expiryTime": 1_900_000_000_000,
        "enable": True,
        "lastOnline": 0,
        "inboundIds": [vless],
        # A panel no other panel manages has no totals pushed down.
        "masterTraffic": None,
    }
    assert get_client(api, email)["client"]["traffic"] == {"up": 300, "down": 400, "enable": True}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"upload": -1, "download": 0}, "upload"),
        ({"upload": "5", "download": 0}, "upload"),
        ({"upload": 1.5, "download": 0}, "upload"),
        ({"upload": True, "download": 0}, "upload"),
        ({"upload": 0, "download": [1]}, "download"),
        ({"upload": 0, "download": None}, "download"),
        ({"upload": 0, "download": 2**63}, "download"),
    ],
)
def test_update_traffic_refuses_bad_counters(api, vless, body, field):
    email = add_client(api, [vless])["email"]
    ok(api.post(f"{API}/updateTraffic/{email}", {"upload": 9, "download": 9}))
    refused(api.post(f"{API}/updateTraffic/{email}", body), field)
    assert ok(api.get(f"{API}/traffic/{email}"))["up"] == 9


def test_update_traffic_needs_an_object(api, vless):
    email = add_client(api, [vless])["email"]
    for data in ("null", "[1, 2]", '"x"'):
        reply = api.raw(
            "POST",
            f"{API}/updateTraffic/{email}",
            data=data,
            headers={"Content-Type": "application/json"},
        )
        assert reply.status_code == 200
        refused(reply.json(), "JSON object")


def test_reset_traffic_re_enables_a_disabled_client(panel, api, vless):
    created = add_client(api, [vless], totalGB=100)
    email = created["email"]
    ok(api.post(f"{API}/updateTraffic/{email}", {"upload": 80, "download": 70}))
    key = email.casefold()
    db_rows(panel, "UPDATE client SET enable = 0 WHERE email_key = ?", (key,))
    db_rows(panel, "UPDATE client_traffic SET enable = 0 WHERE email_key = ?", (key,))
    disabled = get_client(api, email)["client"]
    assert disabled["enable"] is False and disabled["traffic"]["enable"] is False
    stat = next(s for s in listed(api, vless)["clientStats"] if s["email"] == email)
    assert stat["enable"] is False

    ok(api.post(f"{API}/resetTraffic/{email}"))
    client = get_client(api, email)["client"]
    assert client["enable"] is True
    assert client["traffic"] == {"up": 0, "down": 0, "enable": True}
    assert client["totalGB"] == 100
    stat = next(s for s in listed(api, vless)["clientStats"] if s["email"] == email)
    assert (stat["up"], stat["down"], stat["enable"]) == (0, 0, True)


# ---- IPs, presence ------------------------------------------------------------------------------


def test_ips_and_clear_ips(panel, api, vless):
    email = add_client(api, [vless])["email"]
    other = add_client(api, [vless])["email"]
    assert ok(api.post(f"{API}/ips/{email}")) == []
    log_ip(panel, email.casefold(), "203.0.113.5", 1700000000)
    log_ip(panel, email.casefold(), "2001:db8::1", 1700000500)
    log_ip(panel, other.casefold(), "198.51.100.1", 1700000100)
    assert ok(api.post(f"{API}/ips/{email}")) == [
        "2001:db8::1 (1700000500)",
        "203.0.113.5 (1700000000)",
    ]
    assert ok(api.post(f"{API}/ips/{email.upper()}")) == ok(api.post(f"{API}/ips/{email}"))
    ok(api.post(f"{API}/clearIps/{email}"))
    assert ok(api.post(f"{API}/ips/{email}")) == []
    assert ok(api.post(f"{API}/ips/{other}")) == ["198.51.100.1 (1700000100)"]


def panel_guid(panel) -> str:
    return db_rows(panel, "SELECT value FROM setting WHERE key = 'panelGuid'")[0][0]


def test_presence_shapes(panel, api, vless):
    guid = panel_guid(panel)
    assert ok(api.post(f"{API}/onlines")) == []
    assert ok(api.post(f"{API}/onlinesByGuid")) == {guid: []}
    assert ok(api.post(f"{API}/activeInbounds")) == {guid: []}


def test_client_ips_by_guid_and_last_online_read_the_tables(panel, api, vless):
    guid = panel_guid(panel)
    email = add_client(api, [vless])["email"]
    key = email.casefold()
    log_ip(panel, key, "192.0.2.7", 1700000001)
    log_ip(panel, key, "192.0.2.8", 1700000002)
    db_rows(
        panel, "UPDATE client_traffic SET last_online = 1700000123000 WHERE email_key = ?", (key,)
    )
    by_guid = ok(api.post(f"{API}/clientIpsByGuid"))
    assert list(by_guid) == [guid]
    assert by_guid[guid][email] == [
        {"ip": "192.0.2.8", "timestamp": 1700000002},
        {"ip": "192.0.2.7", "timestamp": 1700000001},
    ]
    last = ok(api.post(f"{API}/lastOnline"))
    assert last[email] == 1700000123
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in last.items())
    fresh = add_client(api, [vless])["email"]
    assert fresh not in ok(api.post(f"{API}/lastOnline"))


# ---- client rules over HTTP ------------------------------------------------------------------


def test_secrets_are_generated_and_serve_every_protocol(api, vless):
    created = add_client(api, [vless])
    assert uuid.UUID(created["id"]).version == 4
    assert created["password"] and created["auth"] and created["subId"]
    email = created["email"]
    targets = {kind: add_inbound(api, kind)["id"] for kind in ("trojan", "hysteria2", "vmess")}
    ok(api.post(f"{API}/{email}/attach", {"inboundIds": list(targets.values())}))
    assert entry_of(api, targets["trojan"], email) == {
        "email": email,
        "password": created["password"],
    }
    assert entry_of(api, targets["hysteria2"], email) == {"email": email, "auth": created["auth"]}
    assert entry_of(api, targets["vmess"], email) == {
        "email": email,
        "id": created["id"],
        "security": "auto",
    }
    assert get_client(api, email)["client"]["password"] == created["password"]


@pytest.mark.parametrize(
    ("method", "length"),
    [
        ("2022-blake3-aes-128-gcm", 16),
        ("2022-blake3-aes-256-gcm", 32),
    ],
)
def test_ss2022_keys_have_the_cipher_length(api, vless, method, length):
    ss = add_inbound(api, "shadowsocks", method=method)["id"]
    generated = add_client(api, [ss])
    assert key_bytes(generated["password"]) == length
    assert generated["method"] == ""
    assert entry_of(api, ss, generated["email"]) == {
        "email": generated["email"],
        "password": generated["password"],
    }
    replaced = add_client(api, [ss], password="not-a-key")
    assert key_bytes(replaced["password"]) == length
    kept_key = base64.b64encode(os.urandom(length)).decode()
    assert add_client(api, [ss], password=kept_key)["password"] == kept_key

    existing = add_client(api, [vless])
    ok(api.post(f"{API}/{existing['email']}/attach", {"inboundIds": [ss]}))
    fixed = get_client(api, existing["email"])["client"]
    assert key_bytes(fixed["password"]) == length
    assert entry_of(api, ss, existing["email"])["password"] == fixed["password"]

    updated = ok(api.post(f"{API}/update/{fixed['email']}", {**fixed, "password": "short"}))
    assert key_bytes(updated["password"]) == length


def test_one_client_cannot_hold_two_2022_key_lengths(api, vless):
    short = add_inbound(api, "shadowsocks", method="2022-blake3-aes-128-gcm")["id"]
    long = add_inbound(api, "shadowsocks", method="2022-blake3-aes-256-gcm")["id"]
    created = add_client(api, [short])
    reply = api.post(f"{API}/{created['email']}/attach", {"inboundIds": [long]})
    refused(reply, f"inbound {short}", f"inbound {long}", "key")
    assert get_client(api, created["email"])["client"] == created
    refused(
        api.post(f"{API}/add", {"client": {"email": unique()}, "inboundIds": [short, long]}),
        "key",
    )


def test_the_single_user_2022_cipher_is_refused_clients_on_every_path(api, vless):
    """The core serves 2022-blake3-chacha20-poly1305 to the inbound's own key only: the
    inbound itself is saved, but no client goes on it, and an inbound with clients does
    not switch to it; each refusal changes nothing."""
    single = add_inbound(api, "shadowsocks", method="2022-blake3-chacha20-poly1305")["id"]
    email = unique()
    reply = api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [single]})
    refused(reply, f"inbound {single}", "one user", "2022-blake3-aes-256-gcm")
    assert not api.get(f"{API}/get/{path_of(email)}")["success"]

    existing = add_client(api, [vless])
    reply = api.post(f"{API}/{path_of(existing['email'])}/attach", {"inboundIds": [single]})
    refused(reply, "one user")
    assert get_client(api, existing["email"])["inboundIds"] == [vless]

    multi = add_inbound(api, "shadowsocks", method="2022-blake3-aes-256-gcm")
    client = add_client(api, [multi["id"]])
    method = "2022-blake3-chacha20-poly1305"
    switched = {**multi, "settings": {**multi["settings"], "method": method}}
    reply = api.post(f"{INBOUNDS}/update/{multi['id']}", switched)
    refused(reply, client["email"], "one user")
    assert inbound(api, multi["id"])["settings"]["method"] == "2022-blake3-aes-256-gcm"
    assert entry_of(api, multi["id"], client["email"])["password"] == client["password"]


@pytest.mark.parametrize(
    "method", ["aes-256-gcm", "aes-128-gcm", "chacha20-ietf-poly1305", "xchacha20-poly1305"]
)
def test_legacy_ciphers_are_copied_to_the_client(api, method):
    ss = add_inbound(api, "shadowsocks", method=method)["id"]
    created = add_client(api, [ss], password="plain secret")
    assert created["method"] == method
    assert created["password"] == "plain secret"
    assert entry_of(api, ss, created["email"]) == {
        "email": created["email"],
        "password": "plain secret",
        "method": method,
    }


def test_each_shadowsocks_entry_names_its_own_inbound_cipher(api):
    aes = add_inbound(api, "shadowsocks", method="aes-256-gcm")["id"]
    chacha = add_inbound(api, "shadowsocks", method="chacha20-ietf-poly1305")["id"]
    blake = add_inbound(api, "shadowsocks", method="2022-blake3-aes-256-gcm")["id"]
    email = add_client(api, [aes, chacha, blake])["email"]
    assert entry_of(api, aes, email)["method"] == "aes-256-gcm"
    assert entry_of(api, chacha, email)["method"] == "chacha20-ietf-poly1305"
    assert "method" not in entry_of(api, blake, email)


def test_changing_an_inbound_cipher_refits_its_clients(api):
    ss = add_inbound(api, "shadowsocks", method="aes-256-gcm")
    created = add_client(api, [ss["id"]], password="legacy secret")
    payload = {k: ss[k] for k in ("protocol", "port", "remark", "settings", "streamSettings")}
    payload["settings"] = {"method": "2022-blake3-aes-128-gcm"}
    ok(api.post(f"{INBOUNDS}/update/{ss['id']}", payload))
    refitted = get_client(api, created["email"])["client"]
    assert key_bytes(refitted["password"]) == 16
    assert entry_of(api, ss["id"], created["email"]) == {
        "email": created["email"],
        "password": refitted["password"],
    }


def test_an_inbound_with_clients_cannot_become_clientless(api):
    trojan = add_inbound(api, "trojan")
    email = add_client(api, [trojan["id"]])["email"]
    payload = {"protocol": "socks", "port": trojan["port"], "settings": {"auth": "noauth"}}
    refused(api.post(f"{INBOUNDS}/update/{trojan['id']}", payload), "1 client(s)", "socks")
    assert inbound(api, trojan["id"])["protocol"] == "trojan"
    ok(api.post(f"{API}/{email}/detach", {"inboundIds": [trojan["id"]]}))
    assert ok(api.post(f"{INBOUNDS}/update/{trojan['id']}", payload))["protocol"] == "socks"


def test_flow_only_on_flow_capable_vless_inbounds(api, vless):
    plain = add_inbound(api, "vless-ws")["id"]
    trojan = add_inbound(api, "trojan")["id"]
    created = add_client(api, [vless, plain, trojan], flow="xtls-rprx-vision")
    email = created["email"]
    assert created["flow"] == "xtls-rprx-vision"
    assert entry_of(api, vless, email) == {
        "email": email,
        "id": created["id"],
        "flow": "xtls-rprx-vision",
    }
    assert entry_of(api, plain, email) == {"email": email, "id": created["id"]}
    # The core refuses a Trojan user with a flow ("Flow for Trojan" is a removed feature).
    assert entry_of(api, trojan, email) == {"email": email, "password": created["password"]}
    options = {o["id"]: o["tlsFlowCapable"] for o in ok(api.get(f"{INBOUNDS}/options"))}
    assert options[vless] is True and options[plain] is False
    refused(
        api.post(
            f"{API}/add",
            {"client": {"email": unique(), "flow": "xtls-rprx-direct"}, "inboundIds": [vless]},
        ),
        "flow",
    )


@pytest.mark.parametrize("reverse", [{"tag": "r-out"}, '{"tag": "r-out"}'])
def test_reverse_as_object_or_json_text(api, vless, reverse):
    created = add_client(api, [vless], reverse=reverse)
    assert created["reverse"] == {"tag": "r-out"}
    assert get_client(api, created["email"])["client"]["reverse"] == {"tag": "r-out"}
    assert entry_of(api, vless, created["email"])["reverse"] == {"tag": "r-out"}
    cleared = ok(api.post(f"{API}/update/{created['email']}", {**created, "reverse": {"tag": ""}}))
    assert cleared["reverse"] is None
    assert "reverse" not in entry_of(api, vless, created["email"])


def test_negative_expiry_starts_on_first_use(api, vless):
    created = add_client(api, [vless], expiryTime=-3 * 86_400_000)
    assert created["expiryTime"] == -3 * 86_400_000
    stat = next(s for s in listed(api, vless)["clientStats"] if s["email"] == created["email"])
    assert stat["expiryTime"] == -3 * 86_400_000


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Bob", "bob"),
        ("bob", "BOB"),
        ("\uff42\uff4f\uff42", "bob"),  # fullwidth letters, NFKC-equal to "bob"
        ("carol", "\uff23\uff21\uff32\uff2f\uff2c"),  # fullwidth capitals
        ("\ufb01le", "FILE"),  # the "fi" ligature
    ],
)
def test_emails_are_unique_ignoring_case_and_unicode_forms(api, vless, first, second):
    """Emails are one namespace across the panel, compared after NFKC and case folding."""
    suffix = "-" + uuid.uuid4().hex[:8]
    original = add_client(api, [vless], email=first + suffix)
    reply = api.post(f"{API}/add", {"client": {"email": second + suffix}, "inboundIds": [vless]})
    refused(reply, f"email '{second + suffix}' is already in use")
    # Any spelling finds the one client in a path.
    assert get_client(api, second + suffix)["client"]["email"] == first + suffix
    rows = [c for c in ok(api.get(f"{API}/list")) if c["email"].endswith(suffix)]
    assert rows == [original]


@pytest.mark.parametrize(
    "email",
    ["user+tag@example.com", "a%20b", "a b", "a?b#c;d", "\u540d\u524d", "\U0001f600x", "..x"],
)
def test_any_accepted_email_is_reachable_in_paths(api, vless, email):
    email += "-" + uuid.uuid4().hex[:6]
    ok(api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [vless]}))
    assert get_client(api, email)["client"]["email"] == email
    assert ok(api.post(f"{API}/update/{path_of(email)}", {"email": email, "comment": "p"}))
    assert ok(api.get(f"{API}/traffic/{path_of(email)}"))["email"] == email
    ok(api.post(f"{API}/del/{path_of(email)}"))
    refused(api.get(f"{API}/get/{path_of(email)}"), "no client")


@pytest.mark.parametrize("email", [".", ".."])
def test_dot_segment_emails_are_refused(api, vless, email):
    """A URL path cannot carry them (clients resolve them away), so they are refused."""
    reply = api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [vless]})
    refused(reply, "email may not be '.' or '..'")


def test_email_that_normalises_too_long_is_refused(api, vless):
    email = "\ufdfa" * 100  # one character each, eighteen after NFKC
    reply = api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [vless]})
    refused(reply, "email may be at most 255 characters")


def test_group_that_normalises_too_long_is_refused(api, vless):
    email = unique("grp")
    reply = api.post(
        f"{API}/add", {"client": {"email": email, "group": "\ufdfa" * 10}, "inboundIds": [vless]}
    )
    refused(reply, "group must be a string of at most 64 characters")
    refused(api.get(f"{API}/get/{email}"), "no client")


def test_ad_tag_is_checked_on_add_and_update(api, vless):
    created = add_client(api, [vless], adTag=AD_TAG.upper())
    assert created["adTag"] == AD_TAG
    for bad in (AD_TAG[:-1], AD_TAG + "0", AD_TAG[:-1] + "g", 5, [AD_TAG], " " + AD_TAG[1:]):
        reply = api.post(
            f"{API}/add", {"client": {"email": unique(), "adTag": bad}, "inboundIds": [vless]}
        )
        refused(reply, "adTag must be exactly 32 hexadecimal characters")
        reply = api.post(f"{API}/update/{created['email']}", {**created, "adTag": bad})
        refused(reply, "adTag must be exactly 32 hexadecimal characters")
    assert get_client(api, created["email"])["client"]["adTag"] == AD_TAG
    cleared = ok(api.post(f"{API}/update/{created['email']}", {**created, "adTag": ""}))
    assert cleared["adTag"] == ""


MALFORMED = [
    ("email", 5),
    ("email", ["a"]),
    ("email", {"a": 1}),
    ("email", None),
    ("email", " padded"),
    ("email", "a/b"),
    ("email", "a>>>b"),
    ("id", 5),
    ("id", "not-a-uuid"),
    ("id", ["1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed"]),
    ("password", 5),
    ("password", {"p": 1}),
    ("auth", True),
    ("flow", 1),
    ("flow", "xtls-rprx-direct"),
    ("security", ["auto"]),
    ("security", "rc4"),
    ("reverse", 5),
    ("reverse", ["tag"]),
    ("reverse", "not json"),
    ("reverse", {"tag": 5}),
    ("subId", 5),
    ("subId", "with space"),
    ("totalGB", "ten"),
    ("totalGB", [1]),
    ("totalGB", {"gb": 1}),
    ("totalGB", -1),
    ("totalGB", 1.5),
    ("totalGB", True),
    ("expiryTime", "tomorrow"),
    ("expiryTime", [0]),
    ("limitIp", "two"),
    ("limitIp", -1),
    ("reset", {"days": 1}),
    ("tgId", "me"),
    ("tgId", False),
    ("comment", 5),
    ("comment", ["c"]),
    ("enable", "yes"),
    ("enable", 1),
    ("enable", {"on": True}),
    ("group", 5),
    ("group", ["g"]),
    ("adTag", 5),
]


@pytest.mark.parametrize(("field", "value"), MALFORMED)
def test_malformed_fields_are_refused_by_name(api, vless, field, value):
    email = unique("bad")
    client = {"email": email, field: value}
    refused(api.post(f"{API}/add", {"client": client, "inboundIds": [vless]}), field)
    refused(api.get(f"{API}/get/{email}"), "no client")


@pytest.mark.parametrize(("field", "value"), MALFORMED)
def test_malformed_updates_change_nothing(api, vless, field, value):
    created = add_client(api, [vless], comment="stable")
    reply = api.post(f"{API}/update/{created['email']}", {**created, field: value})
    refused(reply, field)
    assert get_client(api, created["email"])["client"] == created


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("null", ["JSON object"]),
        ("[]", ["JSON object"]),
        ('"client"', ["JSON object"]),
        ('{"client": null, "inboundIds": [1]}', ["client"]),
        ('{"client": [], "inboundIds": [1]}', ["client"]),
        ('{"client": "{}", "inboundIds": [1]}', ["client"]),
        ('{"client": {"email": "m"}, "inboundIds": {"0": 1}}', ["inboundIds"]),
        ('{"client": {"email": "m"}, "inboundIds": ["one"]}', ["inboundIds"]),
        ('{"client": {"email": "m"}, "inboundIds": 1}', ["inboundIds"]),
        ("{not json", ["not valid JSON"]),
    ],
)
def test_malformed_add_bodies(api, data, words):
    before = len(ok(api.get(f"{API}/list")))
    reply = api.raw("POST", f"{API}/add", data=data, headers={"Content-Type": "application/json"})
    assert reply.status_code == 200
    refused(reply.json(), *words)
    assert len(ok(api.get(f"{API}/list"))) == before


# ---- inbounds come alive ----------------------------------------------------------------------


def test_client_stats_in_the_inbound_list(api):
    trojan = add_inbound(api, "trojan")["id"]
    first = add_client(api, [trojan], totalGB=5000, expiryTime=1_900_000_000_000, reset=7)
    second = add_client(api, [trojan], enable=False)
    ok(api.post(f"{API}/updateTraffic/{first['email']}", {"upload": 12, "download": 34}))
    stats = {s["email"]: s for s in listed(api, trojan)["clientStats"]}
    assert set(stats) == {first["email"], second["email"]}
    assert stats[first["email"]] == {
        "inboundId": trojan,
        "email": first["email"],
        "up": 12,
        "down": 34,
        "total": 5000,
        "expiryTime": 1_900_000_000_000,
        "reset": 7,
        "enable": True,
        "lastOnline": 0,
    }
    assert stats[second["email"]]["enable"] is False
    assert inbound(api, trojan)["clientStats"] == listed(api, trojan)["clientStats"]


@pytest.mark.parametrize(
    ("kind", "extra", "keys"),
    [
        ("vless", {"flow": "xtls-rprx-vision", "reverse": {"tag": "r"}}, {"id", "flow", "reverse"}),
        ("vless", {}, {"id"}),
        ("vless-ws", {"flow": "xtls-rprx-vision"}, {"id"}),
        ("vmess", {"security": "aes-128-gcm"}, {"id", "security"}),
        ("trojan", {"flow": "xtls-rprx-vision"}, {"password"}),
        ("shadowsocks", {}, {"password", "method"}),
        ("hysteria", {}, {"auth"}),
        ("hysteria2", {}, {"auth"}),
    ],
)
def test_settings_clients_carry_only_protocol_fields(api, kind, extra, keys):
    target = add_inbound(api, kind)["id"]
    full = {
        "comment": "c",
        "totalGB": 9,
        "limitIp": 1,
        "tgId": 5,
        "group": "g",
        "adTag": AD_TAG,
        "subId": "s" + uuid.uuid4().hex[:8],
        **extra,
    }
    email = add_client(api, [target], **full)["email"]
    entries = inbound(api, target)["settings"]["clients"]
    assert [set(e) for e in entries] == [{"email", *keys}]
    assert listed(api, target)["settings"]["clients"] == entries
    assert entries[0]["email"] == email


def test_slim_list_reduces_clients(api):
    vmess = add_inbound(api, "vmess")["id"]
    first = add_client(api, [vmess], comment="hello")
    second = add_client(api, [vmess], enable=False)
    slim = listed(api, vmess, slim=True)
    assert slim["settings"]["clients"] == [
        {"email": first["email"], "enable": True, "comment": "hello"},
        {"email": second["email"], "enable": False, "comment": ""},
    ]
    assert slim["clientStats"] == []


def test_del_all_clients(panel, api, vless):
    target = add_inbound(api, "vmess")["id"]
    only_here = add_client(api, [target])
    also_elsewhere = add_client(api, [target, vless])
    bystander = add_client(api, [vless])
    ok(api.post(f"{API}/updateTraffic/{only_here['email']}", {"upload": 1, "download": 1}))
    assert ok(api.post(f"{INBOUNDS}/{target}/delAllClients")) == {"deleted": 2}
    refused(api.get(f"{API}/get/{only_here['email']}"), "no client")
    key = only_here["email"].casefold()
    assert db_rows(panel, "SELECT COUNT(*) FROM client_traffic WHERE email_key = ?", (key,)) == [
        (0,)
    ]
    assert get_client(api, also_elsewhere["email"])["inboundIds"] == [vless]
    assert get_client(api, bystander["email"])["inboundIds"] == [vless]
    assert inbound(api, target)["settings"]["clients"] == []
    assert ok(api.post(f"{INBOUNDS}/{target}/delAllClients")) == {"deleted": 0}
    refused(api.post(f"{INBOUNDS}/999999/delAllClients"), "no inbound with id 999999")
    refused(api.post(f"{INBOUNDS}/abc/delAllClients"), "inbound id")


def test_deleting_an_inbound_detaches_its_clients(api, vless):
    target = add_inbound(api, "trojan")["id"]
    only_here = add_client(api, [target])
    shared = add_client(api, [target, vless])
    ok(api.post(f"{INBOUNDS}/del/{target}"))
    assert get_client(api, only_here["email"])["client"]["id"] == only_here["id"]
    assert get_client(api, only_here["email"])["inboundIds"] == []
    assert get_client(api, shared["email"])["inboundIds"] == [vless]


# ---- the invalidate push ----------------------------------------------------------------------


def ws_connect(panel, client) -> websocket.WebSocket:
    cookie = "; ".join(f"{name}={value}" for name, value in client.http.cookies.items())
    url = panel.url.replace("http", "ws", 1) + "/ws"
    return websocket.create_connection(url, timeout=PUSH_WAIT, cookie=cookie)


def next_invalidate(ws, deadline: float) -> str:
    while time.time() < deadline:
        ws.settimeout(max(deadline - time.time(), 0.1))
        message = json.loads(ws.recv())
        if message.get("type") == "invalidate":
            return message["resource"]
    raise AssertionError("no invalidate message before the deadline")


def test_every_client_mutation_pushes_invalidate_clients(panel, api, vless):
    vmess = add_inbound(api, "vmess")["id"]
    email = unique("ws")
    link = {"kind": "link", "value": "vless://a@b:1", "remark": ""}
    mutations = [
        ("add", {"client": {"email": email}, "inboundIds": [vless]}),
        (f"update/{email}", {"email": email, "comment": "pushed"}),
        (f"{email}/attach", {"inboundIds": [vmess]}),
        (f"{email}/detach", {"inboundIds": [vmess]}),
        (f"{email}/externalLinks", {"externalLinks": [link]}),
        (f"updateTraffic/{email}", {"upload": 1, "download": 2}),
        (f"resetTraffic/{email}", None),
        (f"clearIps/{email}", None),
        (f"del/{email}", None),
    ]
    ws = ws_connect(panel, api)
    try:
        for route, body in mutations:
            ok(api.post(f"{API}/{route}", body))
            assert next_invalidate(ws, time.time() + PUSH_WAIT) == "clients", route
        # A refused mutation pushes nothing: the next invalidate is the marker's.
        refused(api.post(f"{API}/update/{email}", {"email": email}))
        add_inbound(api, "vmess")
        assert next_invalidate(ws, time.time() + PUSH_WAIT) == "inbounds"
    finally:
        ws.close()


def test_del_all_clients_pushes_invalidate_clients(panel, api):
    target = add_inbound(api, "vmess")["id"]
    add_client(api, [target])
    ws = ws_connect(panel, api)
    try:
        ok(api.post(f"{INBOUNDS}/{target}/delAllClients"))
        ok(api.post("/panel/api/setting/apiTokens/create", {"name": unique("marker")}))
        pushed = []
        deadline = time.time() + PUSH_WAIT
        while "apiTokens" not in pushed:
            pushed.append(next_invalidate(ws, deadline))
        assert "clients" in pushed
    finally:
        ws.close()


# ---- concurrency --------------------------------------------------------------------------------


def test_parallel_adds_of_one_email_create_one_client(api, vless):
    email = unique("race")
    bodies = [
        {"client": {"email": email if n % 2 else email.upper()}, "inboundIds": [vless]}
        for n in range(50)
    ]
    results = post_at_once(api, f"{API}/add", bodies)
    assert collections.Counter(status for status, _ in results) == {200: 50}
    created = [body for _, body in results if body["success"]]
    failures = [body for _, body in results if not body["success"]]
    assert len(created) == 1 and len(failures) == 49
    for body in failures:
        assert body["msg"].endswith("is already in use"), body
        assert email.casefold() in body["msg"].casefold()
    rows = [c for c in ok(api.get(f"{API}/list")) if c["email"].casefold() == email.casefold()]
    assert len(rows) == 1
    assert entry_of(api, vless, rows[0]["email"]) is not None
