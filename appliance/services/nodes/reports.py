"""What a node may report on: the clients and inbounds bound to it, nothing else.

A node is another machine, and one that is compromised (or simply misconfigured) answers
whatever it likes. What it says per client (traffic, which makes a client online and sets
its last-online time, and client addresses) counts here only for the clients attached to
an inbound bound to that node, and what it says per inbound only for the inbounds bound
to it: otherwise one node could use up the quota, and so disable, any client of the
fleet. Everything else is ignored. Names this panel does not know at all (the node's own
clients and inbounds, made there by hand) are the node's business and ignored quietly;
a client or inbound this panel has, but not on that node, is a report no honest node
sends: it is logged once per node and name (not once per poll) and listed on the node's
row (`ignoredReports`), so the admin sees which node to distrust.

Checks read only what a poll names (its movers, chunked: `store/node_sql.py` and
`store/inbound_rows.py`), so a poll of a few clients costs a few lookups at any fleet
size. What was noted is kept in memory, bounded per node.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)

# Names noted (logged, counted) per node; past this, further ones are ignored unlogged.
MAX_NOTED = 1000
# Names of each kind a node's row lists.
SHOWN = 20


class IgnoredReports:
    """Per node: the clients and inbounds of this panel it reported on though they are
    not bound to it."""

    def __init__(self) -> None:
        self._noted: dict[int, dict[str, set[str]]] = {}
        self._full: set[int] = set()

    def note(self, node: str, node_id: int, what: str, kind: str, names: Iterable[str]) -> None:
        """Note ignored reports of `what` (such as "traffic") about the clients or inbounds
        (`kind`) `names`; each is logged the first time this node reports on it."""
        noted = self._noted.setdefault(node_id, {"client": set(), "inbound": set()})
        for name in sorted(set(names) - noted[kind]):
            if sum(len(found) for found in noted.values()) >= MAX_NOTED:
                if node_id not in self._full:
                    self._full.add(node_id)
                    log.warning(
                        "node %s reported on more than %d clients and inbounds not bound to "
                        "it: all ignored, those past the first %d without a log line",
                        node,
                        MAX_NOTED,
                        MAX_NOTED,
                    )
                return
            noted[kind].add(name)
            log.warning(
                "node %s reported %s for %s %s, which is not bound to it: ignored",
                node,
                what,
                kind,
                name,
            )

    def view(self, node_id: int) -> dict:
        """What a node's row shows: how many clients and inbounds it reported on without
        their being bound to it (at most MAX_NOTED), and the first names of each."""
        noted = self._noted.get(node_id, {"client": set(), "inbound": set()})
        return {
            "count": len(noted["client"]) + len(noted["inbound"]),
            "clients": sorted(noted["client"])[:SHOWN],
            "inbounds": sorted(noted["inbound"])[:SHOWN],
        }

    def forget(self, node_id: int) -> None:
        """A node deleted (or its id reused): what it reported was another record's."""
        self._noted.pop(node_id, None)
        self._full.discard(node_id)
