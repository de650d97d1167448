"""What a request's WSGI environment says about where it was sent.

Both doors, the panel and the subscription server, read the Host header: to build
addresses for the person who asked (a subscription URL, a link's host), to answer only to
the names the panel is configured for, and to tell the panel's own pages from another
site's. One parser keeps them agreeing on what a Host header may be.
"""

from __future__ import annotations

import ipaddress
import re

HOST_HEADER = re.compile(r"^(?P<name>\[[0-9a-f:.]+\]|[a-z0-9._-]{1,253})(?::(?P<port>\d{1,5}))?$")


def split_host(value: str) -> tuple[str, str] | None:
    """(host name, port or "") of a Host header or URL authority, lower-case, without the
    brackets of an IPv6 address or a final dot; None when it is not one."""
    match = HOST_HEADER.match(value.strip().lower())
    if match is None:
        return None
    return match.group("name").strip("[]").rstrip("."), match.group("port") or ""


def request_host(environ: dict) -> tuple[str, str]:
    """(host name without port, host with port) the request came to. A Host header that
    is not a host name (anything could be sent) gives way to the listening address."""
    parsed = split_host(environ.get("HTTP_HOST", ""))
    if parsed is None:
        name, port = environ.get("SERVER_NAME", "127.0.0.1"), environ.get("SERVER_PORT", "")
    else:
        name, port = parsed
    bracketed = f"[{name}]" if ":" in name else name
    return name, f"{bracketed}:{port}" if port else bracketed


def client_address(environ: dict, trusted: list) -> str:
    """The caller's address; `X-Forwarded-For` counts only when a trusted proxy (one of
    the `trusted` networks) sent it.

    The client is the last hop that is not a trusted proxy. A hop that is no address
    (`garbage6`, a name, `1.2.3.4:80`) names nobody: the peer's address stands instead,
    or every such spelling would be a fresh client to the sign-in limiter and a made-up
    one in the audit log. An address comes back in its one canonical spelling, so
    `2001:DB8::1` and `2001:db8::1` are one client."""
    remote = environ.get("REMOTE_ADDR", "") or ""
    if not trusted or not address_in(remote, trusted):
        return remote
    forwarded = environ.get("HTTP_X_FORWARDED_FOR", "")
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    for hop in reversed(hops):
        address = _ip(hop)
        if address is None:
            return remote
        if not any(address in network for network in trusted):
            return str(address)
    return remote


def address_in(address: str, networks) -> bool:
    """Whether `address` (text) is in one of `networks`; False when it is no address."""
    ip = _ip(address)
    return ip is not None and any(ip in network for network in networks)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
