"""Routes of /panel/api/clients: client records, their traffic, addresses and links, and
changes to many clients at once. Groups have their own routes (group_routes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bottle import request

from appliance.errors import ServiceError
from appliance.runtime.wsgi import request_host
from appliance.web.http import JsonStream, JsonText, Reply, body, json_object
from appliance.web.routes import READ, RouteTable

BULK_BODY = 64 << 20
REFUSE_BODY = 1 << 20
EMAILS = {"emails": "string[]"}
EMAILS_INBOUNDS = {"emails": "string[]", "inboundIds": "integer[]"}
CLIENT_AND_INBOUNDS = {"client": "object", "inboundIds": "integer[]"}

if TYPE_CHECKING:
    from appliance.services.admin.settings import Settings
    from appliance.services.clients.bulk import ClientBulk
    from appliance.services.clients.counters import CounterFeed
    from appliance.services.clients.devices import Devices
    from appliance.services.clients.ips import ClientIps
    from appliance.services.clients.query import ClientQuery
    from appliance.services.clients.records import Clients
    from appliance.services.clients.sub_address import SubscriptionAddress
    from appliance.services.clients.subscriptions import Subscriptions
    from appliance.services.clients.usage import UsageHistory
    from appliance.services.nodes.master_traffic import MasterTraffic
    from appliance.services.nodes.traffic import NodeTraffic


@dataclass(frozen=True)
class ClientRouteNeeds:
    clients: Clients
    query: ClientQuery
    bulk: ClientBulk
    subscriptions: Subscriptions  # share links
    settings: Settings  # the subscription domain the links point to
    sub_address: SubscriptionAddress  # each client's subscription URL
    node_traffic: NodeTraffic  # who is online where, from this panel's core and its nodes
    counter_feed: CounterFeed  # the counters a managing panel polls
    master_traffic: MasterTraffic  # totals a managing panel pushed down
    usage: UsageHistory  # traffic hour by hour and day by day
    devices: Devices  # the devices each subscription was served to
    client_ips: ClientIps  # addresses this panel's core saw, refusals a managing panel judged


def client_routes(needs: ClientRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/clients", "clients")
    clients, query, bulk = needs.clients, needs.query, needs.bulk

    @table.get("/list", "Every client with inboundIds and traffic")
    def list_clients():
        return query.list_all()

    @table.get(
        "/list/paged",
        "A page of slim client rows, filtered and sorted, with a summary and its "
        "summaryVersion; ?summaryVersion=V leaves out a summary still at version V",
    )
    def paged():
        return JsonText(query.paged_json(query_text()))

    @table.get(
        "/get/<email>",
        "One client with its inbound ids, external links and subscription URL (subUrl)",
    )
    def get(email):
        found = clients.get(email)
        sub_url = needs.sub_address.url(found["client"]["subId"], page_host())
        return {**found, "subUrl": sub_url}

    @table.post(
        "/add",
        "Create a client attached to at least one inbound",
        resource="clients",
        body=CLIENT_AND_INBOUNDS,
    )
    def add():
        return Reply("client created", clients.add(json_object(1 << 20)))

    @table.post(
        "/update/<email>",
        "Replace a client record (not a patch)",
        resource="clients",
        body={"<client field>": "value"},
    )
    def update(email):
        return Reply("client updated", clients.update(email, json_object(1 << 20)))

    @table.post(
        "/del/<email>", "Delete a client; ?keepTraffic=1 keeps its counters", resource="clients"
    )
    def delete(email):
        keep = request.query.get("keepTraffic", "0")
        if keep not in ("0", "1", "true", "false"):
            raise ServiceError("keepTraffic must be 0 or 1")
        clients.delete(email, keep in ("1", "true"))
        return Reply("client deleted")

    @table.post(
        "/<email>/attach",
        "Attach a client to more inbounds",
        resource="clients",
        body={"inboundIds": "integer[]"},
    )
    def attach(email):
        return Reply("client attached", clients.attach(email, json_object(8192)))

    @table.post(
        "/<email>/detach",
        "Detach a client from inbounds (the record stays)",
        resource="clients",
        body={"inboundIds": "integer[]"},
    )
    def detach(email):
        return Reply("client detached", clients.detach(email, json_object(8192)))

    @table.post(
        "/<email>/externalLinks",
        "Replace a client's external links",
        resource="clients",
        body={"externalLinks": "object[]"},
    )
    def external_links(email):
        clients.set_external_links(email, json_object(1 << 20))
        return Reply("external links saved")

    @table.post("/resetAllTraffics", "Zero every client's counters", resource="clients")
    def reset_all():
        bulk.reset_all_traffics()
        return Reply("all client traffic reset")

    @table.post(
        "/delDepleted", "Delete clients whose quota is used up or expiry passed", resource="clients"
    )
    def delete_depleted():
        return {"deleted": bulk.delete_depleted()}

    @table.post("/delOrphans", "Delete clients attached to no inbound", resource="clients")
    def delete_orphans():
        return {"deleted": bulk.delete_orphans()}

    @table.get("/export", "Every client as {client, inboundIds}")
    def export():
        return JsonStream(query.export_json())

    @table.post(
        "/import",
        "Restore clients from an export (field data, JSON text)",
        resource="clients",
        max_body=BULK_BODY,
        body={"data": "string"},
    )
    def import_clients():
        return bulk.import_(json_object(BULK_BODY))

    @table.post(
        "/bulkAdjust",
        "Add days and bytes to many clients",
        resource="clients",
        body={
            "emails": "string[]",
            "addDays": "integer",
            "addBytes": "integer",
            "deviceLimit": "integer",
        },
    )
    def bulk_adjust():
        return bulk.bulk_adjust(json_object(BULK_BODY))

    @table.post(
        "/bulkDel",
        "Delete many clients",
        resource="clients",
        max_body=BULK_BODY,
        body={"emails": "string[]", "keepTraffic": "boolean"},
    )
    def bulk_delete():
        return bulk.bulk_delete(json_object(BULK_BODY))

    @table.post(
        "/bulkCreate",
        "Create many clients from [{client, inboundIds}]",
        resource="clients",
        max_body=BULK_BODY,
    )
    def bulk_create():
        return bulk.bulk_create(body(BULK_BODY))

    @table.post(
        "/bulkEnable",
        "Switch many clients on or off",
        resource="clients",
        max_body=BULK_BODY,
        body={"emails": "string[]", "enable": "boolean"},
    )
    def bulk_enable():
        return bulk.bulk_enable(json_object(BULK_BODY))

    @table.post(
        "/bulkAttach",
        "Attach many clients to inbounds",
        resource="clients",
        max_body=BULK_BODY,
        body=EMAILS_INBOUNDS,
    )
    def bulk_attach():
        return bulk.bulk_attach(json_object(BULK_BODY))

    @table.post(
        "/bulkDetach",
        "Detach many clients from inbounds",
        resource="clients",
        max_body=BULK_BODY,
        body=EMAILS_INBOUNDS,
    )
    def bulk_detach():
        return bulk.bulk_detach(json_object(BULK_BODY))

    @table.post(
        "/bulkResetTraffic",
        "Zero many clients' counters",
        resource="clients",
        max_body=BULK_BODY,
        body=EMAILS,
    )
    def bulk_reset_traffic():
        return bulk.bulk_reset_traffic(json_object(BULK_BODY))

    @table.post(
        "/resetTraffic/<email>", "Zero a client's counters and re-enable it", resource="clients"
    )
    def reset_traffic(email):
        clients.reset_traffic(email)
        return Reply("client traffic reset")

    @table.post(
        "/updateTraffic/<email>",
        "Set a client's counters",
        resource="clients",
        body={"upload": "integer", "download": "integer"},
    )
    def update_traffic(email):
        clients.update_traffic(email, json_object(8192))
        return Reply("client traffic updated")

    @table.post(
        "/ips/<email>",
        "Addresses a client connected from, as 'ip (timestamp)'; seenBy: each sighting "
        "with the node that saw it (nodeId null: this panel)",
        effect=READ,
    )
    def ips(email):
        return Reply("", clients.ips(email), {"seenBy": clients.ips_seen_by(email)})

    @table.get(
        "/devices/<email>",
        "Devices the client's subscription was served to (hwid, os, osVersion, model, "
        "userAgent, address, firstSeen and lastSeen in unix ms)",
    )
    def devices(email):
        return needs.devices.of_email(email)

    @table.post(
        "/devices/<email>/del",
        "Forget one device of the client's subscription, freeing its place",
        resource="clients",
        body={"hwid": "string"},
    )
    def delete_device(email):
        needs.devices.remove(email, json_object(8192))
        return Reply("device removed")

    @table.post(
        "/devices/<email>/clear",
        "Forget every device of the client's subscription",
        resource="clients",
    )
    def clear_devices(email):
        return Reply("devices cleared", {"removed": needs.devices.clear(email)})

    @table.post("/clearIps/<email>", "Forget a client's addresses", resource="clients")
    def clear_ips(email):
        clients.clear_ips(email)
        return Reply("client addresses cleared")

    @table.post(
        "/onlines",
        "Emails connected within the heartbeat window, here or on any node, each once",
        effect=READ,
    )
    def onlines():
        return query.online_emails()

    @table.post(
        "/onlinesByGuid",
        "Online emails per panel guid: this panel's own, then each node reporting",
        effect=READ,
    )
    def onlines_by_guid():
        return needs.node_traffic.onlines_by_guid()

    @table.post(
        "/clientIpsByGuid",
        "Client addresses per panel guid: this panel's, then each node reporting",
        effect=READ,
    )
    def client_ips_by_guid():
        return needs.node_traffic.client_ips_by_guid()

    @table.post(
        "/activeInbounds",
        "Inbound tags that carried traffic in the window, per guid; nodes not reporting are absent",
        effect=READ,
    )
    def active_inbounds():
        return needs.node_traffic.active_inbounds_by_guid()

    @table.post(
        "/lastOnline",
        "Last time each client carried traffic here or on a node (unix seconds)",
        effect=READ,
    )
    def last_online():
        return query.last_online()

    @table.post(
        "/counters",
        "Panel to panel: absolute traffic counters of clients that moved since the cursor "
        "of the last answer (all with an empty or unknown cursor) and of every inbound",
        body={"cursor": "string"},
        effect=READ,
    )
    def counters():
        return needs.counter_feed.counters(json_object(8192))

    @table.post(
        "/recentIps",
        "Panel to panel: email -> ip -> unix seconds of the addresses this panel's core saw "
        "within the active window (the latest 50,000 at most)",
        effect=READ,
    )
    def recent_ips():
        return needs.client_ips.recent()

    @table.post(
        "/refuseIps",
        "Panel to panel: write the addresses a managing panel judged over a client's IP "
        "limit to this panel's ip-limit.log; entries that name no client here or no address "
        "are refused and listed",
        max_body=REFUSE_BODY,
        body={"bans": "object[]"},
        routine=True,
    )
    def refuse_ips():
        data = json_object(REFUSE_BODY)
        if "bans" not in data:
            raise ServiceError("send {bans: [{email, ip}]}")
        result = needs.client_ips.refuse(data["bans"])
        return Reply(f"{result['written']} address(es) written to the IP limit log", result)

    @table.get(
        "/traffic/<email>",
        "A client's traffic record; masterTraffic: the managing panel's totals, on a node",
    )
    def traffic(email):
        return {**clients.traffic(email), "masterTraffic": needs.master_traffic.view(email)}

    @table.get(
        "/history/<email>",
        "A client's traffic in buckets: ?step=hour|day, ?from= and ?to= in ms "
        "(the last 24 hours or 30 days by default); buckets without traffic are left out",
    )
    def history(email):
        return needs.usage.client(email, query_text())

    @table.get("/subLinks/<subId>", "Share links a subscription id serves (not base64)")
    def sub_links(subId):
        return needs.subscriptions.sub_links(subId, link_address(needs.settings))

    @table.get("/links/<email>", "Share links of one client on every attached inbound")
    def links(email):
        return needs.subscriptions.email_links(email, link_address(needs.settings))

    return table


def link_address(settings: Settings) -> str:
    """Where links made in the panel point: the subscription domain when set, else the
    host name the panel was reached by (as a subscription does with its own)."""
    return settings.get("subDomain") or page_host()


def page_host() -> str:
    """The host name (without port) the panel was reached by."""
    return request_host(request.environ)[0]


def query_text() -> dict[str, str]:
    """The query parameters as text (the last of repeated ones). The server hands them over
    as latin-1; bytes that are not UTF-8 are refused by name instead of raising."""
    params = {}
    for name, value in request.query.allitems():
        try:
            params[name.encode("latin-1").decode("utf-8")] = value.encode("latin-1").decode("utf-8")
        except UnicodeError:
            raise ServiceError(
                f"the query parameter {name.encode('latin-1').decode('utf-8', 'replace')!r} "
                "is not UTF-8 text"
            ) from None
    return params
