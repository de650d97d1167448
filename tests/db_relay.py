"""A TCP relay on loopback between a panel and its database server, which a test cuts and
resumes: the database going away under a running panel, and coming back, without
stopping the server every other test of the run shares."""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading


class Relay:
    """Forwards loopback connections on `port` to `target`; `cut()` closes every open
    connection and stops listening, `resume()` listens again on the same port."""

    def __init__(self, target: tuple[str, int], port: int):
        self.target, self.port = target, port
        self.listener: socket.socket | None = None
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.turn_away = 0  # connections to close at once, before relaying any

    def resume(self) -> Relay:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def cut(self) -> None:
        with self.lock:
            listener, self.listener = self.listener, None
            sockets, self.sockets = self.sockets, []
        if listener is not None:
            # shutdown() wakes the accept() blocked in the relay's thread; close() alone
            # would leave the port accepting until that call returned.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.turn_away:
                self.turn_away -= 1
                # A reset, as from a server that is not there yet.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            server = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def via(url: str, port: int) -> str:
    """`url` pointed at the relay's port."""
    return re.sub(r"@127\.0\.0\.1:\d+/", f"@127.0.0.1:{port}/", url)
