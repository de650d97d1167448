"""What one link must say, worked out once for all three output formats.

A client on an inbound yields one link per place it can connect to: each enabled host
(in the order given), else each legacy `streamSettings.externalProxy` entry, else the
default address of the subscription and the inbound's port. For each of them this module
resolves, from the inbound, the client and that host, everything a client app needs:
address and port, the secret, the transport, and the security layer with its parameters.
The share-link, JSON and Mihomo renderers then only translate a `LinkPlan` into their
format, so the three never disagree about where or how to connect.

Rules worth knowing:

- A host's empty address, port or SNI inherits the subscription address, the inbound's
  port and the inbound's server name. Its `security` is `same` (keep the inbound's),
  `none` (strip TLS: e.g. a plain relay in front), `tls` (force TLS: e.g. a CDN that
  terminates TLS in front of a plain WebSocket inbound) or `reality` (kept only when the
  inbound has REALITY settings to describe it). Hysteria runs over QUIC, which always
  carries TLS, so its links keep TLS whatever a host says.
- REALITY links carry the public key from `realitySettings.settings.publicKey` when the
  panel stored one, else the key derived from `realitySettings.privateKey` (X25519,
  encoded as URL-safe base64 without padding, as the core prints it). The first short id
  and the first server name are used; the fingerprint defaults to "chrome", because a
  REALITY client must imitate a browser.
- WebSocket and HTTPUpgrade links offer the ALPN "http/1.1" alone (when the inbound lists
  it) whatever else the inbound lists: both open with an HTTP/1.1 upgrade, which fails
  on a connection that negotiated h2.
- The Vision flow of a VLESS client is kept only where the core accepts it (raw TCP under
  TLS or REALITY, or XHTTP with VLESS Encryption) and the link still has TLS or REALITY.
- Shadowsocks 2022 links carry "server key:user key"; legacy ciphers carry the client's
  own `method` when it has one, else the inbound's.
- Hysteria: the core implements Hysteria 2 for both panel protocols (`hysteria` and
  `hysteria2`); a link uses the version-1 form only when the inbound declares version 1.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, replace

from appliance.domain.protocols import is_ss2022, mtproto_link_secret
from appliance.links.remarks import render_remark

LINK_PROTOCOLS = frozenset(
    {"vless", "vmess", "trojan", "shadowsocks", "hysteria", "hysteria2", "mtproto"}
)
# The newer names the core accepts for two transports, mapped to the names every client
# app understands.
NETWORK_ALIASES = {"raw": "tcp", "splithttp": "xhttp"}
TRANSPORT_OBJECTS = {
    "tcp": ("tcpSettings", "rawSettings"),
    "ws": ("wsSettings",),
    "grpc": ("grpcSettings",),
    "httpupgrade": ("httpupgradeSettings",),
    "xhttp": ("xhttpSettings", "splithttpSettings"),
    "kcp": ("kcpSettings",),
    "quic": ("quicSettings",),
    "hysteria": ("hysteriaSettings",),
}
HOST_SECURITIES = ("same", "none", "tls", "reality")
# Transports that open with an HTTP/1.1 upgrade request. A client offering h2 as well gets
# h2 from a server that lists it first, and the upgrade then fails (sing-box, the core of
# Hiddify and the SFA/SFI apps, never connects), so their links offer http/1.1 alone.
HTTP1_NETWORKS = frozenset({"ws", "httpupgrade"})


@dataclass(frozen=True)
class LinkContext:
    """Where links point by default, and how they are named.

    `address`: the address clients connect to when no host overrides it (the subDomain
    setting, else the host name the request came to, without port).
    `remark_model`: the `remarkModel` setting, see `appliance.links.remarks`.
    """

    address: str
    remark_model: str


@dataclass(frozen=True)
class Security:
    """The security layer of one link: kind is "none", "tls" or "reality"."""

    kind: str
    sni: str = ""
    alpn: tuple[str, ...] = ()
    fingerprint: str = ""
    allow_insecure: bool = False
    public_key: str = ""
    short_id: str = ""
    spider_x: str = ""
    mldsa65_verify: str = ""


@dataclass(frozen=True)
class LinkPlan:
    """Everything one link says. `transport` is the inbound's settings object of
    `network` (a copy; {} when the inbound has none)."""

    protocol: str
    remark: str
    address: str
    port: int
    network: str
    security: Security
    transport: dict = field(default_factory=dict)
    user_id: str = ""
    password: str = ""
    flow: str = ""
    vless_encryption: str = "none"
    vmess_security: str = "auto"
    ss_method: str = ""
    hysteria_version: int = 2


@dataclass(frozen=True)
class _Target:
    """One place to connect to: a host, an external proxy or the default address.
    An empty `address` stands for the subscription's default address."""

    address: str
    port: int
    security: str
    sni: str
    remark: str


@dataclass(frozen=True)
class _PreparedTarget:
    """A target with what follows from it and the inbound alone."""

    address: str  # "" = the subscription's default address
    port: int
    remark: str
    security: Security
    flow_allowed: bool


@dataclass(frozen=True)
class PreparedInbound:
    """What the links of an inbound share whoever the client is: everything but the
    client's secret, its name in the remark and the default address. Made once per
    change of the inbound or its hosts (`prepare_inbound`), it turns every client on the
    inbound into plans (`plans_for`) without parsing the inbound again or deriving its
    REALITY public key once per link."""

    protocol: str
    remark: str
    settings: dict
    stream: dict
    network: str
    transport: dict
    targets: tuple[_PreparedTarget, ...]


def prepare_inbound(inbound: dict, hosts: list[dict]) -> PreparedInbound | None:
    """The client-independent part of the links of `inbound` with its enabled `hosts` (in
    their order); None when the protocol has no link form. An inbound that runs on a node
    carries `nodeAddress`, which stands in for the default address."""
    if not isinstance(inbound, dict):
        return None
    protocol = _text(inbound.get("protocol"))
    if protocol not in LINK_PROTOCOLS:
        return None
    settings = section(inbound, "settings")
    stream = section(inbound, "streamSettings")
    network = _network(protocol, stream)
    # An inbound that runs on a node is reached at the node, not at this panel's address.
    node_address = _text(inbound.get("nodeAddress"))
    targets = []
    for target in _targets(inbound, stream, hosts):
        security = _security(protocol, network, stream, target)
        targets.append(
            _PreparedTarget(
                address=target.address or node_address,
                port=target.port,
                remark=target.remark,
                security=security,
                flow_allowed=_flow_allowed(network, settings, stream, security),
            )
        )
    return PreparedInbound(
        protocol=protocol,
        remark=_text(inbound.get("remark")),
        settings=settings,
        stream=stream,
        network=network,
        transport=_transport_object(stream, network),
        targets=tuple(targets),
    )


def plans_for(prepared: PreparedInbound | None, client: dict, ctx: LinkContext) -> list[LinkPlan]:
    """One plan per link of `client` on the inbound `prepared` describes; [] when there
    is no link form or the client lacks the secret the protocol needs."""
    if prepared is None or not isinstance(client, dict):
        return []
    credentials = _credentials(prepared.protocol, prepared.settings, prepared.stream, client)
    if credentials is None:
        return []
    email = _text(client.get("email"))
    flow = credentials.get("flow", "")
    plans = []
    for target in prepared.targets:
        plans.append(
            LinkPlan(
                protocol=prepared.protocol,
                remark=render_remark(ctx.remark_model, prepared.remark, email, target.remark),
                address=target.address or ctx.address,
                port=target.port,
                network=prepared.network,
                security=target.security,
                transport=dict(prepared.transport),
                **{**credentials, "flow": flow if target.flow_allowed else ""},
            )
        )
    return plans


def section(record: dict, key: str) -> dict:
    """A nested object of a record, accepting the legacy JSON-text form; {} otherwise."""
    value = record.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------------------
# Credentials
# ---------------------------------------------------------------------------------------


def _credentials(protocol: str, settings: dict, stream: dict, client: dict) -> dict | None:
    if protocol in ("vless", "vmess"):
        user_id = _text(client.get("id")) or _text(client.get("uuid"))
        if not user_id:
            return None
        if protocol == "vmess":
            return {"user_id": user_id, "vmess_security": _text(client.get("security")) or "auto"}
        encryption = _text(settings.get("encryption")) or "none"
        return {
            "user_id": user_id,
            "flow": _text(client.get("flow")),
            "vless_encryption": encryption,
        }
    if protocol == "mtproto":
        key = _text(client.get("secret"))
        if not key:
            return None
        return {"password": mtproto_link_secret(key, _text(settings.get("domain")))}
    if protocol == "trojan":
        password = _text(client.get("password"))
        return {"password": password} if password else None
    if protocol == "shadowsocks":
        return _shadowsocks(settings, client)
    auth = _text(client.get("auth")) or _text(client.get("password"))
    if not auth:
        return None
    version = settings.get("version", section(stream, "hysteriaSettings").get("version", 2))
    return {"password": auth, "hysteria_version": 1 if version == 1 else 2}


def _shadowsocks(settings: dict, client: dict) -> dict | None:
    inbound_method = _text(settings.get("method"))
    password = _text(client.get("password"))
    if not inbound_method or not password:
        return None
    if is_ss2022(inbound_method):
        server_key = _text(settings.get("password"))
        combined = f"{server_key}:{password}" if server_key else password
        return {"ss_method": inbound_method, "password": combined}
    legacy = inbound_method not in ("none", "plain")
    method = (_text(client.get("method")) if legacy else "") or inbound_method
    return {"ss_method": method, "password": password}


def _flow_allowed(network: str, settings: dict, stream: dict, security: Security) -> bool:
    """Vision needs raw TCP under TLS/REALITY, or XHTTP carrying VLESS Encryption."""
    if network == "tcp":
        inbound_security = _text(stream.get("security")) or "none"
        return inbound_security in ("tls", "reality") and security.kind in ("tls", "reality")
    decryption = _text(settings.get("decryption")) or "none"
    return network == "xhttp" and decryption != "none"


# ---------------------------------------------------------------------------------------
# Transport
# ---------------------------------------------------------------------------------------


def _network(protocol: str, stream: dict) -> str:
    if protocol in ("hysteria", "hysteria2"):
        return "hysteria"
    network = _text(stream.get("network")) or "tcp"
    return NETWORK_ALIASES.get(network, network)


def _transport_object(stream: dict, network: str) -> dict:
    for name in TRANSPORT_OBJECTS.get(network, ()):
        value = stream.get(name)
        if isinstance(value, dict):
            return value
    return {}


# ---------------------------------------------------------------------------------------
# Targets: hosts, external proxies, or the default address
# ---------------------------------------------------------------------------------------


def _targets(inbound: dict, stream: dict, hosts: list[dict]) -> list[_Target]:
    port = _port(inbound.get("port")) or 0
    usable_hosts = [host for host in hosts or [] if isinstance(host, dict)]
    if usable_hosts:
        return [
            _Target(
                address=_text(host.get("address")),
                port=_port(host.get("port")) or port,
                security=_host_security(host.get("security")),
                sni=_text(host.get("sni")),
                remark=_text(host.get("remark")),
            )
            for host in usable_hosts
        ]
    proxies = stream.get("externalProxy")
    external = (
        [proxy for proxy in proxies if isinstance(proxy, dict)] if isinstance(proxies, list) else []
    )
    if external:
        return [
            _Target(
                address=_text(proxy.get("dest")),
                port=_port(proxy.get("port")) or port,
                security=_host_security(proxy.get("forceTls")),
                sni="",
                remark=_text(proxy.get("remark")),
            )
            for proxy in external
        ]
    return [_Target(address="", port=port, security="same", sni="", remark="")]


def _host_security(value: object) -> str:
    return value if isinstance(value, str) and value in HOST_SECURITIES else "same"


# ---------------------------------------------------------------------------------------
# Security
# ---------------------------------------------------------------------------------------


def _security(protocol: str, network: str, stream: dict, target: _Target) -> Security:
    inbound_kind = _text(stream.get("security")) or "none"
    kind = inbound_kind if target.security == "same" else target.security
    if kind == "reality" and not isinstance(stream.get("realitySettings"), dict):
        kind = inbound_kind
    if protocol in ("hysteria", "hysteria2"):
        kind = "tls"
    if kind == "reality":
        return _reality(section(stream, "realitySettings"), target.sni)
    if kind == "tls":
        security = _tls(section(stream, "tlsSettings"), target.sni)
        if network in HTTP1_NETWORKS:
            alpn = tuple(name for name in security.alpn if name == "http/1.1")
            return replace(security, alpn=alpn)
        return security
    return Security(kind="none")


def _tls(tls: dict, host_sni: str) -> Security:
    extra = section(tls, "settings")
    alpn = tls.get("alpn")
    return Security(
        kind="tls",
        sni=host_sni or _text(tls.get("serverName")) or _text(extra.get("serverName")),
        alpn=tuple(item for item in alpn if isinstance(item, str) and item)
        if isinstance(alpn, list)
        else (),
        fingerprint=_text(extra.get("fingerprint")) or _text(tls.get("fingerprint")),
        allow_insecure=extra.get("allowInsecure") is True or tls.get("allowInsecure") is True,
    )


def _reality(reality: dict, host_sni: str) -> Security:
    extra = section(reality, "settings")
    names = [name for name in reality.get("serverNames") or [] if isinstance(name, str) and name]
    short_ids = [sid for sid in reality.get("shortIds") or [] if isinstance(sid, str)]
    return Security(
        kind="reality",
        sni=host_sni or _text(extra.get("serverName")) or (names[0] if names else ""),
        fingerprint=_text(extra.get("fingerprint")) or "chrome",
        public_key=_text(extra.get("publicKey"))
        or reality_public_key(_text(reality.get("privateKey"))),
        short_id=short_ids[0] if short_ids else "",
        spider_x=_text(extra.get("spiderX")),
        mldsa65_verify=_text(extra.get("mldsa65Verify")),
    )


def reality_public_key(private_key: str) -> str:
    """The X25519 public key of a REALITY private key, both URL-safe base64 without
    padding (how the core reads and prints them); "" when the key is not 32 bytes."""
    try:
        raw = base64.urlsafe_b64decode(private_key + "=" * (-len(private_key) % 4))
    except (binascii.Error, ValueError):
        return ""
    if len(raw) != 32:
        return ""
    # Imported here: `cryptography` is heavy and only REALITY links need it.
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = X25519PrivateKey.from_private_bytes(raw).public_key()
    encoded = base64.urlsafe_b64encode(public.public_bytes(Encoding.Raw, PublicFormat.Raw))
    return encoded.rstrip(b"=").decode("ascii")


# ---------------------------------------------------------------------------------------
# Small readers
# ---------------------------------------------------------------------------------------


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _port(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and 1 <= value <= 65535 else None
