"""What a node should run, read from this panel's database: the inbounds bound to it and
the clients attached to them, in the shape the node's own API takes.

The central panel is authoritative for these: a node inbound is the central inbound of
the same tag without the `n<id>-` prefix, and a node client is the central client of the
same email, attached there to the node-side inbounds of the tags it is attached to here.
A client's `enable` on the node is its effective state here (the client and its traffic
row both enabled), so a client the central sweep cut off is cut off on the node too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from appliance.domain.client_rules import email_key
from appliance.domain.clients import api_view
from appliance.services.inbounds.views import inbound_record
from appliance.store import inbound_rows, node_sql
from appliance.store.client_rows import client_record, extra

# The prefix this panel gives the tag of an inbound bound to node `<id>`.
NODE_TAG = re.compile(r"^n[0-9]+-")
# The inbound fields a node is sent; the rest (id, counters, nodeId) stay here.
INBOUND_FIELDS = (
    "remark",
    "listen",
    "port",
    "protocol",
    "enable",
    "expiryTime",
    "total",
    "settings",
    "streamSettings",
    "sniffing",
)
# The client fields a node is sent, and compared to tell whether it holds them already.
CLIENT_FIELDS = (
    "id",
    "email",
    "subId",
    "password",
    "auth",
    "flow",
    "security",
    "reverse",
    "totalGB",
    "expiryTime",
    "limitIp",
    "reset",
    "tgId",
    "comment",
    "enable",
    "group",
    "method",
)


def bare_tag(tag: str) -> str:
    """The tag an inbound of this panel has on its node."""
    return NODE_TAG.sub("", tag, count=1)


def node_inbound(record: dict) -> dict:
    """The body of the node's `inbounds/add` and `update` for a central inbound record:
    the node's tag, no clients (attached through the node's clients API) and no fallback
    rules (they name inbounds by this panel's ids)."""
    body = {key: record[key] for key in INBOUND_FIELDS}
    settings = {
        k: v for k, v in (record["settings"] or {}).items() if k not in ("clients", "fallbacks")
    }
    body["settings"] = settings
    body["tag"] = bare_tag(record["tag"])
    return body


def same_inbound(wanted: dict, held: dict) -> bool:
    """Whether the node's view of an inbound (`held`) runs what `wanted` describes."""
    for key in INBOUND_FIELDS:
        value = held.get(key)
        if key == "settings" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in ("clients", "fallbacks")}
        if value != wanted[key]:
            return False
    return held.get("tag") == wanted["tag"]


def node_client(view: dict) -> dict:
    """The client payload a node is sent, from a client's API view here."""
    body = {key: view[key] for key in CLIENT_FIELDS}
    body["enable"] = bool(view["enable"] and view["traffic"]["enable"])
    return body


def same_client(wanted: dict, held: dict) -> bool:
    return all(held.get(key) == wanted[key] for key in CLIENT_FIELDS)


@dataclass
class NodeWants:
    """What one node should hold: its inbounds by node-side tag, and its clients by email
    key as (payload, node-side tags)."""

    inbounds: dict[str, dict] = field(default_factory=dict)
    clients: dict[str, tuple[dict, set[str]]] = field(default_factory=dict)


def node_inbounds(store, node_id: int) -> dict[str, dict]:
    """The node-side bodies of the inbounds bound to `node_id`, by node-side tag."""
    found = {}
    for row in inbound_rows.node_inbound_rows(store, node_id):
        body = node_inbound(inbound_record(row))
        found[body["tag"]] = body
    return found


def node_tags(store, node_id: int) -> set[str]:
    """The node-side tags of the inbounds bound to `node_id`."""
    return {bare_tag(tag) for tag in inbound_rows.tags_of_node(store, node_id)}


def node_clients(store, node_id: int | None, keys: list[str] | None = None) -> dict:
    """{node id: {email key: (payload, node-side tags)}} for the clients attached to the
    inbounds of `node_id` (every node when None), all of them or those of `keys`."""
    found: dict[int, dict[str, tuple[dict, set[str]]]] = {}
    for row in node_sql.node_client_rows(store, node_id, keys):
        node, tag, key = extra(row)
        wanted = found.setdefault(node, {})
        if key not in wanted:
            wanted[key] = (node_client(api_view(client_record(row), [])), set())
        wanted[key][1].add(bare_tag(tag))
    return found


def keys_of(emails) -> list[str]:
    return sorted({email_key(email) for email in emails})
