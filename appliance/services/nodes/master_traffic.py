"""The managing panel's traffic totals, as it pushes them down to this panel (a node).

A managing panel counts a client's traffic over every node it runs on; this panel, one of
those nodes, counts only its own. The totals the managing panel pushes
(`inbounds/pushClientTraffics`) are kept in a side table, `master_traffic`, per managing
panel's guid, and never merged into this panel's own counters: those are what the
managing panel polls, and a total pushed down and polled back up would be counted twice.

They serve two things: display (a client's traffic view carries them) and the local
quota check, which for a client the managing panel has pushed totals for judges its
quota by those totals rather than by this node's share (see `ClientBulk.disable_depleted`):
a node never cuts off a client whose combined traffic is within its quota, and does cut
off one whose combined traffic is past it even while the managing panel is away.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from pony.orm import db_session

from appliance.domain.client_rules import email_key
from appliance.domain.protocols import INT64_MAX
from appliance.errors import ServiceError
from appliance.store import master_traffic_sql

MAX_ITEMS = 100_000


class MasterTraffic:
    def __init__(self, store, parent_guid: Callable[[], str], clock=time.time):
        self.store = store
        self.parent_guid = parent_guid
        self.clock = clock

    def push(self, body: Any) -> dict:
        """Keep the totals of a push; emails this panel has no client for are skipped
        and named (the managing panel sends them again once the client is here)."""
        guid, totals = _parse(body)
        now = int(self.clock() * 1000)
        keys = sorted(totals)
        with db_session:
            self.store.begin_write()
            known = master_traffic_sql.client_keys(self.store, keys)
            stored = master_traffic_sql.kept_keys(self.store, guid, keys)
            master_traffic_sql.keep_totals(
                self.store,
                [(*totals[k][1:], now, guid, k) for k in keys if k in known and k in stored],
                [(guid, k, *totals[k][1:], now) for k in keys if k in known and k not in stored],
            )
        skipped = sorted(totals[k][0] for k in keys if k not in known)
        return {"stored": len(keys) - len(skipped), "skipped": skipped}

    def view(self, email: str) -> dict | None:
        """The totals the managing panel last pushed for `email`, or None."""
        guid = self.parent_guid()
        if not guid:
            return None
        with db_session:
            found = master_traffic_sql.totals_of(self.store, guid, email_key(email))
        if found is None:
            return None
        up, down, updated_at = found
        return {"masterGuid": guid, "up": up, "down": down, "updatedAt": updated_at}


def _parse(body: Any) -> tuple[str, dict[str, tuple[str, int, int]]]:
    """(master guid, email key -> (email, up, down)); the whole body is checked before
    anything is kept."""
    if not isinstance(body, dict):
        raise ServiceError("send {masterGuid, traffics: [{email, up, down}]} as a JSON object")
    guid = body.get("masterGuid")
    try:
        guid = str(uuid.UUID(guid)) if isinstance(guid, str) else None
    except ValueError:
        guid = None
    if guid is None:
        raise ServiceError("masterGuid must be the managing panel's guid (a UUID)")
    traffics = body.get("traffics")
    if not isinstance(traffics, list):
        raise ServiceError("traffics must be a list of {email, up, down}")
    if len(traffics) > MAX_ITEMS:
        raise ServiceError(f"traffics holds {len(traffics)} items; at most {MAX_ITEMS} per push")
    totals: dict[str, tuple[str, int, int]] = {}
    for index, item in enumerate(traffics):
        if not isinstance(item, dict):
            raise ServiceError(f"traffics[{index}] must be an object {{email, up, down}}")
        email = item.get("email")
        if not isinstance(email, str) or not email.strip() or len(email) > 255:
            raise ServiceError(f"traffics[{index}].email must be a client's email")
        values = []
        for field in ("up", "down"):
            value = item.get(field)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
                raise ServiceError(f"traffics[{index}].{field} must be a non-negative integer")
            values.append(value)
        totals[email_key(email)] = (email, *values)
    return guid, totals
