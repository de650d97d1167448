"""The change notice's rules, one test each: declared kinds, delivery at once outside a
call, one merged delivery per resource inside one, nothing from a failed call, the
declared effect of a call, greenlet-local collectors and consumers that fail alone."""

from __future__ import annotations

import gevent
import pytest

from appliance.runtime.changes import KINDS, RELAYED_IDS, Change, ChangeNotice


def recording(notice: ChangeNotice, *resources: str) -> list[Change]:
    seen: list[Change] = []
    for resource in resources:
        notice.subscribe(resource, seen.append)
    return seen


def test_ids_are_kept_as_a_frozenset_and_none_means_any():
    assert Change("clients", ["a", "b", "a"]).ids == frozenset({"a", "b"})
    assert Change("clients").ids is None
    with pytest.raises(AttributeError):
        Change("clients").ids = frozenset()  # type: ignore[misc]


def test_only_declared_kinds_can_be_followed_or_published():
    notice = ChangeNotice()
    with pytest.raises(ValueError, match="clinets"):
        notice.subscribe("clinets", print)
    with pytest.raises(ValueError, match="clinets"):
        notice.publish(Change("clinets"))
    assert {"clients", "inbounds", "hosts", "settings", "nodes"} <= set(KINDS)


def test_outside_a_call_a_change_is_delivered_at_once_to_its_followers_only():
    notice = ChangeNotice()
    clients = recording(notice, "clients")
    hosts = recording(notice, "hosts")
    notice.publish(Change("clients", ["a"]))
    assert clients == [Change("clients", ["a"])]
    assert hosts == []


def test_a_call_delivers_once_when_it_ends_merging_ids_per_resource():
    notice = ChangeNotice()
    seen = recording(notice, "clients", "inbounds")
    with notice.collecting():
        notice.publish(Change("inbounds", [3]))
        notice.publish(Change("clients", ["a"]))
        notice.publish(Change("clients", ["b"]))
        notice.publish(Change("clients", []))
        assert seen == []
    assert seen == [Change("inbounds", [3]), Change("clients", ["a", "b"])]


def test_any_of_them_wins_the_merge():
    notice = ChangeNotice()
    seen = recording(notice, "clients")
    with notice.collecting():
        notice.publish(Change("clients", ["a"]))
        notice.publish(Change("clients"))
        notice.publish(Change("clients", ["b"]))
    assert seen == [Change("clients")]


def test_a_failed_call_delivers_nothing():
    notice = ChangeNotice()
    seen = recording(notice, "clients")
    with notice.collecting() as call:
        notice.publish(Change("clients", ["a"]))
        call.drop()
    with pytest.raises(RuntimeError), notice.collecting():
        notice.publish(Change("clients", ["b"]))
        raise RuntimeError("the call failed")
    assert seen == []
    notice.publish(Change("clients", ["c"]))
    assert seen == [Change("clients", ["c"])]


def test_a_declared_resource_nobody_published_changed_as_a_whole():
    notice = ChangeNotice()
    seen = recording(notice, "clients", "inbounds")
    with notice.collecting() as call:
        notice.publish(Change("clients", ["a"]))
        call.declare("inbounds")
        call.declare("clients")
    assert seen == [Change("clients", ["a"]), Change("inbounds")]


def test_a_collector_gathers_its_own_greenlet_only():
    notice = ChangeNotice()
    seen = recording(notice, "clients")
    with notice.collecting():
        gevent.spawn(notice.publish, Change("clients", ["job"])).join()
        assert seen == [Change("clients", ["job"])]
        notice.publish(Change("clients", ["call"]))
    assert seen == [Change("clients", ["job"]), Change("clients", ["call"])]


def test_a_consumer_that_raises_is_logged_and_the_others_still_hear(caplog):
    notice = ChangeNotice()

    def broken(change: Change) -> None:
        raise RuntimeError("cache gone")

    notice.subscribe("clients", broken)
    seen = recording(notice, "clients")
    notice.publish(Change("clients", ["a"]))
    assert seen == [Change("clients", ["a"])]
    assert "a consumer of clients changes failed: test_a_consumer_that_raises" in caplog.text


def test_a_change_travels_as_text_and_many_ids_become_any():
    change = Change("inbounds", [3, 1])
    assert Change.from_text(change.as_text()) == change
    assert Change.from_text(Change("settings").as_text()) == Change("settings")
    many = Change("clients", [f"{n}@x" for n in range(RELAYED_IDS + 1)])
    assert Change.from_text(many.as_text()) == Change("clients")
    for text in ("", "[]", '{"resource": "clinets", "ids": null}', '{"resource": "hosts"}'):
        with pytest.raises(ValueError, match="not a change"):
            Change.from_text(text)


def test_local_changes_go_to_the_relay_after_the_consumers_and_arrived_ones_do_not():
    notice = ChangeNotice()
    order: list[str] = []
    notice.subscribe("settings", lambda change: order.append("consumer"))
    notice.subscribe_arrived("settings", lambda change: order.append("reload"))
    notice.relay(lambda change: order.append("relay"))
    with notice.collecting():
        notice.publish(Change("settings", ["subUpdates"]))
        assert order == []
    assert order == ["consumer", "relay"]
    order.clear()
    notice.arrive(Change("settings", ["subUpdates"]))
    assert order == ["reload", "consumer"]
