"""The audit log: who changed what in the panel, from where, when, and how it ended.

One entry per call of a route that changes something, and per sign-in and sign-out,
written by the API plugin once the route has answered; routes never write entries
themselves, so none can be forgotten. What an entry may hold is decided here, in one
place, so that no route can carry a secret into the log:

- the route's pattern, and the concrete path rebuilt from it, where every path parameter
  not known to name a record (`RECORD_PARAMS`, `PLAIN_PARAMS`) shows as `<redacted>`: a
  subscription id in a path is a credential, and a parameter added later is redacted
  until someone decides otherwise;
- the record concerned: the record-naming path parameters (`email=alice@example.com`);
- the names of the body's top-level fields, never their values, and only names shaped
  like field names (a body whose keys are data leaves none);
- for a refusal, its message, with every value the body gave a secret-looking field cut
  out, since a message may quote what it refused.

Request bodies are never stored. Entries older than `auditRetentionDays` are pruned by a
background job.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pony.orm import db_session

from appliance.domain.parse import parse_int
from appliance.errors import ServiceError
from appliance.store import audit_sql

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 200
EXPORT_BATCH = 1000
# Path parameters that name the record a call concerns, and ones that are plain values
# (a line count, a chart bucket); every other parameter is redacted.
RECORD_PARAMS = ("id", "inboundId", "email", "name", "tag", "version", "fileName")
PLAIN_PARAMS = frozenset({"count", "metric", "bucket", "action", "format"})
REDACTED = "<redacted>"
PARAM = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)(?::[^>]*)?>")
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
MAX_FIELDS = 50
# Body fields whose values are secrets (passwords, tokens, TOTP secrets and codes,
# subscription ids, client UUIDs and keys): cut out of any refusal message that quotes them.
SECRET_FIELD = re.compile(r"pass|token|secret|uuid|subid|auth|key|psk|code|^id$", re.IGNORECASE)
MIN_BARE_SECRET_CHARS = 8


@dataclass(frozen=True)
class Action:
    """One call as the API plugin saw it; `record` keeps only what may be kept."""

    actor: str
    actor_kind: str  # "admin" (a session or a sign-in attempt), "token", or "" unknown
    method: str
    route: str  # the route's pattern, e.g. /panel/api/clients/update/<email>
    params: dict[str, str]
    address: str
    status: int
    success: bool
    message: str = ""  # the refusal's message; successes keep none
    body: Any = field(default=None, repr=False)  # the parsed body, when the route read one


class AuditLog:
    def __init__(self, store, settings, clock=time.time):
        self.store = store
        self.settings = settings
        self.clock = clock

    def record(self, action: Action) -> None:
        """Write one entry for `action`, in a transaction of its own."""
        with db_session:
            self.store.entities.AuditEntry(
                at=int(self.clock() * 1000),
                actor=_text(action.actor, 64),
                actor_kind=action.actor_kind,
                method=action.method,
                route=_text(action.route, 255),
                path=_text(concrete_path(action.route, action.params), 1024),
                target=_text(record_names(action.params), 1024),
                address=_text(action.address, 64),
                success=action.success,
                status=action.status,
                message="" if action.success else _text(scrub(action.message, action.body), 1024),
                fields=_text(",".join(field_names(action.body)), 1024),
            )

    def page(self, query: dict) -> dict:
        """Entries newest first, a page at a time, filtered by actor (exact) and route
        (any part of its pattern, letter case ignored)."""
        page = parse_int(query.get("page"), "page", 1, 10**9, 1)
        size = parse_int(query.get("pageSize"), "pageSize", 1, PAGE_SIZE_MAX, PAGE_SIZE_DEFAULT)
        where, params = _filters(query)
        with db_session:
            total = audit_sql.count(self.store, where, params)
            rows = audit_sql.newest_page(self.store, where, params, size, (page - 1) * size)
        return {
            "items": [_view(row) for row in rows],
            "total": int(total),
            "page": page,
            "pageSize": size,
        }

    def export_lines(self, query: dict) -> Iterator[str]:
        """Every entry the filters select, newest first, one JSON object per line; read
        a batch at a time, so a long log never sits in memory whole. The filters are
        checked at once, before the first line is asked for."""
        where, params = _filters(query)
        return self._lines(where, params)

    def _lines(self, where: str, params: list) -> Iterator[str]:
        before = None
        while True:
            with db_session:
                rows = audit_sql.batch_before(self.store, where, params, before, EXPORT_BATCH)
            for row in rows:
                yield json.dumps(_view(row), ensure_ascii=False) + "\n"
            if len(rows) < EXPORT_BATCH:
                return
            before = rows[-1][0]

    def prune(self) -> int:
        """Delete entries older than the retention setting; returns how many went."""
        days = self.settings.get("auditRetentionDays")
        cutoff = int(self.clock() * 1000) - days * DAY_MS
        with db_session:
            removed = audit_sql.delete_before(self.store, cutoff)
        if removed:
            log.info("audit log: %d entries older than %d days removed", removed, days)
        return removed


def concrete_path(pattern: str, params: dict[str, str]) -> str:
    """The path as called, rebuilt from the route's pattern with only the parameters known
    to be harmless filled in."""

    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name in RECORD_PARAMS or name in PLAIN_PARAMS:
            return str(params.get(name, ""))
        return REDACTED

    return PARAM.sub(fill, pattern)


def record_names(params: dict[str, str]) -> str:
    return " ".join(f"{name}={params[name]}" for name in RECORD_PARAMS if name in params)


def field_names(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    names = [name for name in body if isinstance(name, str) and FIELD_NAME.fullmatch(name)]
    return names[:MAX_FIELDS]


def scrub(message: str, body: Any) -> str:
    """`message` without the values the body gave secret-looking fields: quoted as the
    refusals quote what they refuse, or, when long enough not to be a word of the message
    itself, anywhere and in part (a refusal may quote a long value cut short)."""
    for secret in sorted(_secret_values(body), key=len, reverse=True):
        for quoted in (json.dumps(secret, ensure_ascii=False), repr(secret), f"'{secret}'"):
            message = message.replace(quoted, REDACTED)
        if len(secret) >= MIN_BARE_SECRET_CHARS:
            message = _cut_prefixes(message, secret)
    return message


def _cut_prefixes(message: str, secret: str) -> str:
    """Replace every run of the message that begins the secret (its first
    MIN_BARE_SECRET_CHARS characters at least)."""
    head = secret[:MIN_BARE_SECRET_CHARS]
    kept, start = [], 0
    while (found := message.find(head, start)) >= 0:
        end = found + len(head)
        while (
            end < len(message)
            and end - found < len(secret)
            and (message[end] == secret[end - found])
        ):
            end += 1
        kept += [message[start:found], REDACTED]
        start = end
    return "".join(kept) + message[start:]


def _secret_values(value: Any, secret: bool = False) -> set[str]:
    """Values the body gives fields named like secrets, at any depth."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            found |= _secret_values(item, secret or bool(SECRET_FIELD.search(str(key))))
    elif isinstance(value, list):
        for item in value:
            found |= _secret_values(item, secret)
    elif secret and isinstance(value, str | int) and not isinstance(value, bool):
        text = value if isinstance(value, str) else str(value)
        if text:
            found.add(text)
    return found


def _filters(query: dict) -> tuple[str, list]:
    """The query's actor and route filters, checked, as `audit_sql.filters` clause."""
    actor = query.get("actor") or ""
    route = query.get("route") or ""
    if not isinstance(actor, str) or len(actor) > 64:
        raise ServiceError("actor must be a name of at most 64 characters")
    if not isinstance(route, str) or len(route) > 255:
        raise ServiceError("route must be a text of at most 255 characters")
    return audit_sql.filters(actor, route)


def _view(row: tuple) -> dict:
    (entry_id, at, actor, kind, method, route, path, target, address, success, status) = row[:11]
    message, fields = row[11:]
    return {
        "id": entry_id,
        "at": int(at),
        "actor": actor,
        "actorKind": kind,
        "method": method,
        "route": route,
        "path": path,
        "target": target,
        "address": address,
        "success": bool(success),
        "status": int(status),
        "msg": message,
        "fields": fields.split(",") if fields else [],
    }


def _text(value: Any, limit: int) -> str:
    """Text any database column holds: at most `limit` characters, with characters that
    are not valid Unicode (half a surrogate pair from a path) replaced, and NUL, which
    PostgreSQL cannot store, written as U+FFFD."""
    text = str(value)[:limit].replace("\x00", "\ufffd")
    return text.encode("utf-8", "replace").decode("utf-8")
