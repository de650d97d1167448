"""The nodes service: what the node routes call.

It joins the records (what the admin entered), the heartbeat (what each node last said)
and the counts of what runs there into the views the API and the UI show, and carries out
the calls that only probe: `test`, `certFingerprint` and `inbounds` reach a node from
unsaved details and save nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pony.orm import count, db_session, select

from appliance.errors import ServiceError
from appliance.services.nodes.health import NodeHealth
from appliance.services.nodes.link import Identity, NodeLink
from appliance.services.nodes.records import Nodes, details, parse_node, public_view
from appliance.store import node_sql

if TYPE_CHECKING:
    from appliance.services.nodes.traffic import NodeTraffic

INBOUNDS_PATH = "/panel/api/inbounds/list/slim"


class Fleet:
    def __init__(
        self,
        nodes: Nodes,
        health: NodeHealth,
        identity: Callable[[], Identity],
        traffic: NodeTraffic,
        depleted_sql: Callable[[], tuple[str, list]],
    ):
        self.nodes = nodes
        self.health = health
        self.identity = identity
        # Who is online on each node (its polls), and what "depleted" means in SQL.
        self.traffic = traffic
        self.depleted_sql = depleted_sql

    # ---- views -----------------------------------------------------------------------

    def list(self) -> list[dict]:
        records = self.nodes.rows()
        counts = self._counts()
        return [self._view(r, counts.get(r["id"], {})) for r in records]

    def get(self, node_id) -> dict:
        record = self.nodes.stored(node_id)
        return self._view(record, self._counts().get(record["id"], {}))

    def history(self, node_id, metric: str, bucket) -> list[dict]:
        record = self.nodes.stored(node_id)
        if metric not in ("cpu", "mem"):
            raise ServiceError(f"metric must be cpu or mem (got {metric!r})")
        return self.health.history(record["id"], metric, bucket)

    # ---- writes ----------------------------------------------------------------------

    def add(self, payload: Any) -> dict:
        """Save a node once its details are valid and it did not answer with something
        other than the panel API (an offline node is saved: it may come up later). The
        heartbeat comes before the one transaction that inserts the record, so a node
        refused by it, or a heartbeat that fails, leaves nothing saved."""
        record = parse_node(payload, None)
        self.nodes.check_name(record["name"], None)
        snapshot = self.health.look(record, strict=True)
        saved = self.nodes.add(payload)
        self.health.keep(saved, snapshot)
        return self.get(saved["id"])

    def update(self, node_id, payload: Any) -> dict:
        _, record = self.nodes.update(node_id, payload)
        self.health.beat(record)
        return self.get(record["id"])

    def set_enable(self, node_id, enable: Any) -> dict:
        record = self.nodes.set_enable(node_id, enable)
        self.health.beat(record)
        return self.get(record["id"])

    def delete(self, node_id) -> str:
        gone, bound = self.nodes.delete(node_id)
        self.health.forget(gone["id"])
        if not bound:
            return f"node {gone['name']!r} deleted"
        return (
            f"node {gone['name']!r} deleted; its {bound} inbound(s) stay in the panel, bound to "
            "the deleted node and no longer deployed: edit them to bind them elsewhere, or "
            "delete them"
        )

    # ---- probes ----------------------------------------------------------------------

    def test(self, payload: Any) -> dict:
        """A heartbeat of unsaved connection details."""
        return self.health.probe(details(self._unsaved(payload)))

    def fingerprint(self, payload: Any) -> str:
        return NodeLink(details(self._unsaved(payload, pin=False)), self.identity()).fingerprint()

    def inbounds(self, payload: Any) -> list[dict]:
        """The inbounds an unsaved node runs, as `{tag, remark, protocol, port}`."""
        link = NodeLink(details(self._unsaved(payload)), self.identity())
        rows = link.call("GET", INBOUNDS_PATH)
        if not isinstance(rows, list):
            raise ServiceError(f"{link.details.label} sent an inbound list that is not a list")
        return [
            {k: row.get(k) for k in ("tag", "remark", "protocol", "port")}
            for row in rows
            if isinstance(row, dict)
        ]

    def probe(self, node_id) -> dict:
        record = self.nodes.stored(node_id)
        self.health.beat(record)
        return self.get(record["id"])

    # ---- the pieces ------------------------------------------------------------------

    def _unsaved(self, payload: Any, pin: bool = True) -> dict:
        """Connection details from a body; with `id`, an empty token is the stored one's."""
        before = None
        if isinstance(payload, dict) and payload.get("id") not in (None, "", 0):
            before = self.nodes.stored(payload["id"])
        if not pin and isinstance(payload, dict):
            payload = {**payload, "tlsVerifyMode": "system", "certFingerprint": ""}
            payload["scheme"] = payload.get("scheme") or "https"
        return parse_node(payload, before, probe=True)

    def _view(self, record: dict, counts: dict) -> dict:
        snapshot = self.health.snapshot(record["id"])
        return {
            **public_view(record),
            "status": snapshot["status"],
            "latency": snapshot.get("latency", 0),
            "lastError": snapshot.get("lastError", ""),
            "cpu": snapshot.get("cpu", 0.0),
            "mem": snapshot.get("mem", 0.0),
            "coreState": snapshot.get("coreState", ""),
            "checkedAt": snapshot.get("checkedAt", 0),
            "inboundCount": counts.get("inbounds", 0),
            "clientCount": counts.get("clients", 0),
            "onlineCount": counts.get("online", 0),
            "depletedCount": counts.get("depleted", 0),
            "ignoredReports": self.traffic.ignored.view(record["id"]),
        }

    def _counts(self) -> dict[int, dict]:
        """Inbounds bound to each node, the distinct clients attached to them, those of
        them past their quota or expiry, and those online there (its last polls)."""
        store = self.nodes.store
        counts: dict[int, dict] = {}
        with db_session:
            inbounds = select(
                (i.node_id, count(i)) for i in store.entities.Inbound if i.node_id is not None
            )[:]
            clients = select(
                (a.inbound.node_id, count(a.client, distinct=True))
                for a in store.entities.ClientInbound
                if a.inbound.node_id is not None
            )[:]
            depleted = node_sql.depleted_counts(store, self.depleted_sql())
        online = self.traffic.online_counts()
        for key, rows in (
            ("inbounds", inbounds),
            ("clients", clients),
            ("depleted", depleted),
            ("online", online.items()),
        ):
            for node_id, number in rows:
                counts.setdefault(node_id, {})[key] = number
        return counts
