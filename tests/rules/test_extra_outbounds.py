"""Outbounds from outside the template joined to the template's own (core.extra_outbounds)."""

from __future__ import annotations

from appliance.core.config import build_config
from appliance.core.extra_outbounds import with_outbounds

TEMPLATE = {
    "outbounds": [{"tag": "direct", "protocol": "freedom"}, {"tag": "blocked"}],
    "routing": {"rules": []},
}


def tags(config: dict) -> list[str]:
    return [outbound["tag"] for outbound in config["outbounds"]]


def test_first_go_before_the_template_and_last_after_it():
    merged = with_outbounds(TEMPLATE, [{"tag": "a"}], [{"tag": "b"}, {"tag": "c"}])
    assert tags(merged) == ["a", "direct", "blocked", "b", "c"]
    assert tags(TEMPLATE) == ["direct", "blocked"]  # the template itself is untouched


def test_the_template_wins_a_tag_and_an_earlier_extra_outbound_wins_a_later_one():
    merged = with_outbounds(
        TEMPLATE,
        [{"tag": "direct", "protocol": "vless"}, {"tag": "x", "n": 1}],
        [{"tag": "x", "n": 2}, {"tag": "y"}],
    )
    assert tags(merged) == ["x", "direct", "blocked", "y"]
    assert merged["outbounds"][0]["n"] == 1
    assert merged["outbounds"][1]["protocol"] == "freedom"


def test_nothing_to_add_leaves_the_template_and_the_built_config_as_they_were():
    assert with_outbounds(TEMPLATE, [], []) is TEMPLATE
    merged = with_outbounds(TEMPLATE, [], [{"tag": "sub1-x", "protocol": "vless"}])
    config = build_config(merged, [], api_port=10085, now_ms=0)
    assert tags(config) == ["direct", "blocked", "sub1-x"]
