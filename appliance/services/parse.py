"""Small parsers for values that arrive from paths, forms and JSON bodies alike."""

from __future__ import annotations

import json
from typing import Any

from appliance.services.errors import ServiceError


def parse_id(value: Any, what: str) -> int:
    """Ids arrive from paths as strings and from bodies as numbers."""
    if isinstance(value, str) and value.isdigit() and len(value) < 12:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31:
        raise ServiceError(f"{what} must be a positive integer (got {json.dumps(value)})")
    return value


def parse_emails(body: Any) -> list[str]:
    """`{emails: [...]}` of a bulk call, deduplicated in order."""
    if not isinstance(body, dict) or not isinstance(body.get("emails"), list):
        raise ServiceError("emails must be an array of client emails")
    emails = body["emails"]
    if not all(isinstance(email, str) for email in emails):
        raise ServiceError("emails must contain only strings")
    return list(dict.fromkeys(emails))


def parse_json_text(data: Any, what: str, kind: type, shape: str) -> Any:
    """A JSON document sent as text inside a field (the import routes), parsed and
    checked to be `kind`; `shape` says what it should be, for the message."""
    if not isinstance(data, str) or not data.strip():
        raise ServiceError(f"{what} must be the JSON text of {shape}")
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ServiceError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        raise ServiceError(f"{what} must encode {shape}")
    return value
