"""Small parsers for values that arrive from paths, forms and JSON bodies alike.

`load_json` is the one way JSON text from a client is read, whether it is a request body or
a document sent inside a field (inbound settings, the core template, imports): its size
and nesting are checked before the parser runs, so a document nested ten thousand levels
deep is refused in one linear pass instead of exhausting the parser's recursion. What
other machines send (nodes, providers, release lists, the Bot API) is read by the same
function through `runtime/reader.py`. `load_yaml` does the same for YAML (the Clash
profiles of outbound subscriptions): libyaml's composer recurses in C, so a document
nested a hundred thousand levels deep ends the whole process, and aliases can make a
small document stand for billions of nodes; both are measured on the parser's events,
which come without recursion, before anything is composed.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

import yaml

from appliance.errors import ServiceError


def parse_id(value: Any, what: str) -> int:
    """Ids arrive from paths as strings and from bodies as numbers."""
    if isinstance(value, str) and value.isdigit() and len(value) < 12:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31:
        raise ServiceError(f"{what} must be a positive integer (got {json.dumps(value)})")
    return value


ASCII_DIGITS = re.compile(r"[0-9]{1,18}")


def parse_int(value: Any, name: str, lo: int, hi: int, default: int) -> int:
    """A whole number from a query string or a body, from `lo` to `hi`; absent or empty
    is `default`."""
    if value in (None, ""):
        return default
    if isinstance(value, str) and ASCII_DIGITS.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServiceError(f"{name} must be a whole number (got {value!r})")
    if not lo <= value <= hi:
        raise ServiceError(f"{name} must be from {lo} to {hi} (got {value})")
    return value


def parse_emails(body: Any) -> list[str]:
    """`{emails: [...]}` of a bulk call, deduplicated in order."""
    if not isinstance(body, dict) or not isinstance(body.get("emails"), list):
        raise ServiceError("emails must be an array of client emails")
    emails = body["emails"]
    if not all(isinstance(email, str) for email in emails):
        raise ServiceError("emails must contain only strings")
    return list(dict.fromkeys(emails))


MAX_JSON_DEPTH = 64
MAX_JSON_CHARS = 16 << 20
MAX_INT_DIGITS = 1000
# A JSON string (escapes included), and the brackets left once strings are gone: what the
# depth scan looks at, both matched by the regular expression engine in one pass each.
JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
JSON_BRACKETS = re.compile(r"[][{}]")


def load_json(text: str | bytes, what: str, max_chars: int = MAX_JSON_CHARS) -> Any:
    """The JSON value of `text`, which a client sent as `what` ("the request body",
    "coreSetting"). Refused with a sentence: text longer than `max_chars`, nesting deeper
    than MAX_JSON_DEPTH, NaN or Infinity, numbers too large to hold, and anything else
    that is not JSON."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode(json.detect_encoding(text))
        except UnicodeDecodeError:
            raise ServiceError(f"{what} is not UTF-8 text") from None
    if len(text) > max_chars:
        raise ServiceError(
            f"{what} is {len(text)} characters long; at most {max_chars} are read here"
        )
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ServiceError(
            f"{what} is not valid JSON here: it is nested too deeply ({depth} levels; "
            f"at most {MAX_JSON_DEPTH} are read)"
        )
    try:
        return json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except (ValueError, RecursionError) as exc:
        raise ServiceError(f"{what} is not valid JSON: {exc}") from None


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of JSON `text` nest, brackets inside strings
    not counted; linear in the length of the text, recursing nowhere. For text that is
    not JSON the figure is only an estimate, which the parser then refuses anyway."""
    brackets = JSON_BRACKETS.findall(JSON_STRING.sub("", text))
    steps = (1 if bracket in "[{" else -1 for bracket in brackets)
    return max(accumulate(steps), default=0)


MAX_YAML_NODES = 200_000
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_YAML_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def load_yaml(text: str, what: str, max_chars: int = MAX_JSON_CHARS) -> Any:
    """The value of the YAML document `text` (safe tags only), which came as `what`.
    Refused with a sentence: text longer than `max_chars`, nesting deeper than
    MAX_JSON_DEPTH, more than MAX_YAML_NODES nodes once every alias is expanded, and
    anything that is not YAML."""
    if len(text) > max_chars:
        raise ServiceError(
            f"{what} is {len(text)} characters long; at most {max_chars} are read here"
        )
    try:
        _check_yaml_events(text, what)
        return yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ServiceError(f"{what} is not valid YAML: {problem}") from None


def _check_yaml_events(text: str, what: str) -> None:
    """Counts nodes and levels as the composer would build them, an alias standing for
    the whole node it names (its size and height were noted when the node closed), so
    alias bombs and deep nesting are found in one pass that stops at the first excess."""
    nodes = depth = 0
    opened: list[tuple[str | None, int, int]] = []
    # anchor -> (nodes, levels) of the node it names, aliases inside already expanded.
    named: dict[str, tuple[int, int]] = {}
    deepest = 0
    for event in yaml.parse(text, Loader=_YAML_LOADER):
        if isinstance(event, yaml.AliasEvent):
            size, height = named.get(event.anchor, (1, 0))
            nodes += size
            deepest = max(deepest, depth + height)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor:
                named[event.anchor] = (1, 0)
        elif isinstance(event, _YAML_OPEN):
            nodes += 1
            depth += 1
            deepest = max(deepest, depth)
            opened.append((event.anchor, nodes, deepest))
            deepest = depth
        elif isinstance(event, _YAML_CLOSE):
            anchor, start, outer = opened.pop()
            if anchor:
                named[anchor] = (nodes - start + 1, deepest - depth + 1)
            depth -= 1
            deepest = max(deepest, outer)
        if deepest > MAX_JSON_DEPTH:
            raise ServiceError(
                f"{what} is not valid YAML here: it is nested more than {MAX_JSON_DEPTH} "
                "levels deep"
            )
        if nodes > MAX_YAML_NODES:
            raise ServiceError(
                f"{what} is not valid YAML here: it stands for more than {MAX_YAML_NODES} "
                "values once its aliases are expanded"
            )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    """Numbers merely out of range reach the field checks, which name the field; only
    digit strings long enough to hit Python's own conversion limit (whose message advises
    raising it) are refused here, as the sender's fault."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"a number with {len(text.lstrip('-'))} digits is too large")
    return int(text)


def _finite_float(text: str) -> float:
    """Python reads 1e999 as infinity, which could never be written back as JSON."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number")
    return value


def parse_json_text(data: Any, what: str, kind: type, shape: str) -> Any:
    """A JSON document sent as text inside a field (the import routes), parsed and
    checked to be `kind`; `shape` says what it should be, for the message."""
    if not isinstance(data, str) or not data.strip():
        raise ServiceError(f"{what} must be the JSON text of {shape}")
    value = load_json(data, what)
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
