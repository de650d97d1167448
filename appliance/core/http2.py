"""Unary gRPC calls over cleartext HTTP/2, on the standard library's sockets.

Everything the panel asks the core's API is a unary call to a loopback port: one
request message, one answer. grpcio, which made those calls before, kept about 12 MiB
resident in every panel (its C core, the C++ runtime and the threads of its poller),
more than the rest of an idle panel's libraries together, and needed gevent hooks and
a fork setting to live beside gevent's hub. This client speaks just what those calls
use: HTTP/2 with prior knowledge (RFC 9113 3.3: no TLS, no upgrade), one stream per
call, request headers as HPACK literals, the server's header blocks decoded by
`appliance.core.hpack`, flow control with windows large enough for the biggest answer
(200,000 traffic counters, 12 MB), and gRPC's framing of one length-prefixed message
each way. Its sockets are the standard library's, so under gevent's monkey patching
every wait yields to the other greenlets.

A connection is kept for the next call; calls at the same time each take their own.
A kept connection the core closed meanwhile (it restarted) is noticed before use, and
a call the server provably never started (a GOAWAY below its stream, a connection
closed before the whole request was sent) is sent again on a new connection, as gRPC's
transparent retry does.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import unquote

from appliance.core import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Frame types and flags (RFC 9113 6).
DATA, HEADERS, RST_STREAM, SETTINGS = 0x0, 0x1, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY = 0x20
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384
# What this client lets the server send before a WINDOW_UPDATE: one window covers any
# answer; the connection's is topped up whenever half of it has been used.
RECEIVE_WINDOW = 1 << 30
# A frame longer than this is not read into memory (the client asks for 16 KiB ones).
FRAME_LIMIT = 1 << 24
LAST_STREAM_ID = (1 << 31) - 1
KEPT_CONNECTIONS = 4
REFUSED_STREAM = 0x7
HTTP2_CANCEL = 0x8

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


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


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


class _Connection:
    """One HTTP/2 connection, used by one call at a time."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.decoder = hpack.Decoder()
        self.next_stream = 1
        self.send_window = DEFAULT_WINDOW
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self.unacknowledged = 0
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
        settings = (SETTINGS_ENABLE_PUSH, 0), (SETTINGS_INITIAL_WINDOW_SIZE, RECEIVE_WINDOW)
        payload = b"".join(
            key.to_bytes(2, "big") + value.to_bytes(4, "big") for key, value in settings
        )
        increment = (RECEIVE_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big")
        try:
            sock.sendall(
                PREFACE + frame(SETTINGS, 0, 0, payload) + frame(WINDOW_UPDATE, 0, 0, increment)
            )
        except OSError as exc:
            connection.close()
            raise RpcError(UNAVAILABLE, f"connection lost: {exc.strerror or exc}") from None
        return connection

    def usable(self) -> bool:
        """Whether a kept connection is still open: one the server closed reads as end
        of file; one with nothing to read now is fine (what it has is read by the call)."""
        if self.broken or self.next_stream > LAST_STREAM_ID:
            return False
        try:
            self.sock.settimeout(0.0)
            return self.sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def close(self) -> None:
        self.broken = True
        self.reader.close()
        self.sock.close()

    def call(self, authority: str, path: str, request: bytes, deadline: float) -> bytes:
        try:
            return self._call(authority, path, request, deadline)
        except TimeoutError:
            self.broken = True
            raise RpcError(DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except hpack.HpackError as exc:
            self.broken = True
            raise RpcError(INTERNAL, f"malformed header block: {exc}") from None
        except OSError as exc:
            self.broken = True
            raise RpcError(UNAVAILABLE, f"connection lost: {exc.strerror or exc}") from None

    def _call(self, authority: str, path: str, request: bytes, deadline: float) -> bytes:
        stream = self.next_stream
        self.next_stream += 2
        milliseconds = max(1, min(int(_remaining(deadline) * 1000), 99_999_999))
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", f"{milliseconds}m"),
        ]
        self._send_request(
            deadline, frame(HEADERS, END_HEADERS, stream, hpack.encode_literals(headers))
        )
        pending = b"\0" + len(request).to_bytes(4, "big") + request
        window = self.peer_initial_window
        blocks: list[list[tuple[str, str]]] = []
        body = bytearray()
        ended = False
        while not ended:
            size = min(len(pending), self.send_window, window, self.peer_max_frame)
            if size > 0:
                flags = END_STREAM if size == len(pending) else 0
                self._send_request(deadline, frame(DATA, flags, stream, pending[:size]))
                pending = pending[size:]
                self.send_window -= size
                window -= size
                continue
            kind, flags, on, payload = self._frame(deadline)
            if kind == HEADERS:
                block = self._header_block(flags, payload, deadline)
                if on == stream:
                    blocks.append(block)
                    ended = bool(flags & END_STREAM)
            elif kind == DATA:
                self._received(len(payload), deadline)
                if on == stream:
                    body += _unpadded(flags, payload)
                    ended = bool(flags & END_STREAM)
            elif kind == WINDOW_UPDATE:
                increment = int.from_bytes(payload[:4], "big") & LAST_STREAM_ID
                if on == 0:
                    self.send_window += increment
                elif on == stream:
                    window += increment
            elif kind == SETTINGS and not flags & ACK:
                window += self._settings(payload)
                self._send(deadline, frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                self._send(deadline, frame(PING, ACK, 0, payload))
            elif kind == GOAWAY:
                self.broken = True
                if stream > int.from_bytes(payload[:4], "big") & LAST_STREAM_ID:
                    raise _NeverStarted
            elif kind == RST_STREAM and on == stream:
                self.broken = bool(pending)
                _reset(int.from_bytes(payload[:4], "big"))
            elif kind == PUSH_PROMISE:
                self.broken = True
                raise RpcError(INTERNAL, "the server pushed a stream it was told not to")
        if pending:
            self.broken = True
        return _answer(blocks, body)

    def _send(self, deadline: float, data: bytes) -> None:
        self.sock.settimeout(_remaining(deadline))
        self.sock.sendall(data)

    def _send_request(self, deadline: float, data: bytes) -> None:
        """Send frames of the request: a server that closed the connection cannot have
        read the whole request, whose last frame ends the stream, so it never started."""
        try:
            self._send(deadline, data)
        except TimeoutError:
            raise
        except OSError:
            self.broken = True
            raise _NeverStarted from None

    def _frame(self, deadline: float) -> tuple[int, int, int, bytes]:
        head = self._read(9, deadline)
        length = int.from_bytes(head[:3], "big")
        if length > FRAME_LIMIT:
            self.broken = True
            raise RpcError(INTERNAL, f"a frame of {length} bytes is too large")
        stream = int.from_bytes(head[5:], "big") & LAST_STREAM_ID
        return head[3], head[4], stream, self._read(length, deadline) if length else b""

    def _read(self, size: int, deadline: float) -> bytes:
        self.sock.settimeout(_remaining(deadline))
        data = self.reader.read(size)
        if len(data) < size:
            self.broken = True
            raise RpcError(UNAVAILABLE, "the server closed the connection")
        return data

    def _header_block(self, flags: int, payload: bytes, deadline: float) -> list[tuple[str, str]]:
        """A HEADERS frame's block with its CONTINUATION frames, decoded: every block
        goes through the decoder, which keeps the connection's table in step."""
        fragment = _unpadded(flags, payload)
        if flags & PRIORITY:
            fragment = fragment[5:]
        while not flags & END_HEADERS:
            kind, flags, _, more = self._frame(deadline)
            if kind != CONTINUATION:
                self.broken = True
                raise RpcError(INTERNAL, "a header block was interrupted by another frame")
            fragment += more
        return self.decoder.decode(fragment)

    def _received(self, size: int, deadline: float) -> None:
        """Count DATA against the connection's window; give it back in large steps."""
        self.unacknowledged += size
        if self.unacknowledged >= RECEIVE_WINDOW // 2:
            increment = self.unacknowledged.to_bytes(4, "big")
            self._send(deadline, frame(WINDOW_UPDATE, 0, 0, increment))
            self.unacknowledged = 0

    def _settings(self, payload: bytes) -> int:
        """Apply the server's settings; how much its new initial window changes that of
        the stream under way."""
        change = 0
        for pos in range(0, len(payload) - len(payload) % 6, 6):
            key = int.from_bytes(payload[pos : pos + 2], "big")
            value = int.from_bytes(payload[pos + 2 : pos + 6], "big")
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                change += value - self.peer_initial_window
                self.peer_initial_window = value
            elif key == SETTINGS_MAX_FRAME_SIZE:
                self.peer_max_frame = value
        return change


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _unpadded(flags: int, payload: bytes) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise RpcError(INTERNAL, "a frame's padding is longer than the frame")
    return payload[1 : len(payload) - payload[0]]


def _reset(error: int) -> None:
    """A stream the server reset: REFUSED_STREAM means it never started the call."""
    if error == REFUSED_STREAM:
        raise _NeverStarted
    code = CANCELLED if error == HTTP2_CANCEL else INTERNAL
    raise RpcError(code, f"the server reset the stream (HTTP/2 error code {error})")


def _answer(blocks: list[list[tuple[str, str]]], body: bytearray) -> bytes:
    """The message of a finished call, or the error its status says: the trailers are
    the last header block, the answer's headers the first (one block: trailers only)."""
    if not blocks:
        raise RpcError(INTERNAL, "the server ended the call without headers")
    headers, trailers = dict(blocks[0]), dict(blocks[-1])
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
