"""The User-Agent rules of the subscription formats, read the way the setting is written.

What each app gets over HTTP is tested in test_sub_formats_api.py; here are the ways an
admin may write the rules (line breaks from the settings page's text box, any case, the
format's other names) and the order that decides between two rules that both match.
"""

from __future__ import annotations

import pytest

from appliance.domain.sub_formats import format_for_agent, format_name, parse_rules


def test_rules_may_be_split_by_lines_and_name_formats_in_any_case():
    rules = "\n  SingBox: SFA/ , Karing\n\nCLASH: Mihomo;\nyaml: stash\n"
    assert parse_rules(rules) == (
        ("singbox", ("sfa/", "karing")),
        ("yaml", ("mihomo",)),
        ("yaml", ("stash",)),
    )
    assert format_for_agent("SFA/1.11.4 (Android 14)", rules) == "singbox"
    assert format_for_agent("Stash/2.4", rules) == "yaml"
    assert format_for_agent("v2rayNG/1.9", rules) == "links"


def test_the_first_matching_rule_wins():
    agent = "HiddifyNext/2.5.7 (android) like ClashMeta v2ray sing-box"
    assert format_for_agent(agent, "clash: clashmeta; singbox: hiddify") == "yaml"
    assert format_for_agent(agent, "singbox: hiddify; clash: clashmeta") == "singbox"


def test_no_rules_give_everyone_base64_links():
    assert parse_rules("") == ()
    assert format_for_agent("SFA/1.11.4", "") == "links"


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("base64", "links"),
        ("links", "links"),
        ("json", "json"),
        ("clash", "yaml"),
        ("Mihomo", "yaml"),
        ("yaml", "yaml"),
        ("singbox", "singbox"),
        (" sing-box ", "singbox"),
        ("xml", None),
        ("", None),
    ],
)
def test_format_names(value, kind):
    assert format_name(value) == kind
