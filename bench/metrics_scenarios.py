"""What a Prometheus scrape of `GET /metrics` costs at 100,000 clients (`clients_100k`).

A scrape reads the clients' summary the panel keeps up to date, the in-memory figures of
the services and two small tables, never the clients: its cost should not grow with
them. Measured as a scrape with nothing changed since the last one (beside the same on a
panel without clients, started in the same run), and as one after a client change
(outside the timing), which makes the summary catch up with that change first, as it
would for the next page of the clients list.
"""

from __future__ import annotations

import client_scenarios  # noqa: F401  (the clients scenarios register, and run, first)
from client_scenarios import DATASET, SummaryBuster
from harness import BenchError, Client, Reply, latency, scenario

METRICS = "/metrics"
SCRAPES = 20
SCRAPES_AFTER_A_CHANGE = 5


def _scrape(client: Client):
    """A scrape, its reply turned into a success envelope for the harness's check: the
    body is the text format, not an envelope."""

    def request() -> Reply:
        reply = client.request("GET", METRICS)
        if reply.status != 200 or not reply.body.startswith(b"# HELP "):
            raise BenchError(f"GET {METRICS}: HTTP {reply.status} {reply.body[:300]!r}")
        return Reply(200, b'{"success": true, "obj": null}')

    return request


def _scraping(panel) -> Client:
    client = panel.client()
    client.call("POST", "/panel/api/setting/update", {"metricsEnable": True})
    return client


@scenario("metrics_scrape", dataset=DATASET)
def metrics_scrape(ctx) -> dict:
    """GET /metrics at 100,000 clients: a scrape with nothing changed since the last (and
    on a panel without clients, for the ratio), and one after a client change (the
    summary catches up first); the body's size."""
    client = _scraping(ctx.panel)
    request = _scrape(client)
    steady = latency(request, ctx.runs, SCRAPES)
    (empty,) = ctx.start_panels(["empty"])
    without_clients = latency(_scrape(_scraping(empty)), ctx.runs, SCRAPES)
    after_change = latency(
        request, ctx.runs, SCRAPES_AFTER_A_CHANGE, warmup=0, before=SummaryBuster(client)
    )
    body = client.request("GET", METRICS).body
    return {
        "scrape": {
            **steady,
            "response_bytes": len(body),
            "ratio_to_no_clients": round(steady["median_ms"] / without_clients["median_ms"], 2),
        },
        "scrape_without_clients": without_clients,
        "scrape_after_a_client_change": after_change,
    }
