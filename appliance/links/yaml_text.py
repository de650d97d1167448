"""YAML text exactly as `yaml.safe_dump(document, allow_unicode=True, sort_keys=False)`
writes it, written faster: the Mihomo profiles of the `/yaml/` subscription.

Client apps must not see a byte change, and PyYAML's pure-Python emitter, representer
and serializer made up most of an uncached YAML subscription. So:

- libyaml's emitter (`CSafeDumper`) writes, when PyYAML was built with it (the wheels
  are); `YAML_EMITTER` says which is in use. The two emitters agree except where
  libyaml escapes what the Python one writes as it is (characters beyond U+FFFF such as
  flag emoji, U+0085) or folds a double-quoted scalar otherwise; each of those puts a
  backslash into libyaml's text, so a text holding one is written again by `safe_dump`.
- The events it writes are made here rather than by the representer and serializer: a
  profile holds only strings, integers, booleans, lists and mappings keyed by field
  names, whose events are simple to make exactly as they make them (the same tags and
  implicit flags, block style). A document holding anything else, one list or mapping
  twice (which they would write as an anchor and an alias), or a key the two emitters
  place otherwise (empty, 128 characters long, several lines) is written by `safe_dump`.
"""

from __future__ import annotations

import yaml
from yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.resolver import Resolver

# libyaml is part of the PyYAML wheels; a PyYAML built without it still works, slower.
FAST_DUMPER = getattr(yaml, "CSafeDumper", None)
YAML_EMITTER = "libyaml" if FAST_DUMPER is not None else "pure Python"
TAG = "tag:yaml.org,2002:"
STR_TAG, INT_TAG, BOOL_TAG, MAP_TAG, SEQ_TAG = (
    TAG + name for name in ("str", "int", "bool", "map", "seq")
)
# Events carry no state the emitter changes, so one object serves every occurrence.
MAPPING_START = MappingStartEvent(None, MAP_TAG, True, flow_style=False)
MAPPING_END = MappingEndEvent()
SEQUENCE_START = SequenceStartEvent(None, SEQ_TAG, True, flow_style=False)
SEQUENCE_END = SequenceEndEvent()
BOOLEANS = {
    value: ScalarEvent(None, BOOL_TAG, (True, False), "true" if value else "false")
    for value in (True, False)
}


def dump_yaml(document: dict) -> str:
    """`yaml.safe_dump(document, allow_unicode=True, sort_keys=False)`, byte for byte,
    by the fastest way that writes it so (see the module docstring)."""
    events = document_events(document) if FAST_DUMPER is not None else None
    if events is not None:
        text = yaml.emit(events, Dumper=FAST_DUMPER, allow_unicode=True)
        if "\\" not in text:
            return text
    return yaml.safe_dump(document, allow_unicode=True, sort_keys=False)


def document_events(document: dict) -> list | None:
    """The events PyYAML's SafeRepresenter and Serializer make of `document` (block
    style, keys in their order); None when it holds anything but the kinds of values the
    module docstring names."""
    events: list = [StreamStartEvent(), DocumentStartEvent(explicit=False)]
    if not _node_events(document, events, set()):
        return None
    events += [DocumentEndEvent(explicit=False), StreamEndEvent()]
    return events


def _node_events(value: object, events: list, seen: set[int]) -> bool:
    kind = type(value)
    if kind is str:
        events.append(ScalarEvent(None, STR_TAG, (_plain_is_text(value), True), value))
    elif kind is bool:
        events.append(BOOLEANS[value])
    elif kind is int:
        events.append(ScalarEvent(None, INT_TAG, (True, False), str(value)))
    elif kind is dict or kind is list:
        if id(value) in seen:
            return False
        seen.add(id(value))
        return (
            _mapping_events(value, events, seen)
            if kind is dict
            else _list_events(value, events, seen)
        )
    else:
        return False
    return True


def _mapping_events(mapping: dict, events: list, seen: set[int]) -> bool:
    events.append(MAPPING_START)
    for key, item in mapping.items():
        if not _field_name(key):
            return False
        events.append(ScalarEvent(None, STR_TAG, (_plain_is_text(key), True), key))
        if not _node_events(item, events, seen):
            return False
    events.append(MAPPING_END)
    return True


def _list_events(items: list, events: list, seen: set[int]) -> bool:
    events.append(SEQUENCE_START)
    for item in items:
        if not _node_events(item, events, seen):
            return False
    events.append(SEQUENCE_END)
    return True


def _field_name(key: object) -> bool:
    """A key both emitters write as a simple key, the same way."""
    return type(key) is str and 0 < len(key) < 100 and key.isprintable()


def _plain_is_text(value: str) -> bool:
    """Whether `value` written plain reads back as a string: what the serializer asks
    the resolver (no implicit resolver of the value's first character, nor any of the
    wildcard ones, matches it)."""
    resolvers = Resolver.yaml_implicit_resolvers
    for _, pattern in resolvers.get(value[0] if value else "", ()):
        if pattern.match(value):
            return False
    return not any(pattern.match(value) for _, pattern in resolvers.get(None, ()))
