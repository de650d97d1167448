"""The one reader of what other machines send the panel: nodes, the tunnel and VPN
providers, release lists, the Bot API, outbound subscriptions, the core's metrics.

Why this module exists: an answer from outside can be any bytes at all. A JSON document
nested a hundred thousand levels deep exhausts the parser's recursion; a body that never
ends holds a greenlet for ever; a number of ten thousand digits, NaN, text that is not
UTF-8, or an array where an object belongs each surface somewhere else as a traceback,
a 500, or a background loop that dies every few seconds. So every answer is read here,
bounded three ways before any caller looks at it:

- time and size: `Reply.chunks` (`egress.py`) stops at a byte limit and a deadline;
- depth and shape: the JSON rules the panel applies to its own request bodies
  (`domain/parse.py`'s `load_json`: nesting, NaN and Infinity, oversized numbers,
  encoding), so one check serves both directions, then the top-level type the caller
  expects;
- YAML (Clash profiles) likewise through `load_yaml`, which also counts aliases.

Every refusal is an `Unreadable` whose message is the reason alone, never the sender's
bytes; callers say who sent it ("node 'edge' answered ... : <reason>").
"""

from __future__ import annotations

from typing import Any

from appliance.domain.parse import load_json, load_yaml
from appliance.errors import ServiceError
from appliance.runtime.egress import Reply

WHAT = "the answer"
TYPE_NAMES = {dict: "an object", list: "an array", str: "a string"}


class Unreadable(ServiceError):
    """An answer the reader refused; the message says why, in words of its own."""


def read_json(reply: Reply, limit: int, kind: type | tuple[type, ...] = object) -> Any:
    """The JSON value of `reply`'s body (at most `limit` bytes, within its deadline),
    which must be of `kind`; `Unreadable` otherwise."""
    return parse_json(reply.read(limit), limit, kind)


def parse_json(raw: bytes | str, limit: int, kind: type | tuple[type, ...] = object) -> Any:
    """The JSON value of bytes that came from outside and are already in hand."""
    if not raw.strip():
        raise Unreadable(f"{WHAT} is empty")
    try:
        value = load_json(raw, WHAT, max_chars=limit)
    except ServiceError as exc:
        raise Unreadable(exc.msg) from None
    if not isinstance(value, kind):
        raise Unreadable(f"{WHAT} is {_type_name(type(value))}, not {_expected(kind)}")
    return value


def parse_yaml(text: str, limit: int) -> Any:
    """The value of a YAML document that came from outside."""
    try:
        return load_yaml(text, WHAT, max_chars=limit)
    except ServiceError as exc:
        raise Unreadable(exc.msg) from None


def _expected(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_type_name(k) for k in kinds)


def _type_name(kind: type) -> str:
    if kind in TYPE_NAMES:
        return TYPE_NAMES[kind]
    if kind is type(None):
        return "null"
    return "a boolean" if kind is bool else "a number" if kind in (int, float) else "a value"
