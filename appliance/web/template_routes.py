"""Routes of /panel/api/sub/templates: the admin's templates of subscription formats.

A preview answers the chosen client's whole configuration, secrets included, so it is
not a read a read-scope token may make, though it changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.web.client_routes import link_address
from appliance.web.http import Reply, json_object
from appliance.web.routes import RouteTable

MAX_BODY = 256 * 1024
SAVE_BODY = {"template": "string"}
PREVIEW_BODY = {"email": "string", "template": "string"}

if TYPE_CHECKING:
    from appliance.services.admin.settings import Settings
    from appliance.services.clients.sub_templates import SubTemplates


@dataclass(frozen=True)
class TemplateRouteNeeds:
    templates: SubTemplates
    settings: Settings  # the subscription domain previews point their links to


def template_routes(needs: TemplateRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/sub/templates", "subscription templates")
    templates = needs.templates

    @table.get(
        "/list",
        "Each format's template (singbox, clash, json, page): its text (empty: built-in), "
        "its file in the data directory and the values it may read",
    )
    def list_templates():
        return templates.list()

    @table.post(
        "/save/<format>",
        "Check and store a format's template (empty: the built-in format); refused with "
        "the sandbox's, the parser's or the app's words",
        resource="settings",
        body=SAVE_BODY,
    )
    def save(format):
        return Reply("template saved", templates.save(format, json_object(MAX_BODY)))

    @table.post(
        "/preview/<format>",
        "Render a template (the one sent, else the stored one) for a client's "
        "subscription and check it like a save: {format, body, custom}",
        body=PREVIEW_BODY,
    )
    def preview(format):
        return templates.preview(format, json_object(MAX_BODY), link_address(needs.settings))

    @table.post(
        "/reset/<format>",
        "Back to the template file in the data directory when there is a usable one, "
        "else the built-in format",
        resource="settings",
    )
    def reset(format):
        return Reply("template reset", templates.reset(format))

    return table
