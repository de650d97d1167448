"""Readers for the transport object of an inbound, as a client must mirror it.

The inbound's `streamSettings.<network>Settings` object describes the server side; a
client needs a few of its fields (a WebSocket path and Host, a gRPC service name, the
request that TCP HTTP obfuscation sends ...). These readers take that object (already
chosen by `plan.prepare_inbound`) and return the values in one shape for the three renderers,
tolerating every odd form the core itself accepts (a string where a list is usual, Host
given inside `headers`, a missing object).
"""

from __future__ import annotations


def text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: object) -> list[str]:
    """A list of non-empty strings from a string or a list of strings."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str) and item]
    return []


def _header(transport: dict) -> dict:
    header = transport.get("header")
    return header if isinstance(header, dict) else {}


def header_type(transport: dict) -> str:
    """The obfuscation header of raw TCP ("none" or "http"), mKCP or QUIC."""
    return text(_header(transport).get("type")) or "none"


def _host_header(headers: object) -> list[str]:
    if not isinstance(headers, dict):
        return []
    for name, value in headers.items():
        if isinstance(name, str) and name.lower() == "host":
            return _strings(value)
    return []


def http_request_paths(transport: dict) -> list[str]:
    """Paths the TCP HTTP obfuscation request may use; the core's default is "/"."""
    request = _header(transport).get("request")
    paths = _strings(request.get("path")) if isinstance(request, dict) else []
    return paths or ["/"]


def http_request_hosts(transport: dict) -> list[str]:
    """Host header values of the TCP HTTP obfuscation request."""
    request = _header(transport).get("request")
    return _host_header(request.get("headers")) if isinstance(request, dict) else []


def http_header(transport: dict) -> dict:
    """The whole TCP `header` object (request and response), for a client config."""
    return dict(_header(transport))


def path(transport: dict) -> str:
    """WebSocket, HTTPUpgrade and XHTTP path."""
    return text(transport.get("path"))


def host(transport: dict) -> str:
    """WebSocket, HTTPUpgrade and XHTTP Host: `host`, else a Host entry in `headers`."""
    hosts = _strings(transport.get("host")) or _host_header(transport.get("headers"))
    return hosts[0] if hosts else ""


def grpc_service_name(transport: dict) -> str:
    return text(transport.get("serviceName"))


def grpc_authority(transport: dict) -> str:
    return text(transport.get("authority"))


def grpc_multi_mode(transport: dict) -> bool:
    return transport.get("multiMode") is True


def xhttp_mode(transport: dict) -> str:
    return text(transport.get("mode")) or "auto"


def xhttp_extra(transport: dict) -> dict | None:
    extra = transport.get("extra")
    return extra if isinstance(extra, dict) and extra else None


def kcp_seed(transport: dict) -> str:
    return text(transport.get("seed"))


def quic_security(transport: dict) -> str:
    return text(transport.get("security")) or "none"


def quic_key(transport: dict) -> str:
    return text(transport.get("key"))


def hop_ports(transport: dict) -> str:
    """Hysteria port hopping range ("20000-50000"), from `udphop.port`."""
    hop = transport.get("udphop")
    return text(hop.get("port")) if isinstance(hop, dict) else ""


KCP_CLIENT_KEYS = (
    "mtu",
    "tti",
    "uplinkCapacity",
    "downlinkCapacity",
    "congestion",
    "readBufferSize",
    "writeBufferSize",
    "header",
    "seed",
)


def kcp_client_settings(transport: dict) -> dict:
    """mKCP tuning both ends should share; header and seed must match the server."""
    return {key: transport[key] for key in KCP_CLIENT_KEYS if key in transport}
