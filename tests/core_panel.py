"""A panel on the real core with a template of the test's making, and a small HTTP server.

The probe, routing and metrics tests each start one panel on Debian's V2Ray 4.34 and change
its core template through `core/update`, the way a user edits it; the core restarts on the
new config. `http_server` serves fixed answers per path on loopback: the probe URL that
outbound tests fetch, and the metrics document an Xray core would serve.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from core_helpers import V2RAY
from helpers import ok
from panels import PanelServer, start_panel

CORE_ENV = {"APPLIANCE_CORE": V2RAY}
WAIT = 15


def wait_until(condition, what: str, timeout: float = WAIT, step: float = 0.1):
    """Poll `condition` every `step` seconds until it returns something truthy; fail with
    `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"not within {timeout} s: {what}")


def loopback_template(api) -> dict:
    """The default core template minus its rules that send private addresses (127.0.0.1
    among them) to the blackhole: these tests talk to servers on loopback."""
    template = ok(api.get("/panel/api/core/getDefaultJsonConfig"))
    rules = template["routing"]["rules"]
    template["routing"]["rules"] = [rule for rule in rules if "ip" not in rule]
    return template


def use_template(api, template: dict, **fields: str) -> dict:
    """Save `template` (plus other core/update fields) and wait until the core runs it."""
    ok(api.post("/panel/api/core/update", {"coreSetting": json.dumps(template), **fields}))

    def running() -> dict | None:
        config = ok(api.get("/panel/api/server/getConfigJson"))
        status = ok(api.get("/panel/api/server/status"))["core"]["state"]
        outbounds = [o.get("tag") for o in config.get("outbounds", [])]
        wanted = [o.get("tag") for o in template.get("outbounds", [])]
        return config if status == "running" and outbounds == wanted else None

    return wait_until(running, "the core runs the new template")


def core_panel(tmp_path) -> PanelServer:
    """A panel on the real core, running the loopback template."""
    server = start_panel(tmp_path, env=CORE_ENV)
    api = server.client()
    use_template(api, loopback_template(api))
    return server


@contextlib.contextmanager
def http_server(answers: dict[str, tuple[int, bytes]]) -> Iterator[tuple[int, list[str]]]:
    """A loopback HTTP server answering GET `path` with `answers[path]` (status, body), 404
    otherwise; yields its port and the list of paths requested so far."""
    requested: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requested.append(self.path)
            status, body = answers.get(self.path, (404, b"not here"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            """Quiet: the test output is for assertions."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
