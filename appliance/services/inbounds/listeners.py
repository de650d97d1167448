"""The ports the core's inbounds need on this host, and the inbounds it runs without.

The core's test mode never binds a port, so a port another program holds passes every check
of a config and only fails when the core starts; and the core then exits on the first
listener it cannot open, taking every inbound offline. So a save asks the host first
(`busy_transports`: a bind of our own, as the core would make it, on the same address),
and when the core still fails on a listener (a program took the port after the save, or
before the panel started) `LeftOut` reads the core's words, names the inbound on that port,
and the core restarts without it while every other inbound keeps serving. The inbound
comes back by itself once its port is free again or once it changes (another port, another
address, disabled).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from appliance.core.config import API_TAG, inbound_in_core
from appliance.domain.inbound_rules import transports

log = logging.getLogger(__name__)

# Go's words for a listener it could not open, as both cores print them at the end of
# their reason: "listen tcp 0.0.0.0:8443: bind: address already in use".
BIND_FAILURE = re.compile(
    r"listen (tcp|udp)[46]? \[?([^\s\]]*)\]?:(\d+): bind: address already in use"
)
# How often the ports of left-out inbounds are tried again, in seconds.
RECHECK_SECONDS = 5.0
# The core's protocol names where they differ from the panel's.
PANEL_PROTOCOLS = {"dokodemo-door": "dokodemo"}

Socket = tuple[str, int, frozenset]


def overlap(a: str, b: str) -> bool:
    """Two listen addresses collide when equal or when either is a wildcard."""
    if a == b:
        return True
    for value in (a, b):
        if not value:
            return True
        try:
            if ipaddress.ip_address(value).is_unspecified:
                return True
        except ValueError:
            continue
    return False


# (listen address, port, what listens there): the panel's own listeners.
Reserved = tuple[str, int, str]


def reserved_by(
    listen: str, port: int, wanted: Iterable[str], reserved: Iterable[Reserved]
) -> str | None:
    """Which of the panel's own listeners (`reserved`) holds TCP `port` where a listener on
    `listen` binding `wanted` ("tcp", "udp") would collide; None when none does."""
    if "tcp" not in wanted:
        return None
    for address, taken, what in reserved:
        if taken == port and overlap(address, listen):
            return what
    return None


def template_port_problem(template: dict, reserved: Iterable[Reserved]) -> str | None:
    """A sentence naming the first inbound of a core template on one of the panel's own
    ports, as the inbound routes refuse one; None when there is none."""
    entries = template.get("inbounds") if isinstance(template, dict) else None
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict) or entry.get("tag") == API_TAG:
            continue
        port, listen = entry.get("port"), entry.get("listen") or ""
        if isinstance(port, str) and port.strip().isdigit():
            port = int(port)
        if not isinstance(port, int) or not isinstance(listen, str):
            continue
        protocol = entry.get("protocol") if isinstance(entry.get("protocol"), str) else ""
        protocol = PANEL_PROTOCOLS.get(protocol, protocol)
        what = reserved_by(listen, port, transports({**entry, "protocol": protocol}), reserved)
        if what:
            return (
                f"coreTemplate inbounds[{index}] ({entry.get('tag') or 'no tag'}) listens on "
                f"{listen or 'every address'} port {port}/tcp, which {what} uses; "
                "choose another port or address"
            )
    return None


def port_in_use(listen: str, port: int, l4: str) -> bool:
    """Whether another socket holds `port` for `l4` ("tcp" or "udp") on `listen`. The bind
    is made as the core makes it: on every address of both families for a wildcard, with
    SO_REUSEADDR for TCP (so connections of an earlier run waiting out TIME_WAIT do not
    count). Only "address already in use" counts; a bind refused for another reason
    (a privileged port, an address this host lacks) is not another program's doing."""
    kind = socket.SOCK_STREAM if l4 == "tcp" else socket.SOCK_DGRAM
    wildcard = overlap(listen, "")
    address = "::" if wildcard else listen
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, kind)
    except OSError:
        if not wildcard:
            return False
        address, sock = "0.0.0.0", socket.socket(socket.AF_INET, kind)
    with sock:
        if address == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        if kind == socket.SOCK_STREAM:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def busy_transports(listen: str, port: int, wanted: Iterable[str], held: list[Socket]) -> list[str]:
    """Those of `wanted` ("tcp", "udp") that another program holds on `listen`:`port`.
    What our own core holds (`held`, from its running config) is left alone: it is released
    at the restart that applies the change."""
    busy = []
    for l4 in sorted(wanted):
        ours = any(
            held_port == port and l4 in held_l4 and overlap(held_listen, listen)
            for held_listen, held_port, held_l4 in held
        )
        if not ours and port_in_use(listen, port, l4):
            busy.append(l4)
    return busy


def core_sockets(config: dict | None) -> list[Socket]:
    """(listen, port, transports) of every inbound of a core config, the API's aside."""
    found = []
    for entry in (config or {}).get("inbounds", []):
        if not isinstance(entry, dict) or entry.get("tag") == API_TAG:
            continue
        port = entry.get("port")
        if not isinstance(port, int):
            continue
        protocol = entry.get("protocol", "")
        record = {**entry, "protocol": PANEL_PROTOCOLS.get(protocol, protocol)}
        found.append((str(entry.get("listen") or ""), port, transports(record)))
    return found


@dataclass(frozen=True)
class BindFailure:
    l4: str
    host: str
    port: int
    words: str  # the core's own words


@dataclass
class Absent:
    """An inbound the core runs without, and why."""

    inbound_id: int
    name: str
    listen: str
    port: int
    transports: frozenset
    reason: str

    def socket(self) -> Socket:
        return (self.listen, self.port, self.transports)


def _socket_of(view: dict) -> Socket:
    return (view["listen"], view["port"], transports(view))


class LeftOut:
    """The inbounds left out of the core's config because their port was taken, by tag."""

    def __init__(self) -> None:
        self.inbounds: dict[str, Absent] = {}
        self._failure: BindFailure | None = None

    def core_failed(self, message: str) -> bool:
        """Note the listener the core could not open, if `message` (why it exited) says
        so; the next sync resolves it to an inbound. Does no I/O: the core's watcher
        calls it."""
        match = BIND_FAILURE.search(message or "")
        if match is None:
            return False
        l4, host, port = match.groups()
        self._failure = BindFailure(l4, host, int(port), match.group(0))
        return True

    def take_failure(self) -> BindFailure | None:
        failure, self._failure = self._failure, None
        return failure

    def leave_out(self, failure: BindFailure, views: list[dict], now_ms: int) -> Absent | None:
        """The inbound of `views` that the core failed to open (now left out), or None when
        none of those the core runs matches the failure."""
        for view in views:
            if view["tag"] in self.inbounds or not inbound_in_core(view, now_ms):
                continue
            listen, port, wanted = _socket_of(view)
            if port == failure.port and failure.l4 in wanted and overlap(listen, failure.host):
                name = f"inbound {view['id']} ({view['remark'] or view['tag']})"
                absent = Absent(
                    view["id"],
                    name,
                    listen,
                    port,
                    wanted,
                    f"{name} is left out of the core: port {port}/{failure.l4} is in use by "
                    f"another program on this host (the core: {failure.words}); it comes "
                    "back once the port is free or the inbound changes",
                )
                self.inbounds[view["tag"]] = absent
                log.warning("%s", absent.reason)
                return absent
        return None

    def admitted(self, views: list[dict], now_ms: int) -> list[dict]:
        """`views` without the inbounds still left out: one stays out while it would run
        in the core on the same socket and its port is still taken."""
        kept, present = [], set()
        for view in views:
            present.add(view["tag"])
            absent = self.inbounds.get(view["tag"])
            if absent is not None and (
                inbound_in_core(view, now_ms)
                and _socket_of(view) == absent.socket()
                and _taken(absent)
            ):
                continue
            if absent is not None:
                del self.inbounds[view["tag"]]
                log.info("%s goes back into the core", absent.name)
            kept.append(view)
        for tag in set(self.inbounds) - present:
            del self.inbounds[tag]
        return kept

    def any_free(self) -> bool:
        """Whether the port of some left-out inbound has come free."""
        return any(not _taken(absent) for absent in self.inbounds.values())

    def view(self) -> list[dict]:
        return [
            {"id": a.inbound_id, "port": a.port, "msg": a.reason} for a in self.inbounds.values()
        ]

    def message(self) -> str:
        return "; ".join(absent.reason for absent in self.inbounds.values())


def _taken(absent: Absent) -> bool:
    return any(port_in_use(absent.listen, absent.port, l4) for l4 in absent.transports)
