"""Routes of /panel/api/hosts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.web.http import Reply, json_object
from appliance.web.routes import RouteTable

HOST_BODY = {
    "inboundId": "integer",
    "remark": "string",
    "address": "string",
    "port": "integer",
    "security": "string",
    "sni": "string",
    "tags": "string[]",
    "enable": "boolean",
}
IDS = {"ids": "integer[]"}

if TYPE_CHECKING:
    from appliance.services.inbounds.hosts import Hosts


@dataclass(frozen=True)
class HostRouteNeeds:
    hosts: Hosts


def host_routes(needs: HostRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/hosts", "hosts")
    hosts = needs.hosts

    @table.get("/list", "Every host, by inbound, then sort order")
    def list_hosts():
        return hosts.list()

    @table.get("/get/<id>", "One host")
    def get(id):
        return hosts.get(id)

    @table.get("/byInbound/<inboundId>", "The hosts of one inbound, in sort order")
    def by_inbound(inboundId):
        return hosts.by_inbound(inboundId)

    @table.get("/tags", "Every tag used by some host, sorted")
    def tags():
        return hosts.tags()

    @table.post(
        "/add", "Create a host at the end of its inbound's list", resource="hosts", body=HOST_BODY
    )
    def add():
        return Reply("host created", hosts.add(json_object(65536)))

    @table.post(
        "/update/<id>",
        "Replace a host's fields (its inbound and position stay)",
        resource="hosts",
        body=HOST_BODY,
    )
    def update(id):
        return Reply("host updated", hosts.update(id, json_object(65536)))

    @table.post("/del/<id>", "Delete a host", resource="hosts")
    def delete(id):
        hosts.delete(id)
        return Reply("host deleted")

    @table.post(
        "/setEnable/<id>", "Enable or disable a host", resource="hosts", body={"enable": "boolean"}
    )
    def set_enable(id):
        hosts.set_enable(id, json_object(8192).get("enable"))
        return Reply("host updated")

    @table.post(
        "/reorder",
        "Order the hosts of one inbound: position in ids = sortOrder",
        resource="hosts",
        body=IDS,
    )
    def reorder():
        hosts.reorder(json_object(1 << 20))
        return Reply("hosts reordered")

    @table.post(
        "/bulk/setEnable",
        "Enable or disable several hosts; unknown ids are skipped",
        resource="hosts",
        body={"ids": "integer[]", "enable": "boolean"},
    )
    def bulk_set_enable():
        return Reply("hosts updated", hosts.bulk_set_enable(json_object(1 << 20)))

    @table.post(
        "/bulk/del", "Delete several hosts; unknown ids are skipped", resource="hosts", body=IDS
    )
    def bulk_delete():
        return Reply("hosts deleted", hosts.bulk_delete(json_object(1 << 20)))

    return table
