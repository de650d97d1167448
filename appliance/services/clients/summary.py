"""The paged list's summary (counts, and the emails of every depleted, expiring, disabled
and online client), kept up to date instead of recomputed.

A scan of every client took a few hundred milliseconds at 100,000 clients, during which
the process answered nobody. Instead the summary keeps the clients that are in some
bucket, by id, and follows what changes them:

- writes: the store notes which clients a committed write touched (`ClientWrites`), and
  only those are read again;
- traffic: the traffic tick notes the clients whose counters grew; of those only the ones
  now within `trafficDiff` of their quota or `expireDiff` of their expiry (a first use
  starts an expiry) can have changed bucket, and only those are read;
- time: a client enters "expiring" when its expiry comes within `expireDiff` days and
  "depleted" when it passes. Between two moments only the clients whose expiry lies
  between them (or between the two horizons) can change, and an index finds them;
- online: from the presence list, re-read when it changes.

Everything else (the first use, `expireDiff` or `trafficDiff` changed, a write that
touched every client) reads every client again, a slice of ids at a time with a turn for
other requests between slices. Each change gives the summary a new `version`, which lets
a client of the API that has this version already leave it out of a page.
"""

from __future__ import annotations

import json
import logging
import secrets
from bisect import bisect_left
from collections.abc import Callable, Iterable

import gevent
from gevent.event import Event
from gevent.lock import Semaphore
from pony.orm import db_session

from appliance.runtime.jobs import breathe
from appliance.store import client_queries
from appliance.store.batches import chunks
from appliance.store.client_queries import expiry_between, id_range, ids_in, keys_in, near_limits
from appliance.store.client_writes import ClientNotes

log = logging.getLogger(__name__)

DEACTIVE, DEPLETED, EXPIRING = 1, 2, 4
BUCKETS = (("depleted", DEPLETED), ("expiring", EXPIRING), ("deactive", DEACTIVE))
LISTS = ("online", "depleted", "expiring", "deactive")
DAY_MS = 86_400_000
# Client ids per statement of a full reading: some 4 ms of SQLite each at 100,000.
LOAD_SLICE = 2_000
# Moved counters looked up by key up to this many; beyond, the clients near a limit are
# scanned instead (2,000 lookups cost about what a scan of 100,000 does).
MOVED_LOOKUPS = 20_000

GIB = 1024**3

# A row of `client_queries.bucket_rows`: (id, email key, email, enable, depleted 0/1,
# expiring 0/1).
Row = tuple


class EmailList:
    """An unchanging list of emails and its JSON text, made on first use."""

    __slots__ = ("_text", "emails")

    def __init__(self, emails: list[str]):
        self.emails = emails
        self._text: str | None = None

    def text(self) -> str:
        if self._text is None:
            self._text = json.dumps(self.emails, ensure_ascii=False)
        return self._text

    def __len__(self) -> int:
        return len(self.emails)


class Bucket:
    """The emails in one bucket in the order of their keys, changed in place."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()):
        pairs = sorted(pairs)
        self.keys = [key for key, _ in pairs]
        self.emails = [email for _, email in pairs]
        self._frozen: EmailList | None = None

    def add(self, key: str, email: str) -> None:
        at = bisect_left(self.keys, key)
        if at < len(self.keys) and self.keys[at] == key:
            self.emails[at] = email
        else:
            self.keys.insert(at, key)
            self.emails.insert(at, email)
        self._frozen = None

    def remove(self, key: str) -> None:
        at = bisect_left(self.keys, key)
        if at < len(self.keys) and self.keys[at] == key:
            del self.keys[at], self.emails[at]
            self._frozen = None

    def frozen(self) -> EmailList:
        """The emails as they are now; the same object until the next change."""
        if self._frozen is None:
            self._frozen = EmailList(list(self.emails))
        return self._frozen


class Summary:
    """One version of the summary: what a page carries."""

    def __init__(self, version: str, total: int, active: int, lists: dict[str, EmailList]):
        self.version = version
        self.total = total
        self.active = active
        self.lists = lists

    def count(self, name: str) -> int:
        return len(self.lists[name])

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "active": self.active,
            **{name: list(self.lists[name].emails) for name in LISTS},
        }

    def text(self) -> str:
        """The summary as JSON text, from each list's text (made once per change of that
        list); put together anew each time rather than kept, a megabyte at 100,000."""
        lists = ", ".join(f'"{name}": {self.lists[name].text()}' for name in LISTS)
        return f'{{"total": {self.total}, "active": {self.active}, {lists}}}'


class Book:
    """The clients in some bucket: id -> (email key, email, bucket flags)."""

    def __init__(self, total: int = 0):
        self.members: dict[int, tuple[str, str, int]] = {}
        self.by_key: dict[str, int] = {}
        self.buckets = {name: Bucket() for name, _ in BUCKETS}
        self.inactive = 0
        self.total = total
        self.changes = 0

    def gather(self, rows: Iterable[Row]) -> None:
        """Members read by a full reading, a slice at a time; `settle` files them."""
        for row in rows:
            client_id, key, email, flags = _entry(row)
            if flags:
                self.members[client_id] = (key, email, flags)
                self.by_key[key] = client_id

    def settle(self) -> None:
        """The buckets of the gathered members, sorted once."""
        self.buckets = {
            name: Bucket((key, email) for key, email, flags in self.members.values() if flags & bit)
            for name, bit in BUCKETS
        }
        self.inactive = sum(
            1 for _, _, flags in self.members.values() if flags & (DEACTIVE | DEPLETED)
        )

    def put(self, row: Row) -> None:
        """A client as read now."""
        client_id, key, email, flags = _entry(row)
        old = self.members.get(client_id)
        if old == (key, email, flags) or (old is None and not flags):
            return
        if old is not None:
            self._unfile(client_id)
        if flags:
            holder = self.by_key.get(key)
            if holder is not None:
                # Its own row has changed (the key is unique): it is read again later.
                self._unfile(holder)
            self.members[client_id] = (key, email, flags)
            self.by_key[key] = client_id
            for name, bit in BUCKETS:
                if flags & bit:
                    self.buckets[name].add(key, email)
            if flags & (DEACTIVE | DEPLETED):
                self.inactive += 1
        self.changes += 1

    def drop_id(self, client_id: int) -> None:
        """A client that no longer exists."""
        if client_id in self.members:
            self._unfile(client_id)
            self.changes += 1

    def drop_key(self, key: str) -> None:
        """An email key that names no client any more."""
        holder = self.by_key.get(key)
        if holder is not None:
            self.drop_id(holder)

    def set_total(self, total: int) -> None:
        if total != self.total:
            self.total = total
            self.changes += 1

    def _unfile(self, client_id: int) -> None:
        key, _, flags = self.members.pop(client_id)
        if self.by_key.get(key) == client_id:
            del self.by_key[key]
            for name, bit in BUCKETS:
                if flags & bit:
                    self.buckets[name].remove(key)
        if flags & (DEACTIVE | DEPLETED):
            self.inactive -= 1


class ClientSummary:
    def __init__(self, store, settings, presence, clock: Callable[[], float]):
        self.store = store
        self.settings = settings
        self.presence = presence
        self.clock = clock
        self.writes = store.client_writes
        self._lock = Semaphore()
        self._book: Book | None = None
        self._limits: tuple[int, int] | None = None
        self._now = 0  # the moment the book is true at, in ms
        self._online_keys: frozenset[str] | None = None
        self._online = EmailList([])
        self._online_changes = 0
        # Versions of an earlier run of the panel never match this run's.
        self._run = secrets.token_hex(4)
        self._summary: Summary | None = None
        self._follower: gevent.Greenlet | None = None
        self._wanted = Event()
        self._warm = False  # make the first reading without waiting for a page to ask
        self.writes.listen(self.wake)

    def current(self) -> Summary:
        """The summary as of now, every committed change included."""
        with self._lock:
            self._catch_up()
            return self._snapshot()

    def wake(self) -> None:
        """Follow committed changes soon, in a greenlet of its own, so that the next page
        finds the work done (a traffic tick may have moved thousands of clients). One
        greenlet lives on for this: each would hold a database connection of its own."""
        self._wanted.set()
        if self._follower is None or self._follower.dead:
            self._follower = gevent.spawn(self._follow_forever)

    def warm(self) -> None:
        """Make the first reading now, in the background, so that the first page after
        the panel starts finds the summary ready."""
        self._warm = True
        self.wake()

    def _follow_forever(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            self._follow_quietly()

    def _follow_quietly(self) -> None:
        with self._lock:
            if self._book is None and not self._warm:
                # Nobody has asked for a summary yet: the first one reads everything.
                self.writes.take()
                return
            try:
                self._catch_up()
            except Exception as exc:
                unavailable = self.store.unavailable(exc)
                if unavailable is None:
                    log.exception("the client summary could not follow a change")
                else:
                    log.warning("the client summary could not follow a change: %s", unavailable.msg)

    def _catch_up(self) -> None:
        now = int(self.clock() * 1000)
        limits = (self.settings.get("expireDiff"), self.settings.get("trafficDiff"))
        notes = self.writes.take()
        try:
            if self._book is None or limits != self._limits or notes.everything:
                self._load(now, limits)
                self._online_keys = None
            else:
                self._follow(notes, now)
                self._pass_time(now)
        except BaseException:
            self.writes.give_back(notes)
            raise
        # A client renamed or deleted changes the online emails as well.
        self._follow_online(renamed=bool(notes.ids))

    def _load(self, now: int, limits: tuple[int, int]) -> None:
        """Read every client again: the notes taken so far are in what it reads, and
        those that arrive meanwhile are followed afterwards."""
        with db_session:
            top = client_queries.top_client_id(self.store)
            total = client_queries.client_count(self.store)
        book = Book(total)
        for low in range(0, top, LOAD_SLICE):
            if low:
                breathe()
            with db_session:
                book.gather(self._read(id_range(low, low + LOAD_SLICE), now, True))
        book.settle()
        if self._book is not None:
            book.changes = self._book.changes + 1
        self._book, self._limits, self._now = book, limits, now

    def _follow(self, notes: ClientNotes, now: int) -> None:
        book = self._book
        first = True
        # (the condition, the values noted, where a row carries it, what a value not
        # found means)
        for condition, values, at, drop in (
            (ids_in, sorted(notes.ids), 0, book.drop_id),
            (keys_in, sorted(notes.keys), 1, book.drop_key),
        ):
            for chunk in chunks(values):
                if not first:
                    breathe()
                first = False
                with db_session:
                    rows = self._read(condition(list(chunk)), now, False)
                found = {row[at] for row in rows}
                for row in rows:
                    book.put(row)
                for value in chunk:
                    if value not in found:
                        drop(value)
        moved = notes.moved - notes.keys
        if moved:
            if not first:
                breathe()
            self._follow_traffic(moved, now)
        if notes.recount:
            with db_session:
                book.set_total(client_queries.client_count(self.store))

    def _follow_traffic(self, moved: set[str], now: int) -> None:
        """Counters that only grew: a client not near a limit now was in no bucket that
        traffic takes it out of, nor within reach of one. Looking up thousands of keys
        costs more than a scan of the clients near a limit, a slice of ids at a time."""
        horizon, margin = self._limits_at(now)
        if len(moved) > MOVED_LOOKUPS:
            with db_session:
                top = client_queries.top_client_id(self.store)
            slices = [id_range(low, low + LOAD_SLICE) for low in range(0, top, LOAD_SLICE)]
        else:
            slices = [keys_in(list(chunk)) for chunk in chunks(sorted(moved))]
        for n, condition in enumerate(slices):
            if n:
                breathe()
            with db_session:
                rows = self._read(near_limits(condition, horizon, margin), now, False)
            for row in rows:
                self._book.put(row)

    def _pass_time(self, now: int) -> None:
        """Between the moment the book is true at and now, only clients whose expiry lies
        between the two, or between the two expiring horizons, change bucket."""
        if now == self._now:
            return
        low, high = sorted((self._now, now))
        horizon = self._limits[0] * DAY_MS
        with db_session:
            for start, end in ((low, high), (low + horizon, high + horizon)):
                for row in self._read(expiry_between(start, end), now, False):
                    self._book.put(row)
        self._now = now

    def _follow_online(self, renamed: bool) -> None:
        keys = frozenset(self.presence.online())
        if keys == self._online_keys and not (renamed and keys):
            return
        found: list[tuple[str, str]] = []
        for chunk in chunks(sorted(keys)):
            with db_session:
                found += client_queries.emails_of(self.store, chunk)
        emails = [email for _, email in sorted(found)]
        self._online_keys = keys
        if emails != self._online.emails:
            self._online = EmailList(emails)
            self._online_changes += 1

    def _limits_at(self, now: int) -> tuple[int, int]:
        """The expiring horizon (ms) at `now` and the quota margin (bytes)."""
        return (
            now + self.settings.get("expireDiff") * DAY_MS,
            self.settings.get("trafficDiff") * GIB,
        )

    def _read(self, condition: tuple[str, list], now: int, members_only: bool) -> list[Row]:
        """The clients of `condition`, their buckets judged at `now`; with `members_only`,
        only those in some bucket. The caller holds the db_session."""
        horizon, margin = self._limits_at(now)
        return client_queries.bucket_rows(self.store, condition, now, horizon, margin, members_only)

    def _snapshot(self) -> Summary:
        book = self._book
        version = f"{self._run}.{book.changes}.{self._online_changes}"
        if self._summary is None or self._summary.version != version:
            lists = {name: book.buckets[name].frozen() for name, _ in BUCKETS}
            lists["online"] = self._online
            self._summary = Summary(version, book.total, book.total - book.inactive, lists)
        return self._summary


def _entry(row: Row) -> tuple[int, str, str, int]:
    client_id, key, email, enable, depleted, expiring = row
    flags = (0 if enable else DEACTIVE) | (DEPLETED if depleted else 0)
    # Most emails are their own key: one string kept for both.
    return client_id, key, key if email == key else email, flags | (EXPIRING if expiring else 0)
