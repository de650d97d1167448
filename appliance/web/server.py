"""Listening sockets and the gevent WSGI servers on them.

TCP_NODELAY is set on the listening socket (Linux hands it down to accepted sockets):
gevent's server writes headers and body separately, and without it every keep-alive
request waits out the peer's delayed ACK, about 40 ms. Requests under the base path
reach the app with the prefix stripped, so routes are written once, without it. Requests
for a host name the panel does not answer to (see `host_allowed`) are refused before
any route sees them: a page of another site that resolves its own name to the panel's
address (DNS rebinding) gets nothing. When the panel trusts its managing panel's CA, the
TLS context asks clients for a certificate, and each request's environ says whether a
verified one came (`CLIENT_CERTIFICATE`). How long a connection may make the server wait,
and how many one address may hold, is `connections.py`'s business.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from collections.abc import Callable

import gevent
from gevent import socket as gsocket
from gevent import ssl as gssl
from gevent.pywsgi import WSGIHandler, WSGIServer
from geventwebsocket.handler import WebSocketHandler

from appliance.web.connections import (
    AddressCap,
    ConnectionLimits,
    ReadLimits,
    ReadTimedOut,
    UnlimitedWebSocket,
    reset,
)
from appliance.web.http import host_allowed

log = logging.getLogger(__name__)

# True in a request's environ when its TLS connection presented a verified client
# certificate (see `ask_client_certificates`).
CLIENT_CERTIFICATE = "appliance.client-certificate"


def listen(host: str, port: int) -> gsocket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = gsocket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def tls_context(certfile: str, keyfile: str) -> gssl.SSLContext:
    """The server's TLS context, loaded once at start.

    Loading here rather than per connection (gevent's default when given file names)
    reads the files once, and a pair that cannot be loaded fails now, where the caller
    can decide what to do, instead of in every connection's greenlet. Raises OSError
    (ssl.SSLError included) when the files are missing or do not form a pair."""
    context = gssl.SSLContext(gssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = gssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context


def ask_client_certificates(context: gssl.SSLContext, ca_pem: str) -> None:
    """Have `context` ask every client for a certificate signed by `ca_pem` and verify
    the one it gets. Optional: a browser without one connects as before, and the app
    learns from `CLIENT_CERTIFICATE` whether a verified one came. Raises ssl.SSLError
    when `ca_pem` holds no usable certificate."""
    context.load_verify_locations(cadata=ca_pem)
    context.verify_mode = gssl.CERT_OPTIONAL


def make_server(
    sock,
    app,
    limits: ConnectionLimits,
    *,
    tls: gssl.SSLContext | None = None,
    upgrade_allowed: Callable[[dict], bool] | None = None,
    cap_exempt: Callable[[], list] | None = None,
):
    """A server for `app` whose connections wait no longer than `limits` allow; with
    `upgrade_allowed`, WebSocket upgrades for which it says yes are accepted, and every
    other upgrade request is served as plain HTTP. With `cap_exempt` (the networks of
    the trusted proxies), connections per address are capped at `limits.per_address`,
    except from those networks."""
    options = {"handler_class": PanelHandler}
    if tls is not None:
        options["ssl_context"] = tls
    if upgrade_allowed is not None:
        options["handler_class"] = PanelWebSocketHandler
    server = PanelWSGIServer(
        sock,
        app,
        log=None,
        error_log=logging.getLogger("appliance.wsgi"),
        **options,
    )
    server.limits = limits
    if cap_exempt is not None and limits.per_address:
        server.cap = AddressCap(limits.per_address, cap_exempt)
    if upgrade_allowed is not None:
        # gevent-websocket answers 101 before the app runs; this hook is asked first, and
        # a true result sends the request down the plain HTTP path, where the app can
        # refuse it with a real status (401) instead of a frame after the handshake.
        server.pre_start_hook = lambda handler: not upgrade_allowed(handler.environ)
    return server


class PanelWSGIServer(WSGIServer):
    """gevent's server, with the limits of `connections.py`, minus the traceback a failed
    TLS handshake prints.

    Plain HTTP sent to the HTTPS port, a browser refusing a self-signed certificate, a
    scanner hanging up mid-handshake: all are the client's doing and end the connection,
    and none may put a traceback in the panel's output. A handshake counts against the
    time the request's head has, from the moment the connection was accepted."""

    limits: ConnectionLimits
    cap: AddressCap | None = None

    def do_handle(self, sock, address):
        if self.cap is not None and not self.cap.admit(address[0]):
            reset(sock)
            return
        super().do_handle(sock, address)

    def do_close(self, sock, address):
        super().do_close(sock, address)
        if self.cap is not None:
            self.cap.release(address[0])

    def handle(self, sock, address, accepted: float | None = None):
        handler = self.handler_class(sock, address, self)
        if accepted is not None:
            handler.reads.deadline = accepted + self.limits.header_seconds
        handler.handle()

    def wrap_socket_and_handle(self, client_socket, address):
        accepted = time.monotonic()
        late = ReadTimedOut("the TLS handshake did not end in time")
        try:
            with gevent.Timeout(self.limits.header_seconds, late):
                tls_socket = self.wrap_socket(client_socket, **self.ssl_args)
            with tls_socket:
                return self.handle(tls_socket, address, accepted)
        except OSError as exc:  # ssl.SSLError is an OSError, and so is ReadTimedOut
            log.debug("TLS connection from %s ended: %s", address[0], exc)
            return None


HEADERS_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 36\r\n\r\n"
    b"the request's headers are too large\n"
)


class HeaderLimits:
    """A request whose headers exceed the parser's limits (a line over 64 kB, more than
    100 headers) gets a plain 431, and the log one line instead of gevent's traceback.

    gevent (pinned in pyproject.toml) hands every request it cannot parse to
    `_handle_client_error`, its hook for subclasses; other malformed requests keep its
    400."""

    def _handle_client_error(self, ex):
        headers = getattr(self, "headers", None)
        too_long = isinstance(ex, http.client.HTTPException) or (
            getattr(headers, "status", "") == "Line too long"
        )
        if not too_long:
            return super()._handle_client_error(ex)
        log.info("refused a request from %s: its headers are too large", self.client_address[0])
        return ("431", HEADERS_TOO_LARGE)


class ClientCertificate:
    """Tells the app whether the connection came with a client certificate the TLS
    context verified (`CLIENT_CERTIFICATE` in the environ); no header can set it."""

    def get_environ(self):
        environ = super().get_environ()
        peer = getattr(self.socket, "getpeercert", None)
        environ[CLIENT_CERTIFICATE] = bool(peer and peer())
        return environ


class PanelHandler(ReadLimits, HeaderLimits, ClientCertificate, WSGIHandler):
    pass


class PanelWebSocketHandler(
    UnlimitedWebSocket, ReadLimits, HeaderLimits, ClientCertificate, WebSocketHandler
):
    pass


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
            query = environ.get("QUERY_STRING", "")
            location = self.prefix + "/" + (f"?{query}" if query else "")
            start_response("301 Moved Permanently", [("Location", location)])
            return [b""]
        if not path.startswith(self.prefix + "/"):
            # The message must not name the base path: hiding it is the point of having one.
            msg = f"no such route: {environ.get('REQUEST_METHOD', 'GET')} {path}"
            return _json_answer(start_response, "404 Not Found", msg)
        environ["PATH_INFO"] = path[len(self.prefix) :]
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + self.prefix
        return self.app(environ, start_response)


class HostCheck:
    """Serve `app` only to requests whose Host is allowed by `allowed()` (a set of names,
    or None for any); others get a 421 envelope."""

    def __init__(self, app, allowed: Callable[[], frozenset[str] | None]):
        self.app = app
        self.allowed = allowed

    def __call__(self, environ, start_response):
        if host_allowed(environ, self.allowed()):
            return self.app(environ, start_response)
        # The message names neither the host sent nor the allowed ones: a caller that
        # does not know the panel's name learns nothing from it.
        return _json_answer(
            start_response,
            "421 Misdirected Request",
            "this panel does not answer to the host name this request was sent to; use "
            "the panel's domain, or add the name to the webAllowedHosts setting",
        )


def _json_answer(start_response, status: str, msg: str) -> list[bytes]:
    body = json.dumps({"success": False, "msg": msg, "obj": None}).encode()
    start_response(
        status,
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
        ],
    )
    return [body]
