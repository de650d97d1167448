"""Loopback ports the panel takes for itself: the core's API, a probe's temporary core.

The kernel picks a free one when asked for port 0; the socket is closed again at once, so
the child process that is handed the number can bind it.
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing was bound to a moment ago."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]
