"""The whole tree below this panel: its nodes, the nodes they manage, and so on down.

`server/descendants` answers `[{guid, parentGuid, name, address, status, versions}]`:
first each node this panel manages, as its record and last heartbeat describe it, then
what that node answered to its own `server/descendants`. Those answers are fetched by a
job beside the heartbeat (every enabled online node at once, at most `CONCURRENCY` in
flight, each call bounded in time) and kept, so the route never waits on a node, and
each level answers from what it keeps: a tree of any depth costs one call per node per
round.

What a node reports is checked and bounded (`MAX_ENTRIES`, field lengths) and never
trusted to end: a panel seen once is not listed again, and this panel itself is never
listed, so two panels that manage each other cannot make the list grow round by round.
The entries below a node that is not online now are its last known ones, with status
`unknown`; those of a disabled or deleted node are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
from gevent.pool import Pool

from appliance.services.nodes.health import BEAT_TIMEOUT, NodeHealth
from appliance.services.nodes.link import Identity, NodeError, NodeLink
from appliance.services.nodes.records import Nodes, details

DESCENDANTS_PATH = "/panel/api/server/descendants"
CONCURRENCY = 16
MAX_ENTRIES = 1000
FIELD_LIMITS = {"guid": 64, "parentGuid": 64, "name": 64, "address": 255, "status": 32}
VERSION_LIMIT = 64


class NodeTree:
    def __init__(self, nodes: Nodes, health: NodeHealth, identity: Callable[[], Identity]):
        self.nodes = nodes
        self.health = health
        self.identity = identity
        self._below: dict[int, list[dict]] = {}
        self._pool = Pool(CONCURRENCY)

    def descendants(self) -> list[dict]:
        """Every panel below this one, each node followed by those below it."""
        own = self.identity().guid
        seen = {own}
        found: list[dict] = []
        for record in self.nodes.rows():
            status = self.health.snapshot(record["id"])["status"]
            entry = {
                "guid": record["guid"],
                "parentGuid": record["parentGuid"] or own,
                "name": record["name"],
                "address": record["address"],
                "status": status,
                "versions": {"panel": record["panelVersion"], "core": record["coreVersion"]},
            }
            if not _unseen(entry, seen):
                continue
            found.append(entry)
            for below in self._below.get(record["id"], []):
                if _unseen(below, seen):
                    found.append(below if status == "online" else {**below, "status": "unknown"})
        return found[:MAX_ENTRIES]

    def refresh(self) -> None:
        """The job: fetch what each enabled online node has below it."""
        records = [r for r in self.nodes.rows() if r["enable"]]
        enabled = {r["id"] for r in records}
        for node_id in list(self._below):
            if node_id not in enabled:
                del self._below[node_id]
        online = [r for r in records if self.health.online(r["id"])]
        greenlets = [self._pool.spawn(self._fetch, record) for record in online]
        gevent.joinall(greenlets, timeout=BEAT_TIMEOUT * 3)

    def _fetch(self, record: dict) -> None:
        link = NodeLink(details(record), self.identity())
        try:
            answer = link.call("GET", DESCENDANTS_PATH, timeout=BEAT_TIMEOUT)
        except NodeError:
            return  # the heartbeat reports the node's trouble; the last list is kept
        self._below[record["id"]] = _entries(answer)


def _unseen(entry: dict, seen: set[str]) -> bool:
    """Whether `entry` is a panel not listed yet (one never reached has no guid yet and
    is listed as it is); notes it as listed."""
    guid = entry["guid"]
    if guid and guid in seen:
        return False
    if guid:
        seen.add(guid)
    return True


def _entries(answer: Any) -> list[dict]:
    """The well-formed entries of a node's descendants answer, bounded."""
    if not isinstance(answer, list):
        return []
    entries = []
    for item in answer[:MAX_ENTRIES]:
        if not isinstance(item, dict):
            continue
        entry = {key: _text(item.get(key), limit) for key, limit in FIELD_LIMITS.items()}
        versions = item.get("versions") if isinstance(item.get("versions"), dict) else {}
        entry["versions"] = {
            key: _text(value, VERSION_LIMIT)
            for key, value in list(versions.items())[:8]
            if isinstance(key, str) and len(key) <= 32
        }
        entries.append(entry)
    return entries


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""
