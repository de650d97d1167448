"""The panel's generated core config, run by the real Xray (26.x, the production core).

The panel's own core in the other tests is Debian's V2Ray 4.34, which has no XHTTP, no
VLESS encryption, no REALITY and no Hysteria 2, so what the panel generates for those was
only compared with golden files. Here a panel stores one inbound of each such kind, with
keys from its own key routes (`getNewX25519Cert`, `getNewVlessEnc`, `getNewmldsa65`), and
the real Xray (tests/xray_core.py) runs the whole config the panel generates: API inbound,
stats, policy and routing included, as the panel would hand it to its core. Xray must
start on it and listen on every inbound.

Then each client's subscription is used the way v2rayNG and v2rayN use it: Xray as the
client, built from the share link (`/sub/`) and run as is from the JSON config
(`/json/`), carries bytes to an echo server and back. Each case also has a link with one
field changed (a key, a path, an id) that must not carry them, which shows the test can
fail.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

import pytest
import requests
import xray_core
from core_helpers import LOOPBACK, socks_echo, wait_port
from core_panel import loopback_template, wait_until
from helpers import free_port, ok
from panels import start_panel, stop_and_drop
from sing_box_links import CERTS, SERVER_NAME, make_certificates, mutate, tls_site

from appliance.links.import_links import decode_base64, read_link
from appliance.links.json_config import proxy_outbound
from appliance.services.tools.keygen import new_mldsa65

pytestmark = pytest.mark.slow

PAYLOAD = b"carried by the real Xray " * 40
CONNECT_WAIT = 15


@dataclass(frozen=True)
class Case:
    """An inbound as an admin saves it (`stream` may name keys the panel makes: see
    `fill`), the client's own fields, and a change (old, new) that spoils its link."""

    settings: dict
    stream: dict
    client: dict
    wrong: tuple[str, str] | Callable[[str], str] | None = None
    protocol: str = "vless"


def tls() -> dict:
    return {
        "serverName": SERVER_NAME,
        "certificates": [
            {"certificate": CERTS.cert_pem.splitlines(), "key": CERTS.key_pem.splitlines()}
        ],
    }


REALITY = "reality"
SS_SERVER_KEY = base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
SS_USER_KEY = base64.b64encode(b"fedcba9876543210fedcba9876543210").decode()
SS_OTHER_KEY = base64.b64encode(b"not-the-user-key-not-the-user-ke").decode()
OTHER_MLDSA65 = new_mldsa65()["publicKey"]
VISION = {"flow": "xtls-rprx-vision"}
CASES = {
    "vless_xhttp": Case(
        {"decryption": "none"},
        {"network": "xhttp", "xhttpSettings": {"path": "/xh", "mode": "auto"}},
        {},
        wrong=("path=%2Fxh", "path=%2Fother"),
    ),
    "vless_xhttp_tls": Case(
        {"decryption": "none"},
        {
            "network": "xhttp",
            "security": "tls",
            "xhttpSettings": {"path": "/xt", "mode": "packet-up"},
            "tlsSettings": tls(),
        },
        {},
        wrong=(f"sni={SERVER_NAME}", "sni=wrong.test"),
    ),
    "vless_xhttp_reality": Case(
        {"decryption": "none"},
        {"network": "xhttp", "security": REALITY, "xhttpSettings": {"path": "/xr"}},
        {},
        wrong=("sid=6ba85179e30d4fc2", "sid=6ba8"),
    ),
    "vless_tcp_reality_mldsa65": Case(
        {"decryption": "none"},
        {"network": "tcp", "security": REALITY, "mldsa65": True},
        VISION,
        wrong=lambda link: re.sub(r"pqv=[^&#]+", f"pqv={OTHER_MLDSA65}", link),
    ),
    "vless_encryption_x25519": Case(
        {"decryption": "x25519"},
        {"network": "tcp"},
        VISION,
        wrong=("encryption=mlkem768x25519plus.native.0rtt.", "encryption=none&x="),
    ),
    "vless_encryption_mlkem768": Case(
        {"decryption": "mlkem768"},
        {"network": "xhttp", "xhttpSettings": {"path": "/pq"}},
        {},
    ),
    "vless_ws_tls": Case(
        {"decryption": "none"},
        {"network": "ws", "security": "tls", "wsSettings": {"path": "/ws"}, "tlsSettings": tls()},
        {},
        wrong=("path=%2Fws", "path=%2Fwx"),
    ),
    "hysteria2": Case(
        {"version": 2},
        {
            "network": "hysteria",
            "security": "tls",
            "hysteriaSettings": {"version": 2},
            "tlsSettings": tls(),
        },
        {"auth": "hy2-right-auth"},
        wrong=("hy2-right-auth", "hy2-wrong-auth"),
        protocol="hysteria2",
    ),
    "shadowsocks_2022": Case(
        {"method": "2022-blake3-aes-256-gcm", "password": SS_SERVER_KEY, "network": "tcp"},
        {"network": "tcp"},
        {"password": SS_USER_KEY},
        wrong=(quote(SS_USER_KEY, safe=""), quote(SS_OTHER_KEY, safe="")),
        protocol="shadowsocks",
    ),
    "trojan_grpc_tls": Case(
        {},
        {
            "network": "grpc",
            "security": "tls",
            "grpcSettings": {"serviceName": "svc"},
            "tlsSettings": tls(),
        },
        {"password": "right-password"},
        wrong=("right-password", "wrong-password"),
        protocol="trojan",
    ),
}


def fill(api, case: Case, target_port: int) -> tuple[dict, dict]:
    """The case's settings and stream with the panel's own keys where they are named."""
    settings, stream = copy.deepcopy(case.settings), copy.deepcopy(case.stream)
    method = settings.get("decryption")
    if method in ("x25519", "mlkem768"):
        auths = ok(api.get("/panel/api/server/getNewVlessEnc"))["auths"]
        (auth,) = [auth for auth in auths if method in auth["label"].lower().replace("-", "")]
        settings["decryption"] = auth["decryption"]
        settings["encryption"] = auth["encryption"]
    if stream.get("security") == REALITY:
        keys = ok(api.get("/panel/api/server/getNewX25519Cert"))
        reality = {
            "show": False,
            "target": f"{LOOPBACK}:{target_port}",
            "xver": 0,
            "serverNames": [SERVER_NAME],
            "privateKey": keys["privateKey"],
            "shortIds": ["6ba85179e30d4fc2"],
            "settings": {"publicKey": keys["publicKey"], "fingerprint": "chrome"},
        }
        if stream.pop("mldsa65", False):
            mldsa = ok(api.get("/panel/api/server/getNewmldsa65"))
            reality["mldsa65Seed"] = mldsa["seed"]
            reality["settings"]["mldsa65Verify"] = mldsa["publicKey"]
        stream["realitySettings"] = reality
    return settings, stream


@dataclass
class Stored:
    case: Case
    record: dict
    sub_id: str


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A panel without a core storing every case, and the real Xray running the config
    the panel generates for them."""
    directory = tmp_path_factory.mktemp("xray-real")
    server = start_panel(directory)
    api = server.client()
    formats = {"subEnable": True, "subJsonEnable": True}
    ok(api.post("/panel/api/setting/update", formats))
    ok(api.post("/panel/api/core/update", {"coreSetting": json.dumps(xray_template(api))}))
    # REALITY sends the target's certificate message with its own in its place; with
    # ML-DSA-65 that must have room for a 3,309-byte signature (Xray asks for 3,500 bytes).
    with tls_site(make_certificates(extra_names=150)) as target_port:
        stored = {}
        for name, case in CASES.items():
            settings, stream = fill(api, case, target_port)
            payload = {
                "protocol": case.protocol,
                "remark": name,
                "listen": LOOPBACK,
                "port": free_port(),
                "settings": settings,
                "streamSettings": stream,
            }
            inbound = ok(api.post("/panel/api/inbounds/add", payload))
            client = {"email": f"{name}@xray", "subId": uuid.uuid4().hex, **case.client}
            if case.protocol == "vless":
                client["id"] = str(uuid.uuid4())
            ok(
                api.post(
                    "/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}
                )
            )
            record = ok(api.get(f"/panel/api/inbounds/get/{inbound['id']}"))
            stored[name] = Stored(case, record, client["subId"])
        config = ok(api.get("/panel/api/server/getConfigJson"))
        # A panel without a core has no API port yet; it picks one when it starts a core.
        (api_inbound,) = [i for i in config["inbounds"] if i.get("tag") == "api"]
        api_port = api_inbound["port"] = free_port()
        with xray_core.running(directory, "panel-config", config, api_port) as process:
            yield server, stored, config, process
    stop_and_drop(server)


def xray_template(api) -> dict:
    """The default template for loopback servers: without the rules that send private
    addresses to the blackhole, and with the freedom outbound allowed to reach loopback
    (since 26.4 Xray refuses private addresses to proxied traffic unless told)."""
    template = loopback_template(api)
    for outbound in template["outbounds"]:
        if outbound.get("protocol") == "freedom":
            allow = {"action": "allow", "ip": [f"{LOOPBACK}/32"]}
            outbound.setdefault("settings", {})["finalRules"] = [allow]
    return template


def test_xray_runs_the_whole_config_the_panel_generates(served):
    _, stored, config, process = served
    assert process.poll() is None
    tags = {entry.record["tag"] for entry in stored.values()}
    assert tags <= {inbound.get("tag") for inbound in config["inbounds"]}
    for entry in stored.values():
        wait_until(lambda e=entry: listening(e.record), f"{entry.record['tag']} listens")


def listening(record: dict) -> bool:
    """Whether the inbound's port is open: TCP, or UDP for Hysteria (QUIC)."""
    if record["protocol"] == "hysteria2":
        return udp_bound(record["port"])
    try:
        wait_port(record["port"], 0.5)
    except TimeoutError:
        return False
    return True


def udp_bound(port: int) -> bool:
    """Whether a UDP socket is bound to `port` on this host, as the kernel lists them."""
    wanted = f":{port:04X}"
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        with open(table) as lines:
            next(lines)
            if any(line.split()[1].endswith(wanted) for line in lines):
                return True
    return False


def carries(socks_port: int, echo_port: int) -> bool:
    try:
        return socks_echo(socks_port, echo_port, PAYLOAD, timeout=3) == PAYLOAD
    except OSError:
        return False


def prove(tmp_path, name: str, outbound: dict, echo_port: int, *, works: bool) -> None:
    """An Xray client on `outbound` (trusting the test CA) carries bytes, or must not."""
    config = xray_core.client_config(xray_core.trusting(outbound, CERTS.ca_pem), free_port())
    port = config["inbounds"][0]["port"]
    with xray_core.running(tmp_path, name, config, port):
        if works:
            try:
                wait_until(lambda: carries(port, echo_port), name, CONNECT_WAIT)
            except AssertionError:
                said = xray_core.log_text(tmp_path, name)[-2000:]
                raise AssertionError(f"{name} carries no bytes; Xray says:\n{said}") from None
        else:
            for _ in range(3):
                assert not carries(port, echo_port), f"{name} carried bytes"


def subscription_link(server, sub_id: str) -> str:
    response = requests.get(f"{server.sub_url}/sub/{sub_id}", timeout=10)
    assert response.status_code == 200, response.text
    (link,) = decode_base64(response.text).splitlines()
    return link


@pytest.mark.parametrize("name", CASES)
def test_the_share_link_carries_bytes_through_xray(name, served, tmp_path, echo):
    server, stored, _, _ = served
    entry = stored[name]
    link = subscription_link(server, entry.sub_id)
    prove(tmp_path, name, proxy_outbound(read_link(link)), echo, works=True)
    if entry.case.wrong:
        spoil = entry.case.wrong
        wrong = spoil(link) if callable(spoil) else mutate(link, *spoil)
        assert wrong != link
        prove(tmp_path, f"{name}-wrong", proxy_outbound(read_link(wrong)), echo, works=False)


@pytest.mark.parametrize("name", CASES)
def test_the_json_config_carries_bytes_through_xray(name, served, tmp_path, echo):
    server, stored, _, _ = served
    response = requests.get(f"{server.sub_url}/json/{stored[name].sub_id}", timeout=10)
    assert response.status_code == 200, response.text
    (config,) = response.json()
    prove(tmp_path, f"{name}-json", config["outbounds"][0], echo, works=True)


def test_xray_refuses_clients_on_the_single_user_2022_cipher(tmp_path):
    """Why the panel gives no clients to 2022-blake3-chacha20-poly1305 (client_rules):
    Xray runs such an inbound on its own key alone, refuses it with users, and takes users
    on the AES 2022 ciphers."""

    def shadowsocks(method: str, *, users: bool) -> dict:
        settings = {"method": method, "password": SS_SERVER_KEY, "network": "tcp"}
        if users:
            settings["clients"] = [{"email": "a", "password": SS_USER_KEY}]
        inbound = {"listen": LOOPBACK, "port": free_port(), "protocol": "shadowsocks"}
        return xray_core.server_config({**inbound, "settings": settings})

    single = "2022-blake3-chacha20-poly1305"
    assert xray_core.refuses(tmp_path, "single-with-users", shadowsocks(single, users=True))
    assert not xray_core.refuses(tmp_path, "single-alone", shadowsocks(single, users=False))
    multi = shadowsocks("2022-blake3-aes-256-gcm", users=True)
    assert not xray_core.refuses(tmp_path, "aes-with-users", multi)
