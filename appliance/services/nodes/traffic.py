"""Traffic of the nodes: each byte a node counts is added here exactly once.

Every traffic interval each enabled, online node is polled for its counters (its
clients' traffic totals and its inbounds' up and down, `clients/counters`), all nodes at
once but at most `CONCURRENCY` in flight, each call bounded in time, in a job of its own:
a slow node costs one slot, never a request. The rule is the core's (see
`services/clients/traffic.py`): counters are read absolute and never reset, the last
value seen of each is kept per node in `node_counter`, and the difference is added to the
client's traffic (matched by email) and to the node's inbound here (matched by tag, with
the `n<id>-` prefix) in the same transaction that moves the kept values forward, for
the clients and inbounds bound to that node only (`reports.py`). So:
- a poll repeated after a timeout, or answered twice, adds nothing the second time;
- a central panel killed between polls reads the kept values again and goes on;
- a node restarted (or killed) keeps its counters in its own database, so its next
  answer continues them; a counter lower than its kept value was reset on the node, and
  its new value is what moved since (which is why a node never has two polls in
  flight: an older answer counted after a newer one would read as a reset).
The kept values are held in memory after the first poll of each node, and only those
that moved are written. A node answers only the counters that moved since the cursor of
its last answer (`services/clients/counters.py`); with no cursor (after this panel
started) it answers every counter.

What the polls find feeds the rest: clients whose counters moved are online on that node
(`Presence`, by node id), inbounds that moved are active there, the sweep that disables
clients past their quota or expiry runs after each round, and the totals of each node's
clients are pushed down to it (`inbounds/pushClientTraffics`), only those that changed,
in batches, at most every `PUSH_SECONDS`, for its display and its own quota check.
Client addresses are read from each node every `IPS_SECONDS`, and its core's recent ones
on every poll, for the IP limit judged on all servers (`addresses.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.lock import Semaphore
from gevent.pool import Pool
from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.domain.protocols import INT64_MAX
from appliance.services.clients.counters import CounterJournal
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.nodes.addresses import NodeAddresses
from appliance.services.nodes.health import NodeHealth
from appliance.services.nodes.link import Identity, NodeError, NodeLink
from appliance.services.nodes.records import Nodes, details
from appliance.services.nodes.reports import IgnoredReports
from appliance.store import inbound_rows, node_sql, node_traffic_sql, traffic_sql, usage_sql
from appliance.store.batches import chunks

log = logging.getLogger(__name__)

COUNTERS_PATH = "/panel/api/clients/counters"
PUSH_PATH = "/panel/api/inbounds/pushClientTraffics"
IPS_PATH = "/panel/api/clients/clientIpsByGuid"
POLL_TIMEOUT = 10
CONCURRENCY = 16
PUSH_SECONDS = 10
FULL_PUSH_SECONDS = 300
PUSH_BATCH = 5000
IPS_SECONDS = 60
USER = "user>>>"
INBOUND = "inbound>>>"


@dataclass
class _NodeState:
    """What this process knows of one node's polls (memory only)."""

    cursor: str = ""
    polled_at: float = 0.0
    guid: str = ""
    # Push-down: the totals last stored on the node, the journal position they cover.
    pushed: dict[str, tuple[int, int]] = field(default_factory=dict)
    push_cursor: str = ""
    pushed_at: float = 0.0
    full_pushed_at: float = 0.0
    ips: dict[str, dict] = field(default_factory=dict)
    ips_at: float = 0.0


@dataclass
class _Answer:
    """A node's counters, checked: email -> (up, down) and node tag -> (up, down)."""

    cursor: str
    full: bool
    clients: dict[str, tuple[str, int, int]]
    inbounds: dict[str, tuple[int, int]]


class NodeTraffic:
    def __init__(
        self,
        nodes: Nodes,
        health: NodeHealth,
        identity: Callable[[], Identity],
        presence: Presence,
        query: ClientQuery,
        journal: CounterJournal,
        sweep: Callable[[], None],
        addresses: NodeAddresses | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.nodes = nodes
        self.store = nodes.store
        self.health = health
        self.identity = identity
        self.presence = presence
        self.query = query
        self.journal = journal
        self.sweep = sweep
        self.addresses = addresses  # the IP limit judged on every server's addresses
        self.clock = clock
        self._states: dict[int, _NodeState] = {}
        # node id -> counter name -> [up, down] last seen, as kept in node_counter.
        self._last: dict[int, dict[str, tuple[int, int]]] = {}
        self._born: dict[int, int] = {}  # node id -> createdAt of the record polled
        # Nodes with a poll in flight, kept apart from the rest of what is known of them
        # (which goes when a node stops being polled) so that none is ever polled twice
        # at once, even across going offline and back.
        self._busy: set[int] = set()
        self._pool = Pool(CONCURRENCY)
        # One node's answer written at a time: each is a short transaction, and two
        # touching the same clients' rows never wait on each other in a circle.
        self._writing = Semaphore()
        # What each node reported on clients and inbounds not bound to it.
        self.ignored = IgnoredReports()

    # ---- the job ----------------------------------------------------------------------

    def poll_all(self) -> None:
        """Every enabled, online node at once; then the sweep, when any was polled."""
        every = self.nodes.rows()
        # Kept values belong to one record: a node deleted and another added under the
        # same id (SQLite may reuse the highest) starts with none.
        born = {r["id"]: r["createdAt"] for r in every}
        for node_id in [n for n in self._born if born.get(n) != self._born[n]]:
            self._drop(node_id)
            self._last.pop(node_id, None)
            self.ignored.forget(node_id)
            del self._born[node_id]
        self._born.update(born)
        records = [r for r in every if r["enable"] and self.health.online(r["id"])]
        polled = {r["id"] for r in records}
        for node_id in list(self._states):
            if node_id not in polled:
                self._drop(node_id)
        if not records:
            return
        greenlets = []
        for record in records:
            if record["id"] not in self._busy:
                self._busy.add(record["id"])
                greenlets.append(self._pool.spawn(self._poll_one, record))
        gevent.joinall(greenlets, timeout=POLL_TIMEOUT * 3)
        self.sweep()

    def _poll_one(self, record: dict) -> None:
        """One node's poll in its greenlet: one at a time per node (an answer counted
        after a newer one would look like a reset, and be added again), and whatever
        fails is logged and tried again next round."""
        try:
            self.poll(record)
        except Exception as exc:
            unavailable = self.store.unavailable(exc)
            if unavailable is None:
                log.exception("traffic of node %s not counted", record["name"])
            else:
                log.warning("traffic of node %s not counted: %s", record["name"], unavailable.msg)
        finally:
            self._busy.discard(record["id"])

    def poll(self, record: dict) -> None:
        """Poll one node, add what moved, push its clients' totals down."""
        node_id = record["id"]
        state = self._states.setdefault(node_id, _NodeState())
        link = NodeLink(details(record), self.identity())
        try:
            answer = _checked(
                link.call("POST", COUNTERS_PATH, {"cursor": state.cursor}, timeout=POLL_TIMEOUT),
                link.details.label,
            )
        except NodeError as exc:
            log.info("traffic of node %s not read: %s", record["name"], exc.msg)
            return
        with self._writing:
            clients, inbounds = self._count(node_id, answer, record["name"])
        state.cursor = answer.cursor
        state.polled_at = self.clock()
        state.guid = self.health.snapshot(node_id).get("guid", "") or record.get("guid", "")
        self.presence.seen(list(clients), list(inbounds), origin=node_id)
        try:
            self._push(node_id, link, state)
            self._read_ips(record, link, state)
        except NodeError as exc:
            log.info("node %s: %s", record["name"], exc.msg)
        if self.addresses is not None:
            try:
                self.addresses.poll(node_id, link)
            except NodeError as exc:
                log.info("addresses of node %s not judged: %s", record["name"], exc.msg)

    # ---- counting ---------------------------------------------------------------------

    def _count(self, node_id: int, answer: _Answer, node: str = "") -> tuple[dict, dict]:
        """Add what moved since the kept values, and keep the new ones, in one
        transaction; returns what moved (email key -> [up, down], central tag -> ...).
        Only the clients and inbounds bound to the node count (`reports.py`); the kept
        values of the others move on all the same, so a client bound to the node later
        is charged from then on, not with what the node counted before."""
        now = int(self.clock() * 1000)
        with db_session:
            if not self.store.entities.Node.exists(id=node_id):
                return {}, {}  # deleted while its answer was on the way
            last = self._kept(node_id)
            changed: dict[str, tuple[int, int]] = {}
            clients: dict[str, list[int]] = {}
            inbounds: dict[str, list[int]] = {}
            for key, (_, up, down) in answer.clients.items():
                _measure(USER + key, (up, down), last, changed, clients, key)
            for tag, values in answer.inbounds.items():
                _measure(INBOUND + tag, values, last, changed, inbounds, f"n{node_id}-{tag}")
            foreign = _keep_only(clients, node_sql.bound_keys(self.store, node_id, clients))
            strays = _keep_only(inbounds, inbound_rows.tags_of_node(self.store, node_id))
            gone = []
            if answer.full:
                names = {USER + key for key in answer.clients}
                names |= {INBOUND + tag for tag in answer.inbounds}
                gone = [name for name in last if name not in names]
            self._write(node_id, now, clients, inbounds, changed, last, gone)
            emails = node_sql.known_emails(self.store, foreign).values() if foreign else []
            tags = inbound_rows.known_tags(self.store, strays) if strays else set()
        for name in gone:
            del last[name]
        last.update(changed)
        self.store.client_writes.committed(moved=clients)
        label = node or f"#{node_id}"
        self.ignored.note(label, node_id, "traffic", "client", emails)
        self.ignored.note(label, node_id, "traffic", "inbound", tags)
        return clients, inbounds

    def _kept(self, node_id: int) -> dict[str, tuple[int, int]]:
        last = self._last.get(node_id)
        if last is None:
            last = self._last[node_id] = {
                name: (up, down)
                for name, up, down in node_traffic_sql.kept_counters(self.store, node_id)
            }
        return last

    def _write(self, node_id, now, clients, inbounds, changed, last, gone) -> None:
        store = self.store
        if clients:
            traffic_sql.add_client_traffic(store, clients, now)
            traffic_sql.start_clocks(store, set(clients), now)
        moved = [((tag, node_id), up, down) for tag, (up, down) in inbounds.items()]
        if moved:
            traffic_sql.add_inbound_traffic(store, moved, by="node tag")
        usage_sql.record(store, now, clients, moved, by="node tag")
        node_traffic_sql.keep_counters(
            store,
            [(up, down, node_id, name) for name, (up, down) in changed.items() if name in last],
            [(node_id, name, up, down) for name, (up, down) in changed.items() if name not in last],
        )
        node_traffic_sql.drop_counters(store, node_id, gone)

    # ---- pushing totals down ----------------------------------------------------------

    def _push(self, node_id: int, link: NodeLink, state: _NodeState) -> None:
        """Push the totals of the node's clients that changed since the last push, at
        most every PUSH_SECONDS; all of them are compared every FULL_PUSH_SECONDS."""
        now = self.clock()
        if now - state.pushed_at < PUSH_SECONDS:
            return
        cursor = self.journal.cursor()
        keys = self.journal.since(state.push_cursor)
        if now - state.full_pushed_at >= FULL_PUSH_SECONDS:
            keys = None
        totals = self._totals(node_id, keys)
        changed = [
            (key, email, up, down)
            for key, (email, up, down) in totals.items()
            if state.pushed.get(key) != (up, down)
        ]
        guid = self.identity().guid
        for batch in chunks(changed, PUSH_BATCH):
            body = {
                "masterGuid": guid,
                "traffics": [{"email": e, "up": u, "down": d} for _, e, u, d in batch],
            }
            reply = link.call("POST", PUSH_PATH, body, timeout=POLL_TIMEOUT)
            skipped = reply.get("skipped", []) if isinstance(reply, dict) else []
            skipped = {email_key(e) for e in skipped if isinstance(e, str)}
            for key, _, up, down in batch:
                if key not in skipped:
                    state.pushed[key] = (up, down)
        state.push_cursor = cursor
        state.pushed_at = now
        if keys is None:
            state.full_pushed_at = now

    def _totals(self, node_id: int, keys: list[str] | None) -> dict[str, tuple[str, int, int]]:
        """email key -> (email, up, down) of the clients attached to the node's inbounds,
        of `keys` only unless None."""
        with db_session:
            rows = node_traffic_sql.client_totals(self.store, node_id, keys)
        return {key: (email, up, down) for key, email, up, down in rows}

    def _read_ips(self, record: dict, link: NodeLink, state: _NodeState) -> None:
        """The node's client addresses, per guid: its own and those of the nodes under
        it, never this panel's or another node's of this panel, and only for the
        clients bound to it."""
        now = self.clock()
        if now - state.ips_at < IPS_SECONDS:
            return
        state.ips_at = now
        answer = link.call("POST", IPS_PATH, timeout=POLL_TIMEOUT)
        if not isinstance(answer, dict):
            return
        node_id = record["id"]
        others = {r["guid"] for r in self.nodes.rows() if r["id"] != node_id and r["guid"]}
        others.add(self.identity().guid)
        found = {
            guid: {e: v for e, v in entries.items() if isinstance(e, str) and 0 < len(e) <= 255}
            for guid, entries in answer.items()
            if isinstance(entries, dict) and guid not in others
        }
        keys = {email_key(e) for entries in found.values() for e in entries}
        with db_session:
            allowed = node_sql.bound_keys(self.store, node_id, keys)
            foreign = node_sql.known_emails(self.store, keys - allowed) if keys - allowed else {}
        state.ips = {
            guid: {e: v for e, v in entries.items() if email_key(e) in allowed}
            for guid, entries in found.items()
        }
        self.ignored.note(record["name"], node_id, "addresses", "client", foreign.values())

    # ---- what the polls found -----------------------------------------------------------

    def reporting(self) -> dict[int, str]:
        """node id -> guid of the nodes whose last poll counted within the heartbeat
        window: the nodes whose part the per-guid answers hold."""
        cutoff = self.clock() - self.presence.window
        return {
            node_id: state.guid
            for node_id, state in self._states.items()
            if state.guid and state.polled_at >= cutoff
        }

    def onlines_by_guid(self) -> dict[str, list[str]]:
        """guid -> emails online there: this panel's own core under its guid, then each
        node reporting."""
        found = {self.identity().guid: self.query.emails_of(self.presence.online_at(None))}
        for node_id, guid in self.reporting().items():
            found[guid] = self.query.emails_of(self.presence.online_at(node_id))
        return found

    def active_inbounds_by_guid(self) -> dict[str, list[str]]:
        """guid -> tags (as this panel names them) of inbounds that carried traffic in
        the window; nodes not reporting are absent."""
        found = {self.identity().guid: self.presence.active_inbounds(None)}
        for node_id, guid in self.reporting().items():
            found[guid] = self.presence.active_inbounds(node_id)
        return found

    def client_ips_by_guid(self) -> dict[str, dict]:
        """guid -> email -> addresses: this panel's, then as each reporting node (with the
        nodes under it) last answered."""
        found: dict[str, dict] = {}
        for node_id in self.reporting():
            found.update(self._states[node_id].ips)
        found[self.identity().guid] = self.query.ips_by_email()
        return found

    def online_counts(self) -> dict[int, int]:
        return {node: len(self.presence.online_at(node)) for node in self.reporting()}

    def _drop(self, node_id: int) -> None:
        """A node no longer polled (disabled, offline, deleted): what it reported goes;
        its kept values stay (deleting a node deletes them)."""
        self._states.pop(node_id, None)
        self.presence.forget(node_id)


def _keep_only(moved: dict, allowed: set[str]) -> list[str]:
    """Drop from `moved` what is not in `allowed`; returns what was dropped."""
    dropped = [name for name in moved if name not in allowed]
    for name in dropped:
        del moved[name]
    return dropped


def _measure(name, values, last, changed, moved, owner) -> None:
    """Compare a counter with its kept value: note the new value when it differs, and
    what moved (all of it when the counter went down: it was reset on the node)."""
    before = last.get(name, (0, 0))
    if values == before:
        return
    changed[name] = values
    steps = [now - was if now >= was else now for now, was in zip(values, before, strict=True)]
    if any(steps):
        pair = moved.setdefault(owner, [0, 0])
        pair[0] += steps[0]
        pair[1] += steps[1]


def _checked(answer: Any, label: str) -> _Answer:
    """A node's counters answer, with every value checked: a node is another machine,
    and what it sends becomes this panel's totals."""
    if not isinstance(answer, dict):
        raise NodeError(f"{label} sent counters that are not an object", reached=True)
    cursor, full = answer.get("cursor"), answer.get("full")
    if not isinstance(cursor, str) or len(cursor) > 64 or not isinstance(full, bool):
        raise NodeError(f"{label} sent counters without a cursor", reached=True)
    clients: dict[str, tuple[str, int, int]] = {}
    for item in _items(answer.get("clients"), label):
        email = item.get("email")
        if isinstance(email, str) and 0 < len(email) <= 255:
            clients[email_key(email)] = (email, *_pair(item, label))
    inbounds: dict[str, tuple[int, int]] = {}
    for item in _items(answer.get("inbounds"), label):
        tag = item.get("tag")
        if isinstance(tag, str) and 0 < len(tag) <= 60:
            inbounds[tag] = _pair(item, label)
    return _Answer(cursor, full, clients, inbounds)


def _items(value: Any, label: str) -> list[dict]:
    if not isinstance(value, list):
        raise NodeError(f"{label} sent counters without their lists", reached=True)
    return [item for item in value if isinstance(item, dict)]


def _pair(item: dict, label: str) -> tuple[int, int]:
    values = item.get("up"), item.get("down")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
            raise NodeError(f"{label} sent a counter that is not a byte count", reached=True)
    return values
