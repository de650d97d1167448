"""What a request's WSGI environment says about where it was sent.

Both doors, the panel and the subscription server, build addresses for the person who
asked (a subscription URL, a link's host) from the host the request came to; one parser
keeps them agreeing on what a Host header may be.
"""

from __future__ import annotations

import re

HOST_HEADER = re.compile(
    r"^(?P<name>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253})(?::(?P<port>\d{1,5}))?$"
)


def request_host(environ: dict) -> tuple[str, str]:
    """(host name without port, host with port) the request came to. A Host header that
    is not a host name (anything could be sent) gives way to the listening address."""
    match = HOST_HEADER.match(environ.get("HTTP_HOST", ""))
    if match:
        name = match.group("name").lower()
        return name.strip("[]"), match.group(0).lower()
    name = environ.get("SERVER_NAME", "127.0.0.1")
    port = environ.get("SERVER_PORT", "")
    bracketed = f"[{name}]" if ":" in name else name
    return name, f"{bracketed}:{port}" if port else bracketed
