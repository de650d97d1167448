"""Which clients a write may have changed: what lets the paged list's summary follow
changes by re-reading those clients alone instead of every client.

Entity writes are noted by hooks on the `Client` and `ClientTraffic` entities as Pony
flushes them (see `models.py`); the set-based SQL writers note what they touch
themselves. A note is a hint, never a value: whoever follows the notes re-reads the rows
they name, so a note too many costs a read and nothing else, while a note missing would
leave the summary wrong.

A note made before its transaction commits must not be followed yet: the re-read would
see the old row, and the note would be spent. So notes stay with the greenlet that wrote
them until it says its writes are committed (`commit`, called once a request or job has
finished its change), and writers that note after their own commit use `committed`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gevent import getcurrent


@dataclass
class ClientNotes:
    """Clients to re-read, by id or by email key; `moved`: email keys whose counters only
    grew (a traffic tick); `recount` when rows may have been inserted or deleted;
    `everything` when a write touched more than is worth naming."""

    ids: set[int] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    moved: set[str] = field(default_factory=set)
    recount: bool = False
    everything: bool = False

    def merge(self, other: ClientNotes) -> None:
        self.ids |= other.ids
        self.keys |= other.keys
        self.moved |= other.moved
        self.recount |= other.recount
        self.everything |= other.everything

    def __bool__(self) -> bool:
        return bool(self.ids or self.keys or self.moved or self.recount or self.everything)


class ClientWrites:
    def __init__(self):
        # Per greenlet, until it commits; a greenlet that ends without committing (its
        # transaction rolled back) takes its notes with it.
        self._open: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._done = ClientNotes()
        self._listeners: list[Callable[[], None]] = []
        self._watchers: list[Callable[[ClientNotes], None]] = []

    def note(
        self,
        ids: Iterable[int] = (),
        keys: Iterable[str] = (),
        recount: bool = False,
        everything: bool = False,
    ) -> None:
        """Note a write of the current greenlet's open transaction."""
        current = getcurrent()
        notes = self._open.get(current)
        if notes is None:
            notes = self._open[current] = ClientNotes()
        notes.ids.update(ids)
        notes.keys.update(keys)
        notes.recount |= recount
        notes.everything |= everything

    def commit(self) -> None:
        """The current greenlet's writes are committed: their notes may be followed."""
        notes = self._open.pop(getcurrent(), None)
        if notes:
            self._done.merge(notes)
            self._tell(notes)

    def committed(self, moved: Iterable[str] = (), everything: bool = False) -> None:
        """Note committed writes: counters that grew, by email key, or every client (a
        restored database)."""
        notes = ClientNotes(moved=set(moved), everything=everything)
        if notes:
            self._done.merge(notes)
            self._tell(notes)

    def take(self) -> ClientNotes:
        """Every committed note so far, handed over once."""
        notes, self._done = self._done, ClientNotes()
        return notes

    def give_back(self, notes: ClientNotes) -> None:
        """Notes taken but not followed (the re-read failed): they are taken again."""
        self._done.merge(notes)

    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever committed notes arrive."""
        self._listeners.append(callback)

    def watch(self, callback: Callable[[ClientNotes], None]) -> None:
        """Hand every batch of committed notes to `callback` as it arrives, besides the
        one reader that `take`s them (the counters a managing panel polls follow them)."""
        self._watchers.append(callback)

    def _tell(self, notes: ClientNotes) -> None:
        for watcher in self._watchers:
            watcher(notes)
        for callback in self._listeners:
            callback()
