"""Names made unique (appliance.links.names): the one rule behind Mihomo proxy names,
sing-box outbound tags and the tags of outbounds read from a subscription feed."""

from __future__ import annotations

from appliance.links.names import free_name, with_unique_names


def test_a_free_name_is_kept():
    assert free_name("Germany", {"France"}) == "Germany"


def test_a_taken_name_gets_the_first_free_counter():
    assert free_name("Germany", {"Germany", "Germany 2", "Germany 4"}) == "Germany 3"


def test_the_separator_is_the_callers():
    assert free_name("sub-de", {"sub-de"}, "-") == "sub-de-2"


def test_free_name_leaves_the_taken_set_alone():
    taken = {"a"}
    free_name("a", taken)
    assert taken == {"a"}


def test_later_duplicates_are_counted_up_and_the_first_keeps_its_name():
    items = [{"name": "x"}, {"name": "x"}, {"name": "y"}, {"name": "x"}]
    named = with_unique_names(items, "name", "proxy", ())
    assert [item["name"] for item in named] == ["x", "x 2", "y", "x 3"]


def test_a_counted_name_never_takes_one_that_comes_later():
    items = [{"name": "x 2"}, {"name": "x"}, {"name": "x"}]
    named = with_unique_names(items, "name", "proxy", ())
    assert [item["name"] for item in named] == ["x 2", "x", "x 3"]


def test_reserved_names_are_never_handed_out():
    items = [{"tag": "select"}, {"tag": "direct"}]
    named = with_unique_names(items, "tag", "server", {"select", "direct"})
    assert [item["tag"] for item in named] == ["select 2", "direct 2"]


def test_a_nameless_item_is_named_by_its_type_or_the_fallback():
    items = [{"name": "", "type": "vless"}, {"type": "vless"}, {}]
    named = with_unique_names(items, "name", "proxy", ())
    assert [item["name"] for item in named] == ["vless", "vless 2", "proxy"]


def test_the_items_handed_in_are_copied_not_changed():
    items = [{"name": "x", "port": 1}, {"name": "x", "port": 2}]
    named = with_unique_names(items, "name", "proxy", ())
    assert items == [{"name": "x", "port": 1}, {"name": "x", "port": 2}]
    assert named == [{"name": "x", "port": 1}, {"name": "x 2", "port": 2}]
