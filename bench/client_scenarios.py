"""The clients scenarios: the paged list, its summary, single reads and writes, bulk
create, export, the inbound lists and memory, all at 100,000 clients (`clients_100k`).

The paged list embeds a summary that the server keeps up to date as clients change; a
page right after a change used to pay for recomputing it. Both are measured: "uncached"
figures make a harmless change (a client's counters written back with their own values)
before each timed request, outside the timing.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from urllib.parse import quote
from uuid import uuid4

import clients_dataset
import scenarios  # noqa: F401  (the first scenarios register, and so run, before these)
from clients_dataset import CLIENT_COUNT, DATASET_NAME, INBOUND_COUNT
from harness import BenchError, Client, Context, Panel, latency, log, scenario, with_target

from appliance.config import DB_FILE

DATASET = DATASET_NAME
PAGED = "/panel/api/clients/list/paged"
# name -> query string of a page of 25; "search" matches about 50 emails, "deep" is the
# 2,000th page of 25 (clients 49,976-50,000 by email).
PAGED_VARIANTS = {
    "first_page": "pageSize=25",
    "search": "pageSize=25&search=4242",
    "active_by_traffic": "pageSize=25&filter=active&sort=traffic&order=descend",
    "expiring": "pageSize=25&filter=expiring",
    "protocol_vless": "pageSize=25&protocol=vless",
    "deep_page": "pageSize=25&page=2000",
    # Search, filter and sort at once: a rare term, and a common one (a tenth of all).
    "search_active_by_traffic": "pageSize=25&search=4242&filter=active&sort=traffic&order=descend",
    "broad_search_active_by_expiry": "pageSize=25&search=alice&filter=active&sort=expiryTime",
}
PAGED_REQUESTS = 20
UNCACHED_REQUESTS = 3
GET_REQUESTS = 50
ADD_REQUESTS = 30
BULK_CREATE_COUNT = 10_000
STALL_WINDOW = 4.0
CORE_WAIT = 30.0
# The dataset's inbound kinds V2Ray 4.34 runs (see clients_change_stall).
CORE_KINDS = ("vless-ws", "vmess-ws")
CORE_PATTERNS = [f"%{kind}%" for kind in CORE_KINDS]
HEAVY_REQUESTS = 3
# The client whose counters the "uncached" figures write back to drop the summary cache.
TOUCHED = "hana.077777@mail.example.org"


class SummaryBuster:
    """A harmless change through the API: the client's own counters written back, which
    makes the panel drop its cached summary like any client change does."""

    def __init__(self, client: Client):
        self.client = client
        self.path = f"/panel/api/clients/updateTraffic/{quote(TOUCHED, safe='@')}"
        traffic = client.call("GET", f"/panel/api/clients/traffic/{quote(TOUCHED, safe='@')}")
        self.body = {"upload": traffic["up"], "download": traffic["down"]}

    def __call__(self) -> None:
        self.client.call("POST", self.path, self.body)


def _get(client: Client, path: str):
    return lambda: client.request("GET", path)


@scenario("clients_paged", dataset=DATASET)
def clients_paged(ctx: Context) -> dict:
    """GET /panel/api/clients/list/paged, pages of 25 at 100,000 clients: the first page,
    a search, active sorted by traffic, expiring, protocol=vless and page 2,000; each with
    the summary cached and uncached (a client change before every request)."""
    client = ctx.panel.client()
    bust = SummaryBuster(client)
    figures = {}
    for name, query in PAGED_VARIANTS.items():
        request = _get(client, f"{PAGED}?{query}")
        cached = latency(request, ctx.runs, PAGED_REQUESTS)
        obj = client.call("GET", f"{PAGED}?{query}")
        figures[name] = {
            **with_target(cached, "median_ms", 30, "ms"),
            "response_bytes": len(request().body),
            "filtered": obj["filtered"],
        }
        uncached = latency(request, ctx.runs, UNCACHED_REQUESTS, warmup=0, before=bust)
        figures[f"{name}_uncached"] = with_target(uncached, "median_ms", 30, "ms")
    return figures


@scenario("clients_summary", dataset=DATASET)
def clients_summary(ctx: Context) -> dict:
    """The summary's own cost at 100,000 clients: a page of one client with the summary
    uncached (a client change before every request) and cached; the difference is what
    building the summary costs. Its email lists are counted too, since every paged
    response carries them."""
    client = ctx.panel.client()
    bust = SummaryBuster(client)
    request = _get(client, f"{PAGED}?pageSize=1")
    uncached = latency(request, ctx.runs, UNCACHED_REQUESTS * 2, warmup=1, before=bust)
    cached = latency(request, ctx.runs, PAGED_REQUESTS)
    summary = client.call("GET", f"{PAGED}?pageSize=1")["summary"]
    return {
        "page_of_one_uncached": uncached,
        "page_of_one_cached": {**cached, "response_bytes": len(request().body)},
        "summary_only": {
            "median_ms": round(uncached["median_ms"] - cached["median_ms"], 3),
            "p99_ms": round(uncached["p99_ms"] - cached["p99_ms"], 3),
            "derived": "page_of_one_uncached minus page_of_one_cached",
            "emails_listed": {
                key: len(value) for key, value in summary.items() if isinstance(value, list)
            },
        },
    }


@scenario("clients_get", dataset=DATASET)
def clients_get(ctx: Context) -> dict:
    """GET /panel/api/clients/get/:email at 100,000 clients, over five emails in turn."""
    client = ctx.panel.client()
    paths = [
        f"/panel/api/clients/get/{quote(email, safe='@')}" for email in clients_dataset.SAMPLES
    ]
    turn = iter(range(10**9))
    figure = latency(
        lambda: client.request("GET", paths[next(turn) % len(paths)]), ctx.runs, GET_REQUESTS
    )
    return {"get": figure}


@scenario("clients_add", dataset=DATASET, mutates=True)
def clients_add(ctx: Context) -> dict:
    """POST /panel/api/clients/add of one new client (on one inbound, inbounds in turn)
    at 100,000 clients."""
    client = ctx.panel.client()
    made = iter(range(10**9))

    def add():
        n = next(made)
        payload = {
            "client": {"email": f"bench-add-{n}@example.com"},
            "inboundIds": [n % INBOUND_COUNT + 1],
        }
        return client.request("POST", "/panel/api/clients/add", payload)

    return {"add": with_target(latency(add, ctx.runs, ADD_REQUESTS), "median_ms", 10, "ms")}


@scenario("clients_bulk_create", dataset=None, mutates=True)
def clients_bulk_create(ctx: Context) -> dict:
    """POST /panel/api/clients/bulkCreate of 10,000 new clients on top of 100,000; one
    fresh panel per run, so every run starts from the same 100,000."""
    seconds = []
    for run in range(ctx.runs):
        (panel,) = ctx.start_panels([DATASET])
        ctx.bench.check(panel)
        client = panel.client()
        items = [
            {
                "client": {"email": f"bulk-{run}-{n:05d}@example.com"},
                "inboundIds": _spread(n),
            }
            for n in range(BULK_CREATE_COUNT)
        ]
        figure = latency(
            lambda items=items, client=client: client.request(
                "POST", "/panel/api/clients/bulkCreate", items
            ),
            1,
            1,
            warmup=0,
        )
        created = client.call("GET", f"{PAGED}?pageSize=1")["total"] - CLIENT_COUNT
        if created != BULK_CREATE_COUNT:
            log(f"clients_bulk_create: run {run} created {created} of {BULK_CREATE_COUNT}")
        seconds.append(figure["median_ms"] / 1000)
        client.close()
        panel.stop()
    return {
        "bulk_create": with_target(
            {
                "median_ms": round(statistics.median(seconds) * 1000, 3),
                "p99_ms": round(max(seconds) * 1000, 3),
                "median_s": round(statistics.median(seconds), 3),
                "runs": ctx.runs,
                "clients_per_request": BULK_CREATE_COUNT,
            },
            "median_s",
            5,
            "s",
        )
    }


def _spread(n: int) -> list[int]:
    """Inbound ids of bulk client `n`: one inbound in turn, a second one for one in
    eight, like the dataset."""
    first = n % INBOUND_COUNT + 1
    return [first, first % INBOUND_COUNT + 1] if n % 8 == 0 else [first]


@scenario("clients_export", dataset=DATASET)
def clients_export(ctx: Context) -> dict:
    """GET /panel/api/clients/export of all 100,000 clients."""
    client = ctx.panel.client()
    request = _get(client, "/panel/api/clients/export")
    figure = latency(request, ctx.runs, HEAVY_REQUESTS, warmup=1)
    figure["median_s"] = round(figure["median_ms"] / 1000, 3)
    figure["response_bytes"] = len(request().body)
    return {"export": with_target(figure, "median_s", 5, "s")}


@scenario("inbounds_list_slim_100k", dataset=DATASET)
def inbounds_list_slim_100k(ctx: Context) -> dict:
    """GET /panel/api/inbounds/list/slim with 100,000 clients attached to 20 inbounds,
    and the full /list for comparison."""
    client = ctx.panel.client()
    figures = {}
    for name, path in (("list_slim", "/list/slim"), ("list", "/list")):
        request = _get(client, f"/panel/api/inbounds{path}")
        figure = latency(request, ctx.runs, HEAVY_REQUESTS, warmup=1)
        figure["response_bytes"] = len(request().body)
        figures[name] = figure
    return figures


RSS_STEPS = (
    ("rss_after_paged_mb", f"{PAGED}?pageSize=25"),
    ("rss_after_list_slim_mb", "/panel/api/inbounds/list/slim"),
    ("rss_after_export_mb", "/panel/api/clients/export"),
)


@scenario("clients_change_stall", dataset=None)
def clients_change_stall(ctx: Context) -> dict:
    """What one client edit costs everyone else at 100,000 clients: the edit (a new UUID
    for a client the core runs) names the client to the core, and the sync that follows
    compares that client's entries with the running ones and changes the user live;
    config.json is rewritten once edits pause for 5 s, which the next run's window sees.
    A second connection sends GET /csrf-token (a route that does almost nothing) back to
    back for STALL_WINDOW seconds after each edit; its slowest reply is how long the panel
    answered nobody. The core on PATH must run the config, or nothing syncs
    (`core_panel`); `clients_in_core` says how many attachments it runs."""
    panel, in_core, emails = core_panel(ctx, DATASET)
    client = panel.client()
    edited = emails[0]
    path = quote(edited, safe="@")
    record = client.call("GET", f"/panel/api/clients/get/{path}")
    probe = panel.client()
    slowest, every = [], []
    for _ in range(ctx.runs):
        client.call("POST", f"/panel/api/clients/update/{path}", {**record, "id": str(uuid4())})
        replies = []
        end = time.perf_counter() + STALL_WINDOW
        while time.perf_counter() < end:
            start = time.perf_counter()
            probe.call("GET", "/csrf-token")
            replies.append((time.perf_counter() - start) * 1000)
        slowest.append(max(replies))
        every += replies
    probe.close()
    client.close()
    return {
        "stall": {
            "slowest_reply_ms": round(statistics.median(slowest), 1),
            "median_reply_ms": round(statistics.median(every), 3),
            "changes": ctx.runs,
            "window_s": STALL_WINDOW,
            "clients_in_core": in_core,
        }
    }


def core_panel(ctx: Context, dataset: str) -> tuple[Panel, int, list[str]]:
    """A panel on `dataset` whose core runs: the inbounds whose kind V2Ray 4.34 cannot run
    (REALITY, TLS with the dataset's missing certificate files, Hysteria, several
    Shadowsocks users) are disabled in its database before it starts, as an admin would
    have left them (the API tests every save with the core, and the core refuses any
    config that still holds one of them). Returns the panel, how many attachments the core
    runs, and the emails of the enabled clients it runs."""
    data_dir = ctx.bench.data_dir(dataset)
    kinds = " OR ".join("remark LIKE ?" for _ in CORE_KINDS)
    conn = sqlite3.connect(data_dir / DB_FILE)
    with conn:
        conn.execute(f"UPDATE inbound SET enable = 0 WHERE NOT ({kinds})", CORE_PATTERNS)
    conn.close()
    panel = Panel(data_dir, dataset)
    ctx.start(panel)
    client = panel.client()
    deadline = time.monotonic() + CORE_WAIT
    while (state := client.call("GET", "/panel/api/server/status")["core"]["state"]) != "running":
        if time.monotonic() > deadline:
            raise BenchError(f"the core did not run the config (state {state})")
        time.sleep(0.5)
    emails = [
        entry["email"]
        for inbound in client.call("GET", "/panel/api/server/getConfigJson")["inbounds"]
        for entry in (inbound.get("settings") or {}).get("clients") or []
    ]
    client.close()
    ctx.bench.check(panel)
    return panel, len(emails), list(dict.fromkeys(emails))


@scenario("clients_rss", dataset=None)
def clients_rss(ctx: Context) -> dict:
    """The panel's VmRSS with 100,000 clients: after start, after signing in and one
    paged request, after list/slim, after an export; and the peak (VmHWM). One panel
    per run, one after the other; medians."""
    readings: dict[str, list[float]] = {}
    for _ in range(ctx.runs):
        (panel,) = ctx.start_panels([DATASET])
        _read(readings, "rss_after_start_mb", panel)
        client = panel.client()
        for key, path in RSS_STEPS:
            client.call("GET", path)
            _read(readings, key, panel)
        readings.setdefault("rss_peak_mb", []).append(panel.rss_mb("VmHWM"))
        client.close()
        ctx.bench.check(panel)
        panel.stop()
    figure = {key: round(statistics.median(values), 1) for key, values in readings.items()}
    figure["panels"] = ctx.runs
    return {"rss": with_target(figure, "rss_after_export_mb", 150, "MiB")}


def _read(readings: dict[str, list[float]], key: str, panel: Panel) -> None:
    readings.setdefault(key, []).append(panel.rss_mb())
