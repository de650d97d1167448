"""A service on this machine that the panel must not reach: the target of the tests of the
egress guard.

It listens on every loopback spelling at once (a dual-stack socket on `::`, so
`127.0.0.1`, `::1`, `::ffff:127.0.0.1`, `0.0.0.0`, `localhost`, `2130706433`, `127.1`
all reach it), counts every connection it accepts, and answers an HTTP request with
`SECRET` in a JSON body shaped like a Bot API reply, the way an internal service's data
would look to a panel tricked into fetching it. A test that expects the guard to refuse
asserts that `connections` stayed 0: refused before any connection, not after one.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading

SECRET = "internal-secret-7f3a"
BODY = json.dumps({"ok": False, "leak": SECRET, "result": {"username": SECRET}}).encode()


class InternalService:
    def __init__(self) -> None:
        self.connections = 0
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.connection.settimeout(5)
                try:
                    while self.rfile.readline().strip():
                        pass
                    self.wfile.write(
                        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
                        + BODY
                    )
                except OSError:
                    pass

        class Server(socketserver.ThreadingTCPServer):
            address_family = socket.AF_INET6
            daemon_threads = True
            allow_reuse_address = True

            def server_bind(self) -> None:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                super().server_bind()

            def verify_request(self, request, client_address) -> bool:
                owner.connections += 1
                return True

        self.server = Server(("::", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# Every way of writing this machine's own address that the guard must see through.
LOOPBACK_SPELLINGS = (
    "127.0.0.1",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "2130706433",
    "0x7f000001",
    "127.1",
    "0.0.0.0",
    "localhost",
    "LocalHost",
)
# Internal addresses in their other forms; the test service cannot listen on these, so the
# refusal is told from the message alone.
OTHER_INTERNAL = {
    "[64:ff9b::7f00:1]": "loopback",
    "[2002:7f00:1::]": "loopback",
    "169.254.169.254": "metadata",
    "[fd00:ec2::254]": "metadata",
    "10.0.0.1": "private",
    "172.16.5.4": "private",
    "192.168.1.1": "private",
    "100.64.0.1": "carrier-grade NAT",
    "[fc00::1]": "unique-local",
    "[fe80::1]": "link-local",
    "224.0.0.1": "multicast",
    "[::]": "unspecified",
}
