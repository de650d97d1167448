"""One established MTProto connection, relayed by the event loop's I/O watchers.

After the handshake a Telegram app mostly sits idle on its connections. A greenlet parked
in `recv` keeps its slice of C stack on the heap (about 8 KiB measured here), two per
connection; so once the handshake is done the greenlet that made it leaves, and the two
directions are driven by libev watchers instead: a readable socket is read once, the
bytes go through the ciphers and are written without blocking; what the other side does
not take yet waits in a buffer, and reading from the source pauses until it drained, so a
slow peer is not buffered without bound. An idle connection then costs its two sockets,
four cipher contexts and four watchers.

Bytes are counted on the app's side of the wire (`tally`: [in, out], in being the upload).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable

import gevent

from appliance.mtproto.wire import (
    TLS_APPLICATION_DATA,
    TLS_CHANGE_CIPHER,
    tls_record_length,
    tls_records,
)

log = logging.getLogger("appliance.mtproto")

CHUNK = 65536
READ, WRITE = 1, 2


class Relay:
    def __init__(
        self,
        app: socket.socket,
        dc: socket.socket,
        tls: bool,
        app_stream,
        dc_stream,
        tally: list[int],
        on_close: Callable[[Relay], None],
    ):
        self.app, self.dc = app, dc
        self.tls = tls
        self.app_stream, self.dc_stream = app_stream, dc_stream
        self.tally = tally
        self.on_close = on_close
        self.records = b""  # TLS bytes from the app not yet a whole record
        self.to_dc = b""
        self.to_app = b""
        self.closing = False
        self.closed = False
        loop = gevent.get_hub().loop
        for sock in (app, dc):
            sock.setblocking(False)
        self.app_read = loop.io(app.fileno(), READ)
        self.dc_read = loop.io(dc.fileno(), READ)
        self.app_write = loop.io(app.fileno(), WRITE)
        self.dc_write = loop.io(dc.fileno(), WRITE)

    def start(self, wire: bytes, payload: bytes) -> None:
        """Begin relaying, with what the handshake read past the opening: `wire` bytes
        not yet unwrapped and `payload` already unwrapped."""
        self._guarded(self._from_app_bytes, wire, payload)
        if not self.closed:
            self.app_read.start(self._guarded, self._app_readable)
            self.dc_read.start(self._guarded, self._dc_readable)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for watcher in (self.app_read, self.dc_read, self.app_write, self.dc_write):
            watcher.stop()
            watcher.close()
        for sock in (self.app, self.dc):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.on_close(self)

    # ---- the watchers' callbacks -----------------------------------------------------------

    def _guarded(self, step, *args) -> None:
        try:
            step(*args)
        except OSError as exc:
            log.debug("relay closed: %s", exc)
            self.close()
        except Exception:
            log.exception("relay failed")
            self.close()

    def _app_readable(self) -> None:
        data = _receive(self.app)
        if data is None:
            return
        if not data:
            self._ending()
            return
        self.tally[0] += len(data)
        self._from_app_bytes(data, b"")

    def _from_app_bytes(self, wire: bytes, payload: bytes) -> None:
        if self.tls:
            self.records += wire
            payload += self._unwrap()
        else:
            payload += wire
        if payload:
            self.to_dc += self.dc_stream.encrypt.update(self.app_stream.decrypt.update(payload))
            self._flush_to_dc()

    def _unwrap(self) -> bytes:
        payload = b""
        while len(self.records) >= 5:
            size = tls_record_length(self.records)
            if len(self.records) < 5 + size:
                break
            kind = self.records[0]
            if kind == TLS_APPLICATION_DATA:
                payload += self.records[5 : 5 + size]
            elif kind != TLS_CHANGE_CIPHER:
                raise OSError("a TLS record that is not application data")
            self.records = self.records[5 + size :]
        return payload

    def _dc_readable(self) -> None:
        data = _receive(self.dc)
        if data is None:
            return
        if not data:
            self._ending()
            return
        plain = self.app_stream.encrypt.update(self.dc_stream.decrypt.update(data))
        self.to_app += tls_records(plain) if self.tls else plain
        self._flush_to_app()

    def _flush_to_dc(self) -> None:
        self.to_dc = self.to_dc[_send(self.dc, self.to_dc) :]
        self._pace(self.to_dc, self.app_read, self._app_readable, self.dc_write, self._flush_to_dc)

    def _flush_to_app(self) -> None:
        sent = _send(self.app, self.to_app)
        self.tally[1] += sent
        self.to_app = self.to_app[sent:]
        self._pace(self.to_app, self.dc_read, self._dc_readable, self.app_write, self._flush_to_app)

    def _pace(self, pending: bytes, source, on_readable, sink, on_writable) -> None:
        """Read from the source while the sink takes everything; else wait for the sink."""
        if self.closed:
            return
        if pending:
            if source.active:
                source.stop()
            if not sink.active:
                sink.start(self._guarded, on_writable)
            return
        if sink.active:
            sink.stop()
        if self.closing:
            if not self.to_app and not self.to_dc:
                self.close()
            return
        if not source.active:
            source.start(self._guarded, on_readable)

    def _ending(self) -> None:
        """One side closed: deliver what is still on its way, then close both."""
        self.closing = True
        self.app_read.stop()
        self.dc_read.stop()
        if not self.to_app and not self.to_dc:
            self.close()


def _receive(sock: socket.socket) -> bytes | None:
    """What the socket has (b"" at its end), or None when it has nothing after all."""
    try:
        return sock.recv(CHUNK)
    except (BlockingIOError, InterruptedError):
        return None


def _send(sock: socket.socket, data: bytes) -> int:
    if not data:
        return 0
    try:
        return sock.send(data)
    except (BlockingIOError, InterruptedError):
        return 0
