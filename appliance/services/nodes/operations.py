"""What the admin asks of nodes through the managing panel, beyond keeping them in step:
the paths of a node's own certificate (`nodes/webCert/:id`) and updating the panel on
many nodes at once (`nodes/updatePanel`).

A panel update is the node's own: its `server/updatePanel` route downloads, verifies and
installs the release its `panelUpdateUrl` offers, then restarts. Only enabled nodes
whose last heartbeat found them online are asked, all at once (at most `CONCURRENCY` in
flight); every node named gets an item in the answer, with the node's own words when it
refused, so one node that cannot update never hides the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gevent.pool import Pool

from appliance.errors import ServiceError
from appliance.services.nodes.health import NodeHealth
from appliance.services.nodes.link import Identity, NodeError, NodeLink
from appliance.services.nodes.records import Nodes, details

WEB_CERT_PATH = "/panel/api/server/getWebCertFiles"
UPDATE_PATH = "/panel/api/server/updatePanel"
# A node answers its update once the release is downloaded and checked: minutes, at worst.
UPDATE_TIMEOUT = 300
CONCURRENCY = 8
MAX_IDS = 1000
MAX_PATH = 4096


class NodeOperations:
    def __init__(self, nodes: Nodes, health: NodeHealth, identity: Callable[[], Identity]):
        self.nodes = nodes
        self.health = health
        self.identity = identity

    def web_cert(self, node_id) -> dict:
        """The node's `webCertFile` and `webKeyFile`, as the node itself reports them."""
        record = self.nodes.stored(node_id)
        link = NodeLink(details(record), self.identity())
        if not record["enable"]:
            raise ServiceError(f"{link.details.label} is disabled: enable it to reach it")
        answer = link.call("GET", WEB_CERT_PATH)
        if not isinstance(answer, dict):
            raise ServiceError(
                f"{link.details.label} sent certificate paths that are not an object"
            )
        paths = {}
        for key in ("webCertFile", "webKeyFile"):
            value = answer.get(key, "")
            if not isinstance(value, str) or len(value) > MAX_PATH:
                raise ServiceError(f"{link.details.label} sent a {key} that is not a file path")
            paths[key] = value
        return paths

    def update_panels(self, payload: Any) -> list[dict]:
        """Ask each node of `ids` to update its panel: `[{id, name, ok, error?}]`."""
        ids = _ids(payload)
        records = {record["id"]: record for record in self.nodes.rows()}
        results: dict[int, dict] = {}
        pool = Pool(CONCURRENCY)
        for node_id in ids:
            record = records.get(node_id)
            if record is None:
                results[node_id] = _failed(node_id, "", f"node {node_id} not found")
            else:
                pool.spawn(self._update_one, record, results)
        pool.join()
        return [results[node_id] for node_id in ids]

    def _update_one(self, record: dict, results: dict[int, dict]) -> None:
        node_id, name = record["id"], record["name"]
        if not record["enable"]:
            results[node_id] = _failed(node_id, name, "node offline: it is disabled")
            return
        snapshot = self.health.snapshot(node_id)
        if snapshot["status"] == "unknown":
            snapshot = self.health.beat(record)
        if snapshot["status"] != "online":
            reason = snapshot.get("lastError") or snapshot["status"]
            results[node_id] = _failed(node_id, name, f"node offline: {reason}")
            return
        link = NodeLink(details(record), self.identity())
        try:
            link.call("POST", UPDATE_PATH, timeout=UPDATE_TIMEOUT)
        except NodeError as exc:
            results[node_id] = _failed(node_id, name, exc.msg)
        else:
            results[node_id] = {"id": node_id, "name": name, "ok": True}


def _ids(payload: Any) -> list[int]:
    """The node ids of an updatePanel body, in order, each once."""
    ids = payload.get("ids") if isinstance(payload, dict) else None
    if not isinstance(ids, list) or not ids:
        raise ServiceError("send {ids: [node id, ...]}: the nodes whose panel to update")
    if len(ids) > MAX_IDS:
        raise ServiceError(f"ids lists {len(ids)} nodes; at most {MAX_IDS} at once")
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ServiceError(f"ids must be node ids, positive integers (got {value!r:.50})")
    return list(dict.fromkeys(ids))


def _failed(node_id: int, name: str, error: str) -> dict:
    return {"id": node_id, "name": name, "ok": False, "error": error}
