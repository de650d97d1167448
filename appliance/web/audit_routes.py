"""Routes of /panel/api/audit: the audit log, a page at a time or as a download.

Both only read, so they are not themselves written to the log; an API token of the
`read` scope may call them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bottle import HTTPResponse, request

from appliance.web.routes import RouteTable

if TYPE_CHECKING:
    from appliance.services.admin.audit import AuditLog

FILTERS = "?page=&pageSize=&actor= (exact) &route= (any part of the route's pattern)"


@dataclass(frozen=True)
class AuditRouteNeeds:
    audit: AuditLog


def audit_routes(needs: AuditRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/audit", "audit")

    @table.get("/list", f"Audit entries, newest first: {{items, total, page, pageSize}}; {FILTERS}")
    def audit_list():
        return needs.audit.page(_query())

    @table.get(
        "/export",
        "Every audit entry the filters select (actor, route), newest first, as JSON lines",
        raw=True,
    )
    def audit_export():
        lines = needs.audit.export_lines(_query())
        filename = time.strftime("audit-%Y%m%d-%H%M%S.jsonl", time.gmtime())
        return HTTPResponse(
            (line.encode() for line in lines),
            headers={
                "Content-Type": "application/x-ndjson; charset=utf-8",
                "Content-Disposition": f'attachment; filename="{filename}"',
                "Cache-Control": "no-store",
            },
        )

    return table


def _query() -> dict:
    return {key: request.query.getunicode(key) for key in ("page", "pageSize", "actor", "route")}
