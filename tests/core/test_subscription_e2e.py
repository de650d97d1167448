"""A subscription used the way a client app uses it, against the real core.

The panel runs Debian's V2Ray 4.34 as its core with VLESS, VMess, Trojan and Shadowsocks
inbounds on 127.0.0.1 and one client attached to all four. The test fetches that client's
JSON subscription from the subscription server and runs each config it holds, unchanged
but for its two local ports, as a second V2Ray process: the user's client app. An HTTP
request through the config's SOCKS inbound reaches an HTTP server the test runs on
loopback, and the bytes must come back whole and appear in that client's counters.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import uuid

import pytest
import requests
from core_helpers import LOOPBACK, V2RAY, running_core
from core_panel import http_server as answering_server
from core_panel import wait_until
from core_traffic import add_inbound, in_core, traffic, traffic_core_panel
from helpers import free_port, ok

CLIENTS = "/panel/api/clients"
PROTOCOLS = ("vless", "vmess", "trojan", "shadowsocks")
BODY_SIZE = 150_000
# What GET /blob answers: bytes the test knows, so it can tell them apart.
BLOB = os.urandom(BODY_SIZE)


@pytest.fixture(scope="module")
def http_server():
    """The loopback HTTP server the client's traffic reaches: GET /blob answers BLOB."""
    with answering_server({"/blob": (200, BLOB)}) as (port, _requested):
        yield port


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = traffic_core_panel(tmp_path_factory.mktemp("sub-e2e"))
    yield server
    server.stop()


def get_through_socks(socks_port: int, http_port: int) -> bytes:
    """GET http://127.0.0.1:http_port/blob through a SOCKS5 proxy; the body, or b"" when
    the chain refused."""
    with socket.create_connection((LOOPBACK, socks_port), 10) as sock:
        sock.sendall(b"\x05\x01\x00")
        if sock.recv(2) != b"\x05\x00":
            return b""
        sock.sendall(
            b"\x05\x01\x00\x01" + socket.inet_aton(LOOPBACK) + struct.pack(">H", http_port)
        )
        reply = b""
        while len(reply) < 10:
            chunk = sock.recv(10 - len(reply))
            if not chunk:
                return b""
            reply += chunk
        if reply[1] != 0:
            return b""
        sock.sendall(f"GET /blob HTTP/1.0\r\nHost: {LOOPBACK}:{http_port}\r\n\r\n".encode())
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    return body if head.startswith(b"HTTP/1.0 200") else b""


def fetches_blob(socks_port: int, http_port: int) -> bool:
    try:
        return get_through_socks(socks_port, http_port) == BLOB
    except OSError:
        return False


def refused_by_v2ray(path) -> str:
    """V2Ray's own verdict on a config file: "" when it accepts it."""
    result = subprocess.run([V2RAY, "-test", "-config", str(path)], capture_output=True, text=True)
    return "" if result.returncode == 0 else result.stdout + result.stderr


def test_json_subscription_runs_on_a_client_core_and_its_bytes_are_counted(
    panel, tmp_path, http_server
):
    api = panel.client()
    ok(api.post("/panel/api/setting/update", {"subJsonEnable": True}))
    inbounds = [add_inbound(api, protocol) for protocol in PROTOCOLS]
    client = {"email": f"{uuid.uuid4().hex[:10]}@sub-e2e", "subId": uuid.uuid4().hex}
    ok(
        api.post(
            f"{CLIENTS}/add",
            {"client": client, "inboundIds": [inbound["id"] for inbound in inbounds]},
        )
    )
    in_core(api, panel, *inbounds)
    response = requests.get(f"{panel.sub_url}/json/{client['subId']}", timeout=10)
    assert response.status_code == 200, response.text
    configs = response.json()
    assert len(configs) == len(PROTOCOLS)
    counted = 0
    for protocol, config in zip(PROTOCOLS, configs, strict=True):
        assert config["outbounds"][0]["protocol"] == protocol
        socks = next(i for i in config["inbounds"] if i["protocol"] == "socks")
        socks["port"] = free_port()
        for other in config["inbounds"]:
            if other is not socks:
                other["port"] = free_port()
        path = tmp_path / f"{protocol}.json"
        path.write_text(json.dumps(config))
        assert refused_by_v2ray(path) == "", f"V2Ray refuses the {protocol} config"
        with running_core(tmp_path, config, socks["port"]):
            wait_until(
                lambda port=socks["port"]: fetches_blob(port, http_server),
                f"an HTTP GET through the {protocol} config comes back whole",
            )
        counted += BODY_SIZE
        wait_until(
            lambda total=counted: traffic(api, client["email"])["down"] >= total,
            f"the {protocol} bytes appear in the client's counters",
        )
    final = traffic(api, client["email"])
    assert counted <= final["down"] <= counted * 1.05 + 65536 * len(PROTOCOLS)
    assert final["up"] > 0
