"""Complete client configurations for the core, one per link (the `/json/` subscription).

Client apps built on the core (v2rayN, v2rayNG, Hiddify ...) import a whole core config
per server instead of a share link when they want routing and local ports decided by
the panel. Each config here is what such an app would run:

- `log` at warning level;
- `inbounds`: SOCKS on 127.0.0.1:10808 (UDP on, sniffing http/tls) and HTTP on
  127.0.0.1:10809, the ports v2rayN uses;
- `outbounds`: "proxy" (the server of the link, mirroring it field by field: vnext for
  VLESS/VMess, servers for Trojan/Shadowsocks, address/port for Hysteria, and
  `streamSettings` with network, security, tlsSettings or realitySettings and the
  transport object), then "direct" (freedom) and "block" (blackhole);
- `routing`: everything to "proxy";
- `remarks`: the link's remark, the key v2rayN reads as the profile name (the core
  ignores keys it does not know).

Only the fields both the core and its older v2fly relative read are written, with the
names they share ("tcp" rather than "raw"), so the same JSON also runs on the v2fly core
for the protocols and transports it has.
"""

from __future__ import annotations

from appliance.links import transport as tr
from appliance.links.plan import LinkPlan, Security

SOCKS_PORT = 10808
HTTP_PORT = 10809
LOOPBACK = "127.0.0.1"


def client_config(
    plan: LinkPlan, *, socks_port: int = SOCKS_PORT, http_port: int = HTTP_PORT
) -> dict:
    """The client config for one plan."""
    return {
        "remarks": plan.remark,
        "log": {"loglevel": "warning"},
        "inbounds": [
            {
                "tag": "socks",
                "listen": LOOPBACK,
                "port": socks_port,
                "protocol": "socks",
                "settings": {"auth": "noauth", "udp": True},
                "sniffing": {"enabled": True, "destOverride": ["http", "tls"]},
            },
            {
                "tag": "http",
                "listen": LOOPBACK,
                "port": http_port,
                "protocol": "http",
                "settings": {},
            },
        ],
        "outbounds": [
            proxy_outbound(plan),
            {"tag": "direct", "protocol": "freedom", "settings": {}},
            {"tag": "block", "protocol": "blackhole", "settings": {}},
        ],
        "routing": {
            "domainStrategy": "AsIs",
            "rules": [{"type": "field", "network": "tcp,udp", "outboundTag": "proxy"}],
        },
    }


def proxy_outbound(plan: LinkPlan) -> dict:
    """The "proxy" outbound: the link as the core's client side."""
    protocol = "hysteria" if plan.protocol == "hysteria2" else plan.protocol
    return {
        "tag": "proxy",
        "protocol": protocol,
        "settings": _settings(plan),
        "streamSettings": stream_settings(plan),
    }


def _settings(plan: LinkPlan) -> dict:
    server = {"address": plan.address, "port": plan.port}
    if plan.protocol == "vless":
        user = {"id": plan.user_id, "encryption": plan.vless_encryption}
        if plan.flow:
            user["flow"] = plan.flow
        return {"vnext": [{**server, "users": [user]}]}
    if plan.protocol == "vmess":
        user = {"id": plan.user_id, "alterId": 0, "security": plan.vmess_security}
        return {"vnext": [{**server, "users": [user]}]}
    if plan.protocol == "trojan":
        return {"servers": [{**server, "password": plan.password}]}
    if plan.protocol == "shadowsocks":
        return {"servers": [{**server, "method": plan.ss_method, "password": plan.password}]}
    if plan.protocol in ("socks", "http"):
        # Only an outbound subscription gives such plans: a SOCKS or HTTP proxy upstream.
        if plan.user_id or plan.password:
            return {
                "servers": [{**server, "users": [{"user": plan.user_id, "pass": plan.password}]}]
            }
        return {"servers": [server]}
    return {"version": 2, **server}


def stream_settings(plan: LinkPlan) -> dict:
    stream: dict = {"network": plan.network, "security": plan.security.kind}
    if plan.security.kind == "tls":
        stream["tlsSettings"] = _tls_settings(plan.security)
    elif plan.security.kind == "reality":
        stream["realitySettings"] = _reality_settings(plan.security)
    transport = _transport_settings(plan)
    if transport is not None:
        name, settings = transport
        stream[name] = settings
    return stream


def _tls_settings(security: Security) -> dict:
    settings: dict = {"allowInsecure": security.allow_insecure}
    if security.sni:
        settings["serverName"] = security.sni
    if security.alpn:
        settings["alpn"] = list(security.alpn)
    if security.fingerprint:
        settings["fingerprint"] = security.fingerprint
    return settings


def _reality_settings(security: Security) -> dict:
    settings = {
        "serverName": security.sni,
        "fingerprint": security.fingerprint,
        "publicKey": security.public_key,
        "shortId": security.short_id,
        "spiderX": security.spider_x,
    }
    if security.mldsa65_verify:
        settings["mldsa65Verify"] = security.mldsa65_verify
    return settings


def _transport_settings(plan: LinkPlan) -> tuple[str, dict] | None:
    """(key, object) of the transport settings the client needs, None for plain TCP."""
    transport = plan.transport
    network = plan.network
    if network == "tcp":
        if tr.header_type(transport) != "http":
            return None
        return "tcpSettings", {"header": tr.http_header(transport)}
    if network in ("ws", "httpupgrade"):
        return f"{network}Settings", _without_empty(
            {"path": tr.path(transport) or "/", "host": tr.host(transport)}
        )
    if network == "grpc":
        return "grpcSettings", _without_empty(
            {
                "serviceName": tr.grpc_service_name(transport),
                "authority": tr.grpc_authority(transport),
                "multiMode": tr.grpc_multi_mode(transport),
            }
        )
    if network == "xhttp":
        settings = {
            "path": tr.path(transport) or "/",
            "host": tr.host(transport),
            "mode": tr.xhttp_mode(transport),
            "extra": tr.xhttp_extra(transport),
        }
        return "xhttpSettings", _without_empty(settings)
    if network == "kcp":
        return "kcpSettings", tr.kcp_client_settings(transport)
    if network == "quic":
        return "quicSettings", {
            "security": tr.quic_security(transport),
            "key": tr.quic_key(transport),
            "header": {"type": tr.header_type(transport)},
        }
    if network == "hysteria":
        settings = {"version": 2, "auth": plan.password}
        hop = tr.hop_ports(transport)
        if hop:
            settings["udphop"] = {"port": hop}
        return "hysteriaSettings", settings
    return None


def _without_empty(settings: dict) -> dict:
    return {key: value for key, value in settings.items() if value not in ("", None, False)}
