"""Routes of /panel/api/clients/groups: named groups of clients.

A group is a label on client records, so these routes change clients (and tell browsers
so), but they call only the groups service and are kept apart from the client routes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.web.client_routes import BULK_BODY, EMAILS
from appliance.web.http import json_object
from appliance.web.routes import RouteTable

if TYPE_CHECKING:
    from appliance.services.clients.groups import Groups


@dataclass(frozen=True)
class GroupRouteNeeds:
    groups: Groups


def group_routes(needs: GroupRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/clients/groups", "clients")
    groups = needs.groups

    @table.get("", "Groups with client counts")
    def list_groups():
        return groups.list()

    @table.get("/<name>/emails", "Emails of a group's clients")
    def group_emails(name):
        return groups.emails(name)

    @table.post("/create", "Create an empty group", resource="clients", body={"name": "string"})
    def create_group():
        return groups.create(json_object(8192))

    @table.post(
        "/rename",
        "Rename a group on every client",
        resource="clients",
        body={"oldName": "string", "newName": "string"},
    )
    def rename_group():
        return groups.rename(json_object(8192))

    @table.post(
        "/delete",
        "Delete a group; its clients stay, ungrouped",
        resource="clients",
        body={"name": "string"},
    )
    def delete_group():
        return groups.delete(json_object(8192))

    @table.post(
        "/bulkAdd",
        "Put clients in a group (created if unknown)",
        resource="clients",
        max_body=BULK_BODY,
        body={"emails": "string[]", "group": "string"},
    )
    def group_bulk_add():
        return groups.bulk_add(json_object(BULK_BODY))

    @table.post(
        "/bulkRemove",
        "Take clients out of their group",
        resource="clients",
        max_body=BULK_BODY,
        body=EMAILS,
    )
    def group_bulk_remove():
        return groups.bulk_remove(json_object(BULK_BODY))

    return table
