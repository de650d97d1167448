"""Validation and normalization of an inbound payload (POST /panel/api/inbounds/add).

The panel stores what the user sent and later renders the core configuration from it, so a
mistake accepted here only shows up at the next core restart, far from the form that caused
it. `normalize_inbound` therefore checks every field the panel or the core relies on and
answers with a `ServiceError` whose message names the field and the accepted values; no
other exception can escape, whatever JSON arrives.

The approach is "parse into a private copy, then check and fill defaults in place":
`settings`, `streamSettings` and `sniffing` may arrive as nested objects or as JSON text
(the legacy form); both end up as fresh plain-JSON dicts. Known keys are type-checked,
unknown keys are kept so options of newer cores survive. Per-protocol `settings` rules live
in `inbound_protocols`; this module covers the top-level fields, the transport
(`streamSettings`), sniffing, and the small read-side helpers other services use
(`transports`, `tls_flow_capable`, `ss_method`).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from appliance.domain.protocols import (
    ABSENT,
    CLIENT_PROTOCOLS,
    INT64_MAX,
    fail,
    is_host,
    is_ss2022,
    item,
    join,
    normalize_settings,
    one_of,
    read_object,
    ss2022_key_length,
    take_bool,
    take_choice,
    take_int,
    take_list,
    take_object,
    take_path,
    take_str,
    take_str_list,
    take_str_map,
    to_bool,
    to_int,
)
from appliance.errors import ServiceError

__all__ = [
    "CLIENT_PROTOCOLS",
    "PROTOCOLS",
    "is_ss2022",
    "normalize_inbound",
    "payload_fallbacks",
    "ss2022_key_length",
    "ss_method",
    "tls_flow_capable",
    "transports",
]

PROTOCOLS: tuple[str, ...] = (
    "vless",
    "vmess",
    "trojan",
    "shadowsocks",
    "hysteria",
    "hysteria2",
    "socks",
    "http",
    "mixed",
    "wireguard",
    "dokodemo",
    "tunnel",
    "mtproto",
)

# The core's own name for dokodemo; accepted so configs copied from the core import cleanly.
PROTOCOL_ALIASES = {"dokodemo-door": "dokodemo"}

STREAM_NETWORKS: tuple[str, ...] = (
    "tcp",
    "raw",
    "ws",
    "grpc",
    "httpupgrade",
    "xhttp",
    "splithttp",
    "kcp",
    "quic",
    "hysteria",
)
SECURITIES: tuple[str, ...] = ("none", "tls", "reality")
DEST_OVERRIDES: tuple[str, ...] = ("http", "tls", "quic", "fakedns")

# Transport settings object(s) read for each network ("raw" is the newer name of "tcp",
# "xhttp" of "splithttp"; either object name is accepted for either spelling).
TRANSPORT_OBJECTS = {
    "tcp": ("tcpSettings", "rawSettings"),
    "raw": ("tcpSettings", "rawSettings"),
    "ws": ("wsSettings",),
    "grpc": ("grpcSettings",),
    "httpupgrade": ("httpupgradeSettings",),
    "xhttp": ("xhttpSettings", "splithttpSettings"),
    "splithttp": ("xhttpSettings", "splithttpSettings"),
    "kcp": ("kcpSettings",),
    "quic": ("quicSettings",),
    "hysteria": ("hysteriaSettings",),
}
UDP_NETWORKS = frozenset({"kcp", "quic", "hysteria"})
REALITY_PROTOCOLS = ("vless", "trojan")
REALITY_NETWORKS = ("tcp", "raw", "xhttp", "grpc")

# Protocols whose listener is not a core stream: never any streamSettings.
STREAMLESS = frozenset({"wireguard", "mtproto"})
# Protocols for which streamSettings is optional and stays {} unless the user sent one.
OPTIONAL_STREAM = frozenset({"dokodemo", "tunnel", "socks", "http", "mixed"})
HYSTERIA = frozenset({"hysteria", "hysteria2"})

# The core config's API inbound carries this tag; a second inbound with it would make the
# core refuse the whole config.
RESERVED_TAG = "api"
TAG_PATTERN = re.compile(r"[A-Za-z0-9_.:@-]{0,64}")
REMARK_MAX = 255


# ---------------------------------------------------------------------------------------
# Top level
# ---------------------------------------------------------------------------------------


def normalize_inbound(payload: dict) -> dict:
    """Check an inbound payload and return a new dict with exactly the stored fields:
    remark, listen, port, protocol, enable, expiryTime, total, tag, settings,
    streamSettings, sniffing, nodeId.

    `settings.clients` (and `users`) are dropped: clients are separate records and the
    list is derived on read. VLESS/Trojan `settings.fallbacks` are dropped too, because
    fallback rules have their own API; read them with `payload_fallbacks`. Raises
    `ServiceError` naming the field for anything it cannot accept.
    """
    if not isinstance(payload, dict):
        fail("inbound payload", "a JSON object", payload)
    protocol = _protocol(payload.get("protocol", ABSENT))
    listen = _listen(_scalar(payload, "listen"))
    unix_socket = listen.startswith(("/", "@"))
    port = _scalar(payload, "port")
    if port is ABSENT and unix_socket:
        port = 0
    return {
        "remark": _remark(_scalar(payload, "remark")),
        "listen": listen,
        "port": to_int(port, "port", 0 if unix_socket else 1, 65535),
        "protocol": protocol,
        "enable": _boolean(_scalar(payload, "enable"), "enable", True),
        "expiryTime": _count(_scalar(payload, "expiryTime"), "expiryTime"),
        "total": _count(_scalar(payload, "total"), "total"),
        "tag": _tag(_scalar(payload, "tag")),
        "settings": normalize_settings(protocol, payload.get("settings")),
        "streamSettings": _stream_settings(payload.get("streamSettings"), protocol),
        "sniffing": _sniffing(payload.get("sniffing")),
        "nodeId": _node_id(_scalar(payload, "nodeId")),
    }


def payload_fallbacks(payload: object) -> list[dict]:
    """The fallback objects a payload carried in `settings.fallbacks` (object or JSON
    text), for the caller that stores them as fallback rules; [] when there are none or
    the shape is unusable. Never raises: `normalize_inbound` reports broken settings."""
    if not isinstance(payload, dict):
        return []
    try:
        settings = read_object(payload.get("settings"), "settings")
    except ServiceError:
        return []
    fallbacks = settings.get("fallbacks")
    if not isinstance(fallbacks, list):
        return []
    return [fallback for fallback in fallbacks if isinstance(fallback, dict)]


def _scalar(payload: dict, key: str) -> Any:
    """A top-level value; null and "" mean "not given" (form-encoded clients send "")."""
    value = payload.get(key)
    return ABSENT if value is None or value == "" else value


def _protocol(value: object) -> str:
    if isinstance(value, str):
        value = PROTOCOL_ALIASES.get(value, value)
        if value in PROTOCOLS:
            return value
    fail("protocol", one_of(PROTOCOLS), value)


def _string(value: object, field: str, default: str) -> str:
    if value is ABSENT:
        return default
    if not isinstance(value, str):
        fail(field, "a string", value)
    return value


def _remark(value: object) -> str:
    """The label shown for the inbound, held in a column of REMARK_MAX characters."""
    remark = _string(value, "remark", "")
    if len(remark) > REMARK_MAX:
        raise ServiceError(
            f"remark must be at most {REMARK_MAX} characters (got {len(remark)} characters)"
        )
    return remark


def _boolean(value: object, field: str, default: bool) -> bool:
    return default if value is ABSENT else to_bool(value, field)


def _count(value: object, field: str) -> int:
    """expiryTime (ms) and total (bytes): 0 means "no limit"; capped at the 64-bit
    maximum the database column holds."""
    return 0 if value is ABSENT else to_int(value, field, 0, INT64_MAX)


def _listen(value: object) -> str:
    """Empty (all interfaces), an IP address, or a unix socket: a path ("/run/x.sock",
    optionally with the core's ",0666" mode suffix) or an abstract name ("@name")."""
    listen = _string(value, "listen", "").strip()
    if not listen or listen.startswith(("/", "@")):
        if len(listen) > 200 or "\x00" in listen:
            fail("listen", "a unix socket path of at most 200 characters", listen)
        return listen
    try:
        ipaddress.ip_address(listen)
    except ValueError:
        fail(
            "listen", 'empty, an IP address, or a unix socket path starting with "/" or "@"', listen
        )
    return listen


def _tag(value: object) -> str:
    """The core tag; "" asks the caller to generate one. Tags end up in routing rules and
    stats names, so they are limited to characters that are safe in both."""
    tag = _string(value, "tag", "")
    if not TAG_PATTERN.fullmatch(tag):
        fail("tag", "at most 64 letters, digits or - _ . : @", tag)
    if tag == RESERVED_TAG:
        fail("tag", f"another tag: '{RESERVED_TAG}' is the core API's own inbound", tag)
    return tag


def _node_id(value: object) -> int | None:
    return None if value is ABSENT else to_int(value, "nodeId", 1, 2**31 - 1)


# ---------------------------------------------------------------------------------------
# Sniffing
# ---------------------------------------------------------------------------------------


def _sniffing(value: object) -> dict:
    """`enabled` and `destOverride` always present; the core's other sniffing options
    (metadataOnly, routeOnly, domainsExcluded, ipsExcluded) are type-checked and kept."""
    sniffing = read_object(value, "sniffing")
    enabled = take_bool(sniffing, "enabled", "sniffing", default=False)
    overrides = take_str_list(
        sniffing,
        "destOverride",
        "sniffing",
        check=DEST_OVERRIDES.__contains__,
        expectation=one_of(DEST_OVERRIDES),
        default=list(DEST_OVERRIDES),
    )
    take_bool(sniffing, "metadataOnly", "sniffing")
    take_bool(sniffing, "routeOnly", "sniffing")
    take_str_list(sniffing, "domainsExcluded", "sniffing")
    take_str_list(sniffing, "ipsExcluded", "sniffing")
    rest = {k: v for k, v in sniffing.items() if k not in ("enabled", "destOverride")}
    return {"enabled": enabled, "destOverride": list(dict.fromkeys(overrides)), **rest}


# ---------------------------------------------------------------------------------------
# streamSettings
# ---------------------------------------------------------------------------------------


def _stream_settings(value: object, protocol: str) -> dict:
    """The transport of the listener. WireGuard and MTProto have none, so whatever was sent
    is ignored; tunnel-like and proxy-only protocols keep one only if given."""
    if protocol in STREAMLESS:
        return {}
    path = "streamSettings"
    stream = read_object(value, path)
    if protocol in OPTIONAL_STREAM and not stream:
        return {}
    network = take_choice(
        stream,
        "network",
        path,
        STREAM_NETWORKS,
        default="hysteria" if protocol in HYSTERIA else "tcp",
    )
    if protocol in HYSTERIA and network != "hysteria":
        fail(join(path, "network"), "hysteria for a Hysteria inbound (UDP/QUIC only)", network)
    security = take_choice(stream, "security", path, SECURITIES, default="none")
    if security == "reality":
        if protocol not in REALITY_PROTOCOLS:
            fail(
                join(path, "security"),
                f"none or tls for {protocol} (reality is for vless and trojan)",
                security,
            )
        if network not in REALITY_NETWORKS:
            fail(join(path, "network"), f"{one_of(REALITY_NETWORKS)} with reality", network)
    _transport_objects(stream, path, network)
    _tls_settings(stream, path, active=security == "tls")
    _reality_settings(stream, path, active=security == "reality")
    _external_proxy(stream, path)
    _sockopt(stream, path)
    return stream


def _transport_objects(stream: dict, path: str, network: str) -> None:
    """Every transport object present must be an object; the active one is checked
    field by field. Stale objects of other networks are kept untouched (the UI leaves
    them behind when the network is switched)."""
    for names in TRANSPORT_OBJECTS.values():
        for name in names:
            take_object(stream, name, path)
    for name in TRANSPORT_OBJECTS[network]:
        if name in stream:
            TRANSPORT_CHECKS[network](stream[name], join(path, name))


def _raw_settings(obj: dict, path: str) -> None:
    take_bool(obj, "acceptProxyProtocol", path)
    header = take_object(obj, "header", path)
    if header is not None:
        take_choice(header, "type", join(path, "header"), ("none", "http"))


def _ws_settings(obj: dict, path: str) -> None:
    take_path(obj, "path", path)
    take_str(obj, "host", path)
    take_str_map(obj, "headers", path)
    take_bool(obj, "acceptProxyProtocol", path)
    take_int(obj, "heartbeatPeriod", path, 0)


def _grpc_settings(obj: dict, path: str) -> None:
    take_str(obj, "serviceName", path)
    take_str(obj, "authority", path)
    take_bool(obj, "multiMode", path)
    take_int(obj, "idle_timeout", path, 0)
    take_int(obj, "health_check_timeout", path, 0)
    take_bool(obj, "permit_without_stream", path)
    take_int(obj, "initial_windows_size", path, 0)


def _xhttp_settings(obj: dict, path: str) -> None:
    take_path(obj, "path", path)
    take_str(obj, "host", path)
    take_str_map(obj, "headers", path)
    take_choice(obj, "mode", path, ("auto", "packet-up", "stream-up", "stream-one"))
    take_object(obj, "extra", path)
    take_bool(obj, "noSSEHeader", path)


def _kcp_settings(obj: dict, path: str) -> None:
    """Ranges from the core's mKCP documentation."""
    take_int(obj, "mtu", path, 576, 1460)
    take_int(obj, "tti", path, 10, 100)
    take_int(obj, "uplinkCapacity", path, 0)
    take_int(obj, "downlinkCapacity", path, 0)
    take_bool(obj, "congestion", path)
    take_int(obj, "readBufferSize", path, 0)
    take_int(obj, "writeBufferSize", path, 0)
    take_object(obj, "header", path)
    take_str(obj, "seed", path)


def _quic_settings(obj: dict, path: str) -> None:
    take_str(obj, "security", path)
    take_str(obj, "key", path)
    take_object(obj, "header", path)


def _hysteria_settings(obj: dict, path: str) -> None:
    """The core's Hysteria 2 QUIC transport: version must be 2; up/down are bandwidth
    strings ("100 mbps") or plain numbers of bits per second."""
    version = take_int(obj, "version", path, 0)
    if version is not None and version != 2:
        fail(join(path, "version"), "2 (the only Hysteria version the core implements)", version)
    take_str(obj, "auth", path)
    take_int(obj, "udpIdleTimeout", path, 0)
    for key in ("up", "down"):
        value = obj.get(key)
        if value is not None and not isinstance(value, str):
            take_int(obj, key, path, 0)
    take_object(obj, "masquerade", path)
    take_object(obj, "udphop", path)


TRANSPORT_CHECKS = {
    "tcp": _raw_settings,
    "raw": _raw_settings,
    "ws": _ws_settings,
    "httpupgrade": _ws_settings,
    "grpc": _grpc_settings,
    "xhttp": _xhttp_settings,
    "splithttp": _xhttp_settings,
    "kcp": _kcp_settings,
    "quic": _quic_settings,
    "hysteria": _hysteria_settings,
}


def _tls_settings(stream: dict, path: str, *, active: bool) -> None:
    """With security "tls", each certificate is either a file pair (certificateFile +
    keyFile) or inline PEM (certificate + key, as text or a list of lines). An inactive
    tlsSettings only has to be an object; it is kept so switching back restores it."""
    if not active:
        take_object(stream, "tlsSettings", path)
        return
    tls = take_object(stream, "tlsSettings", path, default={})
    tls_path = join(path, "tlsSettings")
    certificates = take_list(tls, "certificates", tls_path, default=[])
    for index, certificate in enumerate(certificates):
        _certificate(certificate, item(join(tls_path, "certificates"), index))
    take_str(tls, "serverName", tls_path)
    take_str_list(tls, "alpn", tls_path)
    versions = ("1.0", "1.1", "1.2", "1.3")
    take_choice(tls, "minVersion", tls_path, versions)
    take_choice(tls, "maxVersion", tls_path, versions)
    take_bool(tls, "rejectUnknownSni", tls_path)
    take_str(tls, "cipherSuites", tls_path)
    take_object(tls, "settings", tls_path)


def _certificate(certificate: object, path: str) -> None:
    if not isinstance(certificate, dict):
        fail(
            path, "an object with certificateFile and keyFile, or certificate and key", certificate
        )
    for key in ("certificateFile", "keyFile"):
        take_str(certificate, key, path)
    take_choice(certificate, "usage", path, ("encipherment", "verify", "issue"))
    if certificate.get("certificateFile") or certificate.get("keyFile"):
        for key in ("certificateFile", "keyFile"):
            if not certificate.get(key):
                fail(
                    join(path, key),
                    "a file path (certificateFile and keyFile go together)",
                    certificate.get(key, ABSENT),
                )
        return
    for key in ("certificate", "key"):
        value = certificate.get(key, ABSENT)
        lines_ok = isinstance(value, list) and value and all(isinstance(v, str) for v in value)
        if not (isinstance(value, str) and value.strip()) and not lines_ok:
            fail(
                join(path, key),
                "PEM text or a list of PEM lines (or use certificateFile and keyFile)",
                value,
            )


SHORT_ID = re.compile(r"(?:[0-9a-fA-F]{2}){0,8}")
REALITY_PRIVATE_KEY = re.compile(r"[A-Za-z0-9_-]{43}")


def _reality_settings(stream: dict, path: str, *, active: bool) -> None:
    """REALITY borrows the TLS handshake of `dest`/`target`; the private key is the
    X25519 key printed by `xray x25519` (base64url without padding, 32 bytes), short ids
    are hex of even length up to 16 ("" allowed: clients may then omit theirs)."""
    if not active:
        take_object(stream, "realitySettings", path)
        return
    reality = take_object(stream, "realitySettings", path, default={})
    reality_path = join(path, "realitySettings")
    for key in ("dest", "target"):
        value = reality.get(key)
        if value is None or isinstance(value, str):
            continue
        take_int(reality, key, reality_path, 1, 65535)
    if not (reality.get("dest") or reality.get("target")):
        fail(
            join(reality_path, "target"),
            'a "host:port", a port or a socket path (or set dest)',
            reality.get("target", ABSENT),
        )
    take_int(reality, "xver", reality_path, 0, 2)
    take_bool(reality, "show", reality_path)
    names = take_str_list(reality, "serverNames", reality_path, required=True)
    if not names:
        fail(join(reality_path, "serverNames"), "a non-empty list of server names", names)
    private_key = take_str(reality, "privateKey", reality_path, required=True)
    if not REALITY_PRIVATE_KEY.fullmatch(private_key):
        fail(
            join(reality_path, "privateKey"),
            "a base64url X25519 private key (43 characters, no padding)",
            private_key,
        )
    take_str_list(
        reality,
        "shortIds",
        reality_path,
        check=SHORT_ID.fullmatch,
        expectation="hex of even length, at most 16 characters",
        required=True,
    )
    take_int(reality, "maxTimeDiff", reality_path, 0)
    take_str(reality, "minClientVer", reality_path)
    take_str(reality, "maxClientVer", reality_path)
    take_object(reality, "settings", reality_path)


def _external_proxy(stream: dict, path: str) -> None:
    """Legacy per-inbound link overrides (superseded by hosts, still rendered)."""
    proxies = take_list(stream, "externalProxy", path)
    for index, proxy in enumerate(proxies or []):
        proxy_path = item(join(path, "externalProxy"), index)
        if not isinstance(proxy, dict):
            fail(proxy_path, "an object with forceTls, dest, port and remark", proxy)
        take_choice(proxy, "forceTls", proxy_path, ("same", "tls", "none"), default="same")
        dest = take_str(proxy, "dest", proxy_path, required=True)
        if not is_host(dest):
            fail(join(proxy_path, "dest"), "a host name or IP address", dest)
        take_int(proxy, "port", proxy_path, 1, 65535, required=True)
        take_str(proxy, "remark", proxy_path, default="")


def _sockopt(stream: dict, path: str) -> None:
    sockopt = take_object(stream, "sockopt", path)
    if sockopt is None:
        return
    sockopt_path = join(path, "sockopt")
    take_bool(sockopt, "acceptProxyProtocol", sockopt_path)
    take_choice(sockopt, "tproxy", sockopt_path, ("off", "redirect", "tproxy"))
    take_int(sockopt, "mark", sockopt_path, 0)
    take_str(sockopt, "domainStrategy", sockopt_path)


# ---------------------------------------------------------------------------------------
# Read-side helpers (take a normalized inbound; tolerate odd shapes without raising)
# ---------------------------------------------------------------------------------------


def _section(inbound: dict, key: str) -> dict:
    value = inbound.get(key) if isinstance(inbound, dict) else None
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _l4_set(network: object, default: str) -> set[str]:
    text = network if isinstance(network, str) else default
    parts = {part.strip() for part in text.split(",")} & {"tcp", "udp"}
    return parts or {default}


def transports(inbound: dict) -> frozenset[str]:
    """The L4 protocols the inbound's listener binds on its port: {"tcp"}, {"udp"} or
    both. Two inbounds conflict only if they share a port and one of these."""
    protocol = _text(inbound.get("protocol")) if isinstance(inbound, dict) else ""
    if protocol in HYSTERIA or protocol == "wireguard":
        return frozenset({"udp"})
    settings = _section(inbound, "settings")
    network = _text(_section(inbound, "streamSettings").get("network"))
    stream_l4 = "udp" if network in UDP_NETWORKS else "tcp"
    if protocol in ("shadowsocks", "dokodemo", "tunnel"):
        # "tcp" means the stream listener (whatever its transport), "udp" native UDP.
        l4 = settings.get("network", settings.get("allowedNetwork"))
        wanted = _l4_set(l4, "tcp")
        found = ({stream_l4} if "tcp" in wanted else set()) | (
            {"udp"} if "udp" in wanted else set()
        )
        return frozenset(found)
    if protocol in ("socks", "mixed") and settings.get("udp") is True:
        return frozenset({stream_l4, "udp"})
    return frozenset({stream_l4})


def tls_flow_capable(inbound: dict) -> bool:
    """Whether VLESS clients on this inbound may use an XTLS Vision flow: the stream must
    be raw TCP under TLS or REALITY, or XHTTP carrying VLESS Encryption."""
    if not isinstance(inbound, dict) or inbound.get("protocol") != "vless":
        return False
    stream = _section(inbound, "streamSettings")
    network, security = stream.get("network", "tcp"), stream.get("security", "none")
    if network in ("tcp", "raw") and security in ("tls", "reality"):
        return True
    decryption = _section(inbound, "settings").get("decryption", "none")
    return network == "xhttp" and isinstance(decryption, str) and decryption != "none"


def ss_method(inbound: dict) -> str:
    """The Shadowsocks cipher of the inbound; "" for other protocols."""
    if not isinstance(inbound, dict) or inbound.get("protocol") != "shadowsocks":
        return ""
    method = _section(inbound, "settings").get("method")
    return method if isinstance(method, str) else ""
