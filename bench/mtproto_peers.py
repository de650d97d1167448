"""The two peers the MTProto bench needs beside the proxy, each a gevent process of its
own so that none of them competes with the bench's client for one interpreter:

- `sink BYTES`: a stand-in data centre that accepts any number of connections, reads
  and discards what arrives, and answers one byte once a connection delivered BYTES
  (the moment the bench's client stops its clock);
- `relay HOST:PORT`: a plain TCP relay to HOST:PORT, the same gevent server and copy loop
  as the proxy without the handshake and the ciphers: the figure the proxy's relay
  throughput is compared with.

Each prints the port it listens on as its first line.
"""

from __future__ import annotations

import sys

from gevent import monkey

monkey.patch_all()

import socket  # noqa: E402

import gevent  # noqa: E402
from gevent.server import StreamServer  # noqa: E402

CHUNK = 65536


def sink(target: int):
    def handle(sock, _address):
        seen = 0
        while True:
            data = sock.recv(CHUNK)
            if not data:
                return
            seen += len(data)
            if seen >= target > 0:
                sock.sendall(b"!")
                seen = -(1 << 62)

    return handle


def relay(host: str, port: int):
    def pipe(source, target):
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    return
                target.sendall(data)
        except OSError:
            return
        finally:
            target.close()

    def handle(sock, _address):
        upstream = socket.create_connection((host, port))
        back = gevent.spawn(pipe, upstream, sock)
        pipe(sock, upstream)
        back.join()

    return handle


def main() -> None:
    mode, argument = sys.argv[1], sys.argv[2]
    if mode == "sink":
        handler = sink(int(argument))
    else:
        host, _, port = argument.rpartition(":")
        handler = relay(host, int(port))
    server = StreamServer(("127.0.0.1", 0), handler, backlog=4096)
    server.start()
    print(server.address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
