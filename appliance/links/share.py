"""Share links (the URLs client apps import) for one `LinkPlan`.

Formats followed:

- VLESS and Trojan: the URL form of the Xray share-link standard (XTLS/Xray-core
  discussion 716, as v2rayN and v2rayNG read it):
  `vless://<id>@<host>:<port>?<query>#<remark>`. The query carries `type` (tcp, kcp, ws,
  grpc, httpupgrade, xhttp, quic), `security` (none, tls, reality) and the fields of that
  transport and security: `headerType`, `host`, `path`, `seed`, `serviceName`,
  `authority`, `mode`, `extra`; `sni`, `alpn`, `fp`, `allowInsecure`; `pbk`, `sid`,
  `spx`, `pqv`. VLESS adds `encryption` and, for Vision, `flow`.
- VMess: v2rayN's format version "2": `vmess://` + base64 of a JSON object
  {v, ps, add, port, id, aid, scy, net, type, host, path, tls, sni, alpn, fp} whose
  values are all strings.
- Shadowsocks: SIP002, `ss://<userinfo>@<host>:<port>#<remark>`. The userinfo is
  `method:password` in URL-safe base64 without padding, except for the 2022 ciphers,
  where SIP002 requires it plain with method and password percent-encoded. A transport
  other than plain TCP is described with the same query fields as VLESS.
- Hysteria 2: `hy2://<auth>@<host>:<port>/?sni=&alpn=&insecure=1&mport=#<remark>`
  (the Hysteria 2 URI scheme; `mport` is the port-hopping range as v2rayN writes it).
- Hysteria 1: `hysteria://<host>:<port>?protocol=udp&auth=&peer=&insecure=1&upmbps=&
  downmbps=&alpn=#<remark>` (the Hysteria 1 URI scheme).

Every value is percent-encoded like JavaScript's encodeURIComponent (the standard asks
for it), empty fields are left out, and query keys are sorted, so one inbound always
gives byte-identical links.
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote

from appliance.links import transport as tr
from appliance.links.plan import LinkPlan, Security, is_ss2022


def share_link(plan: LinkPlan) -> str:
    """The share link of one plan."""
    if plan.protocol == "vmess":
        return _vmess(plan)
    if plan.protocol == "mtproto":
        return _telegram(plan)
    if plan.protocol == "shadowsocks":
        return _shadowsocks(plan)
    if plan.protocol in ("hysteria", "hysteria2"):
        return _hysteria(plan) if plan.hysteria_version == 1 else _hysteria2(plan)
    params = standard_params(plan)
    secret = plan.user_id if plan.protocol == "vless" else plan.password
    if plan.protocol == "vless":
        params["encryption"] = plan.vless_encryption
        params["flow"] = plan.flow
    return (
        f"{plan.protocol}://{_encode(secret)}@{_endpoint(plan)}?{_query(params)}{_fragment(plan)}"
    )


def standard_params(plan: LinkPlan) -> dict[str, str]:
    """`type`, `security` and the transport and security fields of the standard."""
    params = {"type": plan.network, "security": plan.security.kind}
    params.update(_transport_params(plan))
    params.update(_security_params(plan.security))
    return params


def _transport_params(plan: LinkPlan) -> dict[str, str]:
    transport = plan.transport
    network = plan.network
    if network == "tcp":
        if tr.header_type(transport) != "http":
            return {}
        return {
            "headerType": "http",
            "path": ",".join(tr.http_request_paths(transport)),
            "host": ",".join(tr.http_request_hosts(transport)),
        }
    if network == "kcp":
        return {"headerType": tr.header_type(transport), "seed": tr.kcp_seed(transport)}
    if network in ("ws", "httpupgrade"):
        return {"path": tr.path(transport), "host": tr.host(transport)}
    if network == "grpc":
        return {
            "serviceName": tr.grpc_service_name(transport),
            "authority": tr.grpc_authority(transport),
            "mode": "multi" if tr.grpc_multi_mode(transport) else "gun",
        }
    if network == "xhttp":
        extra = tr.xhttp_extra(transport)
        return {
            "path": tr.path(transport),
            "host": tr.host(transport),
            "mode": tr.xhttp_mode(transport),
            "extra": json.dumps(extra, separators=(",", ":")) if extra else "",
        }
    if network == "quic":
        return {
            "quicSecurity": tr.quic_security(transport),
            "key": tr.quic_key(transport),
            "headerType": tr.header_type(transport),
        }
    return {}


def _security_params(security: Security) -> dict[str, str]:
    if security.kind == "tls":
        return {
            "sni": security.sni,
            "alpn": ",".join(security.alpn),
            "fp": security.fingerprint,
            "allowInsecure": "1" if security.allow_insecure else "",
        }
    if security.kind == "reality":
        return {
            "sni": security.sni,
            "fp": security.fingerprint,
            "pbk": security.public_key,
            "sid": security.short_id,
            "spx": security.spider_x,
            "pqv": security.mldsa65_verify,
        }
    return {}


# ---------------------------------------------------------------------------------------
# VMess (v2rayN JSON)
# ---------------------------------------------------------------------------------------


def vmess_object(plan: LinkPlan) -> dict[str, str]:
    """The JSON object inside a VMess link (all values strings, as v2rayN writes them)."""
    header, host, path = _vmess_transport(plan)
    security = plan.security
    tls = security.kind == "tls"
    return {
        "v": "2",
        "ps": plan.remark,
        "add": plan.address,
        "port": str(plan.port),
        "id": plan.user_id,
        "aid": "0",
        "scy": plan.vmess_security,
        "net": plan.network,
        "type": header,
        "host": host,
        "path": path,
        "tls": "tls" if tls else "",
        "sni": security.sni if tls else "",
        "alpn": ",".join(security.alpn) if tls else "",
        "fp": security.fingerprint if tls else "",
    }


def _vmess_transport(plan: LinkPlan) -> tuple[str, str, str]:
    """(type, host, path) with the meaning v2rayN gives them for each network."""
    transport = plan.transport
    network = plan.network
    if network == "tcp":
        if tr.header_type(transport) != "http":
            return "none", "", ""
        paths = ",".join(tr.http_request_paths(transport))
        return "http", ",".join(tr.http_request_hosts(transport)), paths
    if network == "kcp":
        return tr.header_type(transport), "", tr.kcp_seed(transport)
    if network == "grpc":
        mode = "multi" if tr.grpc_multi_mode(transport) else "gun"
        return mode, tr.grpc_authority(transport), tr.grpc_service_name(transport)
    if network == "xhttp":
        return tr.xhttp_mode(transport), tr.host(transport), tr.path(transport)
    if network == "quic":
        return tr.header_type(transport), tr.quic_security(transport), tr.quic_key(transport)
    return "none", tr.host(transport), tr.path(transport)


def _vmess(plan: LinkPlan) -> str:
    payload = json.dumps(vmess_object(plan), ensure_ascii=False, separators=(",", ":"))
    return "vmess://" + base64.b64encode(payload.encode("utf-8")).decode("ascii")


# ---------------------------------------------------------------------------------------
# Shadowsocks (SIP002)
# ---------------------------------------------------------------------------------------


def _shadowsocks(plan: LinkPlan) -> str:
    if is_ss2022(plan.ss_method):
        userinfo = f"{_encode(plan.ss_method)}:{_encode(plan.password)}"
    else:
        raw = f"{plan.ss_method}:{plan.password}".encode()
        userinfo = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
    plain = (
        plan.network == "tcp"
        and plan.security.kind == "none"
        and tr.header_type(plan.transport) != "http"
    )
    query = "" if plain else "/?" + _query(standard_params(plan))
    return f"ss://{userinfo}@{_endpoint(plan)}{query}{_fragment(plan)}"


# ---------------------------------------------------------------------------------------
# Hysteria
# ---------------------------------------------------------------------------------------


def _hysteria2(plan: LinkPlan) -> str:
    security = plan.security
    params = {
        "sni": security.sni,
        "alpn": ",".join(security.alpn),
        "insecure": "1" if security.allow_insecure else "",
        "mport": tr.hop_ports(plan.transport),
    }
    query = _query(params)
    return (
        f"hy2://{_encode(plan.password)}@{_endpoint(plan)}"
        f"{'/?' + query if query else ''}{_fragment(plan)}"
    )


def _hysteria(plan: LinkPlan) -> str:
    security = plan.security
    params = {
        "protocol": "udp",
        "auth": plan.password,
        "peer": security.sni,
        "insecure": "1" if security.allow_insecure else "",
        "upmbps": str(bandwidth_mbps(plan.transport.get("up"))),
        "downmbps": str(bandwidth_mbps(plan.transport.get("down"))),
        "alpn": ",".join(security.alpn),
    }
    return f"hysteria://{_endpoint(plan)}?{_query(params)}{_fragment(plan)}"


DEFAULT_MBPS = 100
_BANDWIDTH = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:b|bps)?\s*", re.IGNORECASE)
_UNIT_MBPS = {"": 1e-6, "k": 1e-3, "m": 1.0, "g": 1e3, "t": 1e6}


def _telegram(plan: LinkPlan) -> str:
    """Telegram's own proxy link; it has no name, so the remark is not carried."""
    params = {"server": plan.address, "port": str(plan.port), "secret": plan.password}
    return "tg://proxy?" + "&".join(f"{key}={_encode(value)}" for key, value in params.items())


def bandwidth_mbps(value: object) -> int:
    """Mbps from the core's bandwidth notation ("100 mbps", "1g", 5000000 = bits per
    second). Hysteria 1 clients need a figure; DEFAULT_MBPS when none is given."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    match = _BANDWIDTH.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return DEFAULT_MBPS
    mbps = int(float(match.group(1)) * _UNIT_MBPS[match.group(2).lower()])
    return mbps if mbps > 0 else DEFAULT_MBPS


# ---------------------------------------------------------------------------------------
# URL pieces
# ---------------------------------------------------------------------------------------


_UNESCAPED = re.compile(r"[A-Za-z0-9\-_.!~*'()]*")


def _encode(value: str) -> str:
    """encodeURIComponent: everything but letters, digits and -_.!~*'() is escaped.
    Most values (UUIDs, keys, names) need nothing, which a match tells cheaper than
    `quote` does."""
    return value if _UNESCAPED.fullmatch(value) else quote(value, safe="!~*'()")


def _query(params: dict[str, str]) -> str:
    return "&".join(f"{key}={_encode(value)}" for key, value in sorted(params.items()) if value)


def _endpoint(plan: LinkPlan) -> str:
    address = plan.address
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"{address}:{plan.port}"


def _fragment(plan: LinkPlan) -> str:
    return f"#{_encode(plan.remark)}" if plan.remark else ""
