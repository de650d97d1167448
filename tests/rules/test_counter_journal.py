"""The journal behind `clients/counters`: which clients' traffic changed since a cursor.

A managing panel's poll sends back the cursor of the last answer and gets the clients
journaled after it; whenever the journal cannot vouch for a cursor it says so (None) and
the answer carries every counter. Leaving out a client that changed would lose its bytes
on the managing panel until it moved again: these cases are the ones where that could
happen.
"""

from __future__ import annotations

from appliance.services.clients.counters import CounterJournal
from appliance.store.client_writes import ClientNotes


def changed(journal: CounterJournal, *keys: str) -> None:
    journal.note(ClientNotes(keys=set(keys)))


def test_a_cursor_gets_what_changed_after_it_and_nothing_before():
    journal = CounterJournal()
    changed(journal, "a", "b")
    first = journal.cursor()
    journal.note(ClientNotes(moved={"c"}))
    changed(journal, "a")
    assert sorted(journal.since(first)) == ["a", "c"]
    assert journal.since(journal.cursor()) == []


def test_notes_about_no_traffic_row_move_nothing():
    journal = CounterJournal()
    cursor = journal.cursor()
    journal.note(ClientNotes(ids={1, 2}, recount=True))
    assert journal.cursor() == cursor
    assert journal.since(cursor) == []


def test_cursors_it_cannot_vouch_for_get_everything():
    journal = CounterJournal()
    changed(journal, "a")
    assert journal.since("") is None
    assert journal.since("another-process:1") is None
    assert journal.since(f"{journal.boot}:99") is None
    assert journal.since(f"{journal.boot}:x") is None
    assert CounterJournal().since(journal.cursor()) is None  # a restarted panel


def test_a_write_to_every_client_ends_every_older_cursor():
    journal = CounterJournal()
    before = journal.cursor()
    journal.note(ClientNotes(everything=True))
    assert journal.since(before) is None
    after = journal.cursor()
    changed(journal, "a")
    assert journal.since(after) == ["a"]


def test_a_cursor_older_than_the_journals_memory_gets_everything():
    journal = CounterJournal(limit=2)
    old = journal.cursor()
    changed(journal, "a")
    middle = journal.cursor()
    changed(journal, "b")
    changed(journal, "c")  # "a" is forgotten: a cursor from before it cannot be served
    assert journal.since(old) is None
    assert sorted(journal.since(middle)) == ["b", "c"]
    assert journal.since(journal.cursor()) == []
