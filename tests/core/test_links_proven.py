"""Every link we hand out, proven by the core of the client apps: sing-box.

sing-box runs inside Hiddify, Karing and the SFA/SFI apps. For each protocol, transport
and security the panel renders, a panel stores an inbound and a client, the test fetches
that client's subscription the way an app does (`/sub/` links, `/yaml/` proxies, `/json/`
configs), reads each entry back (our share-link and Mihomo parsers; the core's outbound
schema for JSON) and builds the sing-box outbound an app would (`sing_box_links`). A
sing-box client with a mixed inbound on loopback then carries bytes to an echo server
and they must come back. Only what the subscription says reaches the client, so a link
that says something wrong fails here.

The server is the panel's real core (Debian's V2Ray 4.34) where it can serve the
combination: VLESS, VMess, Trojan and legacy Shadowsocks over TCP and WebSocket, with
or without TLS. Where it cannot (REALITY, Vision, gRPC, HTTPUpgrade, Shadowsocks 2022,
Hysteria 2), a second panel without a core stores the inbound and a sing-box server is
built from the stored record (its keys, users, certificate and port). REALITY and TLS
fingerprints need uTLS, which the packaged sing-box lacks (`sing-box version` lists the
build tags): there sing-box must accept the server and client configs but for uTLS, and
the real Xray (the core of v2rayNG and v2rayN) takes over, as the client built from the
same link, proxy or JSON config, and as the REALITY server running the inbound exactly as
the panel's own generated core config has it.

Each family has a negative case: the same link with one field changed (the REALITY
public key or short id, the SNI, the path, the service name, a password, allowInsecure)
must not carry the bytes, which shows the test can fail. TLS inbounds use a certificate
of a CA made here; the client trusts that CA as an app trusts the system's, so the SNI
of the link is verified. What sing-box cannot express has no case: raw TCP with HTTP
obfuscation, mKCP, QUIC and XHTTP transports, and Shadowsocks over a transport.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

import pytest
import requests
import sing_box
import xray_core
import yaml
from core_helpers import LOOPBACK
from core_panel import CORE_ENV, loopback_template, use_template, wait_until
from helpers import free_port, ok
from panels import start_panel, stop_and_drop
from proving import WITHOUT_UTLS, assert_only_utls_missing, needs_utls, prove
from sing_box_links import (
    CERTS,
    OTHER_PUBLIC,
    REALITY_PRIVATE,
    REALITY_PUBLIC,
    SERVER_NAME,
    mutate,
    plan_of_json,
    server_inbound,
    tls_site,
)

from appliance.links.import_links import decode_base64, read_clash_proxy, read_link

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------------------
# Inbound payloads as an admin saves them
# ---------------------------------------------------------------------------------------


def tls(*, insecure: bool = False) -> dict:
    return {
        "serverName": SERVER_NAME,
        "certificates": [
            {"certificate": CERTS.cert_pem.splitlines(), "key": CERTS.key_pem.splitlines()}
        ],
        "settings": {"allowInsecure": insecure},
    }


def reality(target_port: int) -> dict:
    return {
        "show": False,
        "target": f"{LOOPBACK}:{target_port}",
        "xver": 0,
        "serverNames": [SERVER_NAME],
        "privateKey": REALITY_PRIVATE,
        "shortIds": ["6ba85179e30d4fc2"],
        "settings": {"fingerprint": "chrome"},
    }


def stream(network: str, security: str = "none", **objects) -> dict:
    stream = {"network": network, "security": security, **objects}
    if security == "tls":
        stream.setdefault("tlsSettings", tls())
    return stream


@dataclass(frozen=True)
class Case:
    """One combination: the inbound's protocol, settings and stream (a function of the
    REALITY target's port where it needs one); the client's fields; a change (old text,
    new text) that makes its link wrong; and whether the client app trusts the test CA
    (an app that does not needs the link's allowInsecure)."""

    protocol: str
    settings: dict
    stream: dict | Callable[[int], dict]
    client: dict = field(default_factory=dict)
    wrong: tuple[str, str] | None = None
    trusts_ca: bool = True
    hosts: tuple[dict, ...] = ()


VLESS = {"decryption": "none"}
VISION = {"flow": "xtls-rprx-vision"}
SS_SERVER_KEY = base64.b64encode(b"0123456789abcdef").decode()
SS_USER_KEY = base64.b64encode(b"fedcba9876543210").decode()
SS_SERVER_KEY_256 = base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
SS_USER_KEY_256 = base64.b64encode(b"fedcba9876543210fedcba9876543210").decode()
WRONG_KEY = base64.b64encode(b"not-the-user-key").decode()
VLESS_ID = "11111111-2222-4333-8444-555555555555"
OTHER_ID = "11111111-2222-4333-8444-666666666666"
WRONG_SNI = (f"sni={SERVER_NAME}", "sni=wrong.test")
WRONG_VMESS_SNI = (f'"sni":"{SERVER_NAME}"', '"sni":"wrong.test"')


def quote_key(key: str) -> str:
    """A key as a link carries it: percent-encoded like encodeURIComponent."""
    return quote(key, safe="!~*'()")


# What many panels set by default: both HTTP versions offered.
H2_TLS = {**tls(), "alpn": ["h2", "http/1.1"]}
FINGERPRINT_TLS = {**tls(), "settings": {"fingerprint": "chrome", "allowInsecure": False}}
# A certificate name that is not the inbound's own; a host gives the right SNI.
OTHER_NAME_TLS = {**tls(), "serverName": "other.test"}


def with_reality(network: str, **objects) -> Callable[[int], dict]:
    return lambda target_port: stream(
        network, "reality", realitySettings=reality(target_port), **objects
    )


# Served by the panel's own core, V2Ray 4.34.
CORE_CASES: dict[str, Case] = {
    "vless_tcp": Case("vless", VLESS, stream("tcp"), {"id": VLESS_ID}, wrong=(VLESS_ID, OTHER_ID)),
    "vless_ws": Case(
        "vless", VLESS, stream("ws", wsSettings={"path": "/vl"}), wrong=("%2Fvl", "%2Fx")
    ),
    "vless_tcp_tls": Case("vless", VLESS, stream("tcp", "tls"), wrong=WRONG_SNI),
    "vless_ws_tls": Case(
        "vless",
        VLESS,
        stream("ws", "tls", wsSettings={"path": "/vlt", "host": SERVER_NAME}),
        wrong=("%2Fvlt", "%2Fvl"),
    ),
    "vless_ws_tls_alpn": Case(
        "vless",
        VLESS,
        stream("ws", "tls", wsSettings={"path": "/alpn"}, tlsSettings=H2_TLS),
    ),
    "vless_ws_tls_h2_only": Case(
        "vless",
        VLESS,
        stream("ws", "tls", wsSettings={"path": "/h2"}, tlsSettings={**tls(), "alpn": ["h2"]}),
    ),
    "vless_ws_tls_host": Case(
        "vless",
        VLESS,
        stream("ws", "tls", wsSettings={"path": "/host"}, tlsSettings=OTHER_NAME_TLS),
        wrong=WRONG_SNI,
        hosts=({"remark": "by name", "address": "localhost", "sni": SERVER_NAME},),
    ),
    "vless_ws_tls_fingerprint": Case(
        "vless",
        VLESS,
        stream("ws", "tls", wsSettings={"path": "/fp"}, tlsSettings=FINGERPRINT_TLS),
        wrong=WRONG_SNI,
    ),
    "vmess_tcp": Case("vmess", {}, stream("tcp")),
    "vmess_tcp_aes": Case("vmess", {}, stream("tcp"), {"security": "aes-128-gcm"}),
    "vmess_ws": Case(
        "vmess",
        {},
        stream("ws", wsSettings={"path": "/vm"}),
        wrong=('"path":"/vm"', '"path":"/x"'),
    ),
    "vmess_tcp_tls": Case("vmess", {}, stream("tcp", "tls"), wrong=WRONG_VMESS_SNI),
    "vmess_ws_tls": Case("vmess", {}, stream("ws", "tls", wsSettings={"path": "/vmt"})),
    "trojan_tcp": Case(
        "trojan", {}, stream("tcp"), {"password": "trojan-right"}, ("trojan-right", "trojan-wrong")
    ),
    "trojan_tcp_tls": Case("trojan", {}, stream("tcp", "tls"), wrong=WRONG_SNI),
    "trojan_tcp_tls_insecure": Case(
        "trojan",
        {},
        stream("tcp", "tls", tlsSettings=tls(insecure=True)),
        wrong=("allowInsecure=1", "allowInsecure=0"),
        trusts_ca=False,
    ),
    "trojan_tcp_tls_alpn": Case("trojan", {}, stream("tcp", "tls", tlsSettings=H2_TLS)),
    "trojan_ws": Case("trojan", {}, stream("ws", wsSettings={"path": "/trw"})),
    "trojan_ws_tls": Case("trojan", {}, stream("ws", "tls", wsSettings={"path": "/tr"})),
    "ss_aes_256_gcm": Case(
        "shadowsocks",
        {"method": "aes-256-gcm", "network": "tcp"},
        stream("tcp"),
        {"password": "right-password"},
        wrong=("right-password", "wrong-password"),
    ),
    "ss_aes_128_gcm": Case(
        "shadowsocks",
        {"method": "aes-128-gcm", "network": "tcp"},
        stream("tcp"),
        {"password": "right-password"},
    ),
    "ss_none": Case(
        "shadowsocks",
        {"method": "none", "network": "tcp"},
        stream("tcp"),
        {"password": "open"},
    ),
    "ss_client_method": Case(
        "shadowsocks",
        {"method": "aes-256-gcm", "network": "tcp"},
        stream("tcp"),
        {"password": "own-method", "method": "chacha20-ietf-poly1305"},
    ),
    "ss_chacha20": Case(
        "shadowsocks",
        {"method": "chacha20-ietf-poly1305", "network": "tcp"},
        stream("tcp"),
        {"password": "right-password"},
    ),
}

# What V2Ray 4.34 cannot serve: a sing-box server built from the stored inbound.
SING_BOX_CASES: dict[str, Case] = {
    "vless_tcp_reality_vision": Case(
        "vless",
        VLESS,
        with_reality("tcp"),
        VISION,
        wrong=(f"pbk={REALITY_PUBLIC}", f"pbk={OTHER_PUBLIC}"),
    ),
    "vless_tcp_reality_vision_short_id": Case(
        "vless", VLESS, with_reality("tcp"), VISION, wrong=("sid=6ba85179e30d4fc2", "sid=6ba8")
    ),
    "vless_tcp_reality": Case("vless", VLESS, with_reality("tcp"), wrong=WRONG_SNI),
    "vless_tcp_tls_vision": Case("vless", VLESS, stream("tcp", "tls"), VISION, wrong=WRONG_SNI),
    "vless_grpc_reality": Case(
        "vless",
        VLESS,
        with_reality("grpc", grpcSettings={"serviceName": "svc"}),
        wrong=("serviceName=svc", "serviceName=other"),
    ),
    "vless_grpc": Case("vless", VLESS, stream("grpc", grpcSettings={"serviceName": "plain"})),
    "vless_grpc_tls": Case(
        "vless",
        VLESS,
        stream("grpc", "tls", grpcSettings={"serviceName": "vsvc"}),
        wrong=("serviceName=vsvc", "serviceName=other"),
    ),
    "vless_httpupgrade_tls": Case(
        "vless",
        VLESS,
        stream("httpupgrade", "tls", httpupgradeSettings={"path": "/up", "host": SERVER_NAME}),
        wrong=("path=%2Fup", "path=%2Fdown"),
    ),
    "vless_grpc_tls_alpn": Case(
        "vless",
        VLESS,
        stream("grpc", "tls", grpcSettings={"serviceName": "asvc"}, tlsSettings=H2_TLS),
    ),
    "vmess_grpc_tls": Case(
        "vmess",
        {},
        stream("grpc", "tls", grpcSettings={"serviceName": "msvc"}),
        wrong=('"path":"msvc"', '"path":"other"'),
    ),
    "vmess_httpupgrade": Case(
        "vmess", {}, stream("httpupgrade", httpupgradeSettings={"path": "/hu"})
    ),
    "trojan_grpc_tls": Case(
        "trojan", {}, stream("grpc", "tls", grpcSettings={"serviceName": "tsvc"})
    ),
    "trojan_grpc_reality": Case(
        "trojan",
        {},
        with_reality("grpc", grpcSettings={"serviceName": "trsvc"}),
        wrong=(f"pbk={REALITY_PUBLIC}", f"pbk={OTHER_PUBLIC}"),
    ),
    "ss_2022_aes_128": Case(
        "shadowsocks",
        {"method": "2022-blake3-aes-128-gcm", "password": SS_SERVER_KEY, "network": "tcp"},
        stream("tcp"),
        {"password": SS_USER_KEY},
        wrong=(quote_key(SS_USER_KEY), quote_key(WRONG_KEY)),
    ),
    "ss_2022_aes_256": Case(
        "shadowsocks",
        {"method": "2022-blake3-aes-256-gcm", "password": SS_SERVER_KEY_256, "network": "tcp"},
        stream("tcp"),
        {"password": SS_USER_KEY_256},
    ),
    "hysteria2": Case(
        "hysteria2",
        {"version": 2},
        stream("hysteria", "tls", hysteriaSettings={"version": 2}),
        {"auth": "hy2-right-auth"},
        wrong=("hy2-right-auth", "hy2-wrong-auth"),
    ),
    "hysteria2_sni": Case(
        "hysteria2",
        {"version": 2},
        stream("hysteria", "tls", hysteriaSettings={"version": 2}),
        {"auth": "hy2-other-auth"},
        wrong=WRONG_SNI,
    ),
}


# ---------------------------------------------------------------------------------------
# Panels and their subscriptions
# ---------------------------------------------------------------------------------------


@dataclass
class Stored:
    """A case as the panel holds it: the inbound record and the client's subscription."""

    case: Case
    record: dict
    sub_id: str


def client_fields(case: Case, name: str) -> dict:
    fields = {"email": f"{name}@proven", "subId": uuid.uuid4().hex, "enable": True}
    if case.protocol in ("vless", "vmess"):
        fields["id"] = str(uuid.uuid4())
    elif case.protocol in ("trojan", "shadowsocks"):
        fields["password"] = uuid.uuid4().hex
    elif case.protocol == "hysteria2":
        fields["auth"] = uuid.uuid4().hex
    return {**fields, **case.client}


def store_cases(api, cases: dict[str, Case], target_port: int) -> dict[str, Stored]:
    formats = {"subEnable": True, "subYamlEnable": True, "subJsonEnable": True}
    ok(api.post("/panel/api/setting/update", formats))
    stored = {}
    for name, case in cases.items():
        payload = {
            "protocol": case.protocol,
            "remark": name,
            "listen": LOOPBACK,
            "port": free_port(),
            "settings": case.settings,
            "streamSettings": case.stream(target_port) if callable(case.stream) else case.stream,
        }
        inbound = ok(api.post("/panel/api/inbounds/add", payload))
        for host in case.hosts:
            ok(api.post("/panel/api/hosts/add", {**host, "inboundId": inbound["id"]}))
        client = client_fields(case, name)
        ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
        record = ok(api.get(f"/panel/api/inbounds/get/{inbound['id']}"))
        stored[name] = Stored(case, record, client["subId"])
    return stored


def subscription_link(panel, sub_id: str) -> str:
    response = requests.get(f"{panel.sub_url}/sub/{sub_id}", timeout=10)
    assert response.status_code == 200, response.text
    links = decode_base64(response.text).splitlines()
    assert len(links) == 1, links
    return links[0]


def subscription_proxies(panel, sub_id: str) -> list[dict]:
    response = requests.get(f"{panel.sub_url}/yaml/{sub_id}", timeout=10)
    assert response.status_code == 200, response.text
    return yaml.safe_load(response.text)["proxies"]


def subscription_configs(panel, sub_id: str) -> list[dict]:
    response = requests.get(f"{panel.sub_url}/json/{sub_id}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def reality_target():
    with tls_site() as port:
        yield port


@pytest.fixture(scope="module")
def core_panel(tmp_path_factory, reality_target):
    """A panel on V2Ray 4.34 serving CORE_CASES."""
    server = start_panel(tmp_path_factory.mktemp("proven-core"), env=CORE_ENV)
    api = server.client()
    use_template(api, loopback_template(api))
    stored = store_cases(api, CORE_CASES, reality_target)
    tags = {entry.record["tag"] for entry in stored.values()}

    def serving() -> bool:
        config = ok(api.get("/panel/api/server/getConfigJson"))
        running = ok(api.get("/panel/api/server/status"))["core"]["state"] == "running"
        return running and tags <= {inbound.get("tag") for inbound in config["inbounds"]}

    wait_until(serving, "the core serves every inbound")
    yield server, stored
    stop_and_drop(server)


@pytest.fixture(scope="module")
def bare_panel(tmp_path_factory, reality_target):
    """A panel without a core holding SING_BOX_CASES, which sing-box servers serve."""
    server = start_panel(tmp_path_factory.mktemp("proven-bare"))
    stored = store_cases(server.client(), SING_BOX_CASES, reality_target)
    yield server, stored
    stop_and_drop(server)


# ---------------------------------------------------------------------------------------
# Proving
# ---------------------------------------------------------------------------------------


def prove_link(tmp_path, name: str, stored: Stored, link: str, echo_port: int) -> None:
    trusts_ca = stored.case.trusts_ca
    prove(tmp_path, name, read_link(link), echo_port, works=True, trusts_ca=trusts_ca)
    if stored.case.wrong:
        wrong = read_link(mutate(link, *stored.case.wrong))
        prove(tmp_path, f"{name}-wrong", wrong, echo_port, works=False, trusts_ca=trusts_ca)


def prove_proxies(tmp_path, name: str, stored: Stored, proxies: list[dict], echo_port) -> None:
    for index, proxy in enumerate(proxies):
        plan = read_clash_proxy(proxy)
        trusts_ca = stored.case.trusts_ca
        prove(tmp_path, f"{name}-yaml-{index}", plan, echo_port, works=True, trusts_ca=trusts_ca)


def prove_configs(tmp_path, name: str, stored: Stored, configs: list[dict], echo_port) -> None:
    """The JSON config's proxy outbound: read by sing-box's rules, run as is by Xray."""
    assert len(configs) == 1
    proxy = configs[0]["outbounds"][0]
    prove(
        tmp_path,
        f"{name}-json",
        plan_of_json(proxy),
        echo_port,
        works=True,
        trusts_ca=stored.case.trusts_ca,
        xray_outbound=proxy,
    )


def prove_subscription(tmp_path, name: str, panel, stored: Stored, echo_port: int) -> None:
    """The link (and its wrong twin), the Mihomo proxy and the JSON config of one case."""
    prove_link(tmp_path, name, stored, subscription_link(panel, stored.sub_id), echo_port)
    proxies = subscription_proxies(panel, stored.sub_id)
    assert len(proxies) == expected_proxies(name)
    prove_proxies(tmp_path, name, stored, proxies, echo_port)
    prove_configs(tmp_path, name, stored, subscription_configs(panel, stored.sub_id), echo_port)


# Mihomo's Trojan always speaks TLS, so plain Trojan inbounds have no proxy.
NO_MIHOMO_PROXY = {"trojan_tcp", "trojan_ws"}


def expected_proxies(name: str) -> int:
    return 0 if name in NO_MIHOMO_PROXY else 1


@pytest.mark.parametrize("name", CORE_CASES)
def test_a_link_served_by_the_panels_core_carries_bytes_in_sing_box(
    name, core_panel, tmp_path, echo
):
    panel, stored = core_panel
    prove_subscription(tmp_path, name, panel, stored[name], echo)


def core_inbound(panel, record: dict) -> dict:
    """The inbound of `record` as the panel's generated core config has it."""
    config = ok(panel.client().get("/panel/api/server/getConfigJson"))
    (inbound,) = [inbound for inbound in config["inbounds"] if inbound.get("tag") == record["tag"]]
    return inbound


@pytest.mark.parametrize("name", SING_BOX_CASES)
def test_a_link_the_v2fly_core_cannot_serve_carries_bytes_to_a_sing_box_server(
    name, bare_panel, tmp_path, echo
):
    """A sing-box server from the stored inbound; where the packaged sing-box lacks the
    uTLS that REALITY needs, it must accept all but that, and the real Xray serves the
    inbound from the panel's own core config instead."""
    panel, stored = bare_panel
    entry = stored[name]
    inbound = server_inbound(entry.record)
    server = sing_box.server_config(inbound)
    verdict = sing_box.check(tmp_path, f"{name}-server", server)
    if WITHOUT_UTLS and needs_utls(inbound):
        assert_only_utls_missing(verdict)
        server = xray_core.server_config(core_inbound(panel, entry.record))
        with xray_core.running(tmp_path, f"{name}-server", server, entry.record["port"]):
            prove_subscription(tmp_path, name, panel, entry, echo)
        return
    assert verdict == ""
    tcp = entry.case.protocol != "hysteria2"
    port = entry.record["port"] if tcp else None
    with sing_box.running(tmp_path, f"{name}-server", server, port):
        prove_subscription(tmp_path, name, panel, entry, echo)
