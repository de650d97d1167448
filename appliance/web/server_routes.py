"""Routes of /panel/api/server: status, history, generators, logs, the cluster."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.errors import ServiceError
from appliance.runtime import logbuffer
from appliance.services.tools import keys
from appliance.web.http import body
from appliance.web.routes import READ, RouteTable

if TYPE_CHECKING:
    from appliance.services.admin.settings import Settings
    from appliance.services.admin.status import History
    from appliance.services.control.metrics import CoreMetrics


@dataclass(frozen=True)
class ServerRouteNeeds:
    status: Callable[[], dict]  # the latest sample, with the core's state as it is now
    history: History
    core_metrics: CoreMetrics
    settings: Settings  # the panel's certificate file paths
    descendants: Callable[[], list[dict]]  # the nodes below this panel, at every depth
    core_capabilities: Callable[[], dict]  # capabilities.table_of the detected core
    cluster: Callable[[], list[dict]]  # the panels sharing this database (Cluster.members)


def server_routes(needs: ServerRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/server", "server")

    @table.get("/status", "Host and panel status, refreshed every 2 s")
    def status():
        return needs.status()

    @table.get("/cpuHistory/<bucket>", "CPU history (legacy; use history/cpu)")
    def cpu_history(bucket):
        return needs.history.series("cpu", bucket)

    @table.get("/history/<metric>/<bucket>", "A metric's history over about 6 hours")
    def history(metric, bucket):
        return needs.history.series(metric, bucket)

    @table.get("/coreMetricsState", "The core's runtime metrics; empty when not configured")
    def core_metrics_state():
        return needs.core_metrics.state()

    @table.get("/coreMetricsHistory/<metric>/<bucket>", "A core runtime metric's history")
    def core_metrics_history(metric, bucket):
        return needs.core_metrics.series(metric, bucket)

    @table.get("/coreCapabilities", "What the running core can run, and why it lacks the rest")
    def core_capabilities():
        return needs.core_capabilities()

    @table.get("/coreObservatory", "The core observatory's latest probe of each outbound")
    def core_observatory():
        return needs.core_metrics.observatory()

    @table.get("/coreObservatoryHistory/<tag>/<bucket>", "An outbound's observed delay history")
    def core_observatory_history(tag, bucket):
        return needs.core_metrics.observatory_series(tag, bucket)

    @table.get("/getNewUUID", "A random UUID v4")
    def new_uuid():
        return keys.new_uuid()

    @table.get("/getNewX25519Cert", "A new X25519 key pair in the core's base64url form")
    def new_x25519():
        return keys.new_x25519()

    @table.get("/getWebCertFiles", "The panel's certificate and key file paths")
    def web_cert_files():
        return {
            "webCertFile": needs.settings.get("webCertFile"),
            "webKeyFile": needs.settings.get("webKeyFile"),
        }

    @table.get("/cluster", "The panel instances sharing this database, and which one leads")
    def cluster():
        return needs.cluster()

    @table.get("/descendants", "The nodes this panel manages and, recursively, theirs")
    def descendants():
        return needs.descendants()

    @table.post(
        "/logs/<count>",
        "The panel's own log, newest last",
        body={"level": "string", "syslog": "boolean"},
        effect=READ,
    )
    def logs(count):
        data = body(8192)
        if not isinstance(data, dict):
            raise ServiceError("send {level, syslog} as a JSON object")
        level = data.get("level") or "info"
        if not isinstance(level, str):
            raise ServiceError("level must be one of debug, info, notice, warning, error")
        syslog = data.get("syslog", False)
        if syslog not in (True, False, "true", "false"):
            raise ServiceError("syslog must be true or false")
        if syslog in (True, "true"):
            return logbuffer.read_journal(count, level)
        return logbuffer.read_logs(count, level)

    return table
