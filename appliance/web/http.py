"""Request and response helpers shared by every route: the envelope, bodies, addresses.

Bodies are read once, with a size limit checked before reading, and may be JSON or a
form (urlencoded or multipart): the panels whose clients we serve accept both, so a
script written for either keeps working. Every problem with a body becomes a sentence
in the envelope, never a traceback.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from bottle import request, response

from appliance.services.errors import ServiceError


@dataclass
class Reply:
    """What a handler returns when it has a message to say besides the payload."""

    msg: str = ""
    obj: Any = None


def envelope(success: bool, msg: str = "", obj: Any = None, status: int = 200) -> str:
    """The envelope as the body of the current response (whose cookies stay intact)."""
    response.status = status
    response.content_type = "application/json; charset=utf-8"
    return encode(success, msg, obj)


def encode(success: bool, msg: str = "", obj: Any = None) -> str:
    return json.dumps({"success": success, "msg": msg, "obj": obj}, ensure_ascii=False)


def fail(msg: str, status: int = 200) -> str:
    return envelope(False, msg, None, status)


class BodyTooLarge(ServiceError):
    status = 413


def body(max_bytes: int) -> Any:
    """The request body as JSON or as a form dict; `{}` when there is none."""
    cached = request.environ.get("appliance.body", _MISSING)
    if cached is not _MISSING:
        return cached
    value = _read_body(max_bytes)
    request.environ["appliance.body"] = value
    return value


def json_object(max_bytes: int) -> dict:
    data = body(max_bytes)
    if not isinstance(data, dict):
        raise ServiceError("the request body must be a JSON object")
    return data


_MISSING = object()


def _read_body(max_bytes: int) -> Any:
    length = request.content_length
    if length > max_bytes:
        raise BodyTooLarge(f"the request body is {length} bytes; the limit here is {max_bytes}")
    content_type = (request.content_type or "").split(";")[0].strip().lower()
    if content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        forms = request.forms.decode()
        return {key: forms.get(key) for key in forms}
    raw = request.body.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise BodyTooLarge(f"the request body is larger than the limit of {max_bytes} bytes")
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise ServiceError("the request body is not UTF-8 text") from None
    except ValueError as exc:
        raise ServiceError(f"the request body is not valid JSON: {exc}") from None


def client_address(trusted: list) -> str:
    """The caller's address; `X-Forwarded-For` counts only when a trusted proxy sent it."""
    remote = request.environ.get("REMOTE_ADDR", "") or ""
    if not trusted or not _in(remote, trusted):
        return remote
    forwarded = request.headers.get("X-Forwarded-For", "")
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _in(hop, trusted):
            return hop
    return remote


def is_tls(trusted: list) -> bool:
    if request.environ.get("wsgi.url_scheme") == "https":
        return True
    remote = request.environ.get("REMOTE_ADDR", "")
    return (
        bool(trusted)
        and _in(remote, trusted)
        and (request.headers.get("X-Forwarded-Proto", "").lower() == "https")
    )


def _in(address: str, networks: list) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)
