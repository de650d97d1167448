"""The OpenAPI 3 document, generated from the route table at request time.

Nothing here is written by hand per route: paths, methods, summaries, path parameters,
request bodies and the security requirement all come from `Route` entries, so a route
that is served is a route that is described. Three extensions say what the table decides
for each operation: `x-effect`, what a call does (`read`, `write`, or `egress`: the panel
opens a connection somewhere), `x-token-scopes`, the API token scopes that may call it,
and `x-audited`, whether a call is written to the audit log; the last two follow from
the first.
"""

from __future__ import annotations

import json
import re

from bottle import HTTPResponse

from appliance import __version__
from appliance.services.accounts.tokens import SCOPES
from appliance.web.routes import Route, RouteTable, scope_allows

PARAM = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)(?::[^>]*)?>")
ENVELOPE = {
    "type": "object",
    "required": ["success", "msg", "obj"],
    "properties": {
        "success": {"type": "boolean"},
        "msg": {"type": "string"},
        "obj": {},
    },
}
SCALARS = {"string", "integer", "boolean", "number", "object"}


def openapi_document(routes: list[Route]) -> dict:
    paths: dict[str, dict] = {}
    for route in routes:
        path = PARAM.sub(r"{\1}", route.path) or "/"
        operation: dict = {
            "summary": route.summary,
            "operationId": f"{route.method.lower()}{_camel(path)}",
            "responses": {
                "200": {
                    "description": "the envelope; success false carries msg",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}
                    },
                }
            },
        }
        if route.tags:
            operation["tags"] = list(route.tags)
        params = PARAM.findall(route.path)
        if params:
            operation["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in params
            ]
        if route.body is not None:
            media = "application/x-www-form-urlencoded" if route.form else "application/json"
            operation["requestBody"] = {"content": {media: {"schema": _schema(route.body)}}}
        if not route.auth:
            operation["security"] = []
        else:
            operation["x-token-scopes"] = [s for s in SCOPES if scope_allows(s, route)]
        operation["x-effect"] = route.effect
        operation["x-audited"] = route.acts
        paths.setdefault(path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.0.3",
        "info": {"title": "appliance panel API", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": {"Envelope": ENVELOPE},
            "securitySchemes": {
                "session": {"type": "apiKey", "in": "cookie", "name": "appliance_session"},
                "bearer": {"type": "http", "scheme": "bearer"},
            },
        },
        "security": [{"session": []}, {"bearer": []}],
    }


def openapi_routes(routes: list[Route]) -> RouteTable:
    table = RouteTable("/panel/api", "meta")

    @table.get("/openapi.json", "This document (plain JSON, not in the envelope)", raw=True)
    def openapi():
        document = json.dumps(openapi_document(table.routes + routes))
        return HTTPResponse(document, headers={"Content-Type": "application/json"})

    return table


def _schema(fields: dict) -> dict:
    properties = {}
    for name, kind in fields.items():
        if kind.endswith("[]"):
            item = kind[:-2]
            properties[name] = {
                "type": "array",
                "items": {"type": item if item in SCALARS else "object"},
            }
        else:
            properties[name] = {"type": kind if kind in SCALARS else "string"}
    return {"type": "object", "properties": properties}


def _camel(path: str) -> str:
    words = re.split(r"[^A-Za-z0-9]+", path)
    return "".join(word[:1].upper() + word[1:] for word in words if word)
