"""`GET /metrics` over real HTTP: off until `metricsEnable` is on, refused without a token
of the `read` or `admin` scope (and with a wrong one) without a figure in the answer, and,
once on, a body that `prometheus_client`'s own parser reads, whose figures follow what
the panel did: requests by route group, database statements, clients by status as the
clients list's summary counts them, and each inbound's traffic.
"""

from __future__ import annotations

import json
import re

import pytest
import requests
from core_panel import wait_until
from helpers import ROOT, create_plain_vless, free_port, ok
from node_panels import NODES, add_node
from panels import start_panel, stop_and_drop
from prometheus_client.parser import text_string_to_metric_families

from appliance import __version__

METRICS = "/metrics"
UPDATE = "/panel/api/setting/update"
TOKENS = "/panel/api/setting/apiTokens/create"
PAGED = "/panel/api/clients/list/paged"
DOCS = ROOT / "docs"


def token(api, name: str, scope: str) -> str:
    return ok(api.post(TOKENS, {"name": name, "scope": scope}))["token"]


def scrape(panel, secret: str) -> requests.Response:
    headers = {"Authorization": f"Bearer {secret}"}
    return requests.get(panel.url + METRICS, headers=headers, timeout=10)


def families(response: requests.Response) -> dict:
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def samples(family, name: str | None = None, **labels) -> list:
    """The family's samples named `name` (the family's own name by default) whose labels
    include `labels`."""
    wanted = name or family.name
    return [
        sample
        for sample in family.samples
        if sample.name == wanted and labels.items() <= sample.labels.items()
    ]


def value(family, name: str | None = None, **labels) -> float:
    found = samples(family, name, **labels)
    assert len(found) == 1, (family.name, labels, family.samples)
    return found[0].value


def assert_refused(response: requests.Response, status: int) -> None:
    assert response.status_code == status, response.text
    reply = response.json()
    assert reply["success"] is False and reply["msg"]
    assert "appliance_" not in response.text


@pytest.fixture(scope="module")
def reader(panel) -> str:
    return token(panel.client(), "prometheus", "read")


@pytest.fixture(scope="module")
def metrics_on(panel, reader) -> str:
    ok(panel.client().post(UPDATE, {"metricsEnable": True}))
    return reader


def test_metrics_are_off_until_the_setting_turns_them_on(panel, reader):
    response = scrape(panel, reader)
    assert_refused(response, 403)
    assert "metricsEnable" in response.json()["msg"]
    api = panel.client()
    assert_refused(api.raw("GET", METRICS), 403)
    ok(api.post(UPDATE, {"metricsEnable": True}))
    assert "appliance_build_info" in families(scrape(panel, reader))
    ok(api.post(UPDATE, {"metricsEnable": False}))
    assert_refused(scrape(panel, reader), 403)


def test_refused_without_a_token_with_a_wrong_one_and_with_a_node_token(panel, metrics_on):
    assert_refused(requests.get(panel.url + METRICS, timeout=10), 401)
    assert_refused(scrape(panel, metrics_on[:-4] + "abcd"), 401)
    assert_refused(scrape(panel, "not-a-token"), 401)
    assert_refused(scrape(panel, token(panel.client(), "a node's", "node")), 401)


def test_an_admin_token_and_a_signed_in_admin_may_read_them(panel, metrics_on):
    assert "appliance_build_info" in families(scrape(panel, token(panel.client(), "ops", "admin")))
    assert "appliance_build_info" in families(panel.client().raw("GET", METRICS))


def test_the_figures_follow_what_the_panel_did(panel, metrics_on):
    api = panel.client()
    inbound_id = create_plain_vless(api, free_port())
    tag = ok(api.get(f"/panel/api/inbounds/get/{inbound_id}"))["tag"]
    for n in range(3):
        client = {"email": f"metrics-{n}@example.test", "enable": n != 2}
        ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound_id]}))
    before = families(scrape(panel, metrics_on))
    requests_before = value(
        before["appliance_http_request_duration_seconds"],
        "appliance_http_request_duration_seconds_count",
        group="clients",
    )
    for _ in range(5):
        ok(api.get(PAGED))
    found = families(scrape(panel, metrics_on))

    assert samples(found["appliance_build_info"])[0].labels == {"version": __version__}
    assert value(found["appliance_build_info"]) == 1
    # The API tests run without a core.
    assert value(found["appliance_core_up"]) == 0
    assert samples(found["appliance_core_info"])[0].labels["state"] == "not installed"

    timed = found["appliance_http_request_duration_seconds"]
    count = "appliance_http_request_duration_seconds_count"
    assert value(timed, count, group="clients") == requests_before + 5
    assert value(timed, count, group="inbounds") >= 2
    assert value(timed, "appliance_http_request_duration_seconds_sum", group="clients") > 0
    assert value(
        timed, "appliance_http_request_duration_seconds_bucket", group="clients", le="+Inf"
    ) == value(timed, count, group="clients")

    queries = found["appliance_db_query_duration_seconds"]
    assert value(queries, "appliance_db_query_duration_seconds_count") > value(
        before["appliance_db_query_duration_seconds"], "appliance_db_query_duration_seconds_count"
    )

    summary = ok(api.get(PAGED))["summary"]
    clients = found["appliance_clients"]
    assert value(clients, status="total") == summary["total"] >= 3
    assert value(clients, status="active") == summary["active"]
    for status in ("online", "depleted", "expiring", "deactive"):
        assert value(clients, status=status) == len(summary[status]), status
    assert value(clients, status="deactive") >= 1

    traffic = found["appliance_inbound_traffic_bytes"]
    name = "appliance_inbound_traffic_bytes_total"
    assert value(traffic, name, inbound=tag, direction="up") == 0
    assert value(traffic, name, inbound=tag, direction="down") == 0
    assert (
        value(
            found["appliance_traffic_tick_duration_seconds"],
            "appliance_traffic_tick_duration_seconds_count",
        )
        == 0
    )
    assert samples(found["appliance_node_up"]) == []
    assert samples(found["appliance_mtproto_up"]) == []
    assert value(found["process_resident_memory_bytes"]) > 0


def test_the_dashboard_and_the_readme_name_only_series_that_are_served(panel, metrics_on):
    body = scrape(panel, metrics_on).text
    served = set(re.findall(r"^(?:# TYPE )?([a-z_]+)", body, re.MULTILINE))
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text(encoding="utf-8"))
    named = {
        name
        for panel_doc in dashboard["panels"]
        for target in panel_doc["targets"]
        for name in re.findall(r"\b((?:appliance|process)_[a-z_]+)", target["expr"])
    }
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Metrics for Prometheus") : readme.index("## Settings")]
    named |= set(re.findall(r"`(appliance_[a-z_]+)", section))
    assert len(named) > 15
    assert named <= served, sorted(named - served)


@pytest.fixture
def node(tmp_path):
    server = start_panel(tmp_path)
    yield server
    stop_and_drop(server)


def test_each_node_shows_its_heartbeat_and_whether_it_is_in_step(panel, metrics_on, node):
    api = panel.client()
    reachable = add_node(api, node, "metrics-node")
    refusing = add_node(api, node, "metrics-refused", token="apl_" + "x" * 43)
    for record in (reachable, refusing):
        ok(api.post(f"{NODES}/probe/{record['id']}"))
    listed = {row["name"]: row for row in ok(api.get(f"{NODES}/list"))}
    found = families(scrape(panel, metrics_on))
    assert value(found["appliance_node_up"], node="metrics-node") == 1
    assert value(found["appliance_node_up"], node="metrics-refused") == 0
    latency = value(found["appliance_node_latency_seconds"], node="metrics-node")
    assert latency == listed["metrics-node"]["latency"] / 1000 and latency < 10
    for name in ("metrics-node", "metrics-refused"):
        out_of_step = value(found["appliance_node_out_of_step"], node=name)
        assert out_of_step == int(listed[name]["outOfStep"])
        assert value(found["appliance_node_enabled"], node=name) == 1


def test_each_mtproto_proxy_shows_whether_it_runs(panel, metrics_on):
    api = panel.client()
    inbound = ok(
        api.post(
            "/panel/api/inbounds/add",
            {"protocol": "mtproto", "listen": "127.0.0.1", "port": free_port(), "settings": {}},
        )
    )
    client = {"email": "metrics-mtproto@example.test"}
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))

    def running() -> dict | None:
        """Up, and holding the client's secret: the proxy confirms its secrets just after
        it reports running, so a scrape between the two shows it up with none."""
        found = families(scrape(panel, metrics_on))
        up = samples(found["appliance_mtproto_up"], inbound_id=str(inbound["id"]))
        held = samples(found["appliance_mtproto_secrets"], inbound_id=str(inbound["id"]))
        return found if up and up[0].value == 1 and held and held[0].value == 1 else None

    found = wait_until(running, "the MTProto proxy runs with the client's secret")
    up = samples(found["appliance_mtproto_up"], inbound_id=str(inbound["id"]))[0]
    assert up.labels["port"] == str(inbound["port"])
