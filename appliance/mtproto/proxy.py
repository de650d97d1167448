"""The MTProto proxy process: one per MTProto inbound, started by the panel beside the core.

The core has no Telegram proxy, so the panel runs this one (`appliance mtproto-proxy
CONFIG`). It is a gevent server: a greenlet makes each connection's handshake and hands
the established connection to the event loop's watchers (appliance.mtproto.relay), so thousands of
idle Telegram apps cost their sockets and ciphers, about 8 KiB each, and no thread.

- **Config file** (written by the panel): the listener (`listen`, `port`), the fake-TLS
  `domain` (set: only fake-TLS "ee" secrets are accepted; empty: only padded "dd"
  ones), the data-centre addresses (`dataCenters`, "host:port" for DC 1, 2, ...; an
  internal address is relayed to only with `dataCentersInternal`, the metadata address
  never) and the first set of secrets. With fake TLS, a connection that is not a hello signed by
  one of the secrets (a censor's probe, a browser) is relayed to the real site, `front`
  (the domain's port 443), so the port looks like that site; never to an internal
  address.
- **Token on stdin.** The first line on stdin is `{"token": ...}`: the bearer token of
  the management API, read once at start and never written to disk or shown in `ps`.
  The pipe then stays open; EOF (the panel is gone, however it ended) stops the proxy,
  so none outlives its panel.
- **Management API** on a loopback port of its own choosing, which it announces as the
  first line on stdout (`{"managementPort": N}`); later lines are log records as JSON.
  `PUT /secrets` replaces the active secrets (`{"secrets": {name: {secret, adTag}}}`):
  connections of a secret that left or changed its key are closed at once, every other
  one stays open. `GET /stats` answers `{"instance", "users": {name: {connections,
  bytes_in, bytes_out, ips}}}`: cumulative over this process's life (bytes_in is what
  the app uploaded), and `instance` is new in every process, so the panel can tell a
  restarted proxy from one whose counters moved. `GET /secrets` lists the names with
  their advertising tags.
- **Relay.** Towards the data centre named in the app's opening the proxy opens its own
  obfuscated2 stream (appliance.mtproto.wire), so the data centre receives exactly what the app
  framed; advertising tags are held per secret for the panel to read back.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import os
import resource
import secrets as random_tokens
import socket as plain_socket
import sys
import time
from collections import Counter, OrderedDict

import gevent
from gevent import os as gevent_os
from gevent import socket
from gevent.pywsgi import WSGIServer
from gevent.server import StreamServer

from appliance.mtproto.relay import Relay
from appliance.mtproto.wire import (
    INIT_SIZE,
    PADDED_TAG,
    TLS_APPLICATION_DATA,
    TLS_CHANGE_CIPHER,
    TLS_HELLO_START,
    SeenOpenings,
    accept_client_hello,
    accept_opening,
    data_centre_opening,
    secret_key,
    server_hello,
    tls_record_length,
)
from appliance.runtime.egress import METADATA_REASON, refusal

log = logging.getLogger("appliance.mtproto")

HANDSHAKE_SECONDS = 10.0
CONNECT_SECONDS = 10.0
CHUNK = 65536
AD_TAG_DIGITS = 32


class Refused(Exception):
    """A connection that is not one of ours: closed without an answer."""


class Fronted(Exception):
    """A connection to a fake-TLS proxy that is not one of ours: it goes to the real site
    (`front`), with the bytes read from it so far, so a prober meets that site's server."""

    def __init__(self, reason: str, read: bytes):
        super().__init__(reason)
        self.read = read


class ClientSide:
    """The app's socket, unwrapped from TLS records when fake TLS is in use. Counts the
    bytes on the wire into `tally` ([in, out]): its own until the secret is known, then
    that secret's (`counted`)."""

    def __init__(self, sock: socket.socket, tls: bool):
        self.sock = sock
        self.tls = tls
        self.buffer = b""  # wire bytes not yet read
        self.plain = b""  # payload read past what was asked
        self.tally = [0, 0]

    def _fill(self, size: int) -> bool:
        while len(self.buffer) < size:
            data = self.sock.recv(CHUNK)
            if not data:
                return False
            self.tally[0] += len(data)
            self.buffer += data
        return True

    def take(self, size: int) -> bytes:
        """`size` bytes off the wire, as they came."""
        if not self._fill(size):
            raise Refused("closed before its opening")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def counted(self, tally: list[int]) -> None:
        tally[0] += self.tally[0]
        tally[1] += self.tally[1]
        self.tally = tally

    def read(self) -> bytes:
        """The next payload bytes; b"" at the end."""
        if self.plain:
            data, self.plain = self.plain, b""
            return data
        if not self.tls:
            if self.buffer:
                data, self.buffer = self.buffer, b""
                return data
            data = self.sock.recv(CHUNK)
            self.tally[0] += len(data)
            return data
        while True:
            if not self._fill(5):
                return b""
            size = tls_record_length(self.buffer)
            if not self._fill(5 + size):
                return b""
            kind = self.buffer[0]
            payload, self.buffer = self.buffer[5 : 5 + size], self.buffer[5 + size :]
            if kind == TLS_APPLICATION_DATA:
                return payload
            if kind != TLS_CHANGE_CIPHER:
                return b""

    def read_exactly(self, size: int) -> bytes:
        """`size` payload bytes; what came with them is kept for `read`."""
        data = b""
        while len(data) < size:
            piece = self.read()
            if not piece:
                raise Refused("closed before its opening")
            data += piece
        data, self.plain = data[:size], data[size:]
        return data


class Proxy:
    def __init__(self, config: dict, token: str):
        self.token = token
        self.domain = str(config.get("domain") or "")
        # Where fake-TLS connections that are not ours go (the domain's own site), and
        # whether it may be an internal address (tests only: the panel never sets it,
        # so nobody reaches a service of the host's network through the proxy).
        self.front = _address(config["front"]) if config.get("front") else None
        self.front_internal = bool(config.get("frontInternal"))
        self.data_centres = [_address(text) for text in config.get("dataCenters", [])]
        # Whether a data centre may be an internal address: the admin listed
        # mtprotoDataCenters in allowPrivateDestinations (the metadata address never).
        self.centres_internal = bool(config.get("dataCentersInternal"))
        self.instance = random_tokens.token_hex(8)
        self.secrets: dict[str, tuple[bytes, str]] = {}
        # Tried in this order: an opening names no secret, so each is tried until one
        # fits (about 12 us apiece). Apps reconnect often with the same secret, so the
        # last one that fitted goes first: active users cost little at 10,000 secrets.
        self.keys: OrderedDict[str, bytes] = OrderedDict()
        # name -> [bytes in, bytes out]; kept for the process's life, like the core's.
        self.bytes: dict[str, list[int]] = {}
        self.open: dict[str, set[Relay]] = {}
        self.ips: dict[str, Counter] = {}
        self.seen = SeenOpenings()
        self.replace(config.get("secrets") or {})

    # ---- secrets ---------------------------------------------------------------------------

    def replace(self, entries: object) -> int:
        """Make `entries` the active secrets; close the connections of those that left or
        changed their key. Raises ValueError on a malformed entry (nothing changes)."""
        wanted = _secrets(entries)
        for name, (key, _) in self.secrets.items():
            if name not in wanted or wanted[name][0] != key:
                for relay in list(self.open.get(name, ())):
                    relay.close()
        self.secrets = wanted
        order = [name for name in self.keys if name in wanted]
        order += [name for name in wanted if name not in self.keys]
        self.keys = OrderedDict((name, wanted[name][0]) for name in order)
        return len(wanted)

    def stats(self) -> dict:
        users = {}
        for name, (up, down) in self.bytes.items():
            connections = self.open.get(name, ())
            users[name] = {
                "connections": len(connections),
                "bytes_in": up,
                "bytes_out": down,
                "ips": sorted(self.ips.get(name, {})),
            }
        return {"instance": self.instance, "users": users}

    # ---- connections -----------------------------------------------------------------------

    def handle(self, sock: socket.socket, address) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = ClientSide(sock, bool(self.domain))
        dc_sock = None
        try:
            with gevent.Timeout(HANDSHAKE_SECONDS, Refused("handshake too slow")):
                name, opening = self._open(client)
                dc_sock, dc_stream = self._reach(opening.transport, opening.dc)
        except Fronted as exc:
            log.debug("connection from %s sent to the site: %s", address[0], exc)
            self._to_front(sock, exc.read)
            return
        except (Refused, OSError) as exc:
            log.debug("connection from %s closed: %s", address[0], exc)
            for each in (sock, dc_sock):
                if each is not None:
                    each.close()
            return
        if name not in self.secrets:  # withdrawn while it connected
            sock.close()
            dc_sock.close()
            return
        tally = self.bytes.setdefault(name, [0, 0])
        client.counted(tally)
        ip = address[0]
        relay = Relay(
            _plain(sock),
            _plain(dc_sock),
            client.tls,
            opening.stream,
            dc_stream,
            tally,
            lambda gone: self._closed(name, ip, gone),
        )
        self.open.setdefault(name, set()).add(relay)
        self.ips.setdefault(name, Counter())[ip] += 1
        # The greenlet ends here: the event loop relays from now on (appliance.mtproto.relay).
        relay.start(client.buffer, client.plain)

    def _closed(self, name: str, ip: str, relay: Relay) -> None:
        self.open.get(name, set()).discard(relay)
        ips = self.ips.get(name)
        if ips is not None:
            ips[ip] -= 1
            if ips[ip] <= 0:
                del ips[ip]

    def _open(self, client: ClientSide):
        if self.domain:
            header = client.take(5)
            if header[:3] != TLS_HELLO_START:
                raise Fronted("not a TLS hello", header + client.buffer)
            hello = header + client.take(tls_record_length(header))
            accepted = accept_client_hello(hello, self.keys.items(), self.domain, time.time())
            if accepted is None or not self.seen.first_time(hello[11:43]):
                raise Fronted("no secret signs this hello", hello + client.buffer)
            answer = server_hello(hello, accepted[1])
            client.sock.sendall(answer)
            client.tally[1] += len(answer)
            keys = [accepted]
        else:
            keys = self.keys.items()
        init = client.read_exactly(INIT_SIZE)
        opening = accept_opening(init, keys, (PADDED_TAG,))
        if opening is None or not self.seen.first_time(init):
            raise Refused("no secret opens this stream")
        if opening.name in self.keys:
            self.keys.move_to_end(opening.name, last=False)
        return opening.name, opening

    def _to_front(self, sock: socket.socket, read: bytes) -> None:
        """Relay a connection that is not ours to the real site, as if it had gone there."""
        upstream = None
        try:
            if self.front is None:
                return
            host, port = self.front
            target = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][:2]
            internal = refusal(ipaddress.ip_address(target[0]))
            if internal and not self.front_internal:
                log.warning("not relaying to %s: %s", host, internal)
                return
            upstream = socket.create_connection(target, timeout=CONNECT_SECONDS)
            upstream.settimeout(None)
            upstream.sendall(read)
            back = gevent.spawn(_copy, upstream, sock)
            _copy(sock, upstream)
            back.join()
        except OSError as exc:
            log.debug("the site %s: %s", self.front[0], exc)
        finally:
            for each in (sock, upstream):
                if each is not None:
                    each.close()

    def _reach(self, transport: bytes, dc: int):
        index = abs(dc) - 1
        if not 0 <= index < len(self.data_centres):
            raise Refused(f"no data centre {dc}")
        dc_sock = socket.create_connection(self._centre(index), timeout=CONNECT_SECONDS)
        dc_sock.settimeout(None)
        dc_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        opening, stream = data_centre_opening(transport, dc)
        dc_sock.sendall(opening)
        return dc_sock, stream

    def _centre(self, index: int) -> tuple[str, int]:
        """A checked address of data centre `index`: resolved now, each address judged by
        the egress guard's rule, so a name that moved to an internal address is refused."""
        host, port = self.data_centres[index]
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        for *_, sockaddr in found:
            internal = refusal(ipaddress.ip_address(sockaddr[0].split("%", 1)[0]))
            if internal and (not self.centres_internal or internal.startswith(METADATA_REASON)):
                log.warning("not relaying to data centre %d (%s): %s", index + 1, host, internal)
                raise Refused(f"data centre {index + 1} is {internal}")
        return found[0][4][:2]

    # ---- management API --------------------------------------------------------------------

    def management(self, environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return _answer(start_response, "401 Unauthorized", {"error": "bearer token needed"})
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if (method, path) == ("GET", "/stats"):
            return _answer(start_response, "200 OK", self.stats())
        if (method, path) == ("GET", "/secrets"):
            tags = {name: tag for name, (_, tag) in self.secrets.items()}
            return _answer(start_response, "200 OK", {"secrets": tags})
        if (method, path) == ("PUT", "/secrets"):
            try:
                size = int(environ.get("CONTENT_LENGTH") or 0)
                body = json.loads(environ["wsgi.input"].read(size) or b"{}")
                count = self.replace(body.get("secrets") if isinstance(body, dict) else None)
            except ValueError as exc:
                return _answer(start_response, "400 Bad Request", {"error": str(exc)})
            return _answer(start_response, "200 OK", {"active": count})
        return _answer(start_response, "404 Not Found", {"error": "no such path"})


def _copy(source: socket.socket, target: socket.socket) -> None:
    """Bytes from `source` to `target` until `source` ends, then end `target`'s side."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _plain(sock: socket.socket) -> plain_socket.socket:
    """The operating system's socket under a gevent one, for the relay's watchers."""
    return plain_socket.socket(fileno=sock.detach())


def _secrets(entries: object) -> dict[str, tuple[bytes, str]]:
    if not isinstance(entries, dict):
        raise ValueError('secrets must be an object {name: {"secret": hex, "adTag": hex}}')
    wanted = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("secret"), str):
            raise ValueError(f"secrets[{name!r}] must be an object with a secret")
        tag = entry.get("adTag") or ""
        if not isinstance(tag, str) or (tag and len(tag) != AD_TAG_DIGITS):
            raise ValueError(f"secrets[{name!r}].adTag must be 32 hexadecimal characters")
        bytes.fromhex(tag)
        wanted[name] = (secret_key(entry["secret"]), tag.lower())
    return wanted


def _address(text: str) -> tuple[str, int]:
    host, _, port = str(text).rpartition(":")
    return host.strip("[]"), int(port)


def _answer(start_response, status: str, body: dict) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json")])
    return [data]


class _JsonLines(logging.Handler):
    """Log records as JSON lines on stdout, which the panel logs as its own."""

    def emit(self, record: logging.LogRecord) -> None:
        line = {"level": record.levelno, "name": record.name, "message": record.getMessage()}
        _say(line)


def _say(line: dict) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _until_stdin_closes() -> None:
    gevent_os.make_nonblocking(0)
    while gevent_os.nb_read(0, 4096):
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: appliance mtproto-proxy CONFIG", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, handlers=[_JsonLines()])
    # Every connection holds two descriptors (the app's and the data centre's): as many
    # as the system lets this process have.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(argv[0]) as fh:
        config = json.load(fh)
    token = json.loads(sys.stdin.readline() or "{}").get("token")
    if not token:
        print("error: no management token on stdin", file=sys.stderr)
        return 2
    proxy = Proxy(config, token)
    listen = config.get("listen") or "0.0.0.0"
    try:
        server = StreamServer((listen, int(config["port"])), proxy.handle, backlog=1024)
        server.init_socket()
    except OSError as exc:
        print(f"error: cannot listen on {listen}:{config['port']}: {exc.strerror}", file=sys.stderr)
        return 1
    api = WSGIServer(("127.0.0.1", 0), proxy.management, log=None, error_log=None)
    api.init_socket()
    server.start()
    api.start()
    _say({"managementPort": api.address[1]})
    log.info("MTProto proxy listening on %s:%s", listen, config["port"])
    _until_stdin_closes()
    server.stop(timeout=1)
    api.stop(timeout=1)
    os._exit(0)
