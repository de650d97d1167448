"""Share links and Mihomo proxies read back into `LinkPlan`s: the inverse of `share` and
`clash`.

Why this module exists: an outbound subscription (a provider's list of servers) arrives
in the formats our own subscription server writes: base64 of share-link lines, the
lines in plain text, or a Clash/Mihomo YAML profile. Reading each entry into the same
`LinkPlan` the renderers take means one description of every protocol, transport and
security field serves both directions: `json_config.proxy_outbound` turns a plan into
the core's outbound, and render -> read -> render gives back the very same link, which
the tests check over every renderer case.

Read here: vless://, vmess:// (v2rayN JSON version 2), trojan://, ss:// (SIP002, plain
2022 userinfo, and the legacy all-base64 form), hy2:// and hysteria2://, hysteria://
(version 1), socks:// (v2rayN's base64 userinfo), socks5:// and http:// with an optional
`user:password@`; Mihomo proxies of type vless, vmess, trojan, ss, hysteria2,
hysteria, socks5 and http. What cannot be read raises `LinkError` with the reason,
never with the entry's secret.
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import unquote, urlsplit

from appliance.domain.parse import load_json
from appliance.errors import ServiceError
from appliance.links.plan import LinkPlan, Security
from appliance.links.share import bandwidth_mbps

SCHEMES = {
    "vless": "vless",
    "vmess": "vmess",
    "trojan": "trojan",
    "ss": "shadowsocks",
    "hy2": "hysteria2",
    "hysteria2": "hysteria2",
    "hysteria": "hysteria",
    "socks": "socks",
    "socks5": "socks",
    "http": "http",
}
CLASH_TYPES = {
    "vless": "vless",
    "vmess": "vmess",
    "trojan": "trojan",
    "ss": "shadowsocks",
    "hysteria2": "hysteria2",
    "hysteria": "hysteria",
    "socks5": "socks",
    "http": "http",
}


class LinkError(ValueError):
    """An entry that cannot be read; the message says why in words, without secrets."""


def read_link(text: str) -> LinkPlan:
    """The plan of one share link."""
    link = text.strip()
    scheme, sep, _ = link.partition("://")
    protocol = SCHEMES.get(scheme.lower()) if sep else None
    if protocol is None:
        raise LinkError(f"'{scheme[:20]}' is not a share-link scheme the panel reads")
    if protocol == "vmess":
        return _vmess(link[len(scheme) + 3 :])
    if protocol == "shadowsocks":
        return _shadowsocks(link)
    if protocol == "socks" and scheme.lower() == "socks":
        return _proxy(link, protocol, base64_userinfo=True)
    if protocol in ("socks", "http"):
        return _proxy(link, protocol, base64_userinfo=False)
    parts, host, port = _endpoint(link)
    params = query_params(parts.query)
    remark = unquote(parts.fragment)
    if protocol in ("hysteria", "hysteria2"):
        return _hysteria(protocol, host, port, params, remark, unquote(parts.username or ""))
    secret = unquote(parts.username or "")
    if not secret:
        raise LinkError(f"the {protocol} link names no user")
    network, transport = standard_transport(params)
    common = {
        "protocol": protocol,
        "remark": remark,
        "address": host,
        "port": port,
        "network": network,
        "security": standard_security(params),
        "transport": transport,
    }
    if protocol == "vless":
        return LinkPlan(
            **common,
            user_id=secret,
            flow=params.get("flow", ""),
            vless_encryption=params.get("encryption", "") or "none",
        )
    return LinkPlan(**common, password=secret)


def _hysteria(
    protocol: str, host: str, port: int, params: dict[str, str], remark: str, user: str
) -> LinkPlan:
    """Hysteria 2 (`hysteria2://auth@host:port?sni=&mport=`) or Hysteria 1 (`hysteria://
    host:port?peer=&auth=&upmbps=&downmbps=`): TLS always, the SNI and secret where each
    version puts them, and the version's own transport fields."""
    first = protocol == "hysteria"
    if first:
        transport = {
            "up": f"{bandwidth_mbps(params.get('upmbps', '') + ' mbps')} mbps",
            "down": f"{bandwidth_mbps(params.get('downmbps', '') + ' mbps')} mbps",
        }
    else:
        transport = {"udphop": {"port": params["mport"]}} if params.get("mport") else {}
    return LinkPlan(
        protocol=protocol,
        remark=remark,
        address=host,
        port=port,
        network="hysteria",
        security=Security(
            "tls",
            sni=params.get("peer" if first else "sni", ""),
            alpn=_list(params.get("alpn", "")),
            allow_insecure=_truthy(params.get("insecure", "")),
        ),
        transport=transport,
        password=params.get("auth", "") if first else user,
        hysteria_version=1 if first else 2,
    )


def query_params(query: str) -> dict[str, str]:
    """The query as single values, percent-decoded like decodeURIComponent ("+" stays)."""
    params: dict[str, str] = {}
    for part in query.split("&"):
        if part:
            key, _, value = part.partition("=")
            params.setdefault(unquote(key), unquote(value))
    return params


def standard_transport(params: dict[str, str]) -> tuple[str, dict]:
    """(network, transport object) from the `type` and transport fields of a query."""
    network = params.get("type", "") or "tcp"
    network = {"raw": "tcp", "splithttp": "xhttp", "h2": "http"}.get(network, network)
    header = params.get("headerType", "")
    if network == "tcp":
        if header != "http":
            return "tcp", {}
        request: dict = {"path": list(_list(params.get("path", ""))) or ["/"]}
        hosts = _list(params.get("host", ""))
        if hosts:
            request["headers"] = {"Host": list(hosts)}
        return "tcp", {"header": {"type": "http", "request": request}}
    if network == "kcp":
        return "kcp", {"header": {"type": header or "none"}, "seed": params.get("seed", "")}
    if network in ("ws", "httpupgrade"):
        return network, {"path": params.get("path", ""), "host": params.get("host", "")}
    if network == "grpc":
        return "grpc", {
            "serviceName": params.get("serviceName", ""),
            "authority": params.get("authority", ""),
            "multiMode": params.get("mode", "") == "multi",
        }
    if network == "xhttp":
        transport = {
            "path": params.get("path", ""),
            "host": params.get("host", ""),
            "mode": params.get("mode", "") or "auto",
        }
        if params.get("extra"):
            try:
                extra = load_json(params["extra"], "the xhttp extra field")
            except ServiceError as exc:
                raise LinkError(exc.msg) from None
            if isinstance(extra, dict):
                transport["extra"] = extra
        return "xhttp", transport
    if network == "quic":
        return "quic", {
            "security": params.get("quicSecurity", "") or "none",
            "key": params.get("key", ""),
            "header": {"type": header or "none"},
        }
    raise LinkError(f"the transport '{network[:20]}' is not one the core speaks")


def standard_security(params: dict[str, str]) -> Security:
    kind = params.get("security", "") or "none"
    if kind == "tls":
        return Security(
            "tls",
            sni=params.get("sni", ""),
            alpn=_list(params.get("alpn", "")),
            fingerprint=params.get("fp", ""),
            allow_insecure=_truthy(params.get("allowInsecure", "")),
        )
    if kind == "reality":
        return Security(
            "reality",
            sni=params.get("sni", ""),
            fingerprint=params.get("fp", ""),
            public_key=params.get("pbk", ""),
            short_id=params.get("sid", ""),
            spider_x=params.get("spx", ""),
            mldsa65_verify=params.get("pqv", ""),
        )
    if kind == "none":
        return Security("none")
    raise LinkError(f"the security '{kind[:20]}' is not one the core speaks")


# ---------------------------------------------------------------------------------------
# VMess, Shadowsocks, SOCKS and HTTP
# ---------------------------------------------------------------------------------------


def _vmess(payload: str) -> LinkPlan:
    try:
        data = load_json(decode_base64(payload.strip()), "the vmess link's JSON")
    except (ValueError, UnicodeDecodeError, ServiceError):
        raise LinkError("the vmess link is not base64 of a JSON object") from None
    if not isinstance(data, dict):
        raise LinkError("the vmess link is not base64 of a JSON object")
    values = {key: "" if value is None else str(value) for key, value in data.items()}
    network = values.get("net", "") or "tcp"
    kind, host, path = values.get("type", ""), values.get("host", ""), values.get("path", "")
    params = {"type": network, "headerType": kind, "host": host, "path": path}
    if network == "kcp":
        params.update(seed=path)
    elif network == "grpc":
        params.update(serviceName=path, authority=host, mode=kind)
    elif network == "xhttp":
        params.update(mode=kind)
    elif network == "quic":
        params.update(quicSecurity=host, key=path)
    network, transport = standard_transport(params)
    tls = values.get("tls", "") == "tls"
    security = (
        Security(
            "tls",
            sni=values.get("sni", ""),
            alpn=_list(values.get("alpn", "")),
            fingerprint=values.get("fp", ""),
            allow_insecure=_truthy(values.get("allowInsecure", "")),
        )
        if tls
        else Security("none")
    )
    if not values.get("id"):
        raise LinkError("the vmess link names no user")
    return LinkPlan(
        protocol="vmess",
        remark=values.get("ps", ""),
        address=_address(values.get("add", "")),
        port=_port(values.get("port", "")),
        network=network,
        security=security,
        transport=transport,
        user_id=values["id"],
        vmess_security=values.get("scy", "") or "auto",
    )


def _shadowsocks(link: str) -> LinkPlan:
    body = link[len("ss://") :]
    rest, _, fragment = body.partition("#")
    if "@" not in rest:  # the legacy form: base64 of method:password@host:port
        try:
            rest = decode_base64(rest.split("?", 1)[0].rstrip("/"))
        except (ValueError, UnicodeDecodeError):
            raise LinkError("the ss link is neither SIP002 nor base64") from None
    userinfo, _, _ = rest.rpartition("@")
    if ":" in userinfo or "%3A" in userinfo.upper():
        method, _, password = unquote(userinfo).partition(":")
    else:
        try:
            method, _, password = decode_base64(userinfo).partition(":")
        except (ValueError, UnicodeDecodeError):
            raise LinkError("the ss link's user part is not base64") from None
    if not method or not password:
        raise LinkError("the ss link names no cipher and password")
    parts, host, port = _endpoint(f"ss://x@{rest.rpartition('@')[2]}#{fragment}")
    params = query_params(parts.query)
    network, transport = standard_transport(params)
    return LinkPlan(
        protocol="shadowsocks",
        remark=unquote(parts.fragment),
        address=host,
        port=port,
        network=network,
        security=standard_security(params),
        transport=transport,
        password=password,
        ss_method=method,
    )


def _proxy(link: str, protocol: str, *, base64_userinfo: bool) -> LinkPlan:
    parts, host, port = _endpoint(link)
    if parts.path not in ("", "/"):
        raise LinkError(f"the {protocol} link has a path, so it is a web address, not a proxy")
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    if base64_userinfo and parts.username and parts.password is None:
        try:
            user, _, password = decode_base64(unquote(parts.username)).partition(":")
        except (ValueError, UnicodeDecodeError):
            raise LinkError("the socks link's user part is not base64") from None
    return LinkPlan(
        protocol=protocol,
        remark=unquote(parts.fragment),
        address=host,
        port=port,
        network="tcp",
        security=Security("none"),
        user_id=user,
        password=password,
    )


# ---------------------------------------------------------------------------------------
# Mihomo proxies
# ---------------------------------------------------------------------------------------


def read_clash_proxy(proxy: object) -> LinkPlan:
    """The plan of one entry of a Mihomo `proxies:` list."""
    if not isinstance(proxy, dict):
        raise LinkError("a proxy entry is not a mapping")
    kind = str(proxy.get("type", ""))
    protocol = CLASH_TYPES.get(kind)
    if protocol is None:
        raise LinkError(f"the proxy type '{kind[:20]}' is not one the core speaks")
    common = {
        "protocol": protocol,
        "remark": str(proxy.get("name", "")),
        "address": _address(str(proxy.get("server", ""))),
        "port": _port(proxy.get("port")),
    }
    alpn = tuple(str(item) for item in proxy.get("alpn") or () if isinstance(item, str))
    insecure = proxy.get("skip-cert-verify") is True
    if protocol in ("hysteria", "hysteria2"):
        security = Security(
            "tls", sni=str(proxy.get("sni", "")), alpn=alpn, allow_insecure=insecure
        )
        if protocol == "hysteria":
            transport = {
                "up": f"{bandwidth_mbps(str(proxy.get('up', '')).lower())} mbps",
                "down": f"{bandwidth_mbps(str(proxy.get('down', '')).lower())} mbps",
            }
            return LinkPlan(
                **common,
                network="hysteria",
                security=security,
                transport=transport,
                password=str(proxy.get("auth-str", "")),
                hysteria_version=1,
            )
        ports = str(proxy.get("ports", "") or "")
        return LinkPlan(
            **common,
            network="hysteria",
            security=security,
            transport={"udphop": {"port": ports}} if ports else {},
            password=str(proxy.get("password", "")),
        )
    if protocol in ("socks", "http"):
        return LinkPlan(
            **common,
            network="tcp",
            security=_clash_security(proxy, protocol, alpn, insecure),
            user_id=str(proxy.get("username", "") or ""),
            password=str(proxy.get("password", "") or ""),
        )
    network, transport = _clash_transport(proxy)
    shared = {
        **common,
        "network": network,
        "transport": transport,
        "security": _clash_security(proxy, protocol, alpn, insecure),
    }
    if protocol == "vless":
        return LinkPlan(
            **shared,
            user_id=_required(proxy, "uuid", protocol),
            flow=str(proxy.get("flow", "") or ""),
            vless_encryption=str(proxy.get("encryption", "") or "none"),
        )
    if protocol == "vmess":
        return LinkPlan(
            **shared,
            user_id=_required(proxy, "uuid", protocol),
            vmess_security=str(proxy.get("cipher", "") or "auto"),
        )
    if protocol == "trojan":
        return LinkPlan(**shared, password=_required(proxy, "password", protocol))
    return LinkPlan(
        **shared,
        password=_required(proxy, "password", protocol),
        ss_method=_required(proxy, "cipher", protocol),
    )


def _clash_security(proxy: dict, protocol: str, alpn: tuple, insecure: bool) -> Security:
    tls = protocol == "trojan" or proxy.get("tls") is True
    if not tls:
        return Security("none")
    name = proxy.get("sni") if protocol == "trojan" else proxy.get("servername")
    fingerprint = str(proxy.get("client-fingerprint", "") or "")
    reality = proxy.get("reality-opts")
    if isinstance(reality, dict):
        return Security(
            "reality",
            sni=str(name or ""),
            alpn=alpn,
            fingerprint=fingerprint,
            allow_insecure=insecure,
            public_key=str(reality.get("public-key", "") or ""),
            short_id=str(reality.get("short-id", "") or ""),
        )
    return Security(
        "tls", sni=str(name or ""), alpn=alpn, fingerprint=fingerprint, allow_insecure=insecure
    )


def _clash_transport(proxy: dict) -> tuple[str, dict]:
    network = str(proxy.get("network", "") or "tcp")
    if network == "http":
        options = _mapping(proxy.get("http-opts"))
        paths = options.get("path") or ["/"]
        request: dict = {"path": [str(p) for p in paths] if isinstance(paths, list) else [paths]}
        hosts = _mapping(options.get("headers")).get("Host")
        if hosts:
            request["headers"] = {"Host": hosts if isinstance(hosts, list) else [hosts]}
        return "tcp", {"header": {"type": "http", "request": request}}
    if network == "ws":
        options = _mapping(proxy.get("ws-opts"))
        host = _mapping(options.get("headers")).get("Host", "")
        kind = "httpupgrade" if options.get("v2ray-http-upgrade") is True else "ws"
        return kind, {"path": str(options.get("path", "") or ""), "host": str(host or "")}
    if network == "grpc":
        options = _mapping(proxy.get("grpc-opts"))
        return "grpc", {"serviceName": str(options.get("grpc-service-name", "") or "")}
    if network == "xhttp":
        options = _mapping(proxy.get("xhttp-opts"))
        return "xhttp", {
            "path": str(options.get("path", "") or ""),
            "host": str(options.get("host", "") or ""),
            "mode": str(options.get("mode", "") or "auto"),
        }
    if network == "tcp":
        return "tcp", {}
    raise LinkError(f"the transport '{network[:20]}' is not one the core speaks")


# ---------------------------------------------------------------------------------------
# Pieces
# ---------------------------------------------------------------------------------------


def decode_base64(text: str) -> str:
    """Standard or URL-safe base64, padded or not, as UTF-8 text; ValueError otherwise."""
    compact = "".join(text.split())
    padded = compact + "=" * (-len(compact) % 4)
    alphabet = b"-_" if "-" in compact or "_" in compact else None
    try:
        return base64.b64decode(padded, altchars=alphabet, validate=True).decode("utf-8")
    except binascii.Error as exc:
        raise ValueError(str(exc)) from None


def _endpoint(link: str):
    parts = urlsplit(link)
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise LinkError("the link's port is not a number from 1 to 65535") from None
    if not host or not port:
        raise LinkError("the link names no server address and port")
    return parts, _address(host), port


def _address(host: str) -> str:
    address = host.strip().strip("[]")
    if not address:
        raise LinkError("the entry names no server address")
    return address


def _port(value: object) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        raise LinkError("the entry's port is not a number from 1 to 65535") from None
    if not 0 < port < 65536:
        raise LinkError("the entry's port is not a number from 1 to 65535")
    return port


def _list(value: str) -> tuple[str, ...]:
    return tuple(item for item in value.split(",") if item)


def _truthy(value: str) -> bool:
    return value.lower() in ("1", "true")


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _required(proxy: dict, key: str, protocol: str) -> str:
    value = proxy.get(key)
    if not isinstance(value, str | int) or value == "":
        raise LinkError(f"the {protocol} proxy has no {key}")
    return str(value)
