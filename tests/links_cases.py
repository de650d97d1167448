"""Inbounds, clients and hosts written by hand for the link renderer tests.

Each case is (inbound, client, hosts) shaped like the records the services return
(`Inbounds.get`, `Clients.get`, the enabled hosts of the inbound). The golden files under
tests/golden/links/ hold what each case must render to, written from the published
formats (Xray share-link standard, v2rayN VMess version 2, SIP002, Hysteria URI schemes,
Mihomo proxy schema), keyed by the case name.

The REALITY key pair is Alice's X25519 pair from RFC 7748 section 6.1, so the public key
expected in links comes from the RFC, not from the code under test.
"""

from __future__ import annotations

from appliance.links import LinkContext

CTX = LinkContext(address="vpn.example.com", remark_model="-ieo")
UUID = "b831381d-6324-4d53-ad4f-8cda48b30811"
# RFC 7748 6.1, Alice: private 77076d0a..., public 8520f009..., as URL-safe base64.
REALITY_PRIVATE = "dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo"
REALITY_PUBLIC = "hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"
SS_SERVER_KEY = "z3DL7ZXsqacckOiqSs6TVw=="
SS_USER_KEY = "qxdOq37lFMURIXviQb527Q=="

ALICE = {
    "email": "alice",
    "id": UUID,
    "password": "s3cret/pass",
    "auth": "hy-auth+1",
    "flow": "",
    "security": "auto",
    "method": "",
    "subId": "sub-alice",
    "enable": True,
}


def client(**changes) -> dict:
    return {**ALICE, **changes}


def inbound(protocol: str, stream: dict, settings: dict | None = None, **changes) -> dict:
    record = {
        "id": 7,
        "remark": "DE",
        "protocol": protocol,
        "listen": "",
        "port": 443,
        "tag": "inbound-443",
        "enable": True,
        "settings": settings if settings is not None else {},
        "streamSettings": stream,
        "sniffing": {"enabled": False, "destOverride": ["http", "tls"]},
    }
    record.update(changes)
    return record


TLS = {
    "serverName": "example.com",
    "alpn": ["h2", "http/1.1"],
    "certificates": [{"certificateFile": "/etc/ssl/a.crt", "keyFile": "/etc/ssl/a.key"}],
    "settings": {"fingerprint": "chrome", "allowInsecure": False},
}
TLS_INSECURE = {
    "serverName": "example.com",
    "certificates": [{"certificateFile": "/etc/ssl/a.crt", "keyFile": "/etc/ssl/a.key"}],
    "settings": {"allowInsecure": True},
}
REALITY = {
    "show": False,
    "target": "www.microsoft.com:443",
    "xver": 0,
    "serverNames": ["www.microsoft.com", "microsoft.com"],
    "privateKey": REALITY_PRIVATE,
    "shortIds": ["6ba85179e30d4fc2", "ab"],
    "settings": {"spiderX": "/"},
}
TCP_HTTP = {
    "header": {
        "type": "http",
        "request": {
            "path": ["/index", "/a b"],
            "headers": {"Host": ["a.example.com", "b.example.com"]},
        },
        "response": {"status": "200"},
    }
}


def _stream(network: str, security: str, **objects) -> dict:
    return {"network": network, "security": security, **objects}


VLESS = {"decryption": "none"}
VISION = client(flow="xtls-rprx-vision")

CASES: dict[str, tuple[dict, dict, list[dict]]] = {
    "vless_tcp_none": (inbound("vless", _stream("tcp", "none"), VLESS), ALICE, []),
    "vless_tcp_http_none": (
        inbound("vless", _stream("tcp", "none", tcpSettings=TCP_HTTP), VLESS),
        ALICE,
        [],
    ),
    "vless_raw_tls_vision": (
        inbound("vless", _stream("raw", "tls", tlsSettings=TLS), VLESS),
        VISION,
        [],
    ),
    "vless_tcp_reality_vision": (
        inbound("vless", _stream("tcp", "reality", realitySettings=REALITY), VLESS),
        VISION,
        [],
    ),
    "vless_ws_tls": (
        inbound(
            "vless",
            _stream(
                "ws",
                "tls",
                wsSettings={"path": "/ws?ed=2048", "host": "cdn.example.com"},
                tlsSettings=TLS,
            ),
            VLESS,
        ),
        VISION,
        [],
    ),
    "vless_grpc_reality": (
        inbound(
            "vless",
            _stream(
                "grpc",
                "reality",
                grpcSettings={"serviceName": "svc", "multiMode": True},
                realitySettings=REALITY,
            ),
            VLESS,
        ),
        ALICE,
        [],
    ),
    "vless_httpupgrade_tls": (
        inbound(
            "vless",
            _stream(
                "httpupgrade",
                "tls",
                httpupgradeSettings={"path": "/up", "headers": {"Host": "up.example.com"}},
                tlsSettings=TLS_INSECURE,
            ),
            VLESS,
        ),
        ALICE,
        [],
    ),
    "vless_xhttp_reality": (
        inbound(
            "vless",
            _stream(
                "xhttp",
                "reality",
                xhttpSettings={"path": "/xh", "host": "", "mode": "packet-up"},
                realitySettings=REALITY,
            ),
            VLESS,
        ),
        ALICE,
        [],
    ),
    "vless_kcp_none": (
        inbound(
            "vless",
            _stream(
                "kcp",
                "none",
                kcpSettings={"mtu": 1350, "header": {"type": "wechat-video"}, "seed": "s33d"},
            ),
            VLESS,
        ),
        ALICE,
        [],
    ),
    "vmess_tcp_none": (inbound("vmess", _stream("tcp", "none")), ALICE, []),
    "vmess_tcp_http_none": (
        inbound("vmess", _stream("tcp", "none", tcpSettings=TCP_HTTP)),
        client(security="aes-128-gcm"),
        [],
    ),
    "vmess_ws_tls": (
        inbound(
            "vmess",
            _stream(
                "ws", "tls", wsSettings={"path": "/vm", "host": "cdn.example.com"}, tlsSettings=TLS
            ),
        ),
        ALICE,
        [],
    ),
    "vmess_grpc_tls": (
        inbound(
            "vmess",
            _stream(
                "grpc",
                "tls",
                grpcSettings={"serviceName": "vmsvc", "authority": "grpc.example.com"},
                tlsSettings=TLS,
            ),
        ),
        ALICE,
        [],
    ),
    "vmess_httpupgrade_none": (
        inbound("vmess", _stream("httpupgrade", "none", httpupgradeSettings={"path": "/hu"})),
        ALICE,
        [],
    ),
    "vmess_kcp_none": (
        inbound("vmess", _stream("kcp", "none", kcpSettings={"header": {"type": "srtp"}})),
        ALICE,
        [],
    ),
    "vmess_xhttp_tls": (
        inbound(
            "vmess",
            _stream("xhttp", "tls", xhttpSettings={"path": "/x"}, tlsSettings=TLS_INSECURE),
        ),
        ALICE,
        [],
    ),
    "trojan_tcp_tls": (inbound("trojan", _stream("tcp", "tls", tlsSettings=TLS)), ALICE, []),
    "trojan_tcp_none": (inbound("trojan", _stream("tcp", "none")), ALICE, []),
    "trojan_ws_tls": (
        inbound("trojan", _stream("ws", "tls", wsSettings={"path": "/tr"}, tlsSettings=TLS)),
        ALICE,
        [],
    ),
    "trojan_grpc_reality": (
        inbound(
            "trojan",
            _stream(
                "grpc", "reality", grpcSettings={"serviceName": "trsvc"}, realitySettings=REALITY
            ),
        ),
        ALICE,
        [],
    ),
    "ss_aes_256_gcm": (
        inbound(
            "shadowsocks",
            _stream("tcp", "none"),
            {"method": "aes-256-gcm", "network": "tcp,udp"},
        ),
        client(method="aes-256-gcm"),
        [],
    ),
    "ss_client_method": (
        inbound("shadowsocks", _stream("tcp", "none"), {"method": "aes-256-gcm", "network": "tcp"}),
        client(method="chacha20-ietf-poly1305"),
        [],
    ),
    "ss_2022": (
        inbound(
            "shadowsocks",
            _stream("tcp", "none"),
            {"method": "2022-blake3-aes-128-gcm", "password": SS_SERVER_KEY, "network": "tcp"},
        ),
        client(password=SS_USER_KEY),
        [],
    ),
    "ss_none_cipher": (
        inbound("shadowsocks", _stream("tcp", "none"), {"method": "none", "network": "tcp"}),
        client(password="open"),
        [],
    ),
    "ss_ws_tls": (
        inbound(
            "shadowsocks",
            _stream("ws", "tls", wsSettings={"path": "/ss"}, tlsSettings=TLS_INSECURE),
            {"method": "aes-256-gcm", "network": "tcp"},
        ),
        client(method="aes-256-gcm"),
        [],
    ),
    "hysteria2": (
        inbound(
            "hysteria2",
            _stream(
                "hysteria",
                "tls",
                tlsSettings={"serverName": "hy.example.com", "alpn": ["h3"]},
                hysteriaSettings={"version": 2, "udphop": {"port": "20000-30000", "interval": 30}},
            ),
            {"version": 2},
        ),
        ALICE,
        [],
    ),
    "hysteria_protocol_v2": (
        inbound(
            "hysteria",
            _stream("hysteria", "tls", tlsSettings=TLS_INSECURE, hysteriaSettings={"version": 2}),
            {"version": 2},
        ),
        ALICE,
        [],
    ),
    "hysteria_v1": (
        inbound(
            "hysteria",
            _stream(
                "hysteria",
                "tls",
                tlsSettings={"serverName": "hy.example.com", "alpn": ["h3"]},
                hysteriaSettings={"version": 1, "up": "50 mbps", "down": "200 mbps"},
            ),
            {"version": 1},
        ),
        ALICE,
        [],
    ),
    "hosts": (
        inbound(
            "vless",
            _stream("ws", "tls", wsSettings={"path": "/ws"}, tlsSettings=TLS),
            VLESS,
        ),
        ALICE,
        [
            {
                "id": 3,
                "remark": "CDN",
                "address": "cdn.example.net",
                "port": 8443,
                "security": "same",
                "sni": "front.example.net",
                "enable": True,
            },
            {
                "id": 1,
                "remark": "plain relay",
                "address": "10.1.2.3",
                "port": None,
                "security": "none",
                "sni": "",
                "enable": True,
            },
            {
                "id": 2,
                "remark": "v6",
                "address": "2001:db8::1",
                "port": 0,
                "security": "tls",
                "sni": "",
                "enable": True,
            },
        ],
    ),
    "hosts_force_tls": (
        inbound("vmess", _stream("ws", "none", wsSettings={"path": "/plain"})),
        ALICE,
        [
            {
                "id": 9,
                "remark": "CF",
                "address": "cf.example.org",
                "port": 443,
                "security": "tls",
                "sni": "cf.example.org",
                "enable": True,
            }
        ],
    ),
    "external_proxy": (
        inbound(
            "trojan",
            _stream(
                "tcp",
                "tls",
                tlsSettings=TLS,
                externalProxy=[
                    {
                        "forceTls": "same",
                        "dest": "edge1.example.com",
                        "port": 2083,
                        "remark": "edge1",
                    },
                    {"forceTls": "none", "dest": "edge2.example.com", "port": 80, "remark": ""},
                ],
            ),
        ),
        ALICE,
        [],
    ),
}

NO_LINK_PROTOCOLS = ("socks", "http", "mixed", "dokodemo", "tunnel", "wireguard")
