"""Which addresses each client connects from, asked of Xray's API or read off the core's
access log, and the per-client IP limit (`limitIp`) turned into lines a fail2ban jail can
act on.

Every traffic tick the collector records one `client_ip` row per client and source
address with the latest time it was seen: what `clients/ips/:email` lists. Where the
sightings come from depends on the core:

- Xray with its online-user API (`statsUserOnline`, which the config builder turns on):
  one call lists the users connected now, one call per user gives that user's addresses
  with the time the core last saw each. A call per user costs, so a tick makes at most
  `ONLINE_IP_CALLS` of them; see `pick_online` for who is asked when more are online.
  The access log is then not parsed for addresses, only kept within its size limit.
- Any other core (V2Ray), and an Xray that answers "unimplemented" (a release before
  the API, which is remembered for the life of that core process): the access-log lines
  written since the last tick (see `core_logs`), the accepted connections that name a
  client. The line's own time counts, so lines read late (a flood worked off over several
  ticks) do not look newer than they are. A tick whose API calls fail for another reason
  (the core restarting) reads the log too.

The limit: when `ipLimitEnable` is on and a client with `limitIp` N > 0 has more than N
addresses seen within `ACTIVE_WINDOW`, the addresses it used first (the oldest rows: the
ones the client already had) are its N; each further address seen in this tick gets one
line in `<data dir>/logs/ip-limit.log`:

    2026/11/22 01:02:03 [LIMIT_IP] Email = alice@x || SRC = 203.0.113.5

A managing panel judges the limit of its nodes' clients on the addresses of every server
(`services/nodes/addresses.py`): each row says which server saw it (`server`, empty for
this panel's core), a node answers its core's recent addresses (`recent`) and writes the
pairs its managing panel sends back (`refuse`) to its own limit log like its own.

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
from typing import Any, NamedTuple

import psutil
from pony.orm import db_session

from appliance.core.api import CoreApi, CoreApiError, CoreApiNotFound, CoreApiUnsupported
from appliance.domain.client_rules import EMAIL_MAX, email_key
from appliance.errors import ServiceError
from appliance.services.control.logs import (
    ACCESS_LOG_KEEP,
    ACCESS_LOG_LIMIT,
    API_TAG,
    AccessLine,
    LogTail,
    canonical_ip,
    parse_access_line,
    trim,
)
from appliance.store import client_ip_sql

log = logging.getLogger(__name__)

ACTIVE_WINDOW = 600  # seconds: an address seen this recently counts as in use
LIMIT_LOG_LIMIT = 8 << 20
LIMIT_LOG_KEEP = 1 << 20
# Per tick, how many users' addresses are asked of Xray. A call costs about half a
# millisecond on loopback (measured against a Python gRPC server on this kind of
# machine), so a tick spends at most about half a second on it however many are online.
ONLINE_IP_CALLS = 1000
RECENT_LIMIT = 50000  # addresses a node answers its managing panel per poll
REFUSE_LIMIT = 5000  # over-limit pairs a managing panel sends in one call
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


def server_of(node_id: int) -> str:
    """How `client_ip.server` names the node of `node_id` (this panel: empty)."""
    return f"n{node_id}"


def node_of(server: str) -> int | None:
    """The node id a `client_ip.server` names; None for this panel."""
    return int(server[1:]) if server.startswith("n") and server[1:].isdigit() else None


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
        # The core process (its generation) that answered "unimplemented" to the online
        # API: its access log is read instead for as long as it runs.
        self.log_only_process: int | None = None
        self.turn = 0  # ticks that asked the API: which share of a long list is next

    def collect(self, path: str = "", core: CoreApi | None = None, process: int = 0) -> None:
        """Record who connected from where since the last call: from the online API of
        `core` (an Xray's, `process` naming that core process) when given and served,
        else from `path` (the access log the running config names; empty: the panel's
        own)."""
        path = path or self.access_log
        if path != self.tail.path:
            self.tail = LogTail(path)
        now = self.clock()
        sightings = None
        if core is not None and process != self.log_only_process:
            sightings = self._online_sightings(core, process, now)
        if sightings is None:
            lines = self.tail.read()
            sightings = _sightings((parse_access_line(line) for line in lines), now)
        else:
            self.tail.skip_to_end()
        if path == self.access_log and trim(path, ACCESS_LOG_LIMIT, ACCESS_LOG_KEEP):
            self.tail.skip_to_end()
        if not sightings:
            return
        over = self.record(sightings, now)
        if over:
            self.write_limit_lines(over, now)

    def record(self, sightings: dict[str, dict[str, int]], now: float) -> list[tuple[str, str]]:
        """Upsert the sightings (email key -> ip -> unix seconds) of known clients; returns
        the (email, ip) pairs over a client's limit that were seen in `sightings`."""
        return self.record_seen("", sightings, now)

    def record_seen(
        self, server: str, sightings: dict[str, dict[str, int]], now: float
    ) -> list[tuple[str, str]]:
        """Upsert what `server` saw (empty: this panel's core; `n<id>`: a node) of known
        clients; returns the (email, ip) pairs `server` saw that are over a client's limit,
        the limit judged on the addresses every server saw."""
        with db_session:
            clients = self._clients(list(sightings))
            self._upsert({key: sightings[key] for key in clients}, server)
            if not self.settings.get("ipLimitEnable"):
                return []
            limited = [client for client in clients.values() if client.limit_ip > 0]
            if not limited:
                return []
            active = self._active_addresses([client.key for client in limited], now)
        return [
            (client.email, ip)
            for client in limited
            for ip in list(active.get(client.key, {}))[client.limit_ip :]
            if ip in sightings[client.key] and server in active[client.key][ip]
        ]

    def recent(self, limit: int = RECENT_LIMIT) -> dict[str, dict[str, int]]:
        """email -> ip -> unix seconds of the addresses this panel's core saw within the
        window, at most `limit` of them (the latest): what a managing panel judges."""
        found: dict[str, dict[str, int]] = {}
        with db_session:
            rows = client_ip_sql.recent(self.store, int(self.clock()) - ACTIVE_WINDOW, limit)
        for email, ip, seen in rows:
            found.setdefault(email, {})[ip] = seen
        return found

    def refuse(self, entries: Any) -> dict:
        """Write the over-limit pairs a managing panel judged, `[{email, ip}]`, to the
        limit log as if judged here; entries naming no client here, an address that is
        not one or one of this host's own are refused with the reason, not written."""
        if not isinstance(entries, list) or len(entries) > REFUSE_LIMIT:
            raise ServiceError(f"bans must be a list of at most {REFUSE_LIMIT} {{email, ip}}")
        wanted: list[tuple[int, str, str]] = []
        refused: list[dict] = []
        own = self.own_addresses()
        for number, entry in enumerate(entries, start=1):
            email = entry.get("email") if isinstance(entry, dict) else None
            raw = entry.get("ip") if isinstance(entry, dict) else None
            ip = canonical_ip(raw) if isinstance(raw, str) and len(raw) <= 64 else ""
            if not isinstance(email, str) or not 0 < len(email) <= EMAIL_MAX:
                refused.append({"entry": number, "reason": "needs an email string"})
            elif not ip:
                refused.append({"entry": number, "reason": "ip is not an IP address"})
            elif is_own_address(ip, own):
                refused.append({"entry": number, "reason": f"{ip} is this host's own"})
            else:
                wanted.append((number, email, ip))
        with db_session:
            clients = self._clients(sorted({email_key(email) for _, email, _ in wanted}))
        over = []
        for number, email, ip in wanted:
            client = clients.get(email_key(email))
            if client is None:
                refused.append({"entry": number, "reason": "no client has this email"})
            else:
                over.append((client.email, ip))
        if over:
            self.write_limit_lines(over, self.clock())
        refused.sort(key=lambda item: item["entry"])
        return {"written": len(over), "refused": refused}

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

    # ---- Xray's online API ----------------------------------------------------------------

    def _online_sightings(
        self, core: CoreApi, process: int, now: float
    ) -> dict[str, dict[str, int]] | None:
        """email key -> ip -> unix seconds of the users `pick_online` chooses; None when
        the addresses must come from the access log this time."""
        try:
            return self._ask_online(core, now)
        except CoreApiUnsupported as exc:
            log.info("client IPs come from the access log while this core runs: %s", exc)
            self.log_only_process = process
        except CoreApiError as exc:
            log.warning("client IPs come from the access log this tick: %s", exc)
        return None

    def _ask_online(self, core: CoreApi, now: float) -> dict[str, dict[str, int]]:
        emails = {email_key(email): email for email in core.online_users()}
        limited = self._limited(emails) if len(emails) > ONLINE_IP_CALLS else set()
        chosen = pick_online(sorted(emails), limited, ONLINE_IP_CALLS, self.turn)
        self.turn += 1
        found: dict[str, dict[str, int]] = {}
        for key in chosen:
            try:
                addresses = core.online_ips(emails[key])
            except CoreApiNotFound:
                continue  # gone offline between the two calls: the core dropped its map
            found[key] = _online_addresses(addresses, now)
        return found

    def _limited(self, emails: dict[str, str]) -> set[str]:
        """The email keys among `emails` whose IP limit is enforced (none when it is off)."""
        if not self.settings.get("ipLimitEnable"):
            return set()
        with db_session:
            clients = self._clients(list(emails))
        return {key for key, client in clients.items() if client.limit_ip > 0}

    # ---- the whole table (server/clientIps) ---------------------------------------------

    def table(self) -> list[dict]:
        """Every client with recorded addresses: `[{email, ips: [{ip, timestamp}]}]`,
        clients by email, each one's most recently seen address first."""
        found: dict[str, list[dict]] = {}
        with db_session:
            for email, ip, seen in client_ip_sql.ip_log(self.store):
                found.setdefault(email, []).append({"ip": ip, "timestamp": seen})
        return [{"email": email, "ips": ips} for email, ips in found.items()]

    def merge(self, entries: Any) -> dict:
        """Add `[{email, ips: [{ip, timestamp}]}]` (what `table` returns, from another
        panel or a backup) to the recorded addresses: a new address is added, a known one
        keeps the later of the two times, nothing is removed. The whole list is checked
        before anything is written; entries of unknown clients are skipped and listed."""
        now = int(self.clock())
        sightings = _parse_table(entries, now)
        with db_session:
            clients = self._clients(list(sightings))
            self._upsert({key: sightings[key][1] for key in clients})
        skipped = [
            {"email": email, "reason": "no client has this email"}
            for key, (email, _) in sightings.items()
            if key not in clients
        ]
        merged = sum(len(sightings[key][1]) for key in clients)
        return {"clients": len(clients), "addresses": merged, "skipped": skipped}

    # ---- the store ---------------------------------------------------------------------------

    def _clients(self, keys: list[str]) -> dict[str, Client]:
        return {
            key: Client(key, email, limit_ip or 0)
            for key, email, limit_ip in client_ip_sql.ip_limits(self.store, keys)
        }

    def _upsert(self, sightings: dict[str, dict[str, int]], server: str = "") -> None:
        known = {
            (key, ip): (row_id, seen)
            for row_id, key, ip, seen in client_ip_sql.logged(self.store, list(sightings), server)
        }
        updates, inserts = [], []
        for key, addresses in sightings.items():
            for ip, seen in addresses.items():
                row = known.get((key, ip))
                if row is None:
                    inserts.append((key, ip, seen, server))
                elif seen > row[1]:
                    updates.append((seen, row[0]))
        client_ip_sql.log_sightings(self.store, updates, inserts)

    def _active_addresses(self, keys: list[str], now: float) -> dict[str, dict[str, set[str]]]:
        """email key -> the addresses any server saw within the window, first recorded
        first, each with the servers that saw it; the host's own addresses left out."""
        own = self.own_addresses()
        found: dict[str, dict[str, set[str]]] = {}
        since = int(now) - ACTIVE_WINDOW
        for key, ip, server in client_ip_sql.seen_since(self.store, keys, since):
            if not is_own_address(ip, own):
                found.setdefault(key, {}).setdefault(ip, set()).add(server)
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


def reported_sightings(answer: Any, now: float) -> dict[str, dict[str, int]]:
    """email key -> ip -> unix seconds from what another panel answered to `recent`,
    every value checked: at most RECENT_LIMIT addresses, a time later than now counted as
    now, one before the window left out."""
    if not isinstance(answer, dict):
        return {}
    found: dict[str, dict[str, int]] = {}
    count = 0
    since = int(now) - ACTIVE_WINDOW
    for email, addresses in answer.items():
        if not isinstance(email, str) or not 0 < len(email) <= EMAIL_MAX:
            continue
        if not isinstance(addresses, dict):
            continue
        for raw, seen in addresses.items():
            ip = canonical_ip(raw) if isinstance(raw, str) and len(raw) <= 64 else ""
            if not ip or isinstance(seen, bool) or not isinstance(seen, int) or seen < since:
                continue
            found.setdefault(email_key(email), {})[ip] = min(seen, int(now))
            count += 1
            if count >= RECENT_LIMIT:
                return found
    return found


def pick_online(online: list[str], limited: set[str], budget: int, turn: int) -> list[str]:
    """Whose addresses to ask for this tick (one call each), of the `online` users (email
    keys, sorted), `limited` being those whose IP limit is enforced:

    - everybody online, when they fit in `budget` calls;
    - else every limited user first, since the limit needs their addresses, and the rest
      of the budget for the others, a different share of them each `turn`;
    - more limited users online than the budget: a different share of them each turn,
      so each is asked every ceil(limited / budget) ticks.
    """
    if len(online) <= budget:
        return list(online)
    first = [key for key in online if key in limited]
    if len(first) >= budget:
        return _share(first, budget, turn)
    others = [key for key in online if key not in limited]
    return first + _share(others, budget - len(first), turn)


def _share(keys: list[str], size: int, turn: int) -> list[str]:
    """The `turn`th run of `size` keys, wrapping around the end of `keys`."""
    start = turn * size % len(keys)
    return (keys[start:] + keys[:start])[:size]


def _online_addresses(addresses: dict[str, int], now: float) -> dict[str, int]:
    """ip -> unix seconds from the core's answer: addresses in the panel's spelling, a time
    later than now (or none) counted as now, as for log lines."""
    found: dict[str, int] = {}
    for raw, seen in addresses.items():
        ip = canonical_ip(raw)
        if ip:
            found[ip] = int(min(seen, now)) if seen > 0 else int(now)
    return found


def _parse_table(entries: Any, now: int) -> dict[str, tuple[str, dict[str, int]]]:
    """email key -> (email, ip -> unix seconds) from a `clientIps` list; a time later
    than now counts as now, as for log lines, so no address stays active forever."""
    if not isinstance(entries, list):
        raise ServiceError("ips must be a list of {email, ips: [{ip, timestamp}]}")
    found: dict[str, tuple[str, dict[str, int]]] = {}
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("email"), str):
            raise ServiceError(f"ips[{number}] must be an object with an email string")
        email = entry["email"].strip()
        addresses = entry.get("ips")
        if not email or not isinstance(addresses, list):
            raise ServiceError(f"ips[{number}] needs a non-empty email and an ips list")
        seen = found.setdefault(email_key(email), (email, {}))[1]
        for item in addresses:
            raw_ip = item.get("ip") if isinstance(item, dict) else None
            ip = canonical_ip(raw_ip) if isinstance(raw_ip, str) else ""
            if not ip:
                raise ServiceError(
                    f"ips[{number}] ({email[:100]}): each address must be "
                    f"{{ip, timestamp}} with an IP address (got {str(item)[:100]})"
                )
            stamp = item.get("timestamp")
            if isinstance(stamp, bool) or not isinstance(stamp, int) or stamp < 0:
                raise ServiceError(
                    f"ips[{number}] ({email[:100]}): the timestamp of {ip} must be "
                    "unix seconds, a non-negative integer"
                )
            seen[ip] = max(min(stamp, now), seen.get(ip, 0))
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
