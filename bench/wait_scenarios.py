"""Does anybody wait behind anybody? Light requests measured while the panel works.

`never_wait`, at 100,000 clients: a prober in a process of its own fetches a subscription
and `GET /csrf-token` back to back on two keep-alive connections, the whole time, while
the bench makes the panel work, one task after the other: an idle spell, 20 paged lists
each right after a client change (`paged_uncached`), an export of every client, a bulk
create of 10,000 and one client edit whose core sync follows (`edit_sync`, a window of
`SYNC_WINDOW` seconds after the edit). Each reply of the prober is stamped with the
wall-clock moment it was sent; the figures of a task are those of the replies sent during
it: p50, p99 and the slowest, next to the idle spell's. The bulk create's window goes on
for `SYNC_WINDOW` seconds after its answer, for the core sync it causes. The prober is a
process rather than a thread so that the bench's own work (encoding 10,000 clients,
reading an export) never holds it up.

Also reported: the bytes of a page of 25 with the summary and without it (the
`summaryVersion` of the page before sent back), and the uncached pages' own latency.
"""

from __future__ import annotations

import http.client
import multiprocessing
import sqlite3
import statistics
import time
from urllib.parse import quote, urlsplit
from uuid import uuid4

from client_scenarios import BULK_CREATE_COUNT, CORE_KINDS, CORE_WAIT, DATASET, PAGED, SummaryBuster
from harness import Client, Context, Panel, expect_success, percentile, scenario
from sub_scenarios import _sub_url

from appliance.config import DB_FILE

IDLE_WINDOW = 3.0
PAGED_COUNT = 20
SYNC_WINDOW = 4.0
SUB_IDS = 200  # subscriptions the prober asks for in turn
LIGHT_P99_TARGET_MS = 25
FIRST_PAGE_TARGET_MS = 60
PAGE_BYTES_TARGET = 50_000


@scenario("never_wait", dataset=None, mutates=True)
def never_wait(ctx: Context) -> dict:
    """Subscriptions and /csrf-token on one side, back to back, while the panel pages
    uncached lists, exports 100,000 clients, bulk-creates 10,000 and syncs one client
    edit into the core: p50, p99 and the slowest light reply during each, next to the
    idle figures; page bytes with and without the summary."""
    panel = _panel_with_core(ctx)
    client = panel.client()
    in_core, edited, core_note = _core_clients(client)
    sub_ids = _sub_ids(client)
    client.call("GET", f"{PAGED}?pageSize=25")  # the summary's first reading, untimed
    bytes_figure = _page_bytes(client)

    stop = multiprocessing.Event()
    results = multiprocessing.Queue()
    prober = multiprocessing.Process(
        target=_probe,
        args=(panel.url, client.cookie_header(), _sub_url(panel.lines), sub_ids),
        kwargs={"stop": stop, "results": results},
        daemon=True,
    )
    prober.start()
    windows: list[tuple[str, float, float]] = []
    work: dict[str, dict] = {}
    pages: list[float] = []
    try:
        time.sleep(0.5)  # the prober's connections are open
        for run in range(ctx.runs):
            _window(windows, "idle", lambda: time.sleep(IDLE_WINDOW))
            bust = SummaryBuster(client)

            def paged(bust=bust) -> None:
                for _ in range(PAGED_COUNT):
                    bust()
                    start = time.perf_counter()
                    expect_success(client.request("GET", f"{PAGED}?pageSize=25"))
                    pages.append((time.perf_counter() - start) * 1000)

            _timed(work, "paged_uncached", _window(windows, "paged_uncached", paged))
            export = _window(
                windows, "export", lambda: client.request("GET", "/panel/api/clients/export")
            )
            _timed(work, "export", export)
            items = [
                {"client": {"email": f"wait-{run}-{n:05d}@example.com"}, "inboundIds": [1 + n % 20]}
                for n in range(BULK_CREATE_COUNT)
            ]

            def bulk(items=items) -> None:
                started = time.perf_counter()
                expect_success(client.request("POST", "/panel/api/clients/bulkCreate", items))
                _timed(work, "bulk_create", time.perf_counter() - started)
                time.sleep(SYNC_WINDOW)  # the core sync that follows

            _window(windows, "bulk_create", bulk)
            if edited:
                path = f"/panel/api/clients/update/{quote(edited, safe='@')}"
                record = client.call("GET", f"/panel/api/clients/get/{quote(edited, safe='@')}")

                def edit(path=path, record=record) -> None:
                    client.call("POST", path, {**record, "id": str(uuid4())})
                    time.sleep(SYNC_WINDOW)

                _window(windows, "edit_sync", edit)
    finally:
        stop.set()
        samples = results.get(timeout=60)
        prober.join(timeout=10)
        client.close()

    figures: dict = {}
    for name in ("idle", "paged_uncached", "export", "bulk_create", "edit_sync"):
        figure = _light(samples, [(start, end) for kind, start, end in windows if kind == name])
        if figure is None:
            continue
        if name != "idle":
            figure["target"] = f"light p99 < {LIGHT_P99_TARGET_MS} ms"
            figure["met"] = figure["light_p99_ms"] < LIGHT_P99_TARGET_MS
        figure.update(work.get(name, {}))
        figures[name] = figure
    if "edit_sync" in figures:
        figures["edit_sync"]["clients_in_core"] = in_core
        figures["edit_sync"]["window_s"] = SYNC_WINDOW
    elif core_note:
        figures["edit_sync"] = {"skipped": core_note}
    figures["uncached_page"] = {
        "median_ms": round(statistics.median(pages), 1),
        "p99_ms": round(percentile(pages, 99), 1),
        "slowest_ms": round(max(pages), 1),
        "pages": len(pages),
        "target": f"median < {FIRST_PAGE_TARGET_MS} ms",
        "met": statistics.median(pages) < FIRST_PAGE_TARGET_MS,
    }
    figures["page_bytes"] = bytes_figure
    return figures


def _panel_with_core(ctx: Context) -> Panel:
    """A panel on clients_100k whose core runs: the inbounds V2Ray 4.34 cannot run
    (REALITY, TLS with the dataset's absent certificate files, Hysteria, several
    Shadowsocks users) are disabled in its copy of the database before it starts, since
    the panel refuses any change while the core would refuse the config."""
    data_dir = ctx.bench.data_dir(DATASET)
    conn = sqlite3.connect(data_dir / DB_FILE)
    with conn:
        runnable = " AND ".join("remark NOT LIKE ?" for _ in CORE_KINDS)
        conn.execute(
            f"UPDATE inbound SET enable = 0 WHERE {runnable}", [f"%{k}%" for k in CORE_KINDS]
        )
    conn.close()
    panel = ctx.start(Panel(data_dir, DATASET))
    ctx.bench.check(panel)
    return panel


def _core_clients(client: Client) -> tuple[int, str | None, str]:
    """How many attachments the core runs, the email of an enabled client on them, and
    why the core does not run ("" when it does)."""
    deadline = time.monotonic() + CORE_WAIT
    while (state := client.call("GET", "/panel/api/server/status")["core"]["state"]) != "running":
        if time.monotonic() > deadline:
            return 0, None, f"the core did not run the config (state {state})"
        time.sleep(0.5)
    time.sleep(SYNC_WINDOW)  # the start's own sync
    in_core, edited = 0, None
    for inbound in client.call("GET", "/panel/api/inbounds/list/slim"):
        if inbound["enable"]:
            clients = inbound["settings"].get("clients") or []
            in_core += len(clients)
            edited = edited or next((c["email"] for c in clients if c["enable"]), None)
    return in_core, edited, ""


def _sub_ids(client: Client) -> list[str]:
    """SubIds of enabled clients on inbounds that are enabled (their subscriptions have
    links to render)."""
    enabled = [i["id"] for i in client.call("GET", "/panel/api/inbounds/list/slim") if i["enable"]]
    query = f"{PAGED}?pageSize={SUB_IDS}&filter=active&inboundId={enabled[0]}"
    return [item["subId"] for item in client.call("GET", query)["items"]]


def _page_bytes(client: Client) -> dict:
    """A page of 25 as the first page (with the summary) and as the next ones (the
    version sent back, no summary)."""
    full = client.request("GET", f"{PAGED}?pageSize=25")
    # A panel from before summaryVersion sends none, and every page is a first page.
    version = expect_success(full)["obj"].get("summaryVersion", "")
    slim = client.request("GET", f"{PAGED}?pageSize=25&page=2&summaryVersion={version}")
    expect_success(slim)
    return {
        "with_summary": len(full.body),
        "without_summary": len(slim.body),
        "target": f"without_summary < {PAGE_BYTES_TARGET} bytes",
        "met": len(slim.body) < PAGE_BYTES_TARGET,
    }


def _window(windows: list, name: str, task) -> float:
    """Run `task`, noting the wall-clock span it took under `name`; returns seconds."""
    start = time.time()
    task()
    end = time.time()
    windows.append((name, start, end))
    return end - start


def _timed(work: dict, name: str, seconds: float) -> None:
    work.setdefault(name, {"task_s": []})["task_s"].append(round(seconds, 2))


def _light(samples: list[tuple[float, str, float]], spans: list[tuple[float, float]]):
    """p50, p99 and slowest of the replies sent within `spans`, all and per kind."""
    inside = [(kind, ms) for sent, kind, ms in samples if any(a <= sent <= b for a, b in spans)]
    every = [ms for kind, ms in inside if kind != "failed"]
    if not every:
        return None
    figure = {
        "light_p50_ms": round(statistics.median(every), 2),
        "light_p99_ms": round(percentile(every, 99), 2),
        "light_slowest_ms": round(max(every), 1),
        "replies": len(every),
        "failed": len(inside) - len(every),
    }
    for kind in ("sub", "csrf"):
        values = [ms for k, ms in inside if k == kind]
        if values:
            figure[f"{kind}_p99_ms"] = round(percentile(values, 99), 2)
            figure[f"{kind}_slowest_ms"] = round(max(values), 1)
    return figure


def _probe(panel_url: str, cookies: dict, sub_url: str, sub_ids: list[str], *, stop, results):
    """The prober's process: a subscription, then /csrf-token, until told to stop; sends
    back (sent at, kind, milliseconds) per reply; a reply other than 200 is "failed"."""
    panel = urlsplit(panel_url)
    sub = urlsplit(sub_url)
    panel_conn = http.client.HTTPConnection(panel.hostname, panel.port, timeout=60)
    sub_conn = http.client.HTTPConnection(sub.hostname, sub.port, timeout=60)
    csrf_path = panel.path.rstrip("/") + "/csrf-token"
    samples: list[tuple[float, str, float]] = []
    turn = 0
    while not stop.is_set():
        for kind, conn, path, headers in (
            ("sub", sub_conn, f"/sub/{sub_ids[turn % len(sub_ids)]}", {}),
            ("csrf", panel_conn, csrf_path, cookies),
        ):
            sent = time.time()
            start = time.perf_counter()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            ms = (time.perf_counter() - start) * 1000
            samples.append((sent, kind if response.status == 200 else "failed", ms))
        turn += 1
    results.put(samples)
