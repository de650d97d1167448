"""The panel port's route tables, each handed only the parts of the panel it calls.

Every table declares what it needs beside its routes (`ClientRouteNeeds` and the like);
this is the one place that fills those declarations from the panel's parts, so the panel
itself (`Panel`) stays the place that builds and runs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance import __version__
from appliance.core.capabilities import table_of
from appliance.services.admin.gauges import Gauges
from appliance.services.outbounds.vpn import VpnProvider
from appliance.services.outbounds.warp import WarpTunnel
from appliance.web.audit_routes import AuditRouteNeeds, audit_routes
from appliance.web.backup_routes import BackupRouteNeeds, backup_routes
from appliance.web.client_routes import ClientRouteNeeds, client_routes
from appliance.web.core_routes import CoreRouteNeeds, core_routes
from appliance.web.group_routes import GroupRouteNeeds, group_routes
from appliance.web.host_routes import HostRouteNeeds, host_routes
from appliance.web.inbound_routes import InboundRouteNeeds, inbound_routes
from appliance.web.metrics_routes import MetricsRouteNeeds, metrics_routes
from appliance.web.node_routes import NodeRouteNeeds, node_routes
from appliance.web.openapi import openapi_routes
from appliance.web.outbound_routes import OutboundRouteNeeds, outbound_routes
from appliance.web.release_routes import ReleaseRouteNeeds, release_routes
from appliance.web.server_routes import ServerRouteNeeds, server_routes
from appliance.web.session_routes import SessionRouteNeeds, session_routes
from appliance.web.setting_routes import SettingRouteNeeds, setting_routes
from appliance.web.template_routes import TemplateRouteNeeds, template_routes
from appliance.web.tool_routes import ToolRouteNeeds, tool_routes
from appliance.web.ui import UiRouteNeeds, ui_routes
from appliance.web.webhook_routes import WebhookRouteNeeds, webhook_routes

if TYPE_CHECKING:
    from appliance.app.panel import Panel
    from appliance.web.routes import Route


def routes_of(panel: Panel) -> list[Route]:
    """Every route of the panel port: the API tables, their OpenAPI document, the UI."""
    tables = [
        session_routes(
            SessionRouteNeeds(
                auth=panel.auth,
                hub=panel.hub,
                base_path=panel.base_path,
                origin_names=panel.origin_names,
                trusted_proxies=panel.trusted_proxies,
                release_store=panel.store.release,
            )
        ),
        inbound_routes(
            InboundRouteNeeds(
                inbounds=panel.inbounds,
                fallbacks=panel.inbounds.fallbacks,
                client_bulk=panel.client_bulk,
                subscriptions=panel.subscriptions,
                settings=panel.settings,
                sub_address=panel.sub_address,
                master_traffic=panel.master_traffic,
                usage=panel.usage,
            )
        ),
        client_routes(
            ClientRouteNeeds(
                clients=panel.clients,
                query=panel.client_query,
                bulk=panel.client_bulk,
                subscriptions=panel.subscriptions,
                settings=panel.settings,
                sub_address=panel.sub_address,
                node_traffic=panel.node_traffic,
                counter_feed=panel.counter_feed,
                master_traffic=panel.master_traffic,
                usage=panel.usage,
                devices=panel.devices,
                client_ips=panel.client_ips,
            )
        ),
        group_routes(GroupRouteNeeds(groups=panel.groups)),
        host_routes(HostRouteNeeds(hosts=panel.hosts)),
        template_routes(TemplateRouteNeeds(templates=panel.sub_templates, settings=panel.settings)),
        node_routes(
            NodeRouteNeeds(
                fleet=panel.fleet,
                operations=panel.node_operations,
                mtls=panel.mtls,
                serves_https=lambda: panel.web_tls,
            )
        ),
        core_routes(
            CoreRouteNeeds(
                core=panel.core,
                core_probe=panel.core_probe,
                core_routing=panel.core_routing,
                inbounds=panel.inbounds,
                client_query=panel.client_query,
                settings=panel.settings,
                places=panel.places,
            )
        ),
        outbound_routes(
            OutboundRouteNeeds(
                outbound_subs=panel.outbound_subs,
                warp=WarpTunnel(panel.settings),
                vpn=VpnProvider(panel.settings),
            )
        ),
        release_routes(ReleaseRouteNeeds(releases=panel.core_releases)),
        server_routes(
            ServerRouteNeeds(
                status=panel.status,
                history=panel.history,
                core_metrics=panel.core_metrics,
                settings=panel.settings,
                descendants=panel.node_tree.descendants,
                core_capabilities=lambda: table_of(panel.core.process.info),
                cluster=panel.cluster.members,
            )
        ),
        setting_routes(
            SettingRouteNeeds(
                settings=panel.settings,
                two_factor_view=panel.two_factor_view,
                update_settings=panel.update_settings,
                auth=panel.auth,
                restart_later=panel.restart_later,
                chat_bot=panel.chat_bot,
                default_core_template=panel.core.default_template,
                tokens=panel.tokens,
                overrides=panel.overrides,
            )
        ),
        backup_routes(BackupRouteNeeds(backups=panel.backups, chat_bot=panel.chat_bot)),
        tool_routes(
            ToolRouteNeeds(
                places=panel.places,
                settings=panel.settings,
                panel_update=panel.panel_update,
                client_ips=panel.client_ips,
            )
        ),
        audit_routes(AuditRouteNeeds(audit=panel.audit)),
        webhook_routes(WebhookRouteNeeds(webhooks=panel.webhooks)),
        metrics_routes(
            MetricsRouteNeeds(
                settings=panel.settings,
                version=__version__,
                started=panel.started,
                core_info=panel.core_info,
                mtproto_info=panel.mtproto.info,
                summary=panel.client_query.summary,
                gauges=Gauges(panel.store, panel.node_health),
                tick_stats=panel.accounting.stats,
                query_timings=panel.store.db.query_timings,
                request_timings=panel.request_timings,
            )
        ),
    ]
    routes = [route for table in tables for route in table.routes]
    # The UI's pages and files are not API routes: the OpenAPI document leaves them out.
    ui = ui_routes(UiRouteNeeds(base_path=panel.base_path))
    return routes + openapi_routes(routes).routes + ui.routes
