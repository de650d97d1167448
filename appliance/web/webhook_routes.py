"""Routes of /panel/api/webhooks: endpoints events are sent to, and what was sent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.web.http import Reply, json_object
from appliance.web.routes import EGRESS, RouteTable

WEBHOOK_BODY = {
    "name": "string",
    "url": "string",
    "secret": "string",
    "events": "string[]",
    "enabled": "boolean",
    "allowPrivate": "boolean",
    "withSecrets": "boolean",
    "batch": "boolean",
}
MAX_BODY = 65536

if TYPE_CHECKING:
    from appliance.services.webhooks.endpoints import Webhooks


@dataclass(frozen=True)
class WebhookRouteNeeds:
    webhooks: Webhooks


def webhook_routes(needs: WebhookRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/webhooks", "webhooks")
    webhooks = needs.webhooks

    @table.get("/list", "Every webhook endpoint with counts of its deliveries")
    def list_webhooks():
        return webhooks.list()

    @table.get("/deliveries/<id>", "The latest deliveries of an endpoint, newest first")
    def deliveries(id):
        return webhooks.deliveries(id)

    @table.post(
        "/add",
        "Add an endpoint (its secret is never shown again)",
        resource="webhooks",
        body=WEBHOOK_BODY,
        effect=EGRESS,
    )
    def add():
        return Reply("webhook added", webhooks.add(json_object(MAX_BODY)))

    @table.post(
        "/update/<id>",
        "Replace an endpoint's fields; an empty secret keeps the stored one",
        resource="webhooks",
        body=WEBHOOK_BODY,
        effect=EGRESS,
    )
    def update(id):
        return Reply("webhook updated", webhooks.update(id, json_object(MAX_BODY)))

    @table.post("/del/<id>", "Delete an endpoint and its deliveries", resource="webhooks")
    def delete(id):
        return Reply(webhooks.delete(id))

    @table.post(
        "/test/<id>",
        "Send an endpoint.test event to one endpoint",
        resource="webhooks",
        effect=EGRESS,
    )
    def test(id):
        return Reply("test event queued", webhooks.test(id))

    return table
