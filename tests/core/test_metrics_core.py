"""`GET /metrics` of a panel on the real core: bytes pushed through an inbound show up in
the traffic tick's figures and in that inbound's traffic, the core is up and in step, and
a client whose bytes went through is online in the clients by status.
"""

from __future__ import annotations

import pytest
import requests
from core_panel import wait_until
from core_traffic import (
    add_client,
    add_inbound,
    client_core,
    passes,
    push,
    route,
    traffic_core_panel,
)
from helpers import ok
from prometheus_client.parser import text_string_to_metric_families

SENT = 150_000


def scrape(panel, secret: str) -> dict:
    """Every sample of the body by (name, sorted labels)."""
    headers = {"Authorization": f"Bearer {secret}"}
    response = requests.get(panel.url + "/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = traffic_core_panel(tmp_path_factory.mktemp("metrics-core"))
    yield server
    server.stop()


def test_traffic_through_the_core_shows_in_the_figures(panel, tmp_path, echo):
    api = panel.client()
    ok(api.post("/panel/api/setting/update", {"metricsEnable": True}))
    secret = ok(api.post("/panel/api/setting/apiTokens/create", {"name": "p", "scope": "read"}))
    secret = secret["token"]
    inbound = add_inbound(api, "vless")
    client = add_client(api, inbound["id"])
    before = scrape(panel, secret)
    assert before[("appliance_core_up", ())] == 1
    way = route(inbound, client)
    with client_core(tmp_path, [way]):
        wait_until(lambda: passes(way[0], echo), "the inbound carries bytes")
        push(way[0], echo, SENT)
        down = (
            "appliance_inbound_traffic_bytes_total",
            (("direction", "down"), ("inbound", inbound["tag"])),
        )
        after = wait_until(
            lambda: (found := scrape(panel, secret)).get(down, 0) >= SENT and found,
            "the inbound's bytes are in the figures",
        )
    added = ("appliance_traffic_added_bytes_total", (("direction", "down"), ("kind", "inbound")))
    assert after[added] - before[added] >= SENT
    ticks = "appliance_traffic_tick_duration_seconds_count"
    assert after[(ticks, ())] > before[(ticks, ())]
    assert after[("appliance_traffic_tick_duration_seconds_sum", ())] > 0
    moved = ("appliance_traffic_clients_moved_total", ())
    assert after[moved] > before[moved]
    assert after[("appliance_core_in_step", ())] == 1
    assert after[("appliance_clients", (("status", "online"),))] >= 1
