"""JSON client configs: outbounds against hand-written goldens, and the real core.

tests/golden/links/json_outbounds.json holds the "proxy" outbound each case must get,
written from the core's outbound schema (vnext/servers, streamSettings with network,
security, tlsSettings/realitySettings and the transport object); the whole config of one
case is in json_config_ss_aes_256_gcm.json. The v2fly core of the tests then checks
every config it can read (`v2ray -test`) and carries bytes through a server core with
the configs of four protocols as its clients.
"""

from __future__ import annotations

import json
import subprocess
from urllib.parse import unquote, urlsplit

import pytest
from core_helpers import V2RAY, echo_server, running_core, server_config, socks_echo
from core_helpers import inbound as core_inbound
from helpers import GOLDEN, free_port
from links_cases import ALICE, CASES, CTX, NO_LINK_PROTOCOLS, UUID, inbound

from appliance.links import LinkContext, client_json_configs, client_links

LINKS = GOLDEN / "links"
OUTBOUNDS = json.loads((LINKS / "json_outbounds.json").read_text())
# Cases whose protocol and transport the v2fly 4.34 core of the tests can load.
V2FLY_CASES = (
    "vless_tcp_none",
    "vless_tcp_http_none",
    "vless_raw_tls_vision",
    "vless_ws_tls",
    "vless_kcp_none",
    "vmess_tcp_none",
    "vmess_tcp_http_none",
    "vmess_ws_tls",
    "vmess_kcp_none",
    "trojan_tcp_tls",
    "trojan_tcp_none",
    "trojan_ws_tls",
    "ss_aes_256_gcm",
    "ss_client_method",
    "ss_ws_tls",
    "hosts",
    "hosts_force_tls",
    "external_proxy",
)


def configs_of(name: str, **ports: int) -> list[dict]:
    record, user, hosts = CASES[name]
    return client_json_configs(record, user, hosts, CTX, **ports)


@pytest.mark.parametrize("name", sorted(OUTBOUNDS))
def test_proxy_outbound_matches_its_golden(name):
    [config] = configs_of(name)
    assert config["outbounds"][0] == OUTBOUNDS[name]


def test_whole_config_matches_its_golden():
    golden = json.loads((LINKS / "json_config_ss_aes_256_gcm.json").read_text())
    assert configs_of("ss_aes_256_gcm") == [golden]


def test_one_config_per_link_in_the_same_order():
    for name in ("hosts", "external_proxy"):
        record, user, hosts = CASES[name]
        links = client_links(record, user, hosts, CTX)
        configs = configs_of(name)
        assert len(configs) == len(links) > 1
        for link, config in zip(links, configs, strict=True):
            parts = urlsplit(link)
            outbound = config["outbounds"][0]
            server = (outbound["settings"].get("vnext") or outbound["settings"]["servers"])[0]
            assert (server["address"], server["port"]) == (parts.hostname, parts.port)
            assert config["remarks"] == unquote(parts.fragment)


def test_host_security_is_mirrored_in_stream_settings():
    streams = [config["outbounds"][0]["streamSettings"] for config in configs_of("hosts")]
    assert [stream["security"] for stream in streams] == ["tls", "none", "tls"]
    assert streams[0]["tlsSettings"]["serverName"] == "front.example.net"
    assert "tlsSettings" not in streams[1]
    forced = configs_of("hosts_force_tls")[0]["outbounds"][0]["streamSettings"]
    assert forced == {
        "network": "ws",
        "security": "tls",
        "tlsSettings": {"allowInsecure": False, "serverName": "cf.example.org"},
        "wsSettings": {"path": "/plain"},
    }


def test_local_ports_can_be_chosen():
    [config] = configs_of("vmess_tcp_none", socks_port=21080, http_port=21081)
    assert [(i["protocol"], i["listen"], i["port"]) for i in config["inbounds"]] == [
        ("socks", "127.0.0.1", 21080),
        ("http", "127.0.0.1", 21081),
    ]


def test_hysteria_1_gets_no_core_config():
    assert configs_of("hysteria_v1") == []
    assert configs_of("hysteria_protocol_v2")[0]["outbounds"][0]["protocol"] == "hysteria"


@pytest.mark.parametrize("protocol", NO_LINK_PROTOCOLS)
def test_protocols_without_a_link_form_give_no_config(protocol):
    assert client_json_configs(inbound(protocol, {}, {}), ALICE, [], CTX) == []


@pytest.mark.parametrize("name", V2FLY_CASES)
def test_the_core_accepts_the_config(name, tmp_path):
    for index, config in enumerate(configs_of(name)):
        path = tmp_path / f"{name}-{index}.json"
        path.write_text(json.dumps(config))
        result = subprocess.run(
            [V2RAY, "-test", "-config", str(path)], capture_output=True, text=True, timeout=30
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Configuration OK" in result.stdout


def test_bytes_flow_through_the_server_with_each_config_as_the_client(tmp_path):
    """One server core with VLESS, VMess over WebSocket, Trojan and Shadowsocks inbounds;
    for each, the JSON config of the panel's record runs as the client core."""
    ports = {name: free_port() for name in ("vless", "vmess", "trojan", "shadowsocks")}
    vmess_ws = core_inbound("vmess", "vmess", ports["vmess"], {"id": UUID, "email": "alice"})
    vmess_ws["streamSettings"] = {"network": "ws", "wsSettings": {"path": "/vm"}}
    server = server_config(
        free_port(),
        core_inbound("vless", "vless", ports["vless"], {"id": UUID, "email": "alice"}),
        vmess_ws,
        core_inbound("trojan", "trojan", ports["trojan"], {"password": "pw", "email": "alice"}),
        core_inbound(
            "ss",
            "shadowsocks",
            ports["shadowsocks"],
            {"method": "aes-256-gcm", "password": "pw", "email": "alice"},
        ),
    )
    records = {
        "vless": inbound("vless", {"network": "tcp", "security": "none"}, {"decryption": "none"}),
        "vmess": inbound("vmess", {"network": "ws", "wsSettings": {"path": "/vm"}}),
        "trojan": inbound("trojan", {"network": "tcp", "security": "none"}),
        "shadowsocks": inbound("shadowsocks", {"network": "tcp"}, {"method": "aes-256-gcm"}),
    }
    user = {**ALICE, "password": "pw", "method": "aes-256-gcm"}
    loopback = LinkContext(address="127.0.0.1", remark_model="-ieo")
    with (
        echo_server() as echo_port,
        running_core(tmp_path, server, wait_for=ports["trojan"]),
    ):
        for protocol, record in records.items():
            record["port"] = ports[protocol]
            socks_port = free_port()
            [config] = client_json_configs(
                record, user, [], loopback, socks_port=socks_port, http_port=free_port()
            )
            payload = f"through {protocol}".encode()
            with running_core(tmp_path, config, wait_for=socks_port):
                assert socks_echo(socks_port, echo_port, payload) == payload, protocol
