"""The subscription server's WSGI app.

It listens from the first release so the port is claimed and firewall rules can be
written; every path answers 404 until subscriptions are served from it.
"""

from __future__ import annotations


def subscription_app(environ, start_response):
    body = b"404 Not Found\n"
    start_response(
        "404 Not Found",
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
    )
    return [body]
