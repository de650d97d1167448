"""Which subscription format a client app gets: format names and the User-Agent rules.

One subscription URL serves every app: the plain subscription path picks the format from
the app's User-Agent by the rules of the `subFormatRules` setting, and `?format=` on any
subscription path names it outright. Both the settings check and the subscription server
read the rules here, so what the panel accepts is what the server applies.

The rules are one line of text (it is shown in a settings table): rules separated by ";"
(or line breaks), each `format: word, word, ...`. A rule matches when the User-Agent
contains one of its words, ignoring case; the first rule that matches wins, and a
User-Agent no rule matches gets base64 share links, which every app reads.
"""

from __future__ import annotations

import functools
import re

# Format names as a person writes them -> the name the server renders by.
FORMAT_NAMES = {
    "base64": "links",
    "links": "links",
    "json": "json",
    "clash": "yaml",
    "yaml": "yaml",
    "mihomo": "yaml",
    "singbox": "singbox",
    "sing-box": "singbox",
}
FORMATS_TEXT = "base64, json, clash or singbox"
# Order matters: Hiddify's User-Agent also says "ClashMeta" and "sing-box", NekoBox's says
# "ClashMeta", and FlClash's says "clash-verge".
DEFAULT_RULES = (
    "singbox: hiddify, karing, sfa/, sfi/, sfm/, sft/, sing-box; "
    "base64: nekobox, nekoray, v2rayng, v2rayn, streisand, shadowrocket, happ/; "
    "clash: clash, mihomo, flclash, stash"
)
RULE_SEPARATOR = re.compile(r"[;\n]")


def format_name(value: str) -> str | None:
    """The format `value` names (as in `?format=`), None when it names none."""
    return FORMAT_NAMES.get(value.strip().lower())


@functools.lru_cache(maxsize=8)
def parse_rules(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """((format, lower-case words), ...) of the rules text, in order; ValueError with
    what is wrong for a rule without a known format or without words."""
    rules = []
    for number, raw in enumerate(filter(None, map(str.strip, RULE_SEPARATOR.split(text))), 1):
        name, colon, words_text = raw.partition(":")
        kind = format_name(name)
        if not colon or kind is None:
            raise ValueError(
                f"rule {number} ('{raw}') must start with a format ({FORMATS_TEXT}) and a colon"
            )
        words = tuple(word.lower() for word in map(str.strip, words_text.split(",")) if word)
        if not words:
            raise ValueError(f"rule {number} ('{raw}') names no User-Agent word after the colon")
        rules.append((kind, words))
    return tuple(rules)


def format_for_agent(user_agent: str, rules_text: str) -> str:
    """The format the rules give `user_agent`; base64 links when none matches (and when
    the stored rules cannot be read, which the settings check does not let happen)."""
    try:
        rules = parse_rules(rules_text)
    except ValueError:
        return "links"
    agent = user_agent.lower()
    for kind, words in rules:
        if any(word in agent for word in words):
            return kind
    return "links"
