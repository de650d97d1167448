"""Turning one core config into another without a restart, where the core allows it.

The core's HandlerService adds and removes users of a running VLESS, VMess or Trojan
inbound in about a millisecond, leaving every open connection alone. So a new config is
compared with the running one: when the only differences are client entries of such
inbounds, those become user operations; anything else (an inbound added, a port moved,
a Shadowsocks user, the routing) needs a restart. Pure: configs in, operations out.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

LIVE_PROTOCOLS = frozenset({"vless", "vmess", "trojan"})


@dataclass(frozen=True)
class UserOp:
    action: str  # "add" | "remove"
    inbound_tag: str
    protocol: str
    email: str
    entry: dict | None = None  # the client entry, for "add"


def live_changes(running: dict, wanted: dict) -> list[UserOp] | None:
    """The user operations that make `running` into `wanted`, or None when a restart is
    needed. Removals come first, so a changed entry is removed, then added again."""
    if _without_clients(running) != _without_clients(wanted):
        return None
    removals: list[UserOp] = []
    additions: list[UserOp] = []
    for old, new in zip(running.get("inbounds", []), wanted.get("inbounds", []), strict=True):
        before = _entries(old)
        after = _entries(new)
        if before == after:
            continue
        protocol = new.get("protocol", "")
        if protocol not in LIVE_PROTOCOLS:
            return None
        tag = new.get("tag", "")
        for email, entry in before.items():
            if after.get(email) != entry:
                removals.append(UserOp("remove", tag, protocol, email))
        for email, entry in after.items():
            if before.get(email) != entry:
                additions.append(UserOp("add", tag, protocol, email, entry))
    return removals + additions


def _entries(inbound: dict) -> dict[str, dict]:
    clients = (inbound.get("settings") or {}).get("clients") or []
    return {client.get("email", ""): client for client in clients}


def _without_clients(config: dict) -> dict:
    stripped = copy.deepcopy(config)
    for inbound in stripped.get("inbounds", []):
        settings = inbound.get("settings")
        if isinstance(settings, dict):
            settings.pop("clients", None)
    return stripped
