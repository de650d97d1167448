"""Inbound payload validation: every protocol's minimal payload, the normalized output,
error messages that name the field, and a fuzz run proving only ServiceError escapes."""

import base64
import copy
import json
import os
import random

import pytest

from appliance.domain.inbound_rules import (
    CLIENT_PROTOCOLS,
    PROTOCOLS,
    is_ss2022,
    normalize_inbound,
    payload_fallbacks,
    ss2022_key_length,
    ss_method,
    tls_flow_capable,
    transports,
)
from appliance.errors import ServiceError

DEFAULT_SNIFFING = {"enabled": False, "destOverride": ["http", "tls", "quic", "fakedns"]}
TCP_NONE = {"network": "tcp", "security": "none"}
WG_KEY = base64.b64encode(bytes(range(32))).decode()
WG_PEER_KEY = base64.b64encode(bytes(range(32, 64))).decode()
REALITY_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")
SS_128_KEY = base64.b64encode(b"k" * 16).decode()
VLESS_ENC = "mlkem768x25519plus.native.600s.ptjHQxBQxTJ9MWr2cd5qWIflBSACHOevTauCQwa_71U"
TLS_FILES = {
    "security": "tls",
    "tlsSettings": {
        "certificates": [{"certificateFile": "/etc/ssl/a.crt", "keyFile": "/etc/ssl/a.key"}]
    },
}


def base(protocol, **fields):
    return {"protocol": protocol, "port": 443, **fields}


def expected(protocol, settings, stream, **top):
    return {
        "remark": "",
        "listen": "",
        "port": 443,
        "protocol": protocol,
        "enable": True,
        "expiryTime": 0,
        "total": 0,
        "tag": "",
        "settings": settings,
        "streamSettings": stream,
        "sniffing": DEFAULT_SNIFFING,
        "nodeId": None,
        **top,
    }


def error_of(payload):
    with pytest.raises(ServiceError) as caught:
        normalize_inbound(payload)
    return caught.value.msg


# --- constants ---------------------------------------------------------------------------


def test_protocol_lists():
    assert len(PROTOCOLS) == 13
    assert set(PROTOCOLS) >= CLIENT_PROTOCOLS
    # The spec's client-bearing protocols, and MTProto, whose clients hold one secret each.
    assert (
        frozenset({"shadowsocks", "vless", "vmess", "trojan", "hysteria", "hysteria2", "mtproto"})
        == CLIENT_PROTOCOLS
    )


# --- every protocol, minimal payload -> normalized output ---------------------------------

MINIMAL = [
    ("vless", {}, {}, {"decryption": "none"}, TCP_NONE),
    ("vmess", {}, {}, {}, TCP_NONE),
    ("trojan", {}, {}, {}, TCP_NONE),
    (
        "shadowsocks",
        {"method": "aes-256-gcm", "password": "secret"},
        {},
        {"method": "aes-256-gcm", "password": "secret", "network": "tcp"},
        TCP_NONE,
    ),
    (
        "shadowsocks",
        {"method": "2022-blake3-aes-128-gcm", "password": SS_128_KEY, "network": "udp,tcp"},
        {},
        {"method": "2022-blake3-aes-128-gcm", "password": SS_128_KEY, "network": "tcp,udp"},
        TCP_NONE,
    ),
    (
        "hysteria",
        {},
        TLS_FILES,
        {"version": 2},
        {"network": "hysteria", **TLS_FILES},
    ),
    (
        "hysteria2",
        {"version": 2},
        {"network": "hysteria", **TLS_FILES, "hysteriaSettings": {"version": 2, "up": "100 mbps"}},
        {"version": 2},
        {"network": "hysteria", **TLS_FILES, "hysteriaSettings": {"version": 2, "up": "100 mbps"}},
    ),
    ("socks", {}, {}, {"auth": "noauth", "accounts": [], "udp": False}, {}),
    (
        "socks",
        {
            "auth": "password",
            "accounts": [{"user": "u", "pass": "p"}],
            "udp": True,
            "ip": "1.2.3.4",
        },
        {},
        {
            "auth": "password",
            "accounts": [{"user": "u", "pass": "p"}],
            "udp": True,
            "ip": "1.2.3.4",
        },
        {},
    ),
    ("http", {}, {}, {"accounts": [], "allowTransparent": False}, {}),
    ("mixed", {"udp": "true"}, {}, {"auth": "noauth", "accounts": [], "udp": True}, {}),
    (
        "wireguard",
        {"secretKey": WG_KEY, "peers": [{"publicKey": WG_PEER_KEY, "allowedIPs": ["10.0.0.2/32"]}]},
        {"network": "ws"},
        {
            "secretKey": WG_KEY,
            "peers": [{"publicKey": WG_PEER_KEY, "allowedIPs": ["10.0.0.2/32"]}],
            "mtu": 1420,
        },
        {},
    ),
    (
        "dokodemo",
        {"address": "8.8.8.8", "port": "53"},
        {},
        {"address": "8.8.8.8", "port": 53, "network": "tcp", "followRedirect": False},
        {},
    ),
    (
        "tunnel",
        {"address": "", "network": "tcp,udp", "followRedirect": True},
        {"network": "tcp"},
        {"address": "", "network": "tcp,udp", "followRedirect": True},
        {"network": "tcp", "security": "none"},
    ),
    ("mtproto", {}, {}, {}, {}),
    (
        "mtproto",
        {"adTag": "0123456789ABCDEF0123456789abcdef", "domain": "www.example.com"},
        {"network": "ws"},
        {"adTag": "0123456789abcdef0123456789abcdef", "domain": "www.example.com"},
        {},
    ),
]


@pytest.mark.parametrize(
    ("protocol", "settings", "stream", "want_settings", "want_stream"), MINIMAL
)
def test_minimal_payload_per_protocol(protocol, settings, stream, want_settings, want_stream):
    result = normalize_inbound(base(protocol, settings=settings, streamSettings=stream))
    assert result == expected(protocol, want_settings, want_stream)


def test_every_protocol_has_a_minimal_case():
    assert {case[0] for case in MINIMAL} == set(PROTOCOLS)


def test_result_has_exactly_the_stored_keys():
    result = normalize_inbound(base("vmess"))
    assert list(result) == [
        "remark",
        "listen",
        "port",
        "protocol",
        "enable",
        "expiryTime",
        "total",
        "tag",
        "settings",
        "streamSettings",
        "sniffing",
        "nodeId",
    ]


# --- top-level fields ---------------------------------------------------------------------


def test_top_level_values_are_normalized():
    result = normalize_inbound(
        {
            "protocol": "vmess",
            "port": " 8443 ",
            "remark": "edge",
            "listen": "::1",
            "enable": "false",
            "expiryTime": "1700000000000",
            "total": 10.0 * 2**30,
            "tag": "inbound-8443@node:1",
            "nodeId": "7",
        }
    )
    assert result["port"] == 8443
    assert result["listen"] == "::1"
    assert result["enable"] is False
    assert result["expiryTime"] == 1700000000000
    assert result["total"] == 10 * 2**30
    assert result["tag"] == "inbound-8443@node:1"
    assert result["nodeId"] == 7


def test_null_and_empty_strings_mean_defaults():
    payload = {
        "protocol": "trojan",
        "port": 443,
        "remark": None,
        "listen": "",
        "enable": None,
        "expiryTime": "",
        "total": None,
        "tag": None,
        "nodeId": "",
        "settings": "",
        "streamSettings": None,
        "sniffing": "  ",
    }
    assert normalize_inbound(payload) == expected("trojan", {}, TCP_NONE)


@pytest.mark.parametrize("listen", ["/run/xray/in.sock", "@abstract", "/dev/shm/x.sock,0666"])
def test_unix_socket_listen_allows_port_zero_or_missing(listen):
    assert normalize_inbound(base("vless", listen=listen, port=0))["port"] == 0
    assert normalize_inbound({"protocol": "vless", "listen": listen})["port"] == 0


def test_dokodemo_door_alias():
    assert normalize_inbound(base("dokodemo-door"))["protocol"] == "dokodemo"


def test_input_payload_is_not_modified():
    payload = base(
        "vless",
        settings={"clients": [{"id": "x"}], "fallbacks": [{"dest": 80}]},
        streamSettings={"network": "ws", "wsSettings": {"path": "/a"}},
    )
    before = copy.deepcopy(payload)
    result = normalize_inbound(payload)
    assert payload == before
    result["streamSettings"]["wsSettings"]["path"] = "/changed"
    assert payload["streamSettings"]["wsSettings"]["path"] == "/a"


# --- JSON text vs nested objects ---------------------------------------------------------

FULL_PAYLOADS = [
    base(
        "vless",
        settings={"decryption": "none", "clients": []},
        streamSettings={
            "network": "raw",
            "security": "reality",
            "realitySettings": {
                "target": "example.com:443",
                "serverNames": ["example.com"],
                "privateKey": REALITY_KEY,
                "shortIds": ["", "0123456789abcdef"],
            },
        },
        sniffing={"enabled": True, "destOverride": ["http", "tls"]},
    ),
    base(
        "shadowsocks",
        settings={"method": "chacha20-ietf-poly1305", "password": "pw", "network": "tcp,udp"},
        streamSettings={"network": "ws", "wsSettings": {"path": "/ss", "headers": {"Host": "a"}}},
    ),
    base(
        "trojan",
        streamSettings={
            "network": "grpc",
            "grpcSettings": {"serviceName": "svc", "multiMode": True},
            "security": "tls",
            "tlsSettings": {
                "serverName": "a.example",
                "alpn": ["h2"],
                "certificates": [{"certificate": ["-----BEGIN"], "key": "-----BEGIN KEY"}],
            },
            "externalProxy": [{"dest": "cdn.example", "port": "443", "forceTls": "tls"}],
        },
    ),
]


@pytest.mark.parametrize("payload", FULL_PAYLOADS)
def test_json_text_and_nested_objects_are_equivalent(payload):
    as_text = dict(payload)
    for key in ("settings", "streamSettings", "sniffing"):
        if key in payload:
            as_text[key] = json.dumps(payload[key])
    assert normalize_inbound(as_text) == normalize_inbound(payload)


def test_full_payload_output():
    result = normalize_inbound(FULL_PAYLOADS[0])
    assert result["sniffing"] == {"enabled": True, "destOverride": ["http", "tls"]}
    assert result["streamSettings"]["realitySettings"]["shortIds"] == ["", "0123456789abcdef"]
    proxy = normalize_inbound(FULL_PAYLOADS[2])["streamSettings"]["externalProxy"]
    assert proxy == [{"dest": "cdn.example", "port": 443, "forceTls": "tls", "remark": ""}]


# --- derived and owned-elsewhere keys ---------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("clients", [[{"id": "a"}], "not a list", 5, {}])
def test_clients_are_always_removed(protocol, clients):
    settings = {"clients": clients}
    if protocol == "shadowsocks":
        settings["method"] = "aes-128-gcm"
    assert "clients" not in normalize_inbound(base(protocol, settings=settings))["settings"]


def test_vless_fallbacks_are_stripped_and_readable_separately():
    payload = base("vless", settings=json.dumps({"fallbacks": [{"dest": 80}, "junk"]}))
    assert "fallbacks" not in normalize_inbound(payload)["settings"]
    assert payload_fallbacks(payload) == [{"dest": 80}]
    assert payload_fallbacks(base("vless", settings="{broken")) == []
    assert payload_fallbacks(base("vless", settings={"fallbacks": "x"})) == []
    assert payload_fallbacks("nope") == []


def test_mtproto_inbound_secret_is_dropped():
    result = normalize_inbound(base("mtproto", settings={"secret": "ee00", "adTag": ""}))
    assert result["settings"] == {"adTag": ""}


def test_unknown_keys_are_kept_everywhere():
    result = normalize_inbound(
        base(
            "vmess",
            settings={"futureOption": [1, 2]},
            streamSettings={"network": "ws", "futureTransport": {"x": 1}},
            sniffing={"enabled": True, "routeOnly": True, "newKnob": "y"},
        )
    )
    assert result["settings"]["futureOption"] == [1, 2]
    assert result["streamSettings"]["futureTransport"] == {"x": 1}
    assert result["sniffing"] == {
        "enabled": True,
        "destOverride": ["http", "tls", "quic", "fakedns"],
        "routeOnly": True,
        "newKnob": "y",
    }


def test_stale_transport_objects_of_other_networks_are_kept():
    stream = {"network": "tcp", "wsSettings": {"path": "no-slash"}, "tlsSettings": {"x": 1}}
    result = normalize_inbound(base("vless", streamSettings=stream))
    assert result["streamSettings"]["wsSettings"] == {"path": "no-slash"}
    assert result["streamSettings"]["tlsSettings"] == {"x": 1}


# --- generated keys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "length"),
    [
        ("2022-blake3-aes-128-gcm", 16),
        ("2022-blake3-aes-256-gcm", 32),
        ("2022-blake3-chacha20-poly1305", 32),
    ],
)
@pytest.mark.parametrize("password", [None, "", "short", base64.b64encode(b"x" * 24).decode()])
def test_ss2022_bad_or_missing_key_is_replaced(method, length, password):
    settings = {"method": method, "password": password}
    key = normalize_inbound(base("shadowsocks", settings=settings))["settings"]["password"]
    assert len(base64.b64decode(key, validate=True)) == length
    assert key != password


def test_ss2022_valid_key_is_kept_and_legacy_password_untouched():
    key = base64.b64encode(os.urandom(32)).decode()
    settings = {"method": "2022-blake3-aes-256-gcm", "password": key}
    assert normalize_inbound(base("shadowsocks", settings=settings))["settings"]["password"] == key
    legacy = normalize_inbound(base("shadowsocks", settings={"method": "aes-128-gcm"}))
    assert "password" not in legacy["settings"]


def test_wireguard_secret_is_generated_when_missing():
    first = normalize_inbound(base("wireguard"))["settings"]["secretKey"]
    second = normalize_inbound(base("wireguard", settings={"secretKey": ""}))["settings"]
    raw = base64.b64decode(first, validate=True)
    assert len(raw) == 32
    assert raw[0] & 7 == 0 and raw[31] & 0xC0 == 0x40  # clamped X25519 scalar
    assert second["secretKey"] != first


# --- invalid inputs: the message names the field -----------------------------------------


def stream(protocol="vless", **stream_settings):
    return base(protocol, streamSettings=stream_settings)


def reality(**overrides):
    settings = {
        "dest": "example.com:443",
        "serverNames": ["example.com"],
        "privateKey": REALITY_KEY,
        "shortIds": ["ab"],
        **overrides,
    }
    return stream(security="reality", realitySettings=settings)


INVALID = [
    # top level
    ("not a dict", "inbound payload"),
    ({"port": 443}, "protocol"),
    (base("shadowsocks2"), "protocol"),
    (base(["vless"]), "protocol"),
    (base("vless", port=70000), "port must be an integer from 1 to 65535 (got 70000)"),
    (base("vless", port=0), "port"),
    (base("vless", port=True), "port"),
    (base("vless", port="443a"), "port"),
    (base("vless", port=443.5), "port"),
    (base("vless", port=10**5000), "port"),
    (base("vless", port=float("inf")), "port"),
    (base("vless", port=[443]), "port"),
    ({"protocol": "vless"}, "port"),
    (base("vless", listen="example.com"), "listen"),
    (base("vless", listen=5), "listen"),
    (base("vless", listen="/" + "a" * 300), "listen"),
    (base("vless", remark={"a": 1}), "remark"),
    (base("vless", enable="yes"), "enable"),
    (base("vless", enable=1), "enable"),
    (base("vless", expiryTime=-1), "expiryTime"),
    (base("vless", expiryTime=2**64), "expiryTime"),
    (base("vless", total="lots"), "total"),
    (base("vless", tag="has space"), "tag"),
    (base("vless", tag="x" * 65), "tag"),
    (base("vless", tag=12), "tag"),
    (base("vless", nodeId=0), "nodeId"),
    (base("vless", nodeId=False), "nodeId"),
    (base("vless", settings="[1, 2]"), "settings"),
    (base("vless", settings="{not json"), "settings"),
    (base("vless", settings=7), "settings"),
    (base("vless", settings={"x": float("nan")}), "settings"),
    (base("vless", sniffing="[]"), "sniffing"),
    (base("vless", sniffing={"enabled": "maybe"}), "sniffing.enabled"),
    (base("vless", sniffing={"destOverride": ["http", "dns"]}), "sniffing.destOverride[1]"),
    (base("vless", sniffing={"destOverride": "http"}), "sniffing.destOverride"),
    (base("vless", streamSettings="nope"), "streamSettings"),
    # vless / vmess
    (base("vless", settings={"decryption": ""}), "settings.decryption"),
    (base("vless", settings={"decryption": "aes"}), "settings.decryption"),
    (base("vless", settings={"decryption": 0}), "settings.decryption"),
    (base("vless", settings={"decryption": "mlkem768x25519plus."}), "settings.decryption"),
    (base("vmess", settings={"disableInsecureEncryption": "x"}), "settings.disableInsecure"),
    # shadowsocks
    (base("shadowsocks"), "settings.method"),
    (base("shadowsocks", settings={"method": "rc4-md5"}), "settings.method"),
    (
        base("shadowsocks", settings={"method": "aes-128-gcm", "network": "sctp"}),
        "settings.network",
    ),
    (base("shadowsocks", settings={"method": "aes-128-gcm", "network": ""}), "settings.network"),
    (base("shadowsocks", settings={"method": "aes-128-gcm", "password": 5}), "settings.password"),
    (base("shadowsocks", settings={"method": "none", "level": -1}), "settings.level"),
    # socks / http / mixed
    (base("socks", settings={"auth": "basic"}), "settings.auth"),
    (base("socks", settings={"auth": "password"}), "settings.accounts"),
    (base("socks", settings={"auth": "password", "accounts": "u:p"}), "settings.accounts"),
    (base("socks", settings={"accounts": ["u:p"]}), "settings.accounts[0]"),
    (
        base("mixed", settings={"accounts": [{"user": "u", "pass": ""}]}),
        "settings.accounts[0].pass",
    ),
    (base("mixed", settings={"accounts": [{"pass": "p"}]}), "settings.accounts[0].user"),
    (base("socks", settings={"udp": 1}), "settings.udp"),
    (base("socks", settings={"ip": "localhost"}), "settings.ip"),
    (base("http", settings={"allowTransparent": "no"}), "settings.allowTransparent"),
    (base("http", settings={"accounts": [{"user": 1, "pass": "p"}]}), "settings.accounts[0].user"),
    # wireguard
    (base("wireguard", settings={"secretKey": "short"}), "settings.secretKey"),
    (base("wireguard", settings={"secretKey": 5}), "settings.secretKey"),
    (base("wireguard", settings={"peers": {}}), "settings.peers"),
    (base("wireguard", settings={"peers": ["k"]}), "settings.peers[0]"),
    (base("wireguard", settings={"peers": [{}]}), "settings.peers[0].publicKey"),
    (base("wireguard", settings={"peers": [{"publicKey": "abc="}]}), "settings.peers[0].publicKey"),
    (base("wireguard", settings={"secretKey": WG_KEY, "pubKey": "abc="}), "settings.pubKey"),
    (
        base("wireguard", settings={"peers": [{"publicKey": WG_KEY, "privateKey": "abc="}]}),
        "settings.peers[0].privateKey",
    ),
    (
        base(
            "wireguard", settings={"peers": [{"publicKey": WG_KEY, "allowedIPs": ["10.0.0.300"]}]}
        ),
        "settings.peers[0].allowedIPs[0]",
    ),
    (
        base("wireguard", settings={"peers": [{"publicKey": WG_KEY, "allowedIPs": "0.0.0.0/0"}]}),
        "settings.peers[0].allowedIPs",
    ),
    (base("wireguard", settings={"mtu": 500}), "settings.mtu"),
    (base("wireguard", settings={"mtu": 9001}), "settings.mtu"),
    # dokodemo / tunnel
    (base("dokodemo", settings={"address": "not a host!"}), "settings.address"),
    (base("dokodemo", settings={"port": 65536}), "settings.port"),
    (base("tunnel", settings={"network": "icmp"}), "settings.network"),
    (base("tunnel", settings={"followRedirect": "on"}), "settings.followRedirect"),
    (base("tunnel", settings={"rewritePort": -1}), "settings.rewritePort"),
    (base("tunnel", settings={"portMap": {"5555": 7777}}), "settings.portMap.5555"),
    # hysteria
    (base("hysteria", settings={"version": 1}), "settings.version"),
    (base("hysteria2", settings={"version": "two"}), "settings.version"),
    (stream("hysteria2", network="ws"), "streamSettings.network"),
    (stream("hysteria", network="tcp"), "streamSettings.network"),
    (
        stream("hysteria", hysteriaSettings={"version": 1}),
        "streamSettings.hysteriaSettings.version",
    ),
    (stream("hysteria", hysteriaSettings={"up": True}), "streamSettings.hysteriaSettings.up"),
    (stream("hysteria", hysteriaSettings="x"), "streamSettings.hysteriaSettings"),
    # mtproto
    (base("mtproto", settings={"adTag": "abc"}), "settings.adTag"),
    (base("mtproto", settings={"adTag": "g" * 32}), "settings.adTag"),
    (base("mtproto", settings={"domain": "bad domain"}), "settings.domain"),
    # streamSettings basics
    (stream(network="foo"), "streamSettings.network must be one of tcp, raw, ws, grpc"),
    (stream(network="http"), "streamSettings.network"),
    (stream(security="xtls"), "streamSettings.security"),
    (stream(network="ws", wsSettings={"path": "ws"}), "streamSettings.wsSettings.path"),
    (stream(network="ws", wsSettings=[]), "streamSettings.wsSettings"),
    (
        stream(network="ws", wsSettings={"headers": {"Host": 1}}),
        "streamSettings.wsSettings.headers",
    ),
    (stream(network="grpc", grpcSettings={"serviceName": 5}), "grpcSettings.serviceName"),
    (stream(network="xhttp", xhttpSettings={"path": "x"}), "streamSettings.xhttpSettings.path"),
    (stream(network="xhttp", xhttpSettings={"mode": "fast"}), "xhttpSettings.mode"),
    (stream(network="httpupgrade", httpupgradeSettings={"path": 1}), "httpupgradeSettings.path"),
    (stream(network="kcp", kcpSettings={"mtu": 100}), "streamSettings.kcpSettings.mtu"),
    (stream(network="kcp", kcpSettings={"tti": "x"}), "streamSettings.kcpSettings.tti"),
    (stream(network="kcp", kcpSettings={"congestion": 0}), "kcpSettings.congestion"),
    (stream(network="tcp", tcpSettings={"header": {"type": "srtp"}}), "tcpSettings.header.type"),
    (stream(sockopt={"tproxy": "on"}), "streamSettings.sockopt.tproxy"),
    # tls
    (stream(security="tls", tlsSettings="x"), "streamSettings.tlsSettings"),
    (stream(security="tls", tlsSettings={"certificates": {}}), "tlsSettings.certificates"),
    (stream(security="tls", tlsSettings={"certificates": ["pem"]}), "tlsSettings.certificates[0]"),
    (
        stream(security="tls", tlsSettings={"certificates": [{"certificateFile": "/a"}]}),
        "tlsSettings.certificates[0].keyFile",
    ),
    (
        stream(security="tls", tlsSettings={"certificates": [{"certificate": "PEM"}]}),
        "tlsSettings.certificates[0].key",
    ),
    (
        stream(security="tls", tlsSettings={"certificates": [{"certificate": [1], "key": "k"}]}),
        "tlsSettings.certificates[0].certificate",
    ),
    (stream(security="tls", tlsSettings={"alpn": "h2"}), "streamSettings.tlsSettings.alpn"),
    (stream(security="tls", tlsSettings={"serverName": 1}), "tlsSettings.serverName"),
    (stream(security="tls", tlsSettings={"minVersion": "1.4"}), "tlsSettings.minVersion"),
    # reality
    (stream("vmess", security="reality"), "streamSettings.security"),
    (
        base(
            "shadowsocks", settings={"method": "none"}, streamSettings=reality()["streamSettings"]
        ),
        "streamSettings.security",
    ),
    (
        base("vless", streamSettings={"network": "ws", "security": "reality"}),
        "streamSettings.network",
    ),
    (reality(dest=""), "streamSettings.realitySettings.target"),
    (reality(dest=None), "streamSettings.realitySettings.target"),
    (reality(dest=70000), "streamSettings.realitySettings.dest"),
    (reality(serverNames=[]), "streamSettings.realitySettings.serverNames"),
    (reality(serverNames=None), "streamSettings.realitySettings.serverNames"),
    (reality(serverNames=[1]), "streamSettings.realitySettings.serverNames[0]"),
    (reality(privateKey=None), "streamSettings.realitySettings.privateKey"),
    (reality(privateKey=REALITY_KEY + "="), "streamSettings.realitySettings.privateKey"),
    (reality(privateKey=WG_KEY), "streamSettings.realitySettings.privateKey"),
    (reality(shortIds=["abc"]), "streamSettings.realitySettings.shortIds[0]"),
    (reality(shortIds=["zz"]), "streamSettings.realitySettings.shortIds[0]"),
    (reality(shortIds=["0" * 18]), "streamSettings.realitySettings.shortIds[0]"),
    (reality(shortIds="ab"), "streamSettings.realitySettings.shortIds"),
    (reality(xver=3), "streamSettings.realitySettings.xver"),
    # externalProxy
    (stream(externalProxy={}), "streamSettings.externalProxy"),
    (stream(externalProxy=["a"]), "streamSettings.externalProxy[0]"),
    (stream(externalProxy=[{"port": 443}]), "streamSettings.externalProxy[0].dest"),
    (stream(externalProxy=[{"dest": "a b", "port": 443}]), "streamSettings.externalProxy[0].dest"),
    (stream(externalProxy=[{"dest": "a.example"}]), "streamSettings.externalProxy[0].port"),
    (
        stream(externalProxy=[{"dest": "a.example", "port": 443, "forceTls": "yes"}]),
        "streamSettings.externalProxy[0].forceTls",
    ),
    (
        stream(externalProxy=[{"dest": "a.example", "port": 443, "remark": 1}]),
        "streamSettings.externalProxy[0].remark",
    ),
]


@pytest.mark.parametrize(("payload", "field"), INVALID, ids=[m for _, m in INVALID])
def test_invalid_input_names_the_field(payload, field):
    message = error_of(payload)
    assert field in message
    assert "(got " in message or "JSON" in message


def test_error_messages_read_well():
    assert error_of(stream(network="foo")).startswith(
        "streamSettings.network must be one of tcp, raw, ws, grpc, httpupgrade, xhttp"
    )
    assert error_of(stream(network="foo")).endswith("(got 'foo')")
    assert error_of(base("vless", port=True)).endswith("(got true)")
    assert error_of(base("vless", port=10**5000)).endswith("(got a very large integer)")
    assert error_of({"protocol": "vless"}) == (
        "port must be an integer from 1 to 65535 (got nothing)"
    )


def test_hysteria_rejects_reality_and_stream_of_other_udp_kind():
    assert "streamSettings.network" in error_of(stream("hysteria", network="kcp"))
    assert "streamSettings.security" in error_of(stream("hysteria2", security="reality"))


# --- fuzz: only ServiceError may escape --------------------------------------------------


def random_json(rng, depth=0):
    kind = rng.randrange(12 if depth < 3 else 8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, 1, -1, 443, 65536, 2**63, -(2**70), 10**400])
    if kind == 3:
        return rng.choice([0.5, 443.0, -0.0, 1e308, float("inf"), float("nan")])
    if kind == 4:
        return rng.choice(["", " ", "443", "tcp", "tls", "reality", "none", "/", "@", "x" * 500])
    if kind == 5:
        return rng.choice(["{}", "[]", '{"a":', "null", "1e999", "[" * 5000, "\x00", "é"])
    if kind == 6:
        return "".join(rng.choice("ab/:.-_0@ {}[]\"'") for _ in range(rng.randrange(20)))
    if kind == 7:
        return rng.choice(["2022-blake3-aes-128-gcm", "password", WG_KEY, REALITY_KEY, "ab"])
    if kind in (8, 9):
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = [
        "network",
        "security",
        "path",
        "method",
        "password",
        "accounts",
        "peers",
        "port",
        "certificates",
        "realitySettings",
        "tlsSettings",
        "wsSettings",
        "x",
        "user",
    ]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


SETTINGS_KEYS = [
    "decryption",
    "fallbacks",
    "method",
    "password",
    "network",
    "auth",
    "accounts",
    "udp",
    "ip",
    "allowTransparent",
    "secretKey",
    "peers",
    "mtu",
    "address",
    "port",
    "rewritePort",
    "allowedNetwork",
    "followRedirect",
    "portMap",
    "version",
    "adTag",
    "domain",
    "clients",
]
STREAM_KEYS = [
    "network",
    "security",
    "tlsSettings",
    "realitySettings",
    "wsSettings",
    "grpcSettings",
    "xhttpSettings",
    "httpupgradeSettings",
    "kcpSettings",
    "tcpSettings",
    "hysteriaSettings",
    "externalProxy",
    "sockopt",
]
TOP_KEYS = [
    "remark",
    "listen",
    "port",
    "enable",
    "expiryTime",
    "total",
    "tag",
    "nodeId",
    "settings",
    "streamSettings",
    "sniffing",
    "protocol",
]


def nested(payload, key):
    """payload[key] as a dict, replacing an earlier random non-object value."""
    if not isinstance(payload.get(key), dict):
        payload[key] = {}
    return payload[key]


def mutate(rng, payload):
    """Replace one field (top level or nested) of a valid payload with random JSON."""
    target = rng.randrange(4)
    if target == 0:
        payload[rng.choice(TOP_KEYS)] = random_json(rng)
    elif target == 1:
        nested(payload, "settings")[rng.choice(SETTINGS_KEYS)] = random_json(rng)
    elif target == 2:
        nested(payload, "streamSettings")[rng.choice(STREAM_KEYS)] = random_json(rng)
    else:
        inner = nested(payload, "streamSettings")
        name = rng.choice(["tlsSettings", "realitySettings", "wsSettings", "kcpSettings"])
        inner["security"] = rng.choice(["tls", "reality"])
        field = rng.choice(
            ["certificates", "serverNames", "shortIds", "privateKey", "dest", "path", "mtu", "alpn"]
        )
        nested(inner, name)[field] = random_json(rng)
    return payload


def seeds():
    valid = [base(p, settings=s, streamSettings=st) for p, s, st, _, _ in MINIMAL]
    return valid + [copy.deepcopy(p) for p in FULL_PAYLOADS]


def test_fuzz_only_service_error_escapes():
    rng = random.Random(20240611)
    accepted = rejected = 0
    for _ in range(4000):
        payload = copy.deepcopy(rng.choice(seeds()))
        for _ in range(rng.randrange(1, 4)):
            mutate(rng, payload)
        try:
            result = normalize_inbound(payload)
        except ServiceError as error:
            assert "(got " in error.msg or "JSON" in error.msg
            rejected += 1
            continue
        json.dumps(result, allow_nan=False)  # always storable as JSON
        assert isinstance(transports(result), frozenset)
        assert isinstance(tls_flow_capable(result), bool)
        assert isinstance(ss_method(result), str)
        accepted += 1
    assert accepted > 100 and rejected > 100


@pytest.mark.parametrize("field", TOP_KEYS)
def test_every_top_level_field_rejects_or_normalizes_any_json_value(field):
    rng = random.Random(field)
    outcomes = set()
    for _ in range(300):
        payload = base("vless")
        payload[field] = random_json(rng)
        try:
            result = normalize_inbound(payload)
        except ServiceError as error:
            assert error.msg.startswith(field), error.msg
            outcomes.add("rejected")
        else:
            json.dumps(result, allow_nan=False)
            outcomes.add("accepted")
    assert "rejected" in outcomes


# --- transports / tls_flow_capable / ss_method ------------------------------------------


def normalized(protocol, settings=None, stream_settings=None):
    return normalize_inbound(
        base(protocol, settings=settings or {}, streamSettings=stream_settings or {})
    )


TCP, UDP, BOTH = frozenset({"tcp"}), frozenset({"udp"}), frozenset({"tcp", "udp"})


@pytest.mark.parametrize(
    ("inbound", "want"),
    [
        (normalized("vless"), TCP),
        (normalized("vmess", stream_settings={"network": "ws"}), TCP),
        (normalized("vmess", stream_settings={"network": "kcp"}), UDP),
        (normalized("trojan", stream_settings={"network": "quic"}), UDP),
        (normalized("hysteria", stream_settings=TLS_FILES), UDP),
        (normalized("hysteria2"), UDP),
        (normalized("wireguard"), UDP),
        (normalized("shadowsocks", {"method": "none"}), TCP),
        (normalized("shadowsocks", {"method": "none", "network": "udp"}), UDP),
        (normalized("shadowsocks", {"method": "none", "network": "tcp,udp"}), BOTH),
        (normalized("shadowsocks", {"method": "none"}, {"network": "kcp"}), UDP),
        (normalized("dokodemo"), TCP),
        (normalized("dokodemo", {"network": "tcp,udp"}), BOTH),
        (normalized("tunnel", {"network": "udp"}), UDP),
        (normalized("tunnel", {"allowedNetwork": "udp,tcp"}), BOTH),
        (normalized("socks"), TCP),
        (normalized("socks", {"udp": True}), BOTH),
        (normalized("mixed", {"udp": True}), BOTH),
        (normalized("mixed"), TCP),
        (normalized("http"), TCP),
        (normalized("mtproto"), TCP),
        ({}, TCP),
        ({"protocol": "shadowsocks", "settings": "junk"}, TCP),
        ({"protocol": ["vless"], "streamSettings": {"network": ["kcp"]}}, TCP),
        ({"protocol": "dokodemo", "settings": {"network": {"udp": 1}}}, TCP),
    ],
)
def test_transports(inbound, want):
    assert transports(inbound) == want


REALITY_STREAM = reality()["streamSettings"]


@pytest.mark.parametrize(
    ("inbound", "want"),
    [
        (normalized("vless", stream_settings={"network": "tcp", **TLS_FILES}), True),
        (normalized("vless", stream_settings={"network": "raw", **TLS_FILES}), True),
        (normalized("vless", stream_settings=REALITY_STREAM), True),
        (normalized("vless"), False),
        (normalized("vless", stream_settings={"network": "ws", **TLS_FILES}), False),
        (normalized("vless", stream_settings={"network": "grpc", **REALITY_STREAM}), False),
        (normalized("vless", stream_settings={"network": "xhttp"}), False),
        (normalized("vless", {"decryption": VLESS_ENC}, {"network": "xhttp"}), True),
        (normalized("vless", {"decryption": VLESS_ENC}, {"network": "ws"}), False),
        (normalized("trojan", stream_settings={"network": "tcp", **TLS_FILES}), False),
        (normalized("vmess", stream_settings={"network": "tcp", **TLS_FILES}), False),
        ({"protocol": "vless", "streamSettings": "junk"}, False),
        ("junk", False),
        ({"protocol": ["vless"], "streamSettings": {"network": ["tcp"]}}, False),
    ],
)
def test_tls_flow_capable(inbound, want):
    assert tls_flow_capable(inbound) is want


def test_ss_method():
    for method in ("aes-256-gcm", "2022-blake3-chacha20-poly1305", "none"):
        assert ss_method(normalized("shadowsocks", {"method": method})) == method
    for protocol in ("vless", "vmess", "trojan", "socks", "mtproto"):
        assert ss_method(normalized(protocol)) == ""
    assert ss_method({"protocol": "shadowsocks", "settings": {"method": 3}}) == ""


@pytest.mark.parametrize(
    ("method", "is_2022", "length"),
    [
        ("2022-blake3-aes-128-gcm", True, 16),
        ("2022-blake3-aes-256-gcm", True, 32),
        ("2022-blake3-chacha20-poly1305", True, 32),
        ("aes-256-gcm", False, 0),
        ("chacha20-ietf-poly1305", False, 0),
        ("none", False, 0),
        ("2022-blake3-unknown", False, 0),
        (["2022-blake3-aes-128-gcm"], False, 0),
    ],
)
def test_ss2022_helpers(method, is_2022, length):
    assert is_ss2022(method) is is_2022
    assert ss2022_key_length(method) == length


def test_the_core_api_tag_is_reserved():
    with pytest.raises(ServiceError, match="core API"):
        normalize_inbound({"protocol": "vmess", "port": 1234, "tag": "api"})
