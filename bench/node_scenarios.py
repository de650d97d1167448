"""One central panel driving ten nodes with 100,000 clients between them.

Every panel is a real `appliance run` process on loopback with its own data directory and
its own core (the first core on PATH), exactly as an admin would run a central panel and
ten servers on one machine; the central panel manages them through their API tokens. The
central panel binds one VLESS inbound to each node and then creates 10,000 clients on
each through `clients/bulkCreate`, which it deploys to the nodes in batches.

Figures, in one run:
- `deploy`: seconds from the first bulkCreate to every node holding its 10,000 clients.
- `poll_round`: the central panel's CPU per heartbeat-and-poll round with the nodes
  enabled, while 500 clients per node move traffic between rounds (the bench sets their
  counters on the nodes through `clients/updateTraffic`), against the same panel with
  every node disabled (no heartbeat, no poll), measured over the same window.
- `edit_to_node_core`: milliseconds from a client edit (a new UUID) on the central panel
  until the node's running config holds it.
- `during_polls`: the central panel's uncached paged client list (median and p99) and its
  subscription throughput (wrk) with the nodes polled, against the nodes disabled.
"""

from __future__ import annotations

import statistics
import time
from urllib.parse import quote, urlsplit
from uuid import uuid4

from edit_scenarios import cpu_seconds
from harness import BenchError, Client, Context, latency, log, scenario, throughput
from sub_scenarios import _sub_url

NODES = 10
CLIENTS_PER_NODE = 10_000
BULK = 5_000
FIRST_PORT = 45000
MOVED_PER_ROUND = 500
ROUND_SECONDS = 5  # the heartbeat and poll interval
WINDOW = 30.0
DEPLOY_TIMEOUT = 900
EDITS = 5
PAGES = 20
PAGED = "/panel/api/clients/list/paged"


@scenario("nodes", dataset=None)
def nodes(ctx: Context) -> dict:
    """A central panel and 10 nodes with 100,000 clients: deploy time, a poll round's CPU,
    a client edit's way to the node's core, and the central panel's pages and
    subscriptions while polls run, as ratios to the same panel with its nodes disabled."""
    panels = ctx.start_panels(["empty"] * (NODES + 1))
    central, workers = panels[0], panels[1:]
    api = central.client()
    node_apis = [worker.client() for worker in workers]
    node_ids, inbound_ids = _add_nodes(api, workers, node_apis)
    deploy_s = _deploy(api, node_apis, inbound_ids)
    emails = [f"n{n}-{i:05d}@bench" for n in range(NODES) for i in range(MOVED_PER_ROUND)]

    def move_traffic() -> None:
        for n, node_api in enumerate(node_apis):
            for i in range(MOVED_PER_ROUND):
                email = quote(f"n{n}-{i:05d}@bench", safe="@")
                node_api.call(
                    "POST", f"/panel/api/clients/updateTraffic/{email}", _traffic(time.time())
                )

    enabled_cpu = _cpu_window(central.pid, move_traffic)
    enabled_pages = _pages(api, ctx.runs)
    sub_url = _sub_url(central.lines) + "/sub/" + _sub_id(api, emails[0])
    # Once unmeasured: the load starts the subscription workers (on demand by default),
    # which then serve both measurements alike.
    throughput(sub_url, 1)
    enabled_subs = throughput(sub_url, ctx.runs)
    edit_ms = _edits(api, node_apis[0], emails[:EDITS])
    for node_id in node_ids:
        api.call("POST", f"/panel/api/nodes/setEnable/{node_id}", {"enable": False})
    disabled_cpu = _cpu_window(central.pid, move_traffic)
    disabled_pages = _pages(api, ctx.runs)
    disabled_subs = throughput(sub_url, ctx.runs)
    rounds = WINDOW / ROUND_SECONDS
    return {
        "deploy": {"seconds": round(deploy_s, 1), "clients": NODES * CLIENTS_PER_NODE},
        "poll_round": {
            "cpu_ms_per_round": round((enabled_cpu - disabled_cpu) * 1000 / rounds, 1),
            "cpu_ms_per_round_nodes_disabled": round(disabled_cpu * 1000 / rounds, 1),
            "cpu_share_polling": round(enabled_cpu / WINDOW, 4),
            "cpu_share_disabled": round(disabled_cpu / WINDOW, 4),
            "clients_moved_per_round": NODES * MOVED_PER_ROUND,
        },
        "edit_to_node_core": {
            "median_ms": round(statistics.median(edit_ms), 1),
            "p99_ms": round(max(edit_ms), 1),
            "edits": len(edit_ms),
        },
        "during_polls": {
            "paged_median_ms": enabled_pages["median_ms"],
            "paged_p99_ms": enabled_pages["p99_ms"],
            "paged_median_ratio_to_disabled": _ratio(
                enabled_pages["median_ms"], disabled_pages["median_ms"]
            ),
            "sub_rps": enabled_subs["rps"],
            "sub_rps_ratio_to_disabled": _ratio(enabled_subs["rps"], disabled_subs["rps"]),
        },
    }


def _add_nodes(api: Client, workers, node_apis) -> tuple[list[int], list[int]]:
    node_ids, inbound_ids = [], []
    for n, (worker, node_api) in enumerate(zip(workers, node_apis, strict=True)):
        token = node_api.call(
            "POST", "/panel/api/setting/apiTokens/create", {"name": "central", "scope": "node"}
        )["token"]
        parts = urlsplit(worker.url)
        node = api.call(
            "POST",
            "/panel/api/nodes/add",
            {
                "name": f"node-{n}",
                "scheme": "http",
                "address": "127.0.0.1",
                "port": parts.port,
                "basePath": parts.path or "/",
                "apiToken": token,
                "allowPrivateAddress": True,
            },
        )
        if node["status"] != "online":
            raise BenchError(f"node-{n} is {node['status']}: {node['lastError']}")
        inbound = api.call(
            "POST",
            "/panel/api/inbounds/add",
            {
                "remark": f"on node {n}",
                "protocol": "vless",
                "port": FIRST_PORT + n,
                "settings": {"decryption": "none"},
                "nodeId": node["id"],
            },
        )
        node_ids.append(node["id"])
        inbound_ids.append(inbound["id"])
    return node_ids, inbound_ids


def _deploy(api: Client, node_apis, inbound_ids: list[int]) -> float:
    started = time.monotonic()
    for n, inbound_id in enumerate(inbound_ids):
        for first in range(0, CLIENTS_PER_NODE, BULK):
            items = [
                {"client": {"email": f"n{n}-{i:05d}@bench"}, "inboundIds": [inbound_id]}
                for i in range(first, first + BULK)
            ]
            created = api.call("POST", "/panel/api/clients/bulkCreate", items)["created"]
            if created != BULK:
                raise BenchError(f"bulkCreate made {created} of {BULK} clients")
    for n, node_api in enumerate(node_apis):
        while node_api.call("GET", f"{PAGED}?pageSize=1")["total"] < CLIENTS_PER_NODE:
            if time.monotonic() - started > DEPLOY_TIMEOUT:
                raise BenchError(f"node-{n} did not get its clients in {DEPLOY_TIMEOUT} s")
            time.sleep(0.5)
    seconds = time.monotonic() - started
    log(f"nodes: {NODES * CLIENTS_PER_NODE} clients deployed in {seconds:.1f} s")
    return seconds


def _traffic(now: float) -> dict:
    """Counters that only grow, so every round moves each client's traffic."""
    step = int(now * 1000)
    return {"upload": step, "download": step * 2}


def _cpu_window(pid: int, between_rounds) -> float:
    """The central panel's CPU seconds over WINDOW, while `between_rounds` runs once per
    round (its own time outside the panel is not counted)."""
    start = cpu_seconds(pid)
    deadline = time.monotonic() + WINDOW
    while time.monotonic() < deadline:
        round_end = time.monotonic() + ROUND_SECONDS
        between_rounds()
        time.sleep(max(0.0, round_end - time.monotonic()))
    return cpu_seconds(pid) - start


def _pages(api: Client, runs: int) -> dict:
    """Uncached pages: each asks for another search, so no cached answer serves it."""
    counter = iter(range(1_000_000))

    def request():
        return api.request("GET", f"{PAGED}?pageSize=25&search=n{next(counter) % NODES}-0")

    return latency(request, runs, PAGES)


def _sub_id(api: Client, email: str) -> str:
    return api.call("GET", f"/panel/api/clients/get/{quote(email, safe='@')}")["client"]["subId"]


def _edits(api: Client, node_api: Client, emails: list[str]) -> list[float]:
    """Per edit: a new UUID on the central panel, then the node's config read until its
    running core holds it (getConfigJson writes what the core runs)."""
    times = []
    for email in emails:
        path = quote(email, safe="@")
        record = api.call("GET", f"/panel/api/clients/get/{path}")["client"]
        record["id"] = str(uuid4())
        started = time.monotonic()
        api.call("POST", f"/panel/api/clients/update/{path}", record)
        while (
            record["id"]
            not in node_api.request("GET", "/panel/api/server/getConfigJson").body.decode()
        ):
            if time.monotonic() - started > 30:
                raise BenchError(f"the node's core did not take the edit of {email} in 30 s")
            time.sleep(0.02)
        times.append((time.monotonic() - started) * 1000)
    return times


def _ratio(value: float, base: float) -> float | None:
    return round(value / base, 3) if base else None
