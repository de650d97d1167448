"""Which addresses each client connects from, read off the core's access log, and the
per-client IP limit (`limitIp`) turned into lines a fail2ban jail can act on.

Every traffic tick the collector reads the access-log lines written since the last tick
(see `core_logs`), keeps the accepted connections that name a client, and records one
`client_ip` row per client and source address with the latest time it was seen: what
`clients/ips/:email` lists. The line's own time counts, so lines read late (a flood
worked off over several ticks) do not look newer than they are.

The limit: when `ipLimitEnable` is on and a client with `limitIp` N > 0 has more than N
addresses seen within `ACTIVE_WINDOW`, the addresses it used first (the oldest rows: the
ones the client already had) are its N; each further address seen in this tick gets one
line in `<data dir>/logs/ip-limit.log`:

    2026/11/22 01:02:03 [LIMIT_IP] Email = alice@x || SRC = 203.0.113.5

The panel bans nothing itself: fail2ban reads that file and blocks the source on the
proxy ports only (docs/fail2ban.md). The host's own addresses and loopback are never
counted against a limit and never written there, so a local relay, a fallback or the
panel's own checks cannot get the host banned from itself.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import NamedTuple

import psutil
from pony.orm import db_session

from appliance.services.client_rules import email_key
from appliance.services.core_logs import (
    ACCESS_LOG_KEEP,
    ACCESS_LOG_LIMIT,
    API_TAG,
    AccessLine,
    LogTail,
    canonical_ip,
    parse_access_line,
    trim,
)

log = logging.getLogger(__name__)

ACTIVE_WINDOW = 600  # seconds: an address seen this recently counts as in use
LIMIT_LOG_LIMIT = 8 << 20
LIMIT_LOG_KEEP = 1 << 20
IN_CHUNK = 500
TIME_FORMAT = "%Y/%m/%d %H:%M:%S"


class Client(NamedTuple):
    key: str
    email: str
    limit_ip: int


def host_addresses() -> set[str]:
    """Every address of this host's interfaces (loopback included)."""
    found = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            ip = canonical_ip(address.address)
            if ip:
                found.add(ip)
    return found


def is_own_address(ip: str, own: set[str]) -> bool:
    """Loopback, unspecified, or an address of this host."""
    return ip in own or ip.startswith("127.") or ip in ("::1", "0.0.0.0", "::")


class ClientIps:
    def __init__(
        self,
        store,
        settings,
        access_log: str,
        limit_log: str,
        clock: Callable[[], float] = time.time,
        own_addresses: Callable[[], set[str]] = host_addresses,
    ):
        """`access_log` is the file the panel has the core write (trimmed here when it
        grows too large); `limit_log` where over-limit addresses are written."""
        self.store = store
        self.settings = settings
        self.access_log = access_log
        self.limit_log = limit_log
        self.clock = clock
        self.own_addresses = own_addresses
        self.tail = LogTail(access_log)

    def collect(self, path: str = "") -> None:
        """Read what the core logged since the last call from `path` (the access log the
        running config names; empty: the panel's own) and record it."""
        path = path or self.access_log
        if path != self.tail.path:
            self.tail = LogTail(path)
        lines = self.tail.read()
        if path == self.access_log and trim(path, ACCESS_LOG_LIMIT, ACCESS_LOG_KEEP):
            self.tail.skip_to_end()
        now = self.clock()
        sightings = _sightings((parse_access_line(line) for line in lines), now)
        if not sightings:
            return
        over = self.record(sightings, now)
        if over:
            self.write_limit_lines(over, now)

    def record(self, sightings: dict[str, dict[str, int]], now: float) -> list[tuple[str, str]]:
        """Upsert the sightings (email key -> ip -> unix seconds) of known clients; returns
        the (email, ip) pairs over a client's limit that were seen in `sightings`."""
        with db_session:
            clients = self._clients(list(sightings))
            self._upsert({key: sightings[key] for key in clients})
            if not self.settings.get("ipLimitEnable"):
                return []
            limited = [client for client in clients.values() if client.limit_ip > 0]
            if not limited:
                return []
            active = self._active_addresses([client.key for client in limited], now)
        return [
            (client.email, ip)
            for client in limited
            for ip in active.get(client.key, [])[client.limit_ip :]
            if ip in sightings[client.key]
        ]

    def write_limit_lines(self, over: list[tuple[str, str]], now: float) -> None:
        stamp = time.strftime(TIME_FORMAT, time.localtime(now))
        text = "".join(
            f"{stamp} [LIMIT_IP] Email = {_printable(email)} || SRC = {ip}\n" for email, ip in over
        )
        os.makedirs(os.path.dirname(self.limit_log), exist_ok=True)
        trim(self.limit_log, LIMIT_LOG_LIMIT, LIMIT_LOG_KEEP)
        with open(self.limit_log, "a", encoding="utf-8") as fh:
            fh.write(text)
        log.info("%d address(es) over a client's IP limit written to %s", len(over), self.limit_log)

    # ---- the store ---------------------------------------------------------------------------

    def _clients(self, keys: list[str]) -> dict[str, Client]:
        found: dict[str, Client] = {}
        for chunk in _chunks(keys):
            marks = ", ".join("?" * len(chunk))
            for key, email, limit_ip in self.store.rows(
                f"SELECT email_key, email, limit_ip FROM client WHERE email_key IN ({marks})",
                chunk,
            ):
                found[key] = Client(key, email, limit_ip or 0)
        return found

    def _upsert(self, sightings: dict[str, dict[str, int]]) -> None:
        known: dict[tuple[str, str], tuple[int, int]] = {}
        for chunk in _chunks(list(sightings)):
            marks = ", ".join("?" * len(chunk))
            for row_id, key, ip, seen in self.store.rows(
                f"SELECT id, email_key, ip, seen_at FROM client_ip WHERE email_key IN ({marks})",
                chunk,
            ):
                known[(key, ip)] = (row_id, seen)
        updates, inserts = [], []
        for key, addresses in sightings.items():
            for ip, seen in addresses.items():
                row = known.get((key, ip))
                if row is None:
                    inserts.append((key, ip, seen))
                elif seen > row[1]:
                    updates.append((seen, row[0]))
        if updates:
            self.store.execute_many("UPDATE client_ip SET seen_at = ? WHERE id = ?", updates)
        if inserts:
            self.store.execute_many(
                "INSERT INTO client_ip (email_key, ip, seen_at) VALUES (?, ?, ?)", inserts
            )

    def _active_addresses(self, keys: list[str], now: float) -> dict[str, list[str]]:
        """email key -> the addresses seen within the window, first recorded first;
        the host's own addresses left out."""
        own = self.own_addresses()
        found: dict[str, list[str]] = {}
        for chunk in _chunks(keys):
            marks = ", ".join("?" * len(chunk))
            for key, ip in self.store.rows(
                f"SELECT email_key, ip FROM client_ip WHERE email_key IN ({marks}) "
                "AND seen_at >= ? ORDER BY id",
                [*chunk, int(now) - ACTIVE_WINDOW],
            ):
                if not is_own_address(ip, own):
                    found.setdefault(key, []).append(ip)
        return found


def _sightings(entries, now: float) -> dict[str, dict[str, int]]:
    """email key -> ip -> latest unix second seen, from the parsed lines that count."""
    found: dict[str, dict[str, int]] = {}
    for entry in entries:
        if not _counts(entry):
            continue
        seen = _line_time(entry.when, now)
        addresses = found.setdefault(email_key(entry.email), {})
        addresses[entry.ip] = max(seen, addresses.get(entry.ip, 0))
    return found


def _counts(entry: AccessLine | None) -> bool:
    """An accepted connection of a client from an address (not the panel's API calls)."""
    return (
        entry is not None
        and entry.status == "accepted"
        and bool(entry.email)
        and bool(entry.ip)
        and entry.outbound_tag != API_TAG
    )


def _line_time(when: str, now: float) -> int:
    """The line's time (the core's local time, as this process reads local time) in unix
    seconds, never later than now; now when it cannot be read."""
    try:
        seen = time.mktime(time.strptime(when, TIME_FORMAT))
    except (ValueError, OverflowError):
        return int(now)
    return int(min(seen, now))


def _printable(email: str) -> str:
    """The email on one line: emails cannot hold control characters, but a line of this
    file must never be split or forged by one."""
    return "".join(c if c.isprintable() else "?" for c in email)


def _chunks(values: list, size: int = IN_CHUNK):
    for start in range(0, len(values), size):
        yield values[start : start + size]
