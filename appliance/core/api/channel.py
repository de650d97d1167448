"""Unary gRPC calls over cleartext HTTP/2, with the `h2` library on the standard sockets.

Everything the panel asks the core's API is a unary call to a loopback port: one
request message, one answer. grpcio kept about 12 MiB resident in every panel (its C
core, the C++ runtime and the threads of its poller) and needed gevent hooks and a fork
setting to live beside gevent's hub. HTTP/2 itself (framing, HPACK, flow control, the
stream states) is `h2`'s, a maintained pure-Python implementation that does no I/O of
its own: this module feeds it the bytes of a socket from the standard library, so under
gevent's monkey patching every wait yields to the other greenlets. What is left here is
gRPC's part: HTTP/2 with prior knowledge (RFC 9113 3.3: no TLS, no upgrade), one stream
per call, one length-prefixed message each way, the status in the trailers, and windows
large enough for the biggest answer (200,000 traffic counters, 12 MB) to arrive without
waiting for a window update.

A connection is kept for the next call; calls at the same time each take their own.
A kept connection the core closed meanwhile (it restarted) is noticed before use, and
a call the server provably never started (a GOAWAY below its stream, a refused stream, a
connection closed before the whole request was sent) is sent again on a new connection,
as gRPC's transparent retry does.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from h2.settings import SettingCodes

# What this client lets the server send before a WINDOW_UPDATE, per stream and for the
# connection: one window covers any answer; h2 gives back what was read in large steps.
RECEIVE_WINDOW = 1 << 30
DEFAULT_WINDOW = 65_535
# Reads go into one buffer per connection: a fresh bytes object of this size per read
# would be a large allocation (and its release) on every call.
READ_SIZE = 1 << 16
KEPT_CONNECTIONS = 4

# gRPC status codes (grpc/doc/statuscodes.md).
STATUS_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
OK, CANCELLED, UNKNOWN = 0, 1, 2
DEADLINE_EXCEEDED, NOT_FOUND, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 4, 5, 12, 13, 14
# An answer without grpc-status, by its HTTP status (grpc/doc/http-grpc-status-mapping.md).
HTTP_STATUS_CODES = {400: INTERNAL, 401: 16, 403: 7, 404: UNIMPLEMENTED, 429: UNAVAILABLE}
HTTP_STATUS_CODES.update(dict.fromkeys((502, 503, 504), UNAVAILABLE))


class RpcError(Exception):
    """A call that did not return a message: `code` is its gRPC status code, `details`
    the server's message (or this client's words for a transport failure)."""

    def __init__(self, code: int, details: str):
        super().__init__(details)
        self.code = code
        self.details = details

    @property
    def name(self) -> str:
        return STATUS_NAMES[self.code] if 0 <= self.code < len(STATUS_NAMES) else str(self.code)


class _NeverStarted(Exception):
    """The server did not start the call, so it may be sent again on a new connection."""


class Channel:
    """Calls to one server, `host:port`; safe to share between greenlets and threads."""

    def __init__(self, address: str):
        host, _, port = address.rpartition(":")
        self.address = address
        self.host = host.strip("[]")
        self.port = int(port)
        self._kept: list[_Connection] = []
        self._closed = False

    def unary(self, path: str, request: bytes, timeout: float) -> bytes:
        """The answer of method `path` (`/package.Service/Method`) to `request`."""
        deadline = time.monotonic() + timeout
        connection = self._take(deadline)
        try:
            try:
                answer = connection.call(self.address, path, request, deadline)
            except _NeverStarted:
                connection.close()
                connection = _Connection.open(self.host, self.port, deadline)
                try:
                    answer = connection.call(self.address, path, request, deadline)
                except _NeverStarted:
                    raise RpcError(UNAVAILABLE, "the server closed the connection") from None
        except RpcError:
            self._keep(connection)
            raise
        except BaseException:
            connection.close()
            raise
        self._keep(connection)
        return answer

    def close(self) -> None:
        self._closed = True
        while self._kept:
            self._kept.pop().close()

    def _take(self, deadline: float) -> _Connection:
        while self._kept:
            connection = self._kept.pop()
            if connection.usable():
                return connection
            connection.close()
        return _Connection.open(self.host, self.port, deadline)

    def _keep(self, connection: _Connection) -> None:
        if self._closed or connection.broken or len(self._kept) >= KEPT_CONNECTIONS:
            connection.close()
        else:
            self._kept.append(connection)


class _Call:
    """What one stream has received so far."""

    def __init__(self, stream: int):
        self.stream = stream
        self.blocks: list[dict[str, str]] = []
        self.body = bytearray()
        self.ended = False


class _Connection:
    """One HTTP/2 connection, used by one call at a time."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        # The request's headers are this module's own, in bytes and valid as written:
        # checking, encoding and normalising them again on every call is work for nothing.
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding="utf-8",
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
        self.h2 = h2.connection.H2Connection(config=config)
        self.buffer = memoryview(bytearray(READ_SIZE))
        # Set once the connection must not carry another call (a GOAWAY, a transport
        # error, a call cut short): it is closed instead of kept.
        self.broken = False

    @classmethod
    def open(cls, host: str, port: int, deadline: float) -> _Connection:
        try:
            sock = socket.create_connection((host, port), timeout=_remaining(deadline))
        except TimeoutError:
            raise RpcError(DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except OSError as exc:
            raise RpcError(UNAVAILABLE, f"failed to connect: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = cls(sock)
        connection.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW,
            },
        )
        connection.h2.initiate_connection()
        connection.h2.increment_flow_control_window(RECEIVE_WINDOW - DEFAULT_WINDOW)
        try:
            connection._flush(deadline)
        except OSError as exc:
            connection.close()
            raise RpcError(UNAVAILABLE, f"connection lost: {exc.strerror or exc}") from None
        return connection

    def usable(self) -> bool:
        """Whether a kept connection can carry another call. What the server sent since
        the last one (a PING, new SETTINGS, a GOAWAY when it stops) is read now: a server
        that went away or closed the connection leaves it unusable."""
        if self.broken:
            return False
        try:
            self.sock.settimeout(0.0)
            while data := self._read():
                for event in self._events(data):
                    if isinstance(event, h2.events.ConnectionTerminated):
                        return False
            return False
        except BlockingIOError:
            return self._flushed_now()
        except (OSError, RpcError):
            return False

    def _flushed_now(self) -> bool:
        """Answer what the server's frames asked for (a PING, a SETTINGS ACK)."""
        try:
            self.sock.settimeout(1.0)
            self.sock.sendall(self.h2.data_to_send())
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.broken = True
        self.sock.close()

    def call(self, authority: str, path: str, request: bytes, deadline: float) -> bytes:
        try:
            return self._call(authority, path, request, deadline)
        except TimeoutError:
            self.broken = True
            raise RpcError(DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except h2.exceptions.NoAvailableStreamIDError:
            self.broken = True
            raise _NeverStarted from None
        except h2.exceptions.ProtocolError as exc:
            self.broken = True
            raise RpcError(INTERNAL, f"the server broke HTTP/2: {exc}") from None
        except OSError as exc:
            self.broken = True
            raise RpcError(UNAVAILABLE, f"connection lost: {exc.strerror or exc}") from None

    def _call(self, authority: str, path: str, request: bytes, deadline: float) -> bytes:
        call = _Call(self.h2.get_next_available_stream_id())
        milliseconds = max(1, min(int(_remaining(deadline) * 1000), 99_999_999))
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.encode()),
            (b":authority", authority.encode()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            (b"grpc-timeout", b"%dm" % milliseconds),
        ]
        self.h2.send_headers(call.stream, headers)
        pending = memoryview(b"\0" + len(request).to_bytes(4, "big") + request)
        while not call.ended:
            pending = self._send_what_fits(call.stream, pending)
            self._send_request(deadline)
            self._receive(call, deadline)
        if pending:
            self.broken = True
        return _answer(call.blocks, call.body)

    def _send_what_fits(self, stream: int, pending: memoryview) -> memoryview:
        """Hand h2 as much of the request as the windows allow; the rest waits for a
        WINDOW_UPDATE. The last piece ends the stream."""
        while pending:
            window = self.h2.local_flow_control_window(stream)
            size = min(len(pending), window, self.h2.max_outbound_frame_size)
            if size <= 0:
                break
            self.h2.send_data(stream, bytes(pending[:size]), end_stream=size == len(pending))
            pending = pending[size:]
        return pending

    def _receive(self, call: _Call, deadline: float) -> None:
        self.sock.settimeout(_remaining(deadline))
        data = self._read()
        if not data:
            self.broken = True
            raise RpcError(UNAVAILABLE, "the server closed the connection")
        for event in self._events(data):
            self._on(event, call)

    def _read(self) -> bytes:
        size = self.sock.recv_into(self.buffer)
        return self.buffer[:size].tobytes()

    def _events(self, data: bytes) -> list[h2.events.Event]:
        """h2's events for `data`. A GOAWAY closes h2's side of the connection, and h2
        refuses any frame after it in the same read (grpc servers follow theirs with a
        PING): the server went away."""
        try:
            return self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            if self.h2.state_machine.state == h2.connection.ConnectionState.CLOSED:
                self.broken = True
                raise RpcError(UNAVAILABLE, "the server closed the connection") from None
            raise

    def _on(self, event: h2.events.Event, call: _Call) -> None:
        if isinstance(event, h2.events.ConnectionTerminated):
            self.broken = True
            if event.last_stream_id is None or call.stream > event.last_stream_id:
                raise _NeverStarted
            if not call.ended:
                code = getattr(event.error_code, "name", event.error_code)
                raise RpcError(UNAVAILABLE, f"the server went away (HTTP/2 error {code})")
        if getattr(event, "stream_id", None) != call.stream:
            return
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            call.blocks.append(dict(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            call.body += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, call.stream)
        elif isinstance(event, h2.events.StreamEnded):
            call.ended = True
        elif isinstance(event, h2.events.StreamReset):
            # A reset after the whole answer (a server done with a request it no longer
            # needs) costs the connection, not the answer.
            self.broken = True
            if not call.ended:
                _reset(event.error_code)

    def _send_request(self, deadline: float) -> None:
        """Send what h2 has queued: a server that closed the connection cannot have read
        the whole request, whose last frame ends the stream, so it never started."""
        try:
            self._flush(deadline)
        except TimeoutError:
            raise
        except OSError:
            self.broken = True
            raise _NeverStarted from None

    def _flush(self, deadline: float) -> None:
        data = self.h2.data_to_send()
        if data:
            self.sock.settimeout(_remaining(deadline))
            self.sock.sendall(data)


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _reset(error: int) -> None:
    """A stream the server reset: REFUSED_STREAM means it never started the call."""
    if error == h2.errors.ErrorCodes.REFUSED_STREAM:
        raise _NeverStarted
    code = CANCELLED if error == h2.errors.ErrorCodes.CANCEL else INTERNAL
    raise RpcError(code, f"the server reset the stream (HTTP/2 error code {int(error)})")


def _answer(blocks: list[dict[str, str]], body: bytearray) -> bytes:
    """The message of a finished call, or the error its status says: the trailers are
    the last header block, the answer's headers the first (one block: trailers only)."""
    if not blocks:
        raise RpcError(INTERNAL, "the server ended the call without headers")
    headers, trailers = blocks[0], blocks[-1]
    if "grpc-status" not in trailers:
        status = headers.get(":status", "")
        code = HTTP_STATUS_CODES.get(int(status) if status.isdigit() else 0, UNKNOWN)
        if status == "200":
            code = INTERNAL
        raise RpcError(code, f"the server answered HTTP {status or '?'} without a gRPC status")
    code = int(trailers["grpc-status"]) if trailers["grpc-status"].isdigit() else UNKNOWN
    if code != OK:
        raise RpcError(code, unquote(trailers.get("grpc-message", "")))
    if len(body) < 5:
        raise RpcError(INTERNAL, "the server sent no message")
    if body[0]:
        raise RpcError(INTERNAL, "the server sent a compressed message it was not offered")
    length = int.from_bytes(body[1:5], "big")
    if len(body) != 5 + length:
        raise RpcError(INTERNAL, "the server sent a message of the wrong length")
    return bytes(body[5:])
