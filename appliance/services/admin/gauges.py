"""What the metrics page reads from the database at scrape time, in two small queries.

Everything else it shows is kept in memory by the services that own it (the clients'
summary, the traffic tick, the node heartbeats, the core and MTProto processes). The
inbounds' totals and the nodes' marks live in their rows: a scrape reads those rows,
tens of them, never the clients.
"""

from __future__ import annotations

from pony.orm import db_session

from appliance.store import inbound_rows, node_sql


class Gauges:
    def __init__(self, store, node_health):
        self.store = store
        self.node_health = node_health

    def inbound_traffic(self) -> list[tuple[str, int, int]]:
        """(tag, up, down) of every inbound, in tag order."""
        with db_session:
            rows = inbound_rows.traffic_by_tag(self.store)
        return [(tag, int(up), int(down)) for tag, up, down in rows]

    def nodes(self) -> list[dict]:
        """Each node's name, whether it is enabled and out of step, and what its last
        heartbeat found (status and latency in milliseconds), in name order."""
        with db_session:
            rows = node_sql.nodes_by_name(self.store)
        found = []
        for node_id, name, enable, dirty in rows:
            snapshot = self.node_health.snapshot(node_id)
            found.append(
                {
                    "name": name,
                    "enable": bool(enable),
                    "outOfStep": bool(dirty),
                    "status": snapshot["status"],
                    "latency": snapshot["latency"],
                }
            )
        return found
