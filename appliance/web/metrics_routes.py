"""`GET /metrics`: the panel's figures in the Prometheus text format, for the people who
run Prometheus.

Off until `metricsEnable` is on; then readable by a signed-in admin and by API tokens of
the `read` and `admin` scopes, like every other read (a refusal leaks no figure). The
figures are gathered when Prometheus scrapes, from what the services already keep in
memory (the clients' summary, the traffic tick's totals, the node heartbeats, the core's
and the MTProto proxies' states, the request and database timings) plus two queries of
a few rows each (`Gauges`): a scrape never reads the clients, however many there are.

`prometheus_client` writes the format (and the process figures: memory, CPU, open
files); its metric objects are not used for counting, since the hot paths count into
`runtime.timings` for a tenth of the cost and without a lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bottle import HTTPResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)

from appliance.errors import Forbidden
from appliance.web.routes import RouteTable

if TYPE_CHECKING:
    from appliance.runtime.timings import Timings, TimingsByName
    from appliance.services.admin.gauges import Gauges
    from appliance.services.admin.settings import Settings
    from appliance.services.clients.traffic import TickStats

METRICS_OFF = "metrics are off: turn on metricsEnable in the panel settings to serve them here"
CLIENT_STATUSES = ("online", "depleted", "expiring", "deactive")


@dataclass(frozen=True)
class MetricsRouteNeeds:
    settings: Settings  # metricsEnable
    version: str  # the panel's
    started: float  # when this process started, seconds since the epoch
    core_info: Callable[[], dict]  # state, version, inStep
    mtproto_info: Callable[[], list[dict]]  # one state per MTProto inbound
    summary: Callable[[], object]  # the clients' summary: total, active, count(name)
    gauges: Gauges  # inbound totals and node marks
    tick_stats: TickStats  # the traffic tick's totals
    query_timings: Timings  # every database statement
    request_timings: TimingsByName  # panel requests by route group


class PanelCollector:
    """The panel's families, made anew at each scrape."""

    def __init__(self, needs: MetricsRouteNeeds):
        self.needs = needs

    def collect(self):
        needs = self.needs
        info = InfoMetricFamily("appliance_build", "The panel's version")
        info.add_metric([], {"version": needs.version})
        yield info
        yield GaugeMetricFamily(
            "appliance_start_time_seconds",
            "When the panel process started, in seconds since the epoch",
            value=needs.started,
        )
        yield from self.core()
        yield self.histogram(
            "appliance_http_request_duration_seconds",
            "Panel API requests by route group: how many and how long they took",
            needs.request_timings.by_name.items(),
            "group",
        )
        yield self.histogram(
            "appliance_db_query_duration_seconds",
            "Database statements of the panel process: how many and how long they took",
            [("", needs.query_timings)],
        )
        yield from self.traffic()
        yield from self.clients()
        yield from self.nodes()
        yield from self.mtproto()

    def core(self):
        core = self.needs.core_info()
        running = core.get("state") == "running"
        yield GaugeMetricFamily("appliance_core_up", "1 while the core runs", value=int(running))
        yield GaugeMetricFamily(
            "appliance_core_in_step",
            "1 while the core runs what is stored, 0 while it is out of step",
            value=int(bool(core.get("inStep")) and running),
        )
        info = InfoMetricFamily("appliance_core", "The core's state and version")
        state, version = str(core.get("state", "")), str(core.get("version", ""))
        info.add_metric([], {"state": state, "version": version})
        yield info

    @staticmethod
    def histogram(name: str, documentation: str, series, label: str = ""):
        family = HistogramMetricFamily(name, documentation, labels=[label] if label else [])
        for value, timings in sorted(series):
            family.add_metric(
                [value] if label else [], timings.cumulative(), sum_value=timings.total
            )
        return family

    def traffic(self):
        stats = self.needs.tick_stats
        yield self.histogram(
            "appliance_traffic_tick_duration_seconds",
            "Traffic ticks (the core's counters added to the database): how many and how "
            "long each took",
            [("", stats.seconds)],
        )
        added = CounterMetricFamily(
            "appliance_traffic_added_bytes",
            "Bytes the traffic ticks added, to inbounds and to outbounds",
            labels=["kind", "direction"],
        )
        for kind, pair in (("inbound", stats.inbound_bytes), ("outbound", stats.outbound_bytes)):
            added.add_metric([kind, "up"], pair[0])
            added.add_metric([kind, "down"], pair[1])
        yield added
        yield CounterMetricFamily(
            "appliance_traffic_clients_moved",
            "Clients whose counters moved, summed over the traffic ticks",
            value=stats.clients_moved,
        )
        inbound = CounterMetricFamily(
            "appliance_inbound_traffic_bytes",
            "Each inbound's traffic total as stored (a reset starts it again from zero)",
            labels=["inbound", "direction"],
        )
        for tag, up, down in self.needs.gauges.inbound_traffic():
            inbound.add_metric([tag, "up"], up)
            inbound.add_metric([tag, "down"], down)
        yield inbound

    def clients(self):
        summary = self.needs.summary()
        family = GaugeMetricFamily(
            "appliance_clients",
            "Clients by status: every one (total), enabled (active), online, depleted, "
            "expiring and disabled (deactive), as in the clients list's summary",
            labels=["status"],
        )
        family.add_metric(["total"], summary.total)
        family.add_metric(["active"], summary.active)
        for status in CLIENT_STATUSES:
            family.add_metric([status], summary.count(status))
        yield family

    def nodes(self):
        nodes = self.needs.gauges.nodes()
        up = GaugeMetricFamily(
            "appliance_node_up",
            "1 while the node's last heartbeat found it online",
            labels=["node"],
        )
        latency = GaugeMetricFamily(
            "appliance_node_latency_seconds",
            "How long the node's last heartbeat took to answer",
            labels=["node"],
        )
        out_of_step = GaugeMetricFamily(
            "appliance_node_out_of_step",
            "1 while the node has changes not yet applied there",
            labels=["node"],
        )
        enabled = GaugeMetricFamily(
            "appliance_node_enabled", "1 while the node is enabled", labels=["node"]
        )
        for node in nodes:
            up.add_metric([node["name"]], int(node["status"] == "online"))
            latency.add_metric([node["name"]], node["latency"] / 1000)
            out_of_step.add_metric([node["name"]], int(node["outOfStep"]))
            enabled.add_metric([node["name"]], int(node["enable"]))
        yield from (up, latency, out_of_step, enabled)

    def mtproto(self):
        up = GaugeMetricFamily(
            "appliance_mtproto_up",
            "1 while the MTProto proxy of the inbound runs",
            labels=["inbound_id", "port"],
        )
        secrets = GaugeMetricFamily(
            "appliance_mtproto_secrets",
            "Client secrets the MTProto proxy of the inbound was given",
            labels=["inbound_id"],
        )
        for proxy in self.needs.mtproto_info():
            inbound_id = str(proxy["inboundId"])
            up.add_metric([inbound_id, str(proxy["port"])], int(proxy["state"] == "running"))
            secrets.add_metric([inbound_id], proxy["secrets"])
        yield from (up, secrets)


def metrics_routes(needs: MetricsRouteNeeds) -> RouteTable:
    table = RouteTable("", "metrics")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PanelCollector(needs))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)

    @table.get(
        "/metrics",
        "The panel's figures in the Prometheus text format (plain text, not in the "
        "envelope); off until metricsEnable is on",
        raw=True,
    )
    def metrics():
        if not needs.settings.get("metricsEnable"):
            raise Forbidden(METRICS_OFF)
        return HTTPResponse(
            generate_latest(registry), status=200, headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    return table
