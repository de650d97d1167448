"""Routes of /panel/api/inbounds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.web.client_routes import link_address, page_host, query_text
from appliance.web.http import Reply, body, json_object
from appliance.web.routes import RouteTable

# Changes to inbounds that also change the clients shown on them.
BOTH = ("inbounds", "clients")
# Deleting an inbound deletes its hosts with it.
WITH_HOSTS = (*BOTH, "hosts")
INBOUND_BODY = {
    "remark": "string",
    "listen": "string",
    "port": "integer",
    "protocol": "string",
    "enable": "boolean",
    "expiryTime": "integer",
    "total": "integer",
    "tag": "string",
    "settings": "object",
    "streamSettings": "object",
    "sniffing": "object",
}
# A push of 100,000 clients' totals, about 70 bytes each.
PUSH_BODY = 16 << 20

if TYPE_CHECKING:
    from appliance.services.admin.settings import Settings
    from appliance.services.clients.bulk import ClientBulk
    from appliance.services.clients.sub_address import SubscriptionAddress
    from appliance.services.clients.subscriptions import Subscriptions
    from appliance.services.clients.usage import UsageHistory
    from appliance.services.inbounds.fallbacks import Fallbacks
    from appliance.services.inbounds.records import Inbounds
    from appliance.services.nodes.master_traffic import MasterTraffic


@dataclass(frozen=True)
class InboundRouteNeeds:
    inbounds: Inbounds
    fallbacks: Fallbacks  # the fallback rules of master inbounds
    client_bulk: ClientBulk  # deleting an inbound's clients
    subscriptions: Subscriptions  # an inbound's share links, client by client
    settings: Settings  # the subscription domain the links point to
    sub_address: SubscriptionAddress  # each client's subscription URL
    master_traffic: MasterTraffic  # totals a managing panel pushes down
    usage: UsageHistory  # traffic hour by hour and day by day


def inbound_routes(needs: InboundRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/inbounds", "inbounds")
    inbounds = needs.inbounds

    @table.get("/list", "Every inbound with its client stats")
    def list_inbounds():
        return inbounds.list()

    @table.get("/list/slim", "Every inbound with clients reduced to email, enable, comment")
    def list_slim():
        return inbounds.list(slim=True)

    @table.get("/options", "Inbounds as choices for client forms")
    def options():
        return inbounds.options()

    @table.get("/get/<id>", "One inbound")
    def get(id):
        return inbounds.get(id)

    @table.post(
        "/add", "Create an inbound (with no clients)", resource="inbounds", body=INBOUND_BODY
    )
    def add():
        return Reply("inbound created", inbounds.add(body(1 << 20)))

    @table.post(
        "/update/<id>",
        "Replace an inbound's fields",
        resource=BOTH,
        body=INBOUND_BODY,
    )
    def update(id):
        return Reply("inbound updated", inbounds.update(id, body(1 << 20)))

    @table.post(
        "/clone/<id>",
        "Copy an inbound to another port, with a new tag and no clients",
        resource="inbounds",
        body={"port": "integer", "remark": "string"},
    )
    def clone(id):
        return Reply("inbound cloned", inbounds.clone(id, json_object(8192)))

    @table.post("/del/<id>", "Delete an inbound; its clients stay, detached", resource=WITH_HOSTS)
    def delete(id):
        inbounds.delete(id)
        return Reply("inbound deleted")

    @table.post(
        "/bulkDel", "Delete several inbounds", resource=WITH_HOSTS, body={"ids": "integer[]"}
    )
    def bulk_delete():
        return inbounds.bulk_delete(json_object(1 << 20).get("ids"))

    @table.post(
        "/setEnable/<id>",
        "Enable or disable an inbound",
        resource="inbounds",
        body={"enable": "boolean"},
    )
    def set_enable(id):
        inbounds.set_enable(id, json_object(8192).get("enable"))
        return Reply("inbound updated")

    @table.post("/<id>/resetTraffic", "Zero an inbound's own counters", resource="inbounds")
    def reset_traffic(id):
        inbounds.reset_traffic(id)
        return Reply("inbound traffic reset")

    @table.get(
        "/<id>/history",
        "An inbound's traffic in buckets: ?step=hour|day, ?from= and ?to= in ms "
        "(the last 24 hours or 30 days by default); buckets without traffic are left out",
    )
    def history(id):
        return needs.usage.inbound(id, query_text())

    @table.post("/<id>/delAllClients", "Delete every client attached to an inbound", resource=BOTH)
    def delete_all_clients(id):
        return {"deleted": needs.client_bulk.delete_of_inbound(id)}

    @table.post("/resetAllTraffics", "Zero every inbound's counters", resource="inbounds")
    def reset_all_traffics():
        inbounds.reset_all_traffics()
        return Reply("all inbound traffic reset")

    @table.post(
        "/pushClientTraffics",
        "Panel to panel: the managing panel's client totals, kept beside this panel's own "
        "counters (never merged into them) for display and the local quota check",
        max_body=PUSH_BODY,
        body={"masterGuid": "string", "traffics": "object[]"},
        routine=True,
    )
    def push_client_traffics():
        return needs.master_traffic.push(json_object(PUSH_BODY))

    @table.post(
        "/import",
        "Create an inbound from its exported JSON (form field data)",
        resource="inbounds",
        form=True,
        body={"data": "string"},
    )
    def import_inbound():
        return Reply("inbound imported", inbounds.import_(json_object(1 << 20).get("data")))

    @table.get(
        "/<id>/links",
        "A page of an inbound's clients (page, pageSize up to 1000), each with its share "
        "links on that inbound and its subscription URL (subUrl)",
    )
    def links(id):
        result = needs.subscriptions.inbound_links(id, query_text(), link_address(needs.settings))
        host = page_host()
        for item in result["items"]:
            item["subUrl"] = needs.sub_address.url(item.pop("subId"), host)
        return result

    @table.get("/<id>/fallbacks", "Fallback rules of a master inbound")
    def list_fallbacks(id):
        return needs.fallbacks.list(id)

    @table.post(
        "/<id>/fallbacks",
        "Replace the fallback rules of a master inbound",
        resource="inbounds",
        body={"fallbacks": "object[]"},
    )
    def replace_fallbacks(id):
        return Reply("fallbacks saved", needs.fallbacks.replace(id, body(1 << 20)))

    return table
