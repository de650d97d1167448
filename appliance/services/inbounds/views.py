"""An inbound as the spec's Inbound record, from a row of the inbound table.

The inbounds API, the subscriptions and the client rules all need an inbound's record;
one function makes it, from a row read in INBOUND_SELECT order or from a stored entity,
so the three cannot disagree on what an inbound looks like.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from appliance.store import node_sql
from appliance.store.inbound_rows import INBOUND_COLUMNS


def inbound_record(row: tuple) -> dict:
    """The spec's Inbound record from a row in `INBOUND_SELECT` order, before the clients
    and fallbacks the panel derives into it (a share link needs only this much)."""
    (inbound_id, remark, tag, protocol, listen, port, enable, expiry, total, up, down,
     settings, stream, sniffing, node_id, created, updated) = row  # fmt: skip
    return {
        "id": inbound_id,
        "remark": remark,
        "tag": tag,
        "protocol": protocol,
        "listen": listen,
        "port": port,
        "enable": bool(enable),
        "expiryTime": expiry,
        "total": total,
        "up": up,
        "down": down,
        "settings": json.loads(settings),
        "streamSettings": json.loads(stream),
        "sniffing": json.loads(sniffing),
        "clientStats": [],
        "nodeId": node_id,
        "createdAt": created,
        "updatedAt": updated,
    }


def record_of(inbound) -> dict:
    """`inbound_record` of a stored Inbound entity."""
    return inbound_record(tuple(getattr(inbound, column) for column in INBOUND_COLUMNS))


def with_node_addresses(records: list[dict], rows: Callable) -> list[dict]:
    """`records` with `nodeAddress` set on those bound to a node: its links point to the
    node (hosts still override). Reads the node table only when one is bound."""
    node_ids = sorted({r["nodeId"] for r in records if r["nodeId"] is not None})
    if node_ids:
        addresses = node_sql.addresses(rows, node_ids)
        for record in records:
            if record["nodeId"] is not None:
                record["nodeAddress"] = addresses.get(record["nodeId"], "")
    return records
