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


def parse_text(value: Any, name: str, limit: int = 255) -> str:
    """An optional text field, stripped; absent is empty."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ServiceError(f"{name} must be a string (got {json.dumps(value)})")
    value = value.strip()
    if len(value) > limit:
        raise ServiceError(f"{name} must be at most {limit} characters")
    return value


def parse_port(value: Any, meaning_of_zero: str) -> int:
    """A port from a form or a body; 0, empty or absent is 0, which `meaning_of_zero`
    explains in the message ("any", "inherit")."""
    if value in (None, ""):
        return 0
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 7:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ServiceError(
            f"port must be from 1 to 65535, or 0/empty to {meaning_of_zero} "
            f"(got {json.dumps(value)})"
        )
    return value
