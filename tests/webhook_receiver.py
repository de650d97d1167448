"""A webhook receiver on loopback for the tests: records every request it is sent (body
and headers), answers a chosen status, and can be stopped and started again on its port,
as an integrator's service that goes down for a while and comes back."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from helpers import free_port


class Receiver:
    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        # (headers, body, the status answered) of every request, in arrival order.
        self.requests: list[tuple[dict, bytes, int]] = []
        self.status = 200
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    status = receiver.status
                    receiver.requests.append((dict(self.headers), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def events(self) -> list[dict]:
        """Every event accepted (answered 2xx), batches unpacked, in arrival order."""
        found = []
        with self._lock:
            requests = [(body, status) for _, body, status in self.requests]
        for body, status in requests:
            if not 200 <= status < 300:
                continue
            value = json.loads(body)
            found += value if isinstance(value, list) else [value]
        return found

    def wait_for(self, count: int, timeout: float = 30, event: str | None = None) -> list[dict]:
        """The events received once at least `count` distinct ones (of `event`, if named) have
        come: delivery is at least once, so a repeat must not stand in for one still on its way."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = [e for e in self.events() if event is None or e["event"] == event]
            if len({e["id"] for e in found}) >= count:
                return found
            time.sleep(0.1)
        raise AssertionError(f"{len(found)} events of {count} arrived: {found[-3:]}")


def verified(secret: str, headers: dict, body: bytes, tolerance: int = 300) -> bool:
    """The README's recipe: HMAC-SHA256 of "<timestamp>.<body>" under the secret, compared
    in constant time, with a timestamp no older than `tolerance` seconds."""
    timestamp = headers["X-Webhook-Timestamp"]
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return (
        hmac.compare_digest("sha256=" + expected.hexdigest(), headers["X-Webhook-Signature"])
        and abs(time.time() - int(timestamp)) <= tolerance
    )
