"""Routes of /panel/api/core: the core's config template, its output and outbound
traffic, and the server routes that start and stop it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.errors import ServiceError
from appliance.services.control import logs as core_logs
from appliance.web.http import Reply, json_object
from appliance.web.routes import EGRESS, READ, RouteTable

if TYPE_CHECKING:
    from appliance.runtime.file_paths import FilePlaces
    from appliance.services.admin.settings import Settings
    from appliance.services.clients.query import ClientQuery
    from appliance.services.control.probe import OutboundProbe
    from appliance.services.control.routing import CoreRouting
    from appliance.services.control.supervisor import CoreService
    from appliance.services.inbounds.records import Inbounds


@dataclass(frozen=True)
class CoreRouteNeeds:
    core: CoreService
    core_probe: OutboundProbe
    core_routing: CoreRouting
    # What the template editor offers besides the template: the inbound and reverse tags
    # a rule may name, and the URL outbounds are tested against.
    inbounds: Inbounds
    client_query: ClientQuery
    settings: Settings
    places: FilePlaces  # which log files the log view may read


def core_routes(needs: CoreRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/core", "core")
    core = needs.core

    @table.post("/", "The core config template, inbound tags and reverse tags", effect=READ)
    def core_settings():
        inbounds = needs.inbounds.list(slim=True)
        reverse = needs.client_query.reverse_tags()
        return {
            "coreSetting": json.dumps(core.template(), indent=2),
            "inboundTags": json.dumps([inbound["tag"] for inbound in inbounds]),
            "clientReverseTags": json.dumps(reverse),
            "outboundTestUrl": needs.settings.get("outboundTestUrl"),
        }

    @table.get("/getDefaultJsonConfig", "The built-in core config template")
    def default_config():
        return core.default_template()

    @table.post(
        "/update",
        "Save the core config template (form coreSetting); restarts the core",
        resource="settings",
        form=True,
        body={"coreSetting": "string", "outboundTestUrl": "string"},
    )
    def update():
        data = json_object(4 << 20)
        core.save_template(data.get("coreSetting"), data.get("outboundTestUrl"))
        return Reply("core settings saved")

    @table.get("/getCoreResult", "The core's latest output")
    def core_result():
        return "\n".join(core.output(200))

    @table.get("/getOutboundsTraffic", "Traffic per outbound")
    def outbounds_traffic():
        return core.outbound_traffic()

    @table.post(
        "/resetOutboundsTraffic",
        "Zero an outbound's counters (form tag; empty: all)",
        resource="core",
        form=True,
        body={"tag": "string"},
    )
    def reset_outbounds():
        tag = json_object(8192).get("tag") or ""
        if not isinstance(tag, str):
            raise ServiceError("tag must be an outbound tag")
        core.reset_outbound_traffic(tag)
        return Reply("outbound traffic reset")

    @table.post(
        "/testOutbound",
        "Probe one outbound through a temporary core (mode tcp: dial its server only)",
        form=True,
        max_body=4 << 20,
        body={"outbound": "string", "allOutbounds": "string", "mode": "string"},
        effect=EGRESS,
    )
    def test_outbound():
        form = json_object(4 << 20)
        return needs.core_probe.test_one(
            form.get("outbound"), form.get("allOutbounds"), form.get("mode")
        )

    @table.post(
        "/testOutbounds",
        "Probe up to 50 outbounds; results in input order",
        form=True,
        max_body=4 << 20,
        body={"outbounds": "string", "allOutbounds": "string", "mode": "string"},
        effect=EGRESS,
    )
    def test_outbounds():
        form = json_object(4 << 20)
        return needs.core_probe.test_many(
            form.get("outbounds"), form.get("allOutbounds"), form.get("mode")
        )

    @table.post(
        "/balancerStatus",
        "Override and preferred targets of balancers (form tags, comma-separated)",
        form=True,
        effect=READ,
        body={"tags": "string"},
    )
    def balancer_status():
        return needs.core_routing.balancer_status(json_object(8192).get("tags"))

    @table.post(
        "/balancerOverride",
        "Force a balancer to one outbound until the core restarts (empty target clears)",
        resource="core",
        form=True,
        body={"tag": "string", "target": "string"},
    )
    def balancer_override():
        form = json_object(8192)
        return Reply(needs.core_routing.override_balancer(form.get("tag"), form.get("target")))

    @table.post(
        "/routeTest",
        "The outbound the core's router would pick for a destination; sends nothing",
        form=True,
        effect=READ,
        body={
            "domain": "string",
            "ip": "string",
            "port": "string",
            "network": "string",
            "inboundTag": "string",
            "protocol": "string",
            "email": "string",
        },
    )
    def route_test():
        return needs.core_routing.route_test(json_object(8192))

    server = RouteTable("/panel/api/server", "server")

    @server.post("/stopCoreService", "Stop the core", resource="core")
    def stop_core():
        core.stop()
        return Reply("core stopped")

    @server.post("/restartCoreService", "Restart the core with the current config", resource="core")
    def restart_core():
        core.restart()
        return Reply("core restarted")

    @server.get("/getConfigJson", "The core config the panel runs (or would run)")
    def config_json():
        return core.running_config()

    @server.post(
        "/corelogs/<count>",
        "The core's last access and error lines, filtered (see services.core_logs)",
        form=True,
        effect=READ,
        body={
            "filter": "string",
            "showDirect": "string",
            "showBlocked": "string",
            "showProxy": "string",
        },
    )
    def core_log_lines(count):
        form = json_object(8192)
        config = core.running_config()
        output = core.output(500)
        return core_logs.recent_core_logs(config, output, count, form, needs.places)

    table.routes.extend(server.routes)
    return table
