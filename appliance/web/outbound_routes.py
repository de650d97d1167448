"""Routes of /panel/api/core for outbounds from outside the template: outbound
subscriptions, the WARP tunnel and the VPN provider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.web.http import Reply, json_object
from appliance.web.routes import EGRESS, READ, RouteTable

if TYPE_CHECKING:
    from appliance.services.outbounds.subscriptions import OutboundSubs
    from appliance.services.outbounds.vpn import VpnProvider
    from appliance.services.outbounds.warp import WarpTunnel

SUB_FORM = {
    "remark": "string",
    "url": "string",
    "tagPrefix": "string",
    "updateInterval": "integer",
    "enabled": "boolean",
    "allowPrivate": "boolean",
    "prepend": "boolean",
}
MAX_BODY = 16384


@dataclass(frozen=True)
class OutboundRouteNeeds:
    outbound_subs: OutboundSubs
    warp: WarpTunnel
    vpn: VpnProvider


def outbound_routes(needs: OutboundRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/core", "core")
    subs = needs.outbound_subs

    @table.get("/outbound-subs", "Outbound subscriptions, newest first")
    def list_subs():
        return subs.list()

    @table.post(
        "/outbound-subs",
        "Add an outbound subscription: its URL is fetched and its servers become outbounds",
        resource="core",
        effect=EGRESS,
        form=True,
        body=SUB_FORM,
    )
    def create_sub():
        return Reply("outbound subscription added", subs.create(json_object(MAX_BODY)))

    @table.post(
        "/outbound-subs/parse",
        "The outbounds a subscription URL would give; nothing is stored",
        form=True,
        effect=EGRESS,
        body={"url": "string", "allowPrivate": "boolean", "tagPrefix": "string"},
    )
    def parse_sub():
        return subs.parse(json_object(MAX_BODY))

    @table.post(
        "/outboundFromLink",
        "The outbound a share link (form link) describes; nothing is fetched or stored",
        form=True,
        effect=READ,
        body={"link": "string"},
    )
    def outbound_from_link():
        return subs.from_link(json_object(MAX_BODY))

    @table.post(
        "/outbound-subs/<id>",
        "Change an outbound subscription (absent fields keep their value)",
        resource="core",
        effect=EGRESS,
        form=True,
        body=SUB_FORM,
    )
    def update_sub(id):
        return Reply("outbound subscription saved", subs.update(id, json_object(MAX_BODY)))

    @table.delete("/outbound-subs/<id>", "Delete an outbound subscription", resource="core")
    def delete_sub(id):
        subs.delete(id)
        return Reply("outbound subscription deleted")

    @table.post("/outbound-subs/<id>/del", "Delete an outbound subscription", resource="core")
    def delete_sub_alias(id):
        subs.delete(id)
        return Reply("outbound subscription deleted")

    @table.post(
        "/outbound-subs/<id>/refresh",
        "Fetch an outbound subscription now; its outbounds",
        resource="core",
        effect=EGRESS,
    )
    def refresh_sub(id):
        return Reply("outbound subscription refreshed", subs.refresh(id))

    @table.post(
        "/outbound-subs/<id>/move",
        "Raise (form dir=up) or lower an outbound subscription's priority",
        resource="core",
        form=True,
        body={"dir": "string"},
    )
    def move_sub(id):
        subs.move(id, json_object(MAX_BODY).get("dir"))
        return Reply("outbound subscription moved")

    @table.post(
        "/tunnel/<action>",
        "The WARP tunnel: data, reg (form privateKey, publicKey), config, license, del",
        resource="core",
        effect=EGRESS,
        form=True,
        body={"privateKey": "string", "publicKey": "string", "license": "string"},
    )
    def tunnel(action):
        return needs.warp.act(action, json_object(MAX_BODY))

    @table.post(
        "/vpn/<action>",
        "The VPN provider: countries, servers (form countryId), reg (form token), setKey "
        "(form key), data, del",
        resource="core",
        effect=EGRESS,
        form=True,
        body={"countryId": "integer", "token": "string", "key": "string"},
    )
    def vpn(action):
        return needs.vpn.act(action, json_object(MAX_BODY))

    return table
