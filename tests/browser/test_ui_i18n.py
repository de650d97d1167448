"""The UI's translations: every language ships every string English has, with the same
placeholders, and every key the scripts ask for exists in English. A text that depends
on a count carries exactly the CLDR plural forms its language uses.

The scripts build a few keys from a prefix and a value (`core.state.${state}`); those
prefixes are listed with the values the pages can produce, so a new status or page that
forgets its translation fails here rather than showing a raw key to a user.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from appliance.web.ui import assets_dir

ASSETS = Path(assets_dir())
LANGUAGES = ("fa", "ru", "zh")
STATIC_KEY = re.compile(r"\bt\(\"([a-zA-Z0-9_.]+)\"")
DYNAMIC_KEY = re.compile(r"\bt\(`([a-zA-Z0-9_.]+)\.\$\{")
PLACEHOLDER = re.compile(r"\{(\w+)\}")
# The CLDR plural categories of each language (Intl.PluralRules' pluralCategories).
PLURAL_FORMS = {
    "en": {"one", "other"},
    "fa": {"one", "other"},
    "ru": {"one", "few", "many", "other"},
    "zh": {"other"},
}
# Every value each computed key prefix is built with in assets/js.
DYNAMIC_VALUES = {
    "nav": ["dashboard", "inbounds", "clients", "hosts", "nodes", "core", "logs", "settings"],
    "theme": ["auto", "light", "dark"],
    "core.state": ["running", "stop", "error", "not_installed", "unknown"],
    "core.done": ["start", "stop", "restart"],
    "core.tab": ["json", "routing", "dns", "outbounds"],
    "core.preset": ["private", "ads", "bittorrent"],
    "clients.status": ["online", "active", "deactive", "depleted", "expiring"],
    "clients.sortBy": ["email", "enable", "traffic", "remaining", "expiryTime", "inboundIds"],
    "webhooks.status": ["delivered", "pending", "failed"],
    "dash.chart": ["cpu", "mem", "net", "online"],
    "dash.metric": ["cpu", "mem", "netUp", "netDown", "online"],
    "logs": ["panel", "core"],
    "logs.levels": ["debug", "info", "notice", "warning", "error"],
    "settings.section": ["panel", "clients", "subscription", "chatBot", "smtp"],
    "nodes.status": ["online", "offline", "error", "disabled", "unknown"],
    "nodes.tls": ["system", "pin", "mtls"],
    "nodes.tlsHint": ["system", "pin", "mtls"],
}


def messages(code: str) -> dict[str, str]:
    return json.loads((ASSETS / "i18n" / f"{code}.json").read_text(encoding="utf-8"))


def scripts() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (ASSETS / "js").rglob("*.js"))


def settings_keys() -> list[str]:
    text = (ASSETS / "js" / "pages" / "settings.js").read_text(encoding="utf-8")
    block = text[text.index("const SECTIONS") : text.index("};", text.index("const SECTIONS"))]
    return re.findall(r'"(\w+)"', block)


def forms(text: str | dict[str, str]) -> list[str]:
    return list(text.values()) if isinstance(text, dict) else [text]


def placeholders(text: str | dict[str, str]) -> set[str]:
    return {name for form in forms(text) for name in PLACEHOLDER.findall(form)}


@pytest.mark.parametrize("code", LANGUAGES)
def test_every_english_key_is_translated(code):
    english, other = messages("en"), messages(code)
    assert sorted(set(english) - set(other)) == []
    assert sorted(set(other) - set(english)) == []
    for key, text in other.items():
        assert all(form.strip() for form in forms(text)), (code, key)
        assert placeholders(text) == placeholders(english[key]), key
        assert isinstance(text, dict) == isinstance(english[key], dict), key


@pytest.mark.parametrize("code", ("en", *LANGUAGES))
def test_plural_texts_have_the_forms_of_their_language(code):
    plural = {key: text for key, text in messages(code).items() if isinstance(text, dict)}
    assert plural, "no text has plural forms"
    for key, text in plural.items():
        assert set(text) == PLURAL_FORMS[code], (code, key)
        assert all("{count}" in form for form in text.values()), (code, key)


@pytest.mark.parametrize("code", LANGUAGES)
def test_translations_differ_from_english(code):
    """A file copied from English and never translated would pass the key check."""
    english, other = messages("en"), messages(code)
    same = [key for key in english if other[key] == english[key]]
    assert len(same) < len(english) // 10, same


def test_every_key_the_scripts_use_exists_in_english():
    english = messages("en")
    source = scripts()
    used = set(STATIC_KEY.findall(source))
    prefixes = set(DYNAMIC_KEY.findall(source))
    assert prefixes - {"settings.key"} <= set(DYNAMIC_VALUES), prefixes
    for prefix, values in DYNAMIC_VALUES.items():
        used |= {f"{prefix}.{value}" for value in values}
    used |= {f"settings.key.{key}" for key in settings_keys()}
    assert sorted(used - set(english)) == []


def test_persian_is_right_to_left():
    text = (ASSETS / "js" / "i18n.js").read_text(encoding="utf-8")
    assert re.search(r'code: "fa", name: "[^"]+", dir: "rtl"', text)


# Written the same in every language: protocol and field names, units, bare formats.
SAME_IN_EVERY_LANGUAGE = {
    "ALPN",
    "CPU",
    "DNS",
    "Flow",
    "HTTP 403",
    "IP",
    "JSON",
    "MTU",
    "SNI",
    "UUID",
    "QR {n}",
    "{ms} ms",
    "{field}: {problem}",
}
SCRIPT = {
    "fa": re.compile("[\u0600-\u06ff]"),
    "ru": re.compile("[\u0400-\u04ff]"),
    "zh": re.compile("[\u4e00-\u9fff]"),
}


@pytest.mark.parametrize("code", LANGUAGES)
def test_no_text_is_left_in_english(code):
    """A text that equals the English one, or has Latin words and none of the language's
    own letters, was left untranslated ("Fallback" in Russian), unless it is a term every
    language writes the same."""
    english = messages("en")
    left = [
        (key, text)
        for key, value in messages(code).items()
        for text in forms(value)
        if text not in SAME_IN_EVERY_LANGUAGE
        and (
            text in forms(english[key])
            or (re.search("[A-Za-z]", PLACEHOLDER.sub("", text)) and not SCRIPT[code].search(text))
        )
    ]
    assert left == []
