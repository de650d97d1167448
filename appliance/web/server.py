"""Listening sockets and the gevent WSGI servers on them.

TCP_NODELAY is set on the listening socket (Linux hands it down to accepted sockets):
gevent's server writes headers and body separately, and without it every keep-alive
request waits out the peer's delayed ACK, about 40 ms. Requests under the base path
reach the app with the prefix stripped, so routes are written once, without it.
"""

from __future__ import annotations

import json
import logging
import socket

from gevent import socket as gsocket
from gevent.pywsgi import WSGIServer
from geventwebsocket.handler import WebSocketHandler

log = logging.getLogger(__name__)


def listen(host: str, port: int) -> gsocket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = gsocket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def make_server(sock, app, *, websockets: bool, certfile: str = "", keyfile: str = ""):
    options = {}
    if certfile and keyfile:
        options = {"certfile": certfile, "keyfile": keyfile}
    if websockets:
        options["handler_class"] = WebSocketHandler
    return WSGIServer(
        sock,
        app,
        log=None,
        error_log=logging.getLogger("appliance.wsgi"),
        **options,
    )


class BasePath:
    """Serve `app` under `base` (like `/panel/`); anything outside it is a 404 envelope."""

    def __init__(self, app, base: str):
        self.app = app
        self.prefix = base.rstrip("/")

    def __call__(self, environ, start_response):
        if not self.prefix:
            return self.app(environ, start_response)
        path = environ.get("PATH_INFO", "")
        if path == self.prefix:
            start_response("301 Moved Permanently", [("Location", self.prefix + "/")])
            return [b""]
        if not path.startswith(self.prefix + "/"):
            body = json.dumps({"success": False, "msg": "not found", "obj": None}).encode()
            start_response(
                "404 Not Found",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
            )
            return [body]
        environ["PATH_INFO"] = path[len(self.prefix) :]
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + self.prefix
        return self.app(environ, start_response)
