"""Fallback rules of a VLESS or Trojan master inbound on TCP with TLS or REALITY.

A rule sends connections that are not the master's protocol (matched by SNI `name`,
`alpn` and HTTP `path`) to `dest`. Rules are rows, so a rule can point at a child
inbound by id: with `dest` empty the child's current listen address and port are used,
and moving the child moves the rule with it. `settings.fallbacks` on the inbound is
rendered from these rows on read, never stored. A socket path in `dest` must be in the
panel's sockets folder (`runtime.file_paths`): the core hands connections from the
internet to whatever socket it names.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pony.orm import db_session, select

from appliance.domain.parse import parse_id
from appliance.domain.protocols import to_int
from appliance.errors import ServiceError
from appliance.runtime.file_paths import FilePlaces

MASTER_PROTOCOLS = ("vless", "trojan")
DEST_MAX = 255
SORT_ORDER_MIN, SORT_ORDER_MAX = -(2**31), 2**31 - 1
# Rules name inbounds by this panel's ids, which mean nothing on a node.
NOT_ON_NODES = (
    "fallback rules are not deployed to nodes (they name this panel's inbounds); set them "
    "on the node itself"
)
HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


class Fallbacks:
    def __init__(self, store, places: FilePlaces):
        self.store = store
        # Where a socket path in `dest` may be (runtime.file_paths).
        self.places = places

    def list(self, master_id) -> list[dict]:
        with db_session:
            master = self._master(master_id)
            return [_view(rule) for rule in self._rules(master.id)]

    def replace(self, master_id, body) -> list[dict]:
        """Replace the whole list of a master's rules. An empty list is always accepted, so
        rules can be cleared even from an inbound that no longer qualifies as a master."""
        if not isinstance(body, dict) or not isinstance(body.get("fallbacks"), list):
            raise ServiceError("fallbacks must be an array of rules")
        with db_session:
            master = self._master(master_id)
            if body["fallbacks"]:
                check_master(master)
            rules = [
                self._clean(master, item, index) for index, item in enumerate(body["fallbacks"])
            ]
            for rule in master.fallbacks.select()[:]:
                rule.delete()
            for rule in rules:
                self.store.entities.Fallback(master=master, **rule)
            master.flush()
            return [_view(rule) for rule in self._rules(master.id)]

    def replace_from_payload(self, master, items: list) -> None:
        """Rules given the legacy way, inside an added inbound's `settings.fallbacks`."""
        if not items:
            return
        check_master(master)
        for index, item in enumerate(items):
            rule = self._clean(master, item, index)
            self.store.entities.Fallback(master=master, **rule)

    def rendered(self, master_id: int) -> list[dict]:
        """The master's rules as the core's `settings.fallbacks` entries."""
        return [_render(rule) for rule in self._rules(master_id)]

    def by_master(self) -> dict[int, list[dict]]:
        rules: dict[int, list[dict]] = {}
        query = select(f for f in self.store.entities.Fallback).order_by(
            lambda f: (f.master.id, f.sort_order, f.id)
        )
        for rule in query:
            rules.setdefault(rule.master.id, []).append(_render(rule))
        return rules

    def _rules(self, master_id: int):
        return select(f for f in self.store.entities.Fallback if f.master.id == master_id).order_by(
            lambda f: (f.sort_order, f.id)
        )[:]

    def _master(self, master_id):
        master_id = parse_id(master_id, "inbound id")
        master = self.store.entities.Inbound.get(id=master_id)
        if master is None:
            raise ServiceError(f"no inbound with id {master_id}")
        return master

    def _clean(self, master, item: Any, index: int) -> dict:
        where = f"fallbacks[{index}]"
        if not isinstance(item, dict):
            raise ServiceError(f"{where} must be an object")
        child = None
        child_id = item.get("childId")
        if child_id not in (None, 0, ""):
            child_id = parse_id(child_id, f"{where}.childId")
            child = self.store.entities.Inbound.get(id=child_id)
            if child is None:
                raise ServiceError(f"{where}.childId: no inbound with id {child_id}")
            if child.id == master.id:
                raise ServiceError(f"{where}.childId: an inbound cannot fall back to itself")
        dest = item.get("dest")
        if dest is None:
            dest = ""
        if isinstance(dest, int) and not isinstance(dest, bool):
            dest = str(dest)
        if not isinstance(dest, str):
            raise ServiceError(f"{where}.dest must be a port, host:port or socket path")
        dest = dest.strip()
        if not dest and child is None:
            raise ServiceError(f"{where}: give a dest or a childId")
        if dest:
            check_dest(where, dest, self.places)
        text = {}
        for key, limit in (("name", 255), ("alpn", 64), ("path", 255)):
            value = item.get(key, "")
            if value is None:
                value = ""
            if not isinstance(value, str) or len(value) > limit:
                raise ServiceError(f"{where}.{key} must be a string of at most {limit} characters")
            text[key] = value.strip()
        if text["path"] and not text["path"].startswith("/"):
            raise ServiceError(f"{where}.path must start with / (got '{text['path']}')")
        xver = item.get("xver")
        xver = 0 if xver in (None, "") else to_int(xver, f"{where}.xver", 0, 2)
        sort_order = item.get("sortOrder")
        sort_order = (
            index
            if sort_order in (None, "")
            else to_int(sort_order, f"{where}.sortOrder", SORT_ORDER_MIN, SORT_ORDER_MAX)
        )
        return {**text, "child": child, "dest": dest, "xver": xver, "sort_order": sort_order}


def check_master(master) -> None:
    if master.node_id is not None:
        raise ServiceError(f"inbound {master.id} runs on a node: {NOT_ON_NODES}")
    problem = master_problem(master.protocol, json.loads(master.stream_settings))
    if problem:
        raise ServiceError(f"inbound {master.id} cannot hold fallbacks: {problem}")


def master_problem(protocol: str, stream: dict) -> str | None:
    """Why an inbound of this protocol and transport cannot hold fallback rules; None
    when it can."""
    network = stream.get("network", "tcp")
    security = stream.get("security", "none")
    if (
        protocol in MASTER_PROTOCOLS
        and network in ("tcp", "raw")
        and security in ("tls", "reality")
    ):
        return None
    return (
        f"only VLESS or Trojan inbounds on TCP with TLS or REALITY can (this one is "
        f"{protocol} on {network} with security {security})"
    )


def check_dest(where: str, dest: str, places: FilePlaces) -> None:
    """A port, host:port, an abstract socket name or a socket path in its folder."""
    if len(dest) > DEST_MAX:
        raise ServiceError(f"{where}.dest must be at most {DEST_MAX} characters")
    if dest.isdigit():
        if not 1 <= int(dest) <= 65535:
            raise ServiceError(f"{where}.dest port must be from 1 to 65535 (got {dest})")
        return
    if dest.startswith(("/", "@")):
        places.socket(dest, f"{where}.dest")
        return
    match = HOST_PORT.match(dest)
    if not match or not 1 <= int(match.group(1)) <= 65535:
        raise ServiceError(
            f"{where}.dest must be a port, host:port or a socket path (got '{dest}')"
        )


def child_dest(listen: str, port: int) -> str | int:
    """Where a child inbound can be reached: its port when it listens on every interface,
    host:port for one address, and the path for a unix socket (without the core's
    ",mode" suffix, which belongs to the listener, not to an address)."""
    if listen.startswith(("/", "@")):
        return listen.split(",", 1)[0]
    if not listen or listen in ("0.0.0.0", "::"):
        return port
    host = f"[{listen}]" if ":" in listen else listen
    return f"{host}:{port}"


def _view(rule) -> dict:
    return {
        "id": rule.id,
        "masterId": rule.master.id,
        "childId": rule.child.id if rule.child else None,
        "name": rule.name,
        "alpn": rule.alpn,
        "path": rule.path,
        "dest": rule.dest,
        "xver": rule.xver,
        "sortOrder": rule.sort_order,
    }


def _render(rule) -> dict:
    dest: str | int = rule.dest
    if not dest and rule.child is not None:
        dest = child_dest(rule.child.listen, rule.child.port)
    elif isinstance(dest, str) and dest.isdigit():
        dest = int(dest)
    entry: dict[str, Any] = {"dest": dest}
    for key in ("name", "alpn", "path"):
        if getattr(rule, key):
            entry[key] = getattr(rule, key)
    if rule.xver:
        entry["xver"] = rule.xver
    return entry
