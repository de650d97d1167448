"""The change notice: how a committed change reaches everything that keeps a copy of it.

The approach is publish and subscribe over plain values. A service that committed a
change publishes `Change(resource, ids)`; every part that caches, runs or shows that
resource subscribes to its kind in the composition root. Each kind is declared once in
`KINDS` with what it means and what its ids are, as Datasette's hookspecs declare each
hook once: a consumer names the kinds it follows instead of testing `resource in (...)`.

One API call may publish many changes (a bulk call, an inbound save that re-fits its
clients), and each consumer must see them once, or a call would cost one core restart
per write. So the API plugin opens a collector around every call (`collecting`): what
the call's greenlet publishes is gathered, merged per resource (ids united; "any of
them" wins), delivered once when the call succeeds and dropped when it fails. Outside a
collector (jobs, node pushes, the command line, the core's own sweep) a publish is
delivered at once, in the publishing greenlet, which has committed by then.

A consumer that raises is logged and the others still get the change: a cache that
failed to drop must not keep the core out of step. `Change` stays plain data, so that
changes made by other panel processes on the same database arrive the same way: each
change delivered here is also handed to the `relay` (which sends it to the others, as
`as_text`), and one that `arrive`s from another process reaches every consumer exactly
as a local one, after those that reload what this process keeps (`subscribe_arrived`),
and is never relayed again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass

from gevent import getcurrent

log = logging.getLogger(__name__)

# Ids a change sent to other processes names at most; beyond, it names "any of them".
RELAYED_IDS = 200

# Every kind of change, declared once: what changed, and what its ids are.
KINDS: dict[str, str] = {
    "clients": "client records, their inbounds, traffic, links or IPs; ids: emails as stored",
    "inbounds": "inbound records or their fallbacks; ids: inbound ids",
    "hosts": "the hosts a subscription offers per inbound; ids: host ids",
    "settings": "panel settings, stored or internal; ids: setting keys",
    "nodes": "the records of the panels this one manages; ids: node ids",
    "nodeStatus": "what a node's heartbeat found (online, offline ...); ids: node ids",
    "outbounds": "outbounds from outside the core's template (subscriptions); ids: their ids",
    "sessions": "admin sessions that ended; ids: session ids",
    "apiTokens": "API tokens; ids: token ids",
    "core": "the core's process or release, changed by an admin; ids: none named",
    "webhooks": "webhook endpoints, or events queued for them; ids: endpoint ids",
}


@dataclass(frozen=True)
class Change:
    """`resource` (a kind of `KINDS`) changed: the records keyed by `ids`, or (None) any
    of them."""

    resource: str
    ids: frozenset[Hashable] | None = None

    def __post_init__(self):
        # Any iterable of keys is taken (a list of emails); kept as the frozenset it means.
        if self.ids is not None and not isinstance(self.ids, frozenset):
            object.__setattr__(self, "ids", frozenset(self.ids))

    def merged(self, other: Change) -> Change:
        """Both changes of one resource as one: their ids united, None if either is."""
        if self.ids is None or other.ids is None:
            return Change(self.resource, None)
        return Change(self.resource, self.ids | other.ids)

    def as_text(self) -> str:
        """The change as JSON for another process; many ids become "any of them"."""
        ids = self.ids
        if ids is not None and len(ids) > RELAYED_IDS:
            ids = None
        listed = None if ids is None else sorted(ids, key=lambda key: (str(type(key)), key))
        return json.dumps({"resource": self.resource, "ids": listed}, separators=(",", ":"))

    @classmethod
    def from_text(cls, text: str) -> Change:
        """A change `as_text` wrote; ValueError for anything else."""
        try:
            data = json.loads(text)
            resource, ids = data["resource"], data["ids"]
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a change: {text[:80]!r}") from exc
        if resource not in KINDS or not (ids is None or isinstance(ids, list)):
            raise ValueError(f"not a change: {text[:80]!r}")
        return cls(resource, None if ids is None else frozenset(ids))


Consumer = Callable[[Change], None]


class CallChanges:
    """What one call published, merged per resource in the order first published."""

    def __init__(self, notice: ChangeNotice):
        self._notice = notice
        self._changes: dict[str, Change] = {}
        self._dropped = False

    def add(self, change: Change) -> None:
        known = self._changes.get(change.resource)
        self._changes[change.resource] = change if known is None else known.merged(change)

    def declare(self, resource: str) -> None:
        """The call's declared effect: a resource its services did not publish
        themselves changed as a whole ("a call that named nothing changed anything")."""
        if resource not in self._changes:
            self.add(Change(resource))

    def drop(self) -> None:
        """The call failed: nothing it published is delivered."""
        self._dropped = True

    def deliver(self) -> None:
        changes, self._changes = list(self._changes.values()), {}
        if not self._dropped:
            for change in changes:
                self._notice.deliver(change)


class ChangeNotice:
    def __init__(self, kinds: Iterable[str] = KINDS):
        self._consumers: dict[str, list[Consumer]] = {kind: [] for kind in kinds}
        self._arrived: dict[str, list[Consumer]] = {kind: [] for kind in kinds}
        self._relay: Consumer | None = None
        # The collector of the call each greenlet serves; a greenlet that dies takes its own.
        self._open: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def subscribe(self, resource: str, consumer: Consumer) -> None:
        """Call `consumer` with every change of `resource`, in the order subscribed."""
        self._kind(resource).append(consumer)

    def subscribe_arrived(self, resource: str, consumer: Consumer) -> None:
        """Call `consumer` first with every change of `resource` another process made:
        for what this process keeps of it and the other consumers read."""
        self._kind(resource)
        self._arrived[resource].append(consumer)

    def relay(self, sender: Consumer) -> None:
        """Hand every change delivered here to `sender` too, after the consumers."""
        self._relay = sender

    def publish(self, change: Change) -> None:
        """A committed change: collected when this greenlet serves a call, else delivered."""
        self._kind(change.resource)
        collected = self._open.get(getcurrent())
        if collected is None:
            self.deliver(change)
        else:
            collected.add(change)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[CallChanges]:
        """Gather what this greenlet publishes until the block ends, then deliver it once
        (unless `drop`ped, or the block raised)."""
        current = getcurrent()
        outer = self._open.get(current)
        collected = self._open[current] = CallChanges(self)
        try:
            yield collected
        except BaseException:
            collected.drop()
            raise
        finally:
            if outer is None:
                del self._open[current]
            else:
                self._open[current] = outer
            collected.deliver()

    def deliver(self, change: Change) -> None:
        """Hand `change` to each consumer of its resource, then to the relay."""
        self._hand_out(change, self._kind(change.resource))
        if self._relay is not None:
            self._hand_out(change, [self._relay])

    def arrive(self, change: Change) -> None:
        """A change another process made: delivered here as a local one, not relayed."""
        self._hand_out(change, self._arrived[change.resource] + self._kind(change.resource))

    def _hand_out(self, change: Change, consumers: list[Consumer]) -> None:
        """Call each consumer with `change`; one that raises is logged."""
        for consumer in consumers:
            try:
                consumer(change)
            except Exception:
                name = getattr(consumer, "__qualname__", repr(consumer))
                log.exception("a consumer of %s changes failed: %s", change.resource, name)

    def _kind(self, resource: str) -> list[Consumer]:
        consumers = self._consumers.get(resource)
        if consumers is None:
            raise ValueError(f"no kind of change is declared as {resource!r} (see KINDS)")
        return consumers
