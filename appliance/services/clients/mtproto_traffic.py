"""Traffic of the MTProto proxy processes, added exactly once like the core's.

Each proxy process (one per MTProto inbound) keeps absolute byte counters per secret for
its whole life and names itself with a random `instance`. The last values read are kept
in `mtproto_counter` per inbound and client, with the instance they came from; a tick
adds the difference to the client's and the inbound's totals and moves the kept values
in the same transaction. A proxy started again (crash, kill, listener change, panel
restart) has a new instance, so its counters are measured from zero; a counter that went
down within one instance means the same. A tick whose write fails leaves the kept values
as they were, and the next one adds the same bytes.
"""

from __future__ import annotations

import time

from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.store import traffic_sql, usage_sql


class MtprotoAccounting:
    def __init__(self, store, presence, clock=time.time):
        self.store = store
        self.presence = presence
        self.clock = clock

    def tick(self, inbound_id: int, inbound_tag: str, stats: dict) -> dict[str, list[int]]:
        """Add what the proxy of `inbound_id` counted since the last tick; `stats` is its
        `GET /stats` answer. Returns email key -> [up, down] moved."""
        instance = str(stats.get("instance", ""))
        users = stats.get("users") or {}
        now = int(self.clock() * 1000)
        moved: dict[str, list[int]] = {}
        online: list[str] = []
        with db_session:
            kept = traffic_sql.mtproto_kept(self.store, inbound_id)
            updates, inserts = [], []
            for name, counters in users.items():
                key = email_key(name)
                up, down = int(counters.get("bytes_in", 0)), int(counters.get("bytes_out", 0))
                if counters.get("connections"):
                    online.append(key)
                before = kept.get(key)
                base_up, base_down = (
                    (before[1], before[2]) if before and before[0] == instance else (0, 0)
                )
                step = [_step(up, base_up), _step(down, base_down)]
                if step[0] or step[1]:
                    moved[key] = step
                if before is None:
                    inserts.append((inbound_id, instance, key, up, down))
                elif before != (instance, up, down):
                    updates.append((instance, up, down, inbound_id, key))
            if moved:
                traffic_sql.add_client_traffic(self.store, moved, now)
                total = [sum(step[0] for step in moved.values()), sum(s[1] for s in moved.values())]
                traffic_sql.add_inbound_traffic(self.store, [((inbound_id,), *total)])
                usage_sql.record(self.store, now, moved, [((inbound_id,), *total)])
                traffic_sql.start_clocks(self.store, set(moved), now)
            traffic_sql.keep_mtproto_values(self.store, updates, inserts)
        seen = sorted(set(moved) | set(online))
        if seen:
            self.presence.seen(seen, [inbound_tag])
        if moved:
            self.store.client_writes.committed(moved=moved)
        return moved

    def forget(self, inbound_ids: list[int]) -> None:
        """Drop the kept counters of inbounds that are gone."""
        with db_session:
            for inbound_id in inbound_ids:
                traffic_sql.drop_mtproto_values(self.store, inbound_id)


def _step(value: int, before: int) -> int:
    """What a counter moved: from `before`, or from zero when it went down (a new
    process)."""
    return value - before if value >= before else value
