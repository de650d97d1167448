"""Turning one core config into another without a restart, where the core allows it.

The core's HandlerService adds and removes users of a running VLESS, VMess or Trojan
inbound in about a millisecond, leaving every open connection alone. So a new config is
compared with the running one: when the only differences are client entries of such
inbounds, those become user operations; anything else (an inbound added, a port moved,
a Shadowsocks user, the routing) needs a restart. Pure: configs in, operations out;
`running` and `live_changes` call the caller's `pause` between slices of their work (at
100,000 clients, a fifth of a second of CPU each), so a caller on an event loop can let
others run.

A change to a few clients need not rebuild anything: `took` brings what is kept of the
running config up to date with the user operations the core took, and `with_ops` writes
them into a config read back from its file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

LIVE_PROTOCOLS = frozenset({"vless", "vmess", "trojan"})
PAUSE_EVERY = 1000  # entries fingerprinted between two pauses: a few milliseconds


@dataclass(frozen=True)
class UserOp:
    action: str  # "add" | "remove"
    inbound_tag: str
    protocol: str
    email: str
    entry: dict | None = None  # the client entry, for "add"


@dataclass(frozen=True)
class Running:
    """What the panel keeps of the config the core runs: everything but the client
    entries, and a fingerprint of each entry. At 100,000 clients the entries are most of
    a config; keeping fingerprints instead of a second copy saves tens of megabytes."""

    skeleton: dict
    entries: tuple[dict[str, int], ...]  # per inbound, in order: email -> fingerprint


def _no_pause() -> None:
    """The default `pause`: work straight through."""


def running(config: dict, pause: Callable[[], None] = _no_pause) -> Running:
    """What to keep of `config` once the core runs it."""
    return Running(
        _without_clients(config),
        tuple(_prints(_entries(inbound), pause) for inbound in config.get("inbounds", [])),
    )


def live_changes(
    current: Running,
    wanted: dict,
    target: Running | None = None,
    pause: Callable[[], None] = _no_pause,
) -> list[UserOp] | None:
    """The user operations that make the `current` config into `wanted`, or None when a
    restart is needed. Removals come first, so a changed entry is removed, then added
    again. `target` is `running(wanted)` when the caller has it already: the sync keeps
    it as what the core runs next, so the entries are fingerprinted once."""
    if target is None:
        target = running(wanted)
    if current.skeleton != target.skeleton:
        return None
    removals: list[UserOp] = []
    additions: list[UserOp] = []
    inbounds = wanted.get("inbounds", [])
    for before, prints, new in zip(current.entries, target.entries, inbounds, strict=True):
        if before == prints:
            continue
        protocol = new.get("protocol", "")
        if protocol not in LIVE_PROTOCOLS:
            return None
        tag = new.get("tag", "")
        for email, print_ in _pausing(before.items(), pause):
            if prints.get(email) != print_:
                removals.append(UserOp("remove", tag, protocol, email))
        for email, entry in _pausing(_entries(new).items(), pause):
            if before.get(email) != prints[email]:
                additions.append(UserOp("add", tag, protocol, email, entry))
    return removals + additions


def _pausing(items: Iterable, pause: Callable[[], None]) -> Iterator:
    """`items`, with a pause after every PAUSE_EVERY of them."""
    for n, item in enumerate(items, 1):
        yield item
        if n % PAUSE_EVERY == 0:
            pause()


def took(current: Running, operations: list[UserOp]) -> None:
    """Note in `current` (in place: nothing else holds its entry maps) that the core took
    `operations`, so it again says what the core runs."""
    tags = [inbound.get("tag") for inbound in current.skeleton.get("inbounds", [])]
    for op in operations:
        prints = current.entries[tags.index(op.inbound_tag)]
        if op.action == "remove":
            prints.pop(op.email, None)
        else:
            prints[op.email] = fingerprint(op.entry)


def with_ops(config: dict, operations: list[UserOp]) -> dict:
    """`config` (a config read back from its file, changed in place) with `operations`
    applied to the client lists of its inbounds, in order."""
    by_tag = {inbound.get("tag"): inbound for inbound in config.get("inbounds", [])}
    lists: dict[str, dict[str, dict]] = {}
    for op in operations:
        if op.inbound_tag not in lists:
            by_tag[op.inbound_tag].setdefault("settings", {})
            lists[op.inbound_tag] = _entries(by_tag[op.inbound_tag])
        clients = lists[op.inbound_tag]
        clients.pop(op.email, None)
        if op.action == "add":
            clients[op.email] = op.entry
    for tag, clients in lists.items():
        by_tag[tag]["settings"]["clients"] = list(clients.values())
    return config


def skeleton_of(config: dict) -> dict:
    """What `running(config).skeleton` would be, without fingerprinting any entry."""
    return _without_clients(config)


def _entries(inbound: dict) -> dict[str, dict]:
    clients = (inbound.get("settings") or {}).get("clients") or []
    return {client.get("email", ""): client for client in clients}


def _prints(entries: dict[str, dict], pause: Callable[[], None]) -> dict[str, int]:
    """email -> fingerprint of each entry, with a pause after every PAUSE_EVERY."""
    prints: dict[str, int] = {}
    items = iter(entries.items())
    while chunk := list(islice(items, PAUSE_EVERY)):
        prints.update((email, fingerprint(entry)) for email, entry in chunk)
        pause()
    return prints


def fingerprint(entry: dict) -> int:
    """Equal entries give equal numbers; different ones, with a chance of 2**-64 per pair
    compared, different numbers (a process-wide hash: never stored)."""
    return hash(_frozen(entry))


def _frozen(value):
    if isinstance(value, dict):
        return tuple(sorted((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


def _without_clients(config: dict) -> dict:
    """`config` without client lists; shares every other part with it (configs are
    built anew for each comparison and never changed afterwards)."""
    inbounds = []
    for inbound in config.get("inbounds", []):
        settings = inbound.get("settings")
        if isinstance(settings, dict) and "clients" in settings:
            settings = {key: value for key, value in settings.items() if key != "clients"}
            inbound = {**inbound, "settings": settings}
        inbounds.append(inbound)
    return {**config, "inbounds": inbounds}


def stale_tags(current: Running | None, wanted: Running) -> list[str]:
    """The tags of the inbounds of `wanted` that a core running `current` does not run as
    they are there: changed, new, or every one when nothing runs (None)."""
    runs = {}
    if current is not None:
        for inbound, prints in zip(
            current.skeleton.get("inbounds", []), current.entries, strict=True
        ):
            runs[inbound.get("tag")] = (inbound, prints)
    return [
        inbound.get("tag", "")
        for inbound, prints in zip(wanted.skeleton.get("inbounds", []), wanted.entries, strict=True)
        if runs.get(inbound.get("tag")) != (inbound, prints)
    ]
