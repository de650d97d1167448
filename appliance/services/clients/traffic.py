"""Traffic accounting: every byte the core counts is added exactly once.

The core's counters are read absolute, never reset (a reset between read and write would
lose what arrived in between). The last value seen of each counter is kept in the
database (a client's in client_core_value, the others in core_counter), and each tick
adds the difference to clients, inbounds and outbounds and moves the kept values forward
in the same transaction: a panel that crashes before the commit counts the same bytes
again on the next tick from the old values, never twice. The values are kept per
instance (the guid of the data directory): several panels on one database each run a
core of their own and add its bytes to the same totals, each measured against its own.

A core restart starts its counters from zero. Each core process has a generation number
(kept beside the counters); when it changes, every counter's previous value is taken as
0. A counter that went down within one generation means the same thing.

Values are held in memory after the first tick (one process owns an instance's values),
so a tick reads nothing and writes only counters that moved.

For the metrics page each tick also notes how long it took and what it added (`TickStats`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.runtime.timings import Timings
from appliance.services.webhooks.outbox import Outbox
from appliance.store import traffic_sql, usage_sql

GENERATION = "#generation"
SEPARATOR = ">>>"
KINDS = frozenset({"user", "inbound", "outbound"})
DIRECTIONS = {"uplink": 0, "downlink": 1}


@dataclass
class Tick:
    """What one tick moved, as [up, down]: by email key, inbound tag and outbound tag."""

    clients: dict[str, list[int]] = field(default_factory=dict)
    inbounds: dict[str, list[int]] = field(default_factory=dict)
    outbounds: dict[str, list[int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.clients or self.inbounds or self.outbounds)


@dataclass
class TickStats:
    """What every tick since the start added up to: read by the metrics page."""

    seconds: Timings = field(default_factory=Timings)
    # [up, down] bytes added to inbounds and to outbounds (a client's bytes are its
    # inbound's too, and summing 100,000 of them per tick is not free).
    inbound_bytes: list[int] = field(default_factory=lambda: [0, 0])
    outbound_bytes: list[int] = field(default_factory=lambda: [0, 0])
    clients_moved: int = 0  # clients whose counters moved, summed over the ticks

    def add(self, tick: Tick, seconds: float) -> None:
        self.seconds.observe(seconds)
        pairs = ((self.inbound_bytes, tick.inbounds), (self.outbound_bytes, tick.outbounds))
        for total, moved in pairs:
            for up, down in moved.values():
                total[0] += up
                total[1] += down
        self.clients_moved += len(tick.clients)


class TrafficAccounting:
    def __init__(
        self, store, presence, outbox: Outbox, instance: Callable[[], str], clock=time.time
    ):
        self.store = store
        # Whose kept values these are: the guid of this instance (`instance_guid`), read
        # at the first tick (an offline command builds this and never ticks).
        self._instance = instance
        self.instance = ""
        self.presence = presence
        # Webhook events: client.first_connected, in the tick's transaction.
        self.outbox = outbox
        self.clock = clock
        # Last values seen: of each client's counters by email key ([up, down], kept in
        # client_core_value), of the other counters by name (kept in core_counter).
        self._users: dict[str, list[int]] | None = None
        self._last: dict[str, int] = {}
        self._outbounds: set[str] = set()
        self.stats = TickStats()

    def tick(self, counters: dict[str, int], generation: int) -> Tick:
        """Add what moved since the last tick; `counters` are the core's absolute values."""
        started = time.perf_counter()
        with db_session:
            users, last = self._load()
            same_core = last.get(GENERATION) == generation
            tick = Tick()
            buckets = {"user": tick.clients, "inbound": tick.inbounds, "outbound": tick.outbounds}
            moved_users: dict[str, list[int]] = {}  # email key -> [up, down] now
            changed: dict[str, int] = {}
            kept_users = users if same_core else {}
            for name, value in counters.items():
                counter = _counter(name)
                if counter is None:
                    continue
                kind, owner, direction = counter
                if kind == "user":
                    kept = kept_users.get(owner)
                    before = kept[direction] if kept else 0
                else:
                    before = last.get(name, 0) if same_core else 0
                moved = value - before if value >= before else value
                if moved <= 0:
                    continue
                bucket = buckets[kind]
                pair = bucket.get(owner)
                if pair is None:
                    pair = bucket[owner] = [0, 0]
                pair[direction] += moved
                if kind == "user":
                    now_values = moved_users.get(owner)
                    if now_values is None:
                        kept = kept_users.get(owner)
                        now_values = moved_users[owner] = list(kept) if kept else [0, 0]
                    now_values[direction] = value
                else:
                    changed[name] = value
            if not same_core:
                changed[GENERATION] = generation
                # Every kept value belongs to the old core: zero them all, so a counter
                # the new core has not moved yet is not measured against the old one.
                traffic_sql.zero_core_values(self.store, self.instance)
            new_outbounds = self._write(tick, moved_users, changed, last)
        # Only now that the transaction committed: a tick whose write failed leaves the
        # kept values as they were, and the next tick adds the same bytes again.
        self._outbounds.update(new_outbounds)
        if not same_core:
            last.update(dict.fromkeys(last, 0))
            users.clear()
        last.update(changed)
        users.update(moved_users)
        self.presence.seen(list(tick.clients), list(tick.inbounds))
        # Counters that moved may take a client over its quota or near it (and its first
        # bytes start an expiry that waited for them): the summary reads those again.
        self.store.client_writes.committed(moved=tick.clients)
        self.stats.add(tick, time.perf_counter() - started)
        return tick

    def _load(self) -> tuple[dict[str, list[int]], dict[str, int]]:
        if self._users is None:
            self.instance = self._instance()
            traffic_sql.claim_unowned(self.store, self.instance)
            self._users, self._last = traffic_sql.kept_core_values(self.store, self.instance)
            self._outbounds = traffic_sql.outbound_tags(self.store)
        return self._users, self._last

    def _write(
        self,
        tick: Tick,
        moved_users: dict[str, list[int]],
        changed: dict[str, int],
        last: dict[str, int],
    ) -> list[str]:
        """Writes the tick; returns the outbound tags it inserted rows for."""
        now = int(self.clock() * 1000)
        store = self.store
        if tick.clients:
            # One statement per client that moved: its counters and, with them, the
            # core's values they were measured against, in the same transaction. In the
            # order of their keys, as bulk calls lock them (`bulk.in_lock_order`): a
            # tick and a bulk call never wait on each other in a circle.
            first = self._first_time(sorted(tick.clients))
            traffic_sql.add_client_core_traffic(
                store, tick.clients, moved_users, self.instance, now
            )
            traffic_sql.start_clocks(store, set(tick.clients), now)
            self.outbox.raise_stored_clients("client.first_connected", first)
        inbounds = [((tag,), up, down) for tag, (up, down) in tick.inbounds.items()]
        if inbounds:
            traffic_sql.add_inbound_traffic(store, inbounds, by="tag")
        usage_sql.record(store, now, tick.clients, inbounds, by="tag")
        new_outbounds = [tag for tag in tick.outbounds if tag not in self._outbounds]
        traffic_sql.add_outbound_traffic(store, tick.outbounds, new_outbounds)
        known: list[tuple[int, str]] = []
        fresh: list[tuple[str, int]] = []
        for name, value in changed.items():
            if name in last:
                known.append((value, name))
            else:
                fresh.append((name, value))
        traffic_sql.keep_core_values(store, self.instance, known, fresh)
        return new_outbounds

    def _first_time(self, keys: list[str]) -> list[str]:
        """Which of the clients that moved had never been online, when an endpoint wants
        to hear of it."""
        if not self.outbox.wanted_by_any("client.first_connected"):
            return []
        return traffic_sql.never_online(self.store, keys)


def _counter(name: str) -> tuple[str, str, int] | None:
    """(kind, owner, 0 for uplink or 1 for downlink) of a counter name such as
    `user>>>EMAIL>>>traffic>>>uplink`, with a user's email as its key; None for names
    that are not traffic. Remembered: the same names come back every tick, and taking
    100,000 of them apart each time is most of a tick's work."""
    parts = name.split(SEPARATOR)
    if len(parts) != 4 or parts[0] not in KINDS or parts[2] != "traffic":
        return None
    kind, owner, _, direction = parts
    if direction not in DIRECTIONS:
        return None
    return kind, email_key(owner) if kind == "user" else owner, DIRECTIONS[direction]
