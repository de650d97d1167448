"""Routes of /panel/api/core: the core's config template, its output and outbound
traffic, and the server routes that start and stop it."""

from __future__ import annotations

import json

from appliance.core.template import default_template
from appliance.services import core_logs
from appliance.services.errors import ServiceError
from appliance.web.http import Reply, json_object
from appliance.web.routes import RouteTable


def core_routes(panel) -> RouteTable:
    table = RouteTable("/panel/api/core", "core")
    core = panel.core

    @table.post("/", "The core config template, inbound tags and reverse tags")
    def core_settings():
        inbounds = panel.inbounds.list(slim=True)
        reverse = panel.client_query.reverse_tags()
        return {
            "coreSetting": json.dumps(core.template(), indent=2),
            "inboundTags": json.dumps([inbound["tag"] for inbound in inbounds]),
            "clientReverseTags": json.dumps(reverse),
            "outboundTestUrl": panel.settings.get("outboundTestUrl"),
        }

    @table.get("/getDefaultJsonConfig", "The built-in core config template")
    def default_config():
        return default_template()

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
        return "\n".join(core.process.output(200))

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
        return core_logs.recent_core_logs(config, core.process.output(500), count, form)

    table.routes.extend(server.routes)
    return table
