"""The core config builder: golden configs per protocol and transport, the rules that
decide what runs, and the stand-in core accepting what the builder writes for it.

Inbound views are made the way the panel makes them: the payload goes through
`normalize_inbound` (defaults filled in as stored), and `settings.clients` is derived for
display from every attached client, as `Inbounds.list()` does, so the builder is seen to
decide by the client rows alone. Each golden file under tests/golden/config/ is the core
inbound (or, for the full config, the whole document) written by hand from Xray's
documented schema, not captured from the builder.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from helpers import GOLDEN, write_self_signed

from appliance.core.config import api_inbound, build_config, config_fingerprint
from appliance.core.entries import client_entry
from appliance.core.template import default_template
from appliance.domain.client_rules import legacy_method
from appliance.domain.inbound_rules import (
    CLIENT_PROTOCOLS,
    normalize_inbound,
    tls_flow_capable,
)

CONFIGS = GOLDEN / "config"
NOW = 1_800_000_000_000
DAY = 86_400_000
API_PORT = 62789
V2RAY = shutil.which("v2ray") or "/usr/bin/v2ray"

ALICE_ID = "1d86a1c9-8b08-4a27-8335-d5754d0555ec"
BOB_ID = "c748e82e-d087-455f-a4a9-e6b8d64d6682"
REALITY_KEY = "af-0xeY9CBUvxLPhTE1KS4qLlidSTkO6LF4o1acIJDs"
SS2022_SERVER = "z3DL7ZXsqacckOiqSs6TVw=="
SS2022_ALICE = "qxdOq37lFMURIXviQb527Q=="
SS2022_BOB = "WdGZLTCxQD07IFv4e9geeA=="
WG_SECRET = "10kvStNmf1LRMczcr1FvFdu53IqCfz0EGt3jZd2Uf3Q="
WG_PEER = "CusVISFPl6iI1BMKXgSsriVy5nUlXijW7Y9mxGCeBxA="
API_SERVICES = ["HandlerService", "StatsService"]
CERT_FILES = {"certificateFile": "/etc/ssl/vpn.crt", "keyFile": "/etc/ssl/vpn.key"}


def client(email: str, **fields) -> dict:
    """A client's API view (`client_api_view`), active unless told otherwise."""
    view = {
        "id": ALICE_ID,
        "email": email,
        "subId": f"sub-{email}",
        "password": f"{email}-secret",
        "auth": f"{email}-auth",
        "flow": "",
        "security": "auto",
        "reverse": None,
        "totalGB": 0,
        "expiryTime": 0,
        "limitIp": 0,
        "reset": 0,
        "tgId": 0,
        "comment": "",
        "enable": True,
        "group": "",
        "adTag": "",
        "method": "",
        "createdAt": 0,
        "updatedAt": 0,
        "inboundIds": [],
        "traffic": {"up": 0, "down": 0, "enable": True},
    }
    view.update(fields)
    return view


def inbound(payload: dict, clients=(), fallbacks=(), inbound_id: int = 1, **counters) -> dict:
    """An `Inbounds.list()` view of `payload` plus its `clientRows`."""
    record = normalize_inbound(payload)
    protocol, settings = record["protocol"], record["settings"]
    if protocol in CLIENT_PROTOCOLS:
        capable = tls_flow_capable(record)
        method = legacy_method(settings.get("method")) if protocol == "shadowsocks" else ""
        settings["clients"] = [client_entry(protocol, c, capable, method) for c in clients]
    if fallbacks:
        settings["fallbacks"] = list(fallbacks)
    return {
        "id": inbound_id,
        "remark": "",
        "tag": record["tag"],
        "protocol": protocol,
        "listen": record["listen"],
        "port": record["port"],
        "enable": record["enable"],
        "expiryTime": record["expiryTime"],
        "total": record["total"],
        "up": counters.get("up", 0),
        "down": counters.get("down", 0),
        "settings": settings,
        "streamSettings": record["streamSettings"],
        "sniffing": record["sniffing"],
        "clientStats": [],
        "nodeId": record["nodeId"],
        "createdAt": 0,
        "updatedAt": 0,
        "clientRows": list(clients),
    }


def built_inbounds(views: list[dict], flavor: str = "xray", template=None) -> list[dict]:
    """The panel's inbounds in the built config (after the API inbound)."""
    config = build_config(
        template or default_template(), views, API_PORT, flavor=flavor, now_ms=NOW
    )
    assert config["inbounds"][0] == api_inbound(API_PORT)
    return config["inbounds"][1:]


def emails(core_inbound: dict) -> list[str]:
    return [entry["email"] for entry in core_inbound["settings"]["clients"]]


# ---- one case per protocol and transport -------------------------------------------------

TLS = {"certificates": [CERT_FILES]}

CASES = {
    "vless_reality_vision": inbound(
        {
            "tag": "vless-reality",
            "port": 443,
            "protocol": "vless",
            "settings": {"decryption": "none"},
            "streamSettings": {
                "network": "tcp",
                "security": "reality",
                "tcpSettings": {"header": {"type": "none"}},
                "realitySettings": {
                    "show": False,
                    "target": "www.example.com:443",
                    "xver": 0,
                    "serverNames": ["www.example.com"],
                    "privateKey": REALITY_KEY,
                    "shortIds": ["", "fe7c0cc0b94548ec"],
                },
                # Left behind by the UI when the network or security was switched.
                "wsSettings": {"path": "/old"},
                "tlsSettings": {"serverName": "old.example.com"},
                "externalProxy": [{"dest": "cdn.example.com", "port": 443, "remark": "cdn"}],
            },
            "sniffing": {"enabled": True, "destOverride": ["http", "tls", "quic"]},
        },
        clients=[
            client("alice", flow="xtls-rprx-vision"),
            client("bob", id=BOB_ID, password="bob-secret"),
        ],
    ),
    "vless_ws_tls": inbound(
        {
            "tag": "vless-ws",
            "port": 8443,
            "protocol": "vless",
            "streamSettings": {
                "network": "ws",
                "security": "tls",
                "tlsSettings": {
                    "serverName": "vpn.example.com",
                    "alpn": ["http/1.1"],
                    "certificates": [CERT_FILES],
                },
                "wsSettings": {"path": "/ws", "host": "vpn.example.com"},
            },
        },
        # A Vision flow is for raw TCP under TLS/REALITY only: dropped on WebSocket.
        clients=[client("alice", flow="xtls-rprx-vision")],
    ),
    "vless_xhttp_encryption": inbound(
        {
            "tag": "vless-xhttp",
            "port": 2083,
            "protocol": "vless",
            "settings": {"decryption": "mlkem768x25519plus.native.600s.qxdOq37lFMURIXviQb527Q"},
            "streamSettings": {
                "network": "xhttp",
                "security": "none",
                "xhttpSettings": {"path": "/xh", "host": "", "mode": "auto"},
            },
        },
        clients=[client("alice", flow="xtls-rprx-vision")],
    ),
    "vless_grpc": inbound(
        {
            "tag": "vless-grpc",
            "port": 2096,
            "protocol": "vless",
            "streamSettings": {
                "network": "grpc",
                "security": "tls",
                "grpcSettings": {"serviceName": "svc", "multiMode": False},
                "tlsSettings": TLS,
            },
        },
        clients=[client("alice", flow="xtls-rprx-vision")],
    ),
    "vless_httpupgrade": inbound(
        {
            "tag": "vless-httpupgrade",
            "port": 8080,
            "protocol": "vless",
            "streamSettings": {
                "network": "httpupgrade",
                "httpupgradeSettings": {"path": "/up", "host": "up.example.com"},
            },
        },
        clients=[client("alice")],
    ),
    "vmess_ws": inbound(
        {
            "tag": "vmess-ws",
            "port": 10086,
            "protocol": "vmess",
            "streamSettings": {"network": "ws", "wsSettings": {"path": "/vm"}},
        },
        clients=[
            client("alice", security="aes-128-gcm"),
            client("bob", id=BOB_ID, security=""),
        ],
    ),
    "vmess_kcp": inbound(
        {
            "tag": "vmess-kcp",
            "port": 10087,
            "protocol": "vmess",
            "streamSettings": {
                "network": "kcp",
                "kcpSettings": {
                    "mtu": 1350,
                    "tti": 50,
                    "uplinkCapacity": 5,
                    "downlinkCapacity": 20,
                    "congestion": False,
                    "header": {"type": "wechat-video"},
                    "seed": "kcp-seed",
                },
            },
        },
        clients=[client("alice")],
    ),
    "trojan_tls_fallbacks": inbound(
        {
            "tag": "trojan-tls",
            "port": 443,
            "protocol": "trojan",
            "streamSettings": {
                "network": "tcp",
                "security": "tls",
                "tlsSettings": {"alpn": ["h2", "http/1.1"], "certificates": [CERT_FILES]},
            },
        },
        clients=[client("alice", flow="xtls-rprx-vision")],
        # As the panel renders them: the second rule points at a child inbound listening
        # on 127.0.0.1:20001, resolved to its address.
        fallbacks=[
            {"dest": 8080},
            {"dest": "127.0.0.1:20001", "path": "/ws", "xver": 1},
            {"dest": "/run/nginx.sock", "alpn": "h2"},
        ],
    ),
    "shadowsocks_aes_256_gcm": inbound(
        {
            "tag": "ss-legacy",
            "port": 8388,
            "protocol": "shadowsocks",
            "settings": {"method": "aes-256-gcm", "network": "udp,tcp"},
        },
        clients=[
            client("alice", password="alice-pass", method=""),
            # A cipher copied from another inbound: this inbound's own is what links use.
            client("bob", password="bob-pass", method="chacha20-poly1305"),
        ],
    ),
    "shadowsocks_2022_multi": inbound(
        {
            "tag": "ss-2022",
            "port": 8389,
            "protocol": "shadowsocks",
            "settings": {
                "method": "2022-blake3-aes-128-gcm",
                "password": SS2022_SERVER,
                "network": "tcp,udp",
            },
        },
        clients=[
            client("alice", password=SS2022_ALICE),
            client("bob", password=SS2022_BOB),
        ],
    ),
    "hysteria2": inbound(
        {
            "tag": "hy2",
            "port": 8443,
            "protocol": "hysteria2",
            "streamSettings": {
                "network": "hysteria",
                "security": "tls",
                "tlsSettings": {"alpn": ["h3"], "certificates": [CERT_FILES]},
                "hysteriaSettings": {
                    "udpIdleTimeout": 60,
                    "masquerade": {"type": "string", "content": "not found", "statusCode": 404},
                },
            },
        },
        clients=[client("alice")],
    ),
    "wireguard": inbound(
        {
            "tag": "wg",
            "port": 51820,
            "protocol": "wireguard",
            "settings": {
                "secretKey": WG_SECRET,
                # The keys the panel shows a peer; the core config has neither.
                "pubKey": WG_PEER,
                "peers": [
                    {
                        "publicKey": WG_PEER,
                        "privateKey": WG_SECRET,
                        "allowedIPs": ["10.0.0.2/32"],
                        "keepAlive": 25,
                    }
                ],
                "mtu": 1420,
            },
        }
    ),
    "socks_accounts": inbound(
        {
            "tag": "socks",
            "listen": "127.0.0.1",
            "port": 1080,
            "protocol": "socks",
            "settings": {
                "auth": "password",
                "accounts": [{"user": "u1", "pass": "p1"}],
                "udp": True,
                "ip": "127.0.0.1",
            },
        }
    ),
    "http": inbound(
        {
            "tag": "http",
            "port": 3128,
            "protocol": "http",
            "settings": {"accounts": [{"user": "u1", "pass": "p1"}]},
        }
    ),
    "mixed": inbound(
        {"tag": "mixed", "port": 2080, "protocol": "mixed", "settings": {"auth": "noauth"}}
    ),
    "dokodemo": inbound(
        {
            "tag": "dns-forward",
            "port": 5353,
            "protocol": "dokodemo",
            "settings": {"address": "1.1.1.1", "port": 53, "network": "tcp,udp"},
        }
    ),
    "tunnel": inbound(
        {
            "tag": "ssh-tunnel",
            "port": 6000,
            "protocol": "tunnel",
            "settings": {
                "address": "10.0.0.5",
                "port": 22,
                "network": "tcp",
                "portMap": {"6001": "10.0.0.6:22"},
            },
        }
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inbound_matches_its_golden_file(name):
    golden = json.loads((CONFIGS / f"{name}.json").read_text())
    assert built_inbounds([CASES[name]]) == [golden]


def test_full_config_from_the_default_template_matches_its_golden_file():
    golden = json.loads((CONFIGS / "full_default_template.json").read_text())
    config = build_config(default_template(), [CASES["vless_ws_tls"]], API_PORT, now_ms=NOW)
    assert config == golden
    assert list(config) == list(golden)


def test_every_golden_file_is_used():
    names = {path.stem for path in CONFIGS.glob("*.json")}
    assert names == set(CASES) | {"full_default_template"}


# ---- which inbounds run ------------------------------------------------------------------


def simple(tag: str, **fields) -> dict:
    payload = {"tag": tag, "port": 20000 + len(tag), "protocol": "vmess", **fields}
    return inbound(payload, clients=[client(f"{tag}-user")])


def test_disabled_expired_over_quota_node_and_mtproto_inbounds_are_left_out():
    views = [
        simple("running"),
        simple("disabled", enable=False),
        simple("expired", expiryTime=NOW - 1),
        simple("expires-now", expiryTime=NOW),
        simple("expires-later", expiryTime=NOW + DAY),
        inbound(
            {"tag": "quota-used", "port": 20100, "protocol": "vmess", "total": 1000},
            up=600,
            down=400,
        ),
        inbound(
            {"tag": "quota-left", "port": 20101, "protocol": "vmess", "total": 1000},
            up=600,
            down=399,
        ),
        simple("on-node", nodeId=3),
        inbound({"tag": "telegram", "port": 20102, "protocol": "mtproto"}),
    ]
    assert [i["tag"] for i in built_inbounds(views)] == ["running", "expires-later", "quota-left"]


def test_an_inbound_without_a_limit_runs_whatever_its_counters():
    view = inbound({"tag": "free", "port": 20200, "protocol": "vmess"}, up=10**15, down=10**15)
    assert [i["tag"] for i in built_inbounds([view])] == ["free"]


# ---- which clients connect ---------------------------------------------------------------


def test_only_clients_that_may_connect_get_an_entry():
    rows = [
        client("active"),
        client("disabled", enable=False),
        client("traffic-off", traffic={"up": 0, "down": 0, "enable": False}),
        client("quota-used", totalGB=1000, traffic={"up": 999, "down": 1, "enable": True}),
        client("quota-left", totalGB=1000, traffic={"up": 998, "down": 1, "enable": True}),
        client("expired", expiryTime=NOW - 1),
        client("expires-now", expiryTime=NOW),
        client("expires-later", expiryTime=NOW + DAY),
        client("starts-on-first-use", expiryTime=-7 * DAY),
    ]
    view = inbound({"tag": "v", "port": 20300, "protocol": "vless"}, clients=rows)
    # The derived display list names every client; the builder must not go by it.
    assert len(view["settings"]["clients"]) == len(rows)
    (built,) = built_inbounds([view])
    assert emails(built) == ["active", "quota-left", "expires-later", "starts-on-first-use"]


def test_an_inbound_whose_clients_are_all_inactive_runs_with_an_empty_list():
    view = inbound(
        {"tag": "v", "port": 20301, "protocol": "trojan"},
        clients=[client("gone", enable=False)],
    )
    (built,) = built_inbounds([view])
    assert built["settings"]["clients"] == []


def test_the_single_user_2022_cipher_runs_on_its_own_key_whatever_is_attached():
    """Clients attached before the panel refused them there (or in a database from
    elsewhere) are left out: Xray would refuse the whole config for them."""
    key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
    settings = {"method": "2022-blake3-chacha20-poly1305", "password": key}
    view = inbound(
        {"tag": "single", "port": 20302, "protocol": "shadowsocks", "settings": settings},
        clients=[client("attached", password=key)],
    )
    (built,) = built_inbounds([view])
    assert "clients" not in built["settings"]
    assert built["settings"]["password"] == key
    assert built["settings"]["method"] == "2022-blake3-chacha20-poly1305"


def test_entries_carry_only_what_their_protocol_uses():
    everything = client(
        "full", flow="xtls-rprx-vision", security="aes-128-gcm", method="aes-256-gcm"
    )
    keys = {}
    for protocol, extra in (
        ("vless", {}),
        ("vmess", {}),
        ("trojan", {}),
        ("shadowsocks", {"settings": {"method": "aes-128-gcm"}}),
        ("hysteria", {}),
    ):
        view = inbound(
            {"tag": protocol, "port": 20400, "protocol": protocol, **extra}, clients=[everything]
        )
        (built,) = built_inbounds([view])
        keys[protocol] = built["settings"]["clients"][0]
    assert keys["vless"] == {"email": "full", "id": ALICE_ID, "level": 0}
    assert keys["vmess"] == {"email": "full", "id": ALICE_ID, "security": "aes-128-gcm", "level": 0}
    assert keys["trojan"] == {"email": "full", "password": "full-secret", "level": 0}
    assert keys["shadowsocks"] == {
        "email": "full",
        "password": "full-secret",
        "method": "aes-128-gcm",
        "level": 0,
    }
    assert keys["hysteria"] == {"email": "full", "auth": "full-auth", "level": 0}


def test_a_vless_reverse_tag_is_kept():
    view = inbound(
        {"tag": "v", "port": 20500, "protocol": "vless"},
        clients=[client("bridge", reverse={"tag": "bridge-out"})],
    )
    (built,) = built_inbounds([view])
    assert built["settings"]["clients"][0]["reverse"] == {"tag": "bridge-out"}


# ---- the template ------------------------------------------------------------------------


def test_api_inbound_comes_first_and_its_rule_is_the_first_rule():
    template = default_template()
    template["routing"]["rules"] = [
        {"type": "field", "outboundTag": "blocked", "protocol": ["bittorrent"]},
        {"type": "field", "inboundTag": ["api"], "outboundTag": "api"},
        {"type": "field", "outboundTag": "direct", "domain": ["example.com"]},
    ]
    config = build_config(template, [simple("a")], API_PORT, now_ms=NOW)
    assert config["inbounds"][0] == {
        "tag": "api",
        "listen": "127.0.0.1",
        "port": API_PORT,
        "protocol": "dokodemo-door",
        "settings": {"address": "127.0.0.1"},
    }
    assert config["routing"]["rules"] == [
        {"type": "field", "inboundTag": ["api"], "outboundTag": "api"},
        {"type": "field", "outboundTag": "blocked", "protocol": ["bittorrent"]},
        {"type": "field", "outboundTag": "direct", "domain": ["example.com"]},
    ]


def test_a_bare_template_gets_api_stats_policy_and_the_api_rule():
    config = build_config({"outbounds": [{"protocol": "freedom"}]}, [], API_PORT, now_ms=NOW)
    assert config == {
        "outbounds": [{"protocol": "freedom"}],
        "api": {"tag": "api", "services": ["HandlerService", "StatsService", "RoutingService"]},
        "stats": {},
        "policy": {
            "levels": {
                "0": {"statsUserUplink": True, "statsUserDownlink": True, "statsUserOnline": True}
            },
            "system": {
                "statsInboundUplink": True,
                "statsInboundDownlink": True,
                "statsOutboundUplink": True,
                "statsOutboundDownlink": True,
            },
        },
        "routing": {"rules": [{"type": "field", "inboundTag": ["api"], "outboundTag": "api"}]},
        "inbounds": [api_inbound(API_PORT)],
    }


def test_the_users_template_is_kept_around_what_the_panel_needs():
    template = {
        "log": {"loglevel": "debug"},
        "api": {"tag": "control", "services": ["LoggerService"]},
        "dns": {"servers": ["1.1.1.1"]},
        "inbounds": [
            {"tag": "api", "port": 1, "protocol": "dokodemo-door"},
            {"tag": "local-socks", "listen": "127.0.0.1", "port": 1081, "protocol": "socks"},
        ],
        "outbounds": [
            {"tag": "warp", "protocol": "wireguard", "settings": {"secretKey": WG_SECRET}},
            {"tag": "direct", "protocol": "freedom"},
        ],
        "policy": {
            "levels": {"0": {"handshake": 4, "statsUserUplink": False}, "1": {"connIdle": 30}},
            "system": {"statsInboundUplink": False},
        },
        "routing": {"domainStrategy": "IPIfNonMatch", "balancers": [{"tag": "b"}], "rules": []},
    }
    original = copy.deepcopy(template)
    config = build_config(template, [simple("panel")], API_PORT, now_ms=NOW)
    assert template == original
    assert config["log"] == {"loglevel": "debug"}
    assert config["dns"] == {"servers": ["1.1.1.1"]}
    assert config["api"] == {
        "tag": "api",
        "services": ["LoggerService", *API_SERVICES, "RoutingService"],
    }
    assert config["outbounds"] == original["outbounds"]
    assert [i["tag"] for i in config["inbounds"]] == ["api", "local-socks", "panel"]
    assert config["inbounds"][0] == api_inbound(API_PORT)
    assert config["policy"]["levels"] == {
        "0": {
            "handshake": 4,
            "statsUserUplink": True,
            "statsUserDownlink": True,
            "statsUserOnline": True,
        },
        "1": {"connIdle": 30},
    }
    assert all(config["policy"]["system"].values()) and len(config["policy"]["system"]) == 4
    assert config["routing"]["domainStrategy"] == "IPIfNonMatch"
    assert config["routing"]["balancers"] == [{"tag": "b"}]
    assert config["stats"] == {}


# ---- determinism ----------------------------------------------------------------------------


def test_the_same_records_give_the_same_bytes_and_fingerprint():
    views = [CASES[name] for name in sorted(CASES)]
    first = build_config(default_template(), copy.deepcopy(views), API_PORT, now_ms=NOW)
    second = build_config(default_template(), copy.deepcopy(views), API_PORT, now_ms=NOW)
    assert json.dumps(first) == json.dumps(second)
    assert config_fingerprint(first) == config_fingerprint(second)


def test_the_fingerprint_ignores_key_order_and_sees_every_change():
    config = build_config(default_template(), [CASES["vmess_ws"]], API_PORT, now_ms=NOW)
    reordered = json.loads(json.dumps(config, sort_keys=True))
    assert list(reordered) != list(config)
    assert config_fingerprint(reordered) == config_fingerprint(config)
    assert len(config_fingerprint(config)) == 64

    view = copy.deepcopy(CASES["vmess_ws"])
    view["clientRows"][1]["enable"] = False
    changed = build_config(default_template(), [view], API_PORT, now_ms=NOW)
    assert config_fingerprint(changed) != config_fingerprint(config)


def test_the_api_services_match_what_each_core_has():
    """Xray gets its router service (route test, balancer override), and its observatory
    service when the template runs an observatory; V2Ray 4.34 has neither and would
    refuse a config that names them."""

    def services(flavor: str, template: dict) -> list[str]:
        return build_config(template, [], API_PORT, flavor=flavor, now_ms=NOW)["api"]["services"]

    observed = {"observatory": {"subjectSelector": ["proxy"]}}
    assert services("v2fly", {}) == ["HandlerService", "StatsService"]
    assert services("v2fly", observed) == ["HandlerService", "StatsService"]
    assert services("xray", {}) == ["HandlerService", "StatsService", "RoutingService"]
    assert services("xray", observed)[-1] == "ObservatoryService"


def test_only_xray_gets_the_online_map_of_each_user():
    """`statsUserOnline` lets Xray's API list who is online from which addresses; V2Ray
    4.34 has no such map, so its policy stays as it was."""

    def level(flavor: str) -> dict:
        config = build_config({}, [], API_PORT, flavor=flavor, now_ms=NOW)
        return config["policy"]["levels"]["0"]

    assert level("xray")["statsUserOnline"] is True
    assert level("v2fly") == {"statsUserUplink": True, "statsUserDownlink": True}


def test_an_unknown_flavor_is_refused():
    with pytest.raises(ValueError, match="flavor"):
        build_config(default_template(), [], API_PORT, flavor="sing-box", now_ms=NOW)


# ---- flavor v2fly ---------------------------------------------------------------------------


def test_v2fly_gets_its_own_spellings():
    views = [
        inbound(
            {
                "tag": "raw",
                "port": 20600,
                "protocol": "vless",
                "streamSettings": {"network": "raw", "rawSettings": {"header": {"type": "none"}}},
                "sniffing": {"enabled": True},
            },
            clients=[client("a")],
        ),
        inbound(
            {
                "tag": "tcp-with-raw-object",
                "port": 20601,
                "protocol": "vless",
                "streamSettings": {
                    "network": "tcp",
                    "tcpSettings": {"header": {"type": "none"}},
                    "rawSettings": {"acceptProxyProtocol": True},
                },
            },
        ),
        CASES["tunnel"],
        CASES["mixed"],
    ]
    raw, both, tunnel, mixed = built_inbounds(views, flavor="v2fly")
    assert both["streamSettings"] == {
        "network": "tcp",
        "tcpSettings": {"acceptProxyProtocol": True},
        "security": "none",
    }
    assert raw["streamSettings"] == {
        "network": "tcp",
        "tcpSettings": {"header": {"type": "none"}},
        "security": "none",
    }
    assert raw["sniffing"] == {"enabled": True, "destOverride": ["http", "tls"]}
    assert tunnel["protocol"] == "dokodemo-door"
    assert tunnel["settings"] == {
        "address": "10.0.0.5",
        "port": 22,
        "network": "tcp",
        "portMap": {"6001": "10.0.0.6:22"},
        "followRedirect": False,
    }
    assert mixed["protocol"] == "socks"
    # Xray keeps its own names for the same records.
    raw_x, _, tunnel_x, mixed_x = built_inbounds(views)
    assert raw_x["streamSettings"]["network"] == "raw"
    assert "rawSettings" in raw_x["streamSettings"]
    assert raw_x["sniffing"]["destOverride"] == ["http", "tls", "quic", "fakedns"]
    assert (tunnel_x["protocol"], mixed_x["protocol"]) == ("tunnel", "mixed")


def test_tunnel_settings_given_in_newer_names_keep_working_under_both_flavors():
    view = inbound(
        {
            "tag": "t",
            "port": 20700,
            "protocol": "tunnel",
            "settings": {"rewriteAddress": "8.8.8.8", "rewritePort": 53, "allowedNetwork": "udp"},
        }
    )
    (xray,) = built_inbounds([view])
    (v2fly,) = built_inbounds([view], flavor="v2fly")
    assert xray["settings"] == {
        "rewriteAddress": "8.8.8.8",
        "rewritePort": 53,
        "allowedNetwork": "udp",
        "followRedirect": False,
    }
    assert v2fly["settings"] == {
        "address": "8.8.8.8",
        "port": 53,
        "network": "udp",
        "followRedirect": False,
    }


def test_v2fly_shadowsocks_with_one_client_uses_the_single_user_form():
    view = inbound(
        {
            "tag": "ss",
            "port": 20800,
            "protocol": "shadowsocks",
            "settings": {"method": "aes-256-gcm"},
        },
        clients=[client("solo", password="solo-pass"), client("off", enable=False)],
    )
    (v2fly,) = built_inbounds([view], flavor="v2fly")
    assert v2fly["settings"] == {
        "method": "aes-256-gcm",
        "network": "tcp",
        "email": "solo",
        "password": "solo-pass",
        "level": 0,
    }
    (xray,) = built_inbounds([view])
    assert emails(xray) == ["solo"]


# ---- the stand-in core runs what it is given ---------------------------------------------


def self_signed(directory: Path) -> dict:
    cert_file, key_file = write_self_signed(directory, "localhost", x509.DNSName("localhost"))
    return {"certificateFile": cert_file, "keyFile": key_file}


def v2fly_template() -> dict:
    """The default template, as a new install runs it on the stand-in core."""
    return default_template()


def v2ray_test(config: dict, directory: Path) -> subprocess.CompletedProcess:
    path = directory / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return subprocess.run(
        [V2RAY, "-test", "-config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
        cwd=directory,
    )


def v2fly_views(cert: dict) -> list[dict]:
    port = iter(range(41000, 41100))
    return [
        inbound(
            {"tag": "vless-tcp", "port": next(port), "protocol": "vless", "listen": "127.0.0.1"},
            clients=[client("vless-user", flow="xtls-rprx-vision")],
        ),
        inbound(
            {
                "tag": "vless-raw",
                "port": next(port),
                "protocol": "vless",
                "listen": "127.0.0.1",
                "streamSettings": {"network": "raw", "rawSettings": {"header": {"type": "none"}}},
                "sniffing": {"enabled": True},
            },
            clients=[client("raw-user")],
        ),
        inbound(
            {
                "tag": "vmess-ws",
                "port": next(port),
                "protocol": "vmess",
                "listen": "127.0.0.1",
                "streamSettings": {"network": "ws", "wsSettings": {"path": "/vm"}},
            },
            clients=[client("vmess-user", id=BOB_ID, security="aes-128-gcm")],
        ),
        inbound(
            {
                "tag": "trojan-tls",
                "port": next(port),
                "protocol": "trojan",
                "listen": "127.0.0.1",
                "streamSettings": {
                    "network": "tcp",
                    "security": "tls",
                    "tlsSettings": {"serverName": "localhost", "certificates": [cert]},
                },
            },
            clients=[client("trojan-user")],
            fallbacks=[{"dest": 41099}, {"dest": "127.0.0.1:41098", "path": "/ws"}],
        ),
        inbound(
            {
                "tag": "ss",
                "port": next(port),
                "protocol": "shadowsocks",
                "listen": "127.0.0.1",
                "settings": {"method": "aes-256-gcm", "network": "tcp,udp"},
            },
            clients=[client("ss-user", password="ss-pass")],
        ),
        inbound(
            {
                "tag": "socks",
                "port": next(port),
                "protocol": "socks",
                "listen": "127.0.0.1",
                "settings": {"auth": "password", "accounts": [{"user": "u", "pass": "p"}]},
            }
        ),
        inbound(
            {
                "tag": "http",
                "port": next(port),
                "protocol": "http",
                "listen": "127.0.0.1",
                "settings": {"accounts": [{"user": "u", "pass": "p"}]},
            }
        ),
        inbound(
            {
                "tag": "dokodemo",
                "port": next(port),
                "protocol": "dokodemo",
                "listen": "127.0.0.1",
                "settings": {"address": "127.0.0.1", "port": 53, "network": "tcp,udp"},
            }
        ),
        inbound(
            {
                "tag": "tunnel",
                "port": next(port),
                "protocol": "tunnel",
                "listen": "127.0.0.1",
                "settings": {"rewriteAddress": "127.0.0.1", "rewritePort": 22},
            }
        ),
        inbound({"tag": "mixed", "port": next(port), "protocol": "mixed", "listen": "127.0.0.1"}),
    ]


@pytest.fixture(scope="module")
def v2ray_here():
    if not Path(V2RAY).exists():
        pytest.fail(f"the stand-in core is not installed at {V2RAY} (Debian package v2ray)")
    return V2RAY


def test_v2ray_accepts_the_v2fly_config_of_every_protocol_it_implements(v2ray_here, tmp_path):
    config = build_config(
        v2fly_template(), v2fly_views(self_signed(tmp_path)), API_PORT, flavor="v2fly", now_ms=NOW
    )
    result = v2ray_test(config, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Configuration OK" in result.stdout


def test_v2ray_refuses_a_config_it_cannot_run(v2ray_here, tmp_path):
    views = [
        *v2fly_views(self_signed(tmp_path)),
        inbound(
            {
                "tag": "xhttp",
                "port": 41090,
                "protocol": "vless",
                "streamSettings": {"network": "xhttp", "xhttpSettings": {"path": "/x"}},
            },
            clients=[client("x")],
        ),
    ]
    config = build_config(v2fly_template(), views, API_PORT, flavor="v2fly", now_ms=NOW)
    result = v2ray_test(config, tmp_path)
    assert result.returncode != 0
    assert "xhttp" in result.stdout + result.stderr


def test_the_default_template_needs_no_geo_files(v2ray_here, tmp_path):
    """Debian's v2ray ships no geoip.dat; the default template blocks private networks
    by their addresses, so a new install's core starts without geo files."""
    config = build_config(default_template(), [], API_PORT, flavor="v2fly", now_ms=NOW)
    result = v2ray_test(config, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_unix_socket_inbound_has_no_port_and_an_empty_listen_is_left_out():
    socket_view = inbound(
        {"tag": "behind-nginx", "listen": "/run/xray/vless.sock,0666", "protocol": "vless"},
        clients=[client("a")],
    )
    everywhere = simple("everywhere")
    on_socket, on_all = built_inbounds([socket_view, everywhere])
    assert (on_socket["listen"], "port" in on_socket) == ("/run/xray/vless.sock,0666", False)
    assert ("listen" in on_all, on_all["port"]) == (False, everywhere["port"])


def test_v2fly_leaves_out_a_shadowsocks_inbound_nobody_can_use_yet():
    """v2ray 4.34 refuses a Shadowsocks inbound without a user, and with it the whole
    config; Xray takes an empty client list."""
    empty = {**CASES["shadowsocks_aes_256_gcm"], "clientRows": []}
    tags = [
        i["tag"]
        for i in build_config(default_template(), [empty], API_PORT, flavor="v2fly", now_ms=NOW)[
            "inbounds"
        ]
    ]
    assert tags == ["api"]
    xray = build_config(default_template(), [empty], API_PORT, now_ms=NOW)
    assert [i["tag"] for i in xray["inbounds"]] == ["api", empty["tag"]]
