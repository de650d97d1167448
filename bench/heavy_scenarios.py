"""How long the heavy admin requests keep everyone else waiting, at 100,000 clients.

While one connection exports every client or bulk-creates 10,000, a second one sends
`GET /csrf-token` (a route that does almost nothing) and a third fetches one
subscription on the subscription port, back to back, until the heavy request has been
answered. Their p50, p99 and slowest reply say how long the one process answered
nobody; the same probe on the idle panel, in the same run, is the reference.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import clients_dataset
from harness import BenchError, Client, Context, percentile, scenario, with_target
from sub_scenarios import _sub_url

DATASET = clients_dataset.DATASET_NAME
IDLE_PROBE_SECONDS = 2.0
# A panel just started on 100,000 clients builds and syncs the core's config, and so it
# does after a bulk create: the idle reference and each heavy request start once that
# is over.
SETTLE_SECONDS = 15
BULK_COUNT = 10_000
ACTIVE = "/panel/api/clients/list/paged?filter=active&pageSize=50"
BULK_CREATE = "/panel/api/clients/bulkCreate"
EXPORT = "/panel/api/clients/export"


def _served_subscription(admin: Client, sub_client: Client) -> str:
    """The path of an active client's subscription that the server serves (rendered
    once here, so the probe measures waiting rather than rendering)."""
    for row in admin.call("GET", ACTIVE)["items"]:
        path = f"/sub/{row['subId']}"
        if sub_client.request("GET", path).status == 200:
            return path
    raise BenchError("no active client of the first page has a subscription served")


def _probe(panel_client: Client, sub_client: Client, sub_path: str, busy) -> dict:
    """Light requests back to back, alternating panel and subscription, while `busy()`."""
    panel_times, sub_times = [], []
    while busy():
        start = time.perf_counter()
        reply = panel_client.request("GET", "/csrf-token")
        panel_times.append(time.perf_counter() - start)
        if reply.status != 200:
            raise BenchError(f"/csrf-token answered HTTP {reply.status}")
        start = time.perf_counter()
        reply = sub_client.request("GET", sub_path)
        sub_times.append(time.perf_counter() - start)
        if reply.status != 200:
            raise BenchError(f"{sub_path} answered HTTP {reply.status}")
    return {"csrf_token": panel_times, "subscription": sub_times}


# The heavy request runs in a process of its own: encoding 10,000 items or parsing a
# 55 MB export in a thread of this one would hold its GIL and stall the probe itself.
HEAVY = """
import http.client, json, sys, time
from urllib.parse import urlsplit
url, method, headers, body_path = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
body = open(body_path, "rb").read() if body_path else None
parts = urlsplit(url)
connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
start = time.perf_counter()
connection.request(method, parts.path, body=body, headers=headers)
reply = connection.getresponse()
data = reply.read()
seconds = time.perf_counter() - start
ok = reply.status == 200 and data.startswith(b'{"success": true')
print(json.dumps({"ok": ok, "seconds": seconds, "head": data[:200].decode(errors="replace")}))
"""


def _heavy(client: Client, url: str, method: str, body_path: str = "") -> subprocess.Popen:
    headers = {**client.headers, **client.cookie_header(), "Content-Type": "application/json"}
    argv = [sys.executable, "-c", HEAVY, url, method, json.dumps(headers), body_path]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def _figure(times: list[float]) -> dict:
    return {
        "p50_ms": round(statistics.median(times) * 1000, 3),
        "p99_ms": round(percentile(times, 99) * 1000, 3),
        "slowest_ms": round(max(times) * 1000, 3),
        "requests": len(times),
    }


@scenario("heavy_stall", dataset=DATASET, mutates=True)
def heavy_stall(ctx: Context) -> dict:
    """Light requests (panel `/csrf-token`, one cached subscription) during an export of
    100,000 clients and during a bulk create of 10,000, `runs` times each, next to the
    same probe on the idle panel; p99 target 25 ms."""
    panel = ctx.panel
    admin = panel.client()
    probe = panel.client()
    sub_client = Client(_sub_url(panel.lines))
    sub_path = _served_subscription(admin, sub_client)
    time.sleep(SETTLE_SECONDS)
    end = time.perf_counter() + IDLE_PROBE_SECONDS
    samples = {"idle": _probe(probe, sub_client, sub_path, lambda: time.perf_counter() < end)}
    heavy_seconds: dict[str, list[float]] = {"export": [], "bulk_create": []}
    for run in range(ctx.runs):
        items = [
            {"client": {"email": f"stall-{run}-{n:05d}@example.com"}, "inboundIds": [n % 20 + 1]}
            for n in range(BULK_COUNT)
        ]
        body_path = ctx.bench.workdir / f"bulk-{run}.json"
        body_path.write_text(json.dumps(items))
        heavies = {
            "export": ("GET", EXPORT, ""),
            "bulk_create": ("POST", BULK_CREATE, str(body_path)),
        }
        for name, (method, path, body) in heavies.items():
            process = _heavy(admin, panel.url + path, method, body)
            seen = _probe(probe, sub_client, sub_path, lambda p=process: p.poll() is None)
            outcome = json.loads(process.communicate()[0])
            if not outcome["ok"]:
                raise BenchError(f"{name} failed: {outcome['head']}")
            heavy_seconds[name].append(outcome["seconds"])
            for kind, times in seen.items():
                samples.setdefault(name, {}).setdefault(kind, []).extend(times)
            # A bulk create is followed by the core's sync of the new clients: each
            # figure is of its own heavy request, not of what the one before left.
            time.sleep(SETTLE_SECONDS)
    figures = {}
    for during, kinds in samples.items():
        for kind, times in kinds.items():
            figure = _figure(times)
            if during in heavy_seconds:
                figure["heavy_request_s"] = round(statistics.median(heavy_seconds[during]), 3)
            figures[f"{kind}_{during}"] = with_target(figure, "p99_ms", 25, "ms")
    for client in (admin, probe, sub_client):
        client.close()
    return figures
