"""sing-box outbounds and the whole sing-box profile of the `?format=singbox` subscription.

sing-box is the core of the SFA/SFI/SFM apps, Hiddify, Karing and others; they import a
complete sing-box config rather than share links when they can. Each `LinkPlan` becomes
one outbound with the fields sing-box's schema (1.12 and later) names for its type:

- common: type, tag (the remark, made unique), server, server_port;
- vless: uuid, flow (Vision); vmess: uuid, security, alter_id 0; trojan: password;
  shadowsocks: method (the core's "chacha20-poly1305", "xchacha20-poly1305" and
  "plain" under sing-box's names), password (2022 ciphers carry "server key:user key",
  which sing-box reads as the identity header); hysteria2: password, server_ports and
  hop_interval for port hopping; hysteria (version 1): auth_str, up_mbps, down_mbps;
- `tls`: enabled, server_name, insecure, alpn, `utls` with the fingerprint (always on
  for REALITY, which must look like a browser), `reality` with public_key and short_id;
- `transport`: ws (an `?ed=` in the path becomes max_early_data sent in the
  Sec-WebSocket-Protocol header, as the core reads it), httpupgrade, grpc, and http for
  raw TCP with HTTP obfuscation (sing-box's http transport without TLS is that request).

What sing-box cannot express gets no outbound: XHTTP, mKCP and QUIC transports, VLESS
Encryption, raw TCP with HTTP obfuscation under TLS (sing-box would speak HTTP/2 there),
Shadowsocks over anything but plain TCP, and MTProto.

`singbox_profile` puts the outbounds into a config an app runs as is: a TUN inbound (for
the mobile and desktop apps) and a mixed SOCKS/HTTP inbound on 127.0.0.1:2080; a
`selector` named "proxy" (default "auto") and a `urltest` named "auto" over every
server; DNS over HTTPS through the proxy with the system resolver for server names;
routing that sniffs, answers DNS itself, keeps private addresses direct and sends the
rest to "proxy". Only rule actions and the DNS server types of 1.12 are used, never the
special outbounds or legacy fields that sing-box 1.13 and 1.14 reject.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from appliance.links import transport as tr
from appliance.links.names import with_unique_names
from appliance.links.plan import LinkPlan, Security
from appliance.links.share import bandwidth_mbps

SELECTOR = "proxy"
URLTEST = "auto"
RESERVED_TAGS = frozenset({SELECTOR, URLTEST, "direct"})
MIXED_PORT = 2080
TEST_URL = "https://www.gstatic.com/generate_204"
# The uTLS fingerprints sing-box knows; the core's others get the default browser.
UTLS_FINGERPRINTS = frozenset(
    {"chrome", "firefox", "edge", "safari", "360", "qq", "ios", "android", "random", "randomized"}
)
SINGBOX_TRANSPORTS = {
    "vless": frozenset({"tcp", "ws", "httpupgrade", "grpc"}),
    "vmess": frozenset({"tcp", "ws", "httpupgrade", "grpc"}),
    "trojan": frozenset({"tcp", "ws", "httpupgrade", "grpc"}),
    "shadowsocks": frozenset({"tcp"}),
    "hysteria": frozenset({"hysteria"}),
    "hysteria2": frozenset({"hysteria"}),
}
EARLY_DATA_HEADER = "Sec-WebSocket-Protocol"
# The core's other names for three Shadowsocks ciphers, in the names sing-box knows.
SS_METHODS = {
    "chacha20-poly1305": "chacha20-ietf-poly1305",
    "xchacha20-poly1305": "xchacha20-ietf-poly1305",
    "plain": "none",
}


def singbox_outbound(plan: LinkPlan) -> dict | None:
    """The sing-box outbound of one plan, or None when sing-box cannot express it."""
    if plan.network not in SINGBOX_TRANSPORTS.get(plan.protocol, ()):
        return None
    obfuscated = plan.network == "tcp" and tr.header_type(plan.transport) == "http"
    if obfuscated and plan.security.kind != "none":
        return None
    if plan.protocol == "shadowsocks" and plan.security.kind != "none":
        return None
    if plan.protocol == "vless" and plan.vless_encryption != "none":
        return None
    kind = plan.protocol
    if kind in ("hysteria", "hysteria2"):
        kind = "hysteria2" if plan.hysteria_version == 2 else "hysteria"
    outbound = {
        "type": kind,
        "tag": plan.remark,
        "server": plan.address,
        "server_port": plan.port,
    }
    outbound.update(_credentials(plan))
    if plan.security.kind != "none":
        outbound["tls"] = _tls(plan.security)
    transport = _transport(plan)
    if transport is not None:
        outbound["transport"] = transport
    return outbound


def _credentials(plan: LinkPlan) -> dict:
    if plan.protocol == "vless":
        # sing-box has the one Vision flow; the core's "-udp443" variant differs only in
        # what the server does with QUIC.
        return {"uuid": plan.user_id, **({"flow": "xtls-rprx-vision"} if plan.flow else {})}
    if plan.protocol == "vmess":
        return {"uuid": plan.user_id, "security": plan.vmess_security, "alter_id": 0}
    if plan.protocol == "shadowsocks":
        return {"method": SS_METHODS.get(plan.ss_method, plan.ss_method), "password": plan.password}
    if plan.protocol in ("hysteria", "hysteria2") and plan.hysteria_version == 1:
        return {
            "auth_str": plan.password,
            "up_mbps": bandwidth_mbps(plan.transport.get("up")),
            "down_mbps": bandwidth_mbps(plan.transport.get("down")),
        }
    credentials: dict = {"password": plan.password}
    if plan.protocol in ("hysteria", "hysteria2"):
        hop = tr.hop_ports(plan.transport)
        if hop:
            credentials["server_ports"] = [hop.replace("-", ":")]
            interval = plan.transport.get("udphop", {}).get("interval")
            if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0:
                credentials["hop_interval"] = f"{interval}s"
    return credentials


def _tls(security: Security) -> dict:
    tls: dict = {"enabled": True}
    if security.sni:
        tls["server_name"] = security.sni
    if security.allow_insecure:
        tls["insecure"] = True
    if security.alpn:
        tls["alpn"] = list(security.alpn)
    fingerprint = security.fingerprint if security.fingerprint in UTLS_FINGERPRINTS else ""
    if security.kind == "reality":
        fingerprint = fingerprint or "chrome"
    if fingerprint:
        tls["utls"] = {"enabled": True, "fingerprint": fingerprint}
    if security.kind == "reality":
        tls["reality"] = {
            "enabled": True,
            "public_key": security.public_key,
            "short_id": security.short_id,
        }
    return tls


def _transport(plan: LinkPlan) -> dict | None:
    transport = plan.transport
    network = plan.network
    if network == "ws":
        path, early_data = _early_data(tr.path(transport) or "/")
        ws: dict = {"type": "ws", "path": path}
        host = tr.host(transport)
        if host:
            ws["headers"] = {"Host": host}
        if early_data:
            ws["max_early_data"] = early_data
            ws["early_data_header_name"] = EARLY_DATA_HEADER
        return ws
    if network == "httpupgrade":
        upgrade = {"type": "httpupgrade", "path": tr.path(transport) or "/"}
        host = tr.host(transport)
        if host:
            upgrade["host"] = host
        return upgrade
    if network == "grpc":
        return {"type": "grpc", "service_name": tr.grpc_service_name(transport)}
    if network == "tcp" and tr.header_type(transport) == "http":
        http: dict = {
            "type": "http",
            "path": tr.http_request_paths(transport)[0],
            "method": "GET",
        }
        hosts = tr.http_request_hosts(transport)
        if hosts:
            http["host"] = hosts
        return http
    return None


def _early_data(path: str) -> tuple[str, int]:
    """(path without `ed`, the early data size it asked for): `/ws?ed=2048` is how the
    core's share links ask for early data, which sing-box sets apart."""
    parts = urlsplit(path)
    query = parse_qsl(parts.query, keep_blank_values=True)
    sizes = [value for key, value in query if key == "ed"]
    if not sizes or not sizes[0].isdigit():
        return path, 0
    rest = urlencode([(key, value) for key, value in query if key != "ed"])
    return urlunsplit(("", "", parts.path or "/", rest, "")), int(sizes[0])


# ---------------------------------------------------------------------------------------
# The profile
# ---------------------------------------------------------------------------------------


def singbox_profile(outbounds: list[dict]) -> dict:
    """The sing-box config for `outbounds` (from `singbox_outbound`), ready to run."""
    servers = with_unique_names(outbounds, "tag", "server", RESERVED_TAGS)
    tags = [server["tag"] for server in servers]
    # No server sing-box can reach (all on XHTTP, say): the selector offers going direct,
    # as sing-box refuses a group without members.
    groups = (
        [
            {
                "type": "selector",
                "tag": SELECTOR,
                "outbounds": [URLTEST, *tags],
                "default": URLTEST,
            },
            {
                "type": "urltest",
                "tag": URLTEST,
                "outbounds": tags,
                "url": TEST_URL,
                "interval": "3m",
                "tolerance": 50,
            },
        ]
        if tags
        else [{"type": "selector", "tag": SELECTOR, "outbounds": ["direct"]}]
    )
    return {
        "log": {"level": "warn", "timestamp": True},
        "dns": {
            "servers": [
                {"type": "https", "tag": "dns-remote", "server": "1.1.1.1", "detour": SELECTOR},
                {"type": "local", "tag": "dns-local"},
            ],
            "final": "dns-remote",
            "strategy": "prefer_ipv4",
        },
        "inbounds": [
            {
                "type": "tun",
                "tag": "tun-in",
                "address": ["172.19.0.1/30", "fdfe:dcba:9876::1/126"],
                "auto_route": True,
                "strict_route": True,
            },
            {"type": "mixed", "tag": "mixed-in", "listen": "127.0.0.1", "listen_port": MIXED_PORT},
        ],
        "outbounds": [
            *groups,
            *servers,
            {"type": "direct", "tag": "direct"},
        ],
        "route": {
            "rules": [
                {"action": "sniff"},
                {"protocol": "dns", "action": "hijack-dns"},
                {"ip_is_private": True, "outbound": "direct"},
            ],
            "final": SELECTOR,
            "auto_detect_interface": True,
            "default_domain_resolver": "dns-local",
        },
        "experimental": {"cache_file": {"enabled": True}},
    }
