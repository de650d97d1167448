"""What webhooks cost the panel's other requests, and how fast they are delivered.

A bulk create of 10,000 clients writes 10,000 `client.created` events to the outbox in
its own transaction, and the deliverer then sends them to a receiver on loopback (a
process of its own, answering 200 and counting what arrives). While that happens, a
probe fetches a page of the client list and one subscription back to back; the same
bulk create with the endpoint disabled, in the same run and for as long, is the
reference. Figures: the probe's p50/p99 with and without webhooks and their ratio
(target: p99 within 1.2x), how long the bulk call took each way, and deliveries per
second, in batches of 100 and one event per request.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time

from harness import BenchError, Child, Client, Context, percentile, scenario
from heavy_scenarios import _heavy
from sub_scenarios import _sub_url

BULK_COUNT = 10_000
SINGLE_COUNT = 1_000
DELIVERY_TIMEOUT = 300
SETTLE_SECONDS = 5
RECEIVER_POLL_SECONDS = 0.05
PAGE = "/panel/api/clients/list/paged?page=1&pageSize=25"
HOOKS = "/panel/api/webhooks"

# The receiver: answers 200 to every POST and counts the events (each has one "event"
# key; counted in the bytes, not parsed: on this one host the receiver's CPU is taken
# from the panel's, where a real one runs elsewhere); GET answers the count and the
# times of the first and last arrival.
RECEIVER = """
import json, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
state = {"events": 0, "requests": 0, "first": 0.0, "last": 0.0}
lock = threading.Lock()
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with lock:
            now = time.time()
            state["first"] = state["first"] or now
            state["last"] = now
            state["events"] += body.count(b'"event":"')
            state["requests"] += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_GET(self):
        with lock:
            data = json.dumps(state).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"receiver listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
server.serve_forever()
"""


def _inbound() -> dict:
    """A plain VLESS inbound on a port nothing holds."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return {
        "protocol": "vless",
        "port": port,
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "none"},
    }


def _probe(panel_client: Client, sub_client: Client, sub_path: str, busy) -> list[float]:
    """A page of clients and a subscription, back to back, while `busy()`."""
    times = []
    while busy():
        for client, path in ((panel_client, PAGE), (sub_client, sub_path)):
            start = time.perf_counter()
            reply = client.request("GET", path)
            times.append(time.perf_counter() - start)
            if reply.status != 200:
                raise BenchError(f"{path} answered HTTP {reply.status}")
    return times


def _received(receiver: Child) -> dict:
    probe = Client(receiver.url)
    try:
        return probe.request("GET", "/").json()
    finally:
        probe.close()


def _bulk(admin: Client, ctx: Context, tag: str, count: int) -> subprocess.Popen:
    items = [
        {"client": {"email": f"hook-{tag}-{n:05d}@example.com"}, "inboundIds": [1]}
        for n in range(count)
    ]
    body_path = ctx.bench.workdir / f"webhook-bulk-{tag}.json"
    body_path.write_text(json.dumps(items))
    return _heavy(admin, ctx.panel.url + "/panel/api/clients/bulkCreate", "POST", str(body_path))


def _finished(process: subprocess.Popen, what: str) -> float:
    outcome = json.loads(process.communicate()[0])
    if not outcome["ok"]:
        raise BenchError(f"{what} failed: {outcome['head']}")
    return outcome["seconds"]


def _figure(times: list[float]) -> dict:
    return {
        "p50_ms": round(statistics.median(times) * 1000, 3),
        "p99_ms": round(percentile(times, 99) * 1000, 3),
        "slowest_ms": round(max(times) * 1000, 3),
        "requests": len(times),
    }


@scenario("webhooks", dataset="empty", mutates=True)
def webhooks(ctx: Context) -> dict:
    """A page of clients and a subscription, probed during a bulk create of 10,000
    clients delivered as webhooks to a loopback receiver (batches of 100) and during the
    same bulk create with the endpoint disabled; p99 ratio target 1.2x. Deliveries per
    second in batches and one per request."""
    receiver = ctx.start(Child("receiver", [sys.executable, "-c", RECEIVER]))
    admin, probe = ctx.panel.client(), ctx.panel.client()
    sub_client = Client(_sub_url(ctx.panel.lines))
    admin.call("POST", "/panel/api/inbounds/add", _inbound())
    first = admin.call(
        "POST", "/panel/api/clients/add", {"client": {"email": "probe@x"}, "inboundIds": [1]}
    )
    sub_path = f"/sub/{first['subId']}"
    endpoint = {
        "name": "bench",
        "url": receiver.url + "/hook",
        "secret": "bench-secret-0123456789",
        "allowPrivate": True,
        "batch": True,
        "events": ["client.created"],
        "enabled": False,
    }
    hook = admin.call("POST", f"{HOOKS}/add", endpoint)
    samples: dict[str, list[float]] = {"without": [], "with": []}
    bulk_seconds: dict[str, list[float]] = {"without": [], "with": []}
    rates: list[float] = []
    expected = 0
    for run in range(ctx.runs):
        # With webhooks first: the window it needs (bulk call, then delivery) is the
        # window the reference is probed for.
        admin.call("POST", f"{HOOKS}/update/{hook['id']}", {**endpoint, "enabled": True})
        start, wall_start = time.perf_counter(), time.time()
        process = _bulk(admin, ctx, f"with-{run}", BULK_COUNT)
        expected += BULK_COUNT
        deadline = time.monotonic() + DELIVERY_TIMEOUT

        asked = [0.0]

        def delivering(p=process, want=expected, until=deadline, asked=asked) -> bool:
            now = time.monotonic()
            if now > until:
                raise BenchError("the webhooks were not all delivered in time")
            if p.poll() is None or now - asked[0] < RECEIVER_POLL_SECONDS:
                return True
            # Asked seldom: the probe's loop is the same in both windows, but for this.
            asked[0] = now
            return _received(receiver)["events"] < want

        samples["with"] += _probe(probe, sub_client, sub_path, delivering)
        window = time.perf_counter() - start
        bulk_seconds["with"].append(_finished(process, "bulk create with webhooks"))
        state = _received(receiver)
        # From the bulk call's answer (its commit: nothing is sent before) to the last
        # arrival.
        committed = wall_start + bulk_seconds["with"][-1]
        rates.append(BULK_COUNT / max(state["last"] - committed, 1e-3))
        receiver_reset = state["events"]
        time.sleep(SETTLE_SECONDS)
        admin.call("POST", f"{HOOKS}/update/{hook['id']}", {**endpoint, "enabled": False})
        start = time.perf_counter()
        process = _bulk(admin, ctx, f"without-{run}", BULK_COUNT)
        end = start + window
        samples["without"] += _probe(
            probe,
            sub_client,
            sub_path,
            lambda p=process, e=end: p.poll() is None or time.perf_counter() < e,
        )
        bulk_seconds["without"].append(_finished(process, "bulk create without webhooks"))
        if _received(receiver)["events"] != receiver_reset:
            raise BenchError("a disabled endpoint was sent events")
        time.sleep(SETTLE_SECONDS)
    single = _single_rate(admin, ctx, receiver, endpoint, hook["id"], expected)
    with_webhooks, without = _figure(samples["with"]), _figure(samples["without"])
    ratio = with_webhooks["p99_ms"] / without["p99_ms"]
    for client in (admin, probe, sub_client):
        client.close()
    return {
        "probe_with_webhooks": with_webhooks,
        "probe_without_webhooks": without,
        "p99_ratio": {"value": round(ratio, 3), "target": "<= 1.2", "met": ratio <= 1.2},
        "bulk_create_s": {k: round(statistics.median(v), 3) for k, v in bulk_seconds.items()},
        "deliveries_per_second_batched": round(statistics.median(rates), 1),
        "deliveries_per_second_single": round(single, 1),
    }


def _single_rate(
    admin: Client, ctx: Context, receiver: Child, endpoint: dict, hook_id: int, before: int
) -> float:
    """Deliveries per second to an endpoint that takes one event per request."""
    admin.call("POST", f"{HOOKS}/update/{hook_id}", {**endpoint, "enabled": True, "batch": False})
    _finished(_bulk(admin, ctx, "single", SINGLE_COUNT), "bulk create, single deliveries")
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    start = time.time()
    while _received(receiver)["events"] < before + SINGLE_COUNT:
        if time.monotonic() > deadline:
            raise BenchError("the single deliveries did not all arrive in time")
        time.sleep(0.05)
    return SINGLE_COUNT / max(_received(receiver)["last"] - start, 1e-3)
