"""The first scenarios: the hello-world ceiling, sign-in, the inbound list, status, and
idle memory. Each returns figures; targets from the performance issue are noted next to
the figure they concern (`with_target`), never asserted.
"""

from __future__ import annotations

import statistics
import time

from harness import (
    Client,
    Context,
    HelloServer,
    latency,
    scenario,
    throughput,
    with_target,
)

HELLO_REQUESTS = 1000
LOGIN_REQUESTS = 30
LIST_REQUESTS = 30
STATUS_REQUESTS = 300
IDLE_SECONDS = 10


@scenario("hello", dataset=None)
def hello(ctx: Context) -> dict:
    """The ceiling: a one-route Bottle app on the panel's own server stack
    (bench/hello_server.py). Latency on one keep-alive connection; throughput with
    concurrent connections. Other scenarios' ratios divide by these figures."""
    server = ctx.start(HelloServer())
    client = Client(server.url)
    return {
        "latency": latency(lambda: client.request("GET", "/hello"), ctx.runs, HELLO_REQUESTS),
        "throughput": throughput(server.url + "/hello", ctx.runs),
    }


@scenario("login")
def login(ctx: Context) -> dict:
    """POST /login with the right credentials (scrypt verification, a new session row),
    from a client that sends no cookie. Wrong credentials are never sent: five failures
    would block the pair."""
    panel = ctx.panel
    client = Client(panel.url, keep_cookies=False)
    credentials = {"username": panel.username, "password": panel.password}
    figure = latency(
        lambda: client.request("POST", "/login", credentials), ctx.runs, LOGIN_REQUESTS
    )
    return {"login": with_target(figure, "median_ms", 100, "ms")}


@scenario("inbounds_list", dataset="inbounds_1k")
def inbounds_list(ctx: Context) -> dict:
    """GET /panel/api/inbounds/list and /list/slim with 1,000 inbounds, signed in."""
    client = ctx.panel.client()
    full = latency(
        lambda: client.request("GET", "/panel/api/inbounds/list"), ctx.runs, LIST_REQUESTS
    )
    slim = latency(
        lambda: client.request("GET", "/panel/api/inbounds/list/slim"), ctx.runs, LIST_REQUESTS
    )
    size = len(client.request("GET", "/panel/api/inbounds/list").body)
    return {
        "list": {**with_target(full, "median_ms", 50, "ms"), "response_bytes": size},
        "list_slim": with_target(slim, "median_ms", 50, "ms"),
    }


@scenario("status")
def status(ctx: Context) -> dict:
    """GET /panel/api/server/status (cached, refreshed every 2 s), signed in: latency on
    one connection and throughput with concurrent ones."""
    client = ctx.panel.client()
    return {
        "status": latency(
            lambda: client.request("GET", "/panel/api/server/status"), ctx.runs, STATUS_REQUESTS
        ),
        "status_throughput": throughput(
            ctx.panel.url + "/panel/api/server/status", ctx.runs, client.cookie_header()
        ),
    }


@scenario("idle_rss", dataset=None)
def idle_rss(ctx: Context) -> dict:
    """The panel's resident memory (VmRSS) just after start, after IDLE_SECONDS with no
    requests (the target's figure), then after signing in, then after listing the
    inbounds once; on an empty database and on 1,000 inbounds. One panel per run and
    dataset, all started together and left idle together; medians over the panels."""
    datasets = ["empty", "inbounds_1k"]
    panels = ctx.start_panels([name for name in datasets for _ in range(ctx.runs)])
    readings = {"rss_after_start_mb": {panel: panel.rss_mb() for panel in panels}}
    time.sleep(IDLE_SECONDS)
    readings["rss_idle_mb"] = {panel: panel.rss_mb() for panel in panels}
    clients = {panel: panel.client() for panel in panels}
    readings["rss_after_sign_in_mb"] = {panel: panel.rss_mb() for panel in panels}
    for client in clients.values():
        client.call("GET", "/panel/api/inbounds/list")
        client.close()
    readings["rss_after_list_mb"] = {panel: panel.rss_mb() for panel in panels}
    figures = {}
    for name in datasets:
        mine = [panel for panel in panels if panel.dataset == name]
        figure = {
            key: round(statistics.median(rss[panel] for panel in mine), 1)
            for key, rss in readings.items()
        }
        figure.update(idle_seconds=IDLE_SECONDS, panels=len(mine))
        figures[name] = with_target(figure, "rss_idle_mb", 60, "MiB")
    return figures
