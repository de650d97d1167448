"""The IP limit of clients spread over nodes: judged here, on every server's addresses.

A node judges `limitIp` only on what its own core sees, so a client with limit 1 could
connect from one address on each node. On each traffic poll of a node this panel asks it
for the addresses its core saw within the active window (`clients/recentIps`, its own,
never those of nodes under it), keeps those of the clients bound to it in `client_ip`
under that node's name (`n<id>`), and judges each limited client on the union of the
addresses every server saw: the addresses first recorded keep their place, the others are
over. The over-limit addresses that node saw are sent back to it (`clients/refuseIps`),
which writes them to its own ip-limit.log for its fail2ban; the ones this panel's core saw
are written here when its core reports them, as before. A pair sent to a node is not sent
again within the window. A node that does not answer is skipped for that round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.services.clients.ips import (
    ACTIVE_WINDOW,
    ClientIps,
    reported_sightings,
    server_of,
)
from appliance.services.nodes.link import NodeLink
from appliance.store import node_sql

log = logging.getLogger(__name__)

RECENT_PATH = "/panel/api/clients/recentIps"
REFUSE_PATH = "/panel/api/clients/refuseIps"
TIMEOUT = 10


class NodeAddresses:
    def __init__(self, client_ips: ClientIps, clock: Callable[[], float] = time.time):
        self.client_ips = client_ips
        self.store = client_ips.store
        self.clock = clock
        # (node id, email key, ip) -> when it was sent to that node to refuse.
        self._sent: dict[tuple[int, str, str], float] = {}

    def poll(self, node_id: int, link: NodeLink) -> None:
        """Read one node's recent addresses, judge the limits, send it its refusals;
        `NodeError` when the node does not answer."""
        now = self.clock()
        answer = link.call("POST", RECENT_PATH, timeout=TIMEOUT)
        sightings = reported_sightings(answer, now)
        if not sightings:
            return
        with db_session:
            allowed = node_sql.bound_keys(self.store, node_id, set(sightings))
        sightings = {key: sightings[key] for key in allowed}
        if not sightings:
            return
        over = self.client_ips.record_seen(server_of(node_id), sightings, now)
        self._forget(now)
        fresh = [(e, ip) for e, ip in over if (node_id, email_key(e), ip) not in self._sent]
        if not fresh:
            return
        bans = [{"email": email, "ip": ip} for email, ip in fresh]
        reply = link.call("POST", REFUSE_PATH, {"bans": bans}, timeout=TIMEOUT)
        for email, ip in fresh:
            self._sent[(node_id, email_key(email), ip)] = now
        refused = reply.get("refused") if isinstance(reply, dict) else None
        if refused:
            log.info("node %s refused %d ban(s): %s", link.details.label, len(refused), refused)

    def _forget(self, now: float) -> None:
        for sent in [k for k, at in self._sent.items() if now - at >= ACTIVE_WINDOW]:
            del self._sent[sent]
