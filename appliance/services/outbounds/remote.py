"""JSON calls to a provider's API (the WARP tunnel, the VPN provider), through the
egress guard, with every failure told as a sentence.

Why this module exists: both providers are remote services the panel calls on the
admin's behalf, at a base URL that is a setting (so tests and mirrors can stand in for
them). Their failures — no connection, an error status, an answer that is not the JSON
expected — are the admin's to read, never a 500, and what the service sent is never
echoed: the status and the kind of failure are. Answers are read by the bounded reader
(`runtime/reader.py`): size, time, nesting and the shape of a JSON object or array.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from appliance.errors import ServiceError
from appliance.runtime.egress import DestinationRefused, FetchFailed, for_url
from appliance.runtime.reader import Unreadable, parse_json

MAX_ANSWER = 4 << 20


def call_json(
    settings,
    setting: str,
    service: str,
    method: str,
    path: str,
    *,
    body: dict | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """The JSON answer of `method` base + `path`, where base is the `setting` URL;
    ServiceError naming `service` when there is none."""
    base = settings.get(setting).rstrip("/")
    url = base + path
    sent = {"Accept": "application/json", "User-Agent": "appliance", **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    try:
        guard = for_url(settings, setting, base)
        with guard.request(
            url,
            method=method,
            body=data,
            headers=sent,
            connect_timeout=10,
            read_timeout=20,
            total_timeout=60,
        ) as reply:
            if reply.status == 204:
                return None
            if not 200 <= reply.status < 300:
                raise ServiceError(f"{service} answered HTTP {reply.status}{_hint(reply.status)}")
            raw = reply.read(MAX_ANSWER)
    except DestinationRefused:
        raise
    except FetchFailed as exc:
        raise ServiceError(f"{service} could not be reached: {exc.msg}") from None
    if not raw.strip():
        return None
    try:
        return parse_json(raw, MAX_ANSWER, (dict, list))
    except Unreadable as exc:
        raise ServiceError(
            f"{service} answered with something that is not JSON it can use ({exc.msg})"
        ) from None


def basic_auth(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


def field(document: Any, service: str, *path: str | int) -> Any:
    """`document[path[0]][path[1]]...`; ServiceError saying which field is missing."""
    value = document
    for step in path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            where = ".".join(str(s) for s in path)
            raise ServiceError(f"{service}'s answer has no {where}") from None
    return value


def _hint(status: int) -> str:
    if status in (401, 403):
        return " (the credentials were refused)"
    if status == 404:
        return " (not found: the account may have been deleted there)"
    if status == 429:
        return " (too many requests; try again later)"
    return ""
