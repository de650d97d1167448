"""The Mihomo profile is written byte for byte as `yaml.safe_dump` writes it.

`clash_document` makes the YAML events itself and has libyaml write them when PyYAML has
it (`appliance.links.yaml_text`); client apps must not see a single byte change for that.
Every document the link cases make, and documents full of the text admins put into
remarks, paths and rules (flag emoji, every script, quotes, colons, control characters,
lines longer than the fold width), are compared with the pure-Python `safe_dump` of the
same document, which wrote every profile before.
"""

from __future__ import annotations

import random

import pytest
import yaml
from links_cases import ALICE, CASES, CTX

from appliance.links import clash_document, client_clash_proxies, yaml_text
from appliance.links.clash import clash_profile
from appliance.links.plan import LinkContext
from appliance.links.yaml_text import dump_yaml

RULES = "DOMAIN-SUFFIX,ads.example,REJECT\nGEOIP,CN,DIRECT"
# Text an admin may type: scripts, YAML indicators, quotes, line breaks and plenty of
# spaces for folding; then what libyaml writes otherwise than the Python emitter (emoji
# beyond U+FFFF, characters YAML must escape, backslashes).
PLAIN = (
    list("abcdefghijklmnopqrstuvwxyz0123456789")
    + list(" " * 12)
    + list(":#-?&*!|>'\"%@`,[]{}/=+")
    + ["Straße", "Ж", "中", "\u0627", "é", "\u00a0", "\u3000", "\ufffd", "\ue000", "\n"]
)
ESCAPED = ["🇩🇪", "😀", "\U0010fffd", "\\", "\t", "\x00", "\x85", "\u2028", "\ufeff"]


def reference(proxies: list[dict], rules: str) -> str:
    """What `clash_document` wrote before libyaml: the same profile through safe_dump."""
    return yaml.safe_dump(clash_profile(proxies, rules), allow_unicode=True, sort_keys=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_is_written_as_safe_dump_writes_it(name):
    record, user, hosts = CASES[name]
    proxies = client_clash_proxies(record, user, hosts, CTX)
    for rules in ("", RULES):
        assert clash_document(proxies, rules) == reference(proxies, rules)


def test_every_case_in_one_document_is_written_as_safe_dump_writes_it():
    proxies = [
        proxy
        for record, user, hosts in CASES.values()
        for proxy in client_clash_proxies(record, user, hosts, CTX)
    ]
    assert len(proxies) > 20
    assert clash_document(proxies, RULES) == reference(proxies, RULES)


def test_flag_emoji_in_remarks_are_written_as_text():
    record, _, hosts = CASES[sorted(CASES)[0]]
    ctx = LinkContext(address="vpn.example.com", remark_model="-ieo")
    proxies = client_clash_proxies({**record, "remark": "🇩🇪 Frankfurt"}, ALICE, hosts, ctx)
    document = clash_document(proxies, "")
    assert "🇩🇪 Frankfurt" in document
    assert document == reference(proxies, "")


def safe_dump(document: dict) -> str:
    return yaml.safe_dump(document, allow_unicode=True, sort_keys=False)


def test_text_that_reads_as_another_type_is_written_as_safe_dump_writes_it():
    lookalikes = ["true", "False", "yes", "on", "null", "~", "", "443", "-7", "0x1F", "0o17"]
    lookalikes += ["1e3", ".inf", "2026-11-26", "12:30:45", "<<", "=", "- a", "a: b", "#x"]
    profile = {
        f"field{n}": {"text": word, "list": [word, 1, -2, True, False], "empty": {}, "none": []}
        for n, word in enumerate(lookalikes)
    }
    assert dump_yaml(profile) == safe_dump(profile)
    assert yaml_text.document_events(profile) is not None  # the fast way was taken


def test_what_the_fast_path_cannot_say_is_written_as_safe_dump_writes_it():
    shared = {"path": "/ws"}
    for profile in (
        {"proxies": [{"ws-opts": shared}, {"ws-opts": shared}]},  # an anchor and an alias
        {"up": 1.5, "down": None, "alpn": ("h2",), "empty": ()},
        {"udp": True, 7: "a key that is not text"},
        {"": "an empty key", "k" * 128: "a long key", "two\nlines": "a key of two lines"},
    ):
        assert dump_yaml(profile) == safe_dump(profile)


def test_admins_text_is_written_as_safe_dump_writes_it():
    rng = random.Random(20261126)
    record, user, hosts = CASES[sorted(CASES)[0]]
    base = client_clash_proxies(record, user, hosts, CTX)[0]
    fast = 0
    for count in range(1000):
        alphabet = PLAIN if count % 2 else PLAIN + ESCAPED
        words = [
            "".join(rng.choice(alphabet) for _ in range(rng.choice((1, 3, 12, 40, 95))))
            for _ in range(4)
        ]
        proxy = {
            **base,
            "name": words[0],
            "server": words[1],
            "ws-opts": {"path": words[2], "headers": {"Host": words[3]}},
        }
        rules = "\n".join(f"DOMAIN,{word},DIRECT" for word in words)
        assert clash_document([proxy], rules) == reference([proxy], rules), words
        events = yaml_text.document_events(clash_profile([proxy], rules))
        if events is not None:
            text = yaml.emit(events, Dumper=yaml_text.FAST_DUMPER, allow_unicode=True)
            fast += "\\" not in text
    # Both ways of writing were compared, not only the fallback.
    assert fast > 300 or yaml_text.FAST_DUMPER is None
