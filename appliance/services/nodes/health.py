"""Node health: a heartbeat to every enabled node, and what the last one said.

Every few seconds each enabled node's `server/status` is read, all nodes at once but at
most `CONCURRENCY` in flight, each call bounded in time, so a node that hangs costs one
slot for a few seconds and never a request of the panel's. What a beat learns is kept
in memory (status, latency, CPU and memory, the core's state and version) and, where it
is the node's identity (guid, the guid of the panel managing it, versions), in the
node's record. CPU and memory go into a history per node, with the buckets of the
panel's own charts.

A node whose status names another managing panel (`parentGuid` not this panel's guid) is
reported as such: two panels pushing inbounds to one node would undo each other.

Whatever a node answers, a beat ends in a snapshot: a node that answers with something
that is not the panel API's answer (refused by the bounded reader) is shown as `error`
with the reason in `lastError`, logged once when its status changes, and the next good
answer clears it. Only a probe of unsaved details (`nodes/test`, and `nodes/add` before
it saves) refuses such a node outright: there is nothing to keep a status on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent.pool import Pool
from pony.orm import db_session

from appliance.runtime.changes import Change, ChangeNotice
from appliance.services.admin.status import History
from appliance.services.nodes.link import (
    Details,
    Identity,
    NodeAnswerUnreadable,
    NodeError,
    NodeLink,
)
from appliance.services.nodes.records import Nodes, details, node_event
from appliance.services.nodes.sealing import is_sealed, unopened
from appliance.services.webhooks.outbox import Outbox

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5
BEAT_TIMEOUT = 5
CONCURRENCY = 16
STATUS_PATH = "/panel/api/server/status"


class NodeHealth:
    def __init__(
        self,
        nodes: Nodes,
        identity: Callable[[], Identity],
        notice: ChangeNotice,
        outbox: Outbox,
        clock: Callable[[], float] = time.time,
    ):
        self.nodes = nodes
        # Webhook events node.online / node.offline, and the last one raised per node.
        self.outbox = outbox
        self._told: dict[int, str] = {}
        self.identity = identity
        # Told `Change("nodeStatus", [id])` when a heartbeat finds a node's status changed.
        self.notice = notice
        self.clock = clock
        self._snapshots: dict[int, dict] = {}
        self._histories: dict[int, History] = {}
        self._pool = Pool(CONCURRENCY)

    # ---- reads -----------------------------------------------------------------------

    def snapshot(self, node_id: int) -> dict:
        """What the last heartbeat of `node_id` found; `unknown` before the first."""
        return self._snapshots.get(node_id) or {"status": "unknown", "latency": 0, "lastError": ""}

    def online(self, node_id: int) -> bool:
        return self.snapshot(node_id)["status"] == "online"

    def history(self, node_id: int, metric: str, bucket) -> list[dict]:
        history = self._histories.get(node_id)
        return history.series(metric, bucket) if history else []

    # ---- beats -----------------------------------------------------------------------

    def probe(self, connection: Details) -> dict:
        """A heartbeat of unsaved details: what `nodes/test` answers; nothing is kept.
        A node whose answer is not the panel API's is refused (`NodeAnswerUnreadable`)."""
        return self._beat(connection, strict=True)

    def beat(self, record: dict) -> dict:
        """A heartbeat of one stored node; the answer is kept and returned."""
        snapshot = self.look(record)
        self._keep(record, snapshot)
        return snapshot

    def look(self, record: dict, strict: bool = False) -> dict:
        """A heartbeat of `record`, saved or not, that keeps nothing; `strict` refuses a
        node whose answer is not the panel API's, as `probe` does."""
        if not record["enable"]:
            return {"status": "disabled", "latency": 0, "lastError": ""}
        if is_sealed(record["apiToken"]):
            # Not a node that cannot be reached: one this panel cannot speak for.
            return {"status": "error", "latency": 0, "lastError": unopened(details(record).label)}
        return self._beat(details(record), strict)

    def beat_all(self) -> None:
        """The job: every enabled node at once, at most CONCURRENCY in flight."""
        records = self.nodes.rows()
        known = {r["id"] for r in records}
        for node_id in list(self._snapshots):
            if node_id not in known:
                self._forget(node_id)
        greenlets = [self._pool.spawn(self.beat, record) for record in records]
        gevent.joinall(greenlets, timeout=BEAT_TIMEOUT * 3)

    def forget(self, node_id: int) -> None:
        self._forget(node_id)

    def keep(self, record: dict, snapshot: dict) -> None:
        """Keep a snapshot taken before `record` was saved (`probe`)."""
        self._keep(record, snapshot)

    # ---- the pieces ------------------------------------------------------------------

    def _beat(self, connection: Details, strict: bool = False) -> dict:
        link = NodeLink(connection, self.identity())
        started = time.monotonic()
        try:
            status = link.call("GET", STATUS_PATH, timeout=BEAT_TIMEOUT)
            if not isinstance(status, dict):
                raise NodeAnswerUnreadable(
                    f"{connection.label} sent a status that is not an object"
                )
        except NodeError as exc:
            if strict and isinstance(exc, NodeAnswerUnreadable):
                raise
            return {
                "status": "error" if exc.reached else "offline",
                "latency": 0,
                "lastError": exc.msg,
            }
        latency = int((time.monotonic() - started) * 1000)
        return _summary(status, latency)

    def _keep(self, record: dict, snapshot: dict) -> None:
        node_id = record["id"]
        now = self.clock()
        snapshot = {**snapshot, "checkedAt": int(now)}
        own = self.identity().guid
        parent = snapshot.get("parentGuid", "")
        if snapshot["status"] == "online" and parent and parent != own:
            snapshot["status"] = "error"
            snapshot["lastError"] = (
                f"node {record['name']!r} is managed by another panel (guid {parent}); "
                "two panels managing one node would undo each other's changes"
            )
        old = self._snapshots.get(node_id, {}).get("status", "unknown")
        self._snapshots[node_id] = snapshot
        if snapshot["status"] == "online":
            self._histories.setdefault(node_id, History()).record(
                now, {"cpu": snapshot["cpu"], "mem": snapshot["mem"]}
            )
            self.nodes.note_identity(
                node_id,
                guid=snapshot["guid"],
                parentGuid=parent,
                panelVersion=snapshot["panelVersion"],
                coreVersion=snapshot["coreVersion"],
                lastHeartbeat=int(now),
            )
        if old != snapshot["status"]:
            log.info(
                "node %s (%s): %s -> %s%s",
                record["name"],
                node_id,
                old,
                snapshot["status"],
                f" ({snapshot['lastError']})" if snapshot.get("lastError") else "",
            )
            self._tell(record, snapshot, first=old == "unknown")
            self.notice.publish(Change("nodeStatus", [node_id]))

    def _tell(self, record: dict, snapshot: dict, first: bool) -> None:
        """node.online or node.offline when a node went from one to the other; a node
        found online by the first beat after a start raises nothing."""
        event = "node.online" if snapshot["status"] == "online" else "node.offline"
        told = self._told.get(record["id"], "node.online" if first else "")
        self._told[record["id"]] = event
        if event == told:
            return
        told_of = node_event(
            record, status=snapshot["status"], lastError=snapshot.get("lastError", "")
        )
        with db_session:
            self.outbox.raise_event(event, [told_of])

    def _forget(self, node_id: int) -> None:
        self._told.pop(node_id, None)
        self._snapshots.pop(node_id, None)
        self._histories.pop(node_id, None)


def _summary(status: dict, latency: int) -> dict[str, Any]:
    """The heartbeat fields out of a node's `server/status`, each cut to the length its
    column holds (a longer one would fail every beat's write on PostgreSQL and MariaDB)."""
    memory = status.get("mem") if isinstance(status.get("mem"), dict) else {}
    total = _number(memory.get("total"))
    core = status.get("core") if isinstance(status.get("core"), dict) else {}
    return {
        "status": "online",
        "latency": latency,
        "lastError": "",
        "cpu": _number(status.get("cpu")),
        "mem": min(100.0, _number(memory.get("current")) * 100.0 / total) if total > 0 else 0.0,
        "coreState": _text(core.get("state")),
        "coreVersion": _text(core.get("version")),
        "panelVersion": _text(status.get("panelVersion"), 32),
        "guid": _text(status.get("guid"), 36),
        "parentGuid": _text(status.get("parentGuid"), 36),
    }


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _text(value: Any, limit: int = 64) -> str:
    return value[:limit] if isinstance(value, str) else ""
