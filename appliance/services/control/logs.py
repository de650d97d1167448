"""The core's logs as the panel reads them: its access log, parsed, followed and bounded,
and the recent access and error lines that `server/corelogs` shows.

Why a file: the access log is the one record of who connected that every core has, V2Ray
4.34 as well as Xray (which also offers an online-IP API, but only in newer releases), so
IP accounting is built on it. The config builder points the core's `log.access` at
`<data dir>/core/access.log`, the only file it may name (services.file_paths confines the
template's log paths to the panel's own files); the core opens it with O_APPEND, which is
what makes trimming it in place safe. `corelogs` reads back only those files, whatever a
config names, so it can never serve another file of the host.

Both cores write one line per accepted or rejected connection:

    2026/11/22 01:02:03 127.0.0.1:51234 accepted tcp:127.0.0.1:80 [direct] email: alice@x
    2026/11/22 01:02:03.123456 from 203.0.113.5:51234 accepted tcp:example.com:443 \
[in-tag >> direct] email: alice@x

V2Ray 4.34 names only the outbound in brackets; Xray names `inbound -> outbound` (older
releases), `inbound >> outbound` or `inbound ==> outbound` (a balancer's pick), may put
`from ` and a `tcp:`/`udp:` network before the source, and adds microseconds to the time.
The `email:` part is there only when the connection belongs to a user with an email,
which every client the panel renders has.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from appliance.errors import ServiceError
from appliance.runtime.file_paths import FilePlaces
from appliance.runtime.logbuffer import parse_count

# Bytes read from the access log per tick: a flood of connections is worked off over
# several ticks instead of holding the process for one long read.
READ_LIMIT = 4 << 20
# The access log the panel chose is cut back to its newest KEEP bytes once it passes
# LIMIT, so a busy core cannot fill the disk between two log rotations.
ACCESS_LOG_LIMIT = 32 << 20
ACCESS_LOG_KEEP = 4 << 20
# How far back `corelogs` looks for lines that pass its filter.
SCAN_LIMIT = 8 << 20
BLOCK = 64 << 10
API_TAG = "api"
DISABLED = ("", "none")

TIMESTAMP = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?")
ACCESS_LINE = re.compile(
    r"^(?P<when>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)(?:\.\d+)? "
    r"(?:from )?(?:(?:tcp|udp):)?(?P<host>\[[^\]]*\]|[^\s\[\]]+):(?P<port>\d+) "
    r"(?P<status>accepted|rejected) ?(?P<destination>(?:tcp|udp):\S+)?\s*"
    r"(?:\[(?P<detour>[^\]]*)\])?(?P<rest>.*)$"
)
DETOUR_ARROWS = (" >> ", " -> ", " ==> ")
EMAIL = re.compile(r"(?:^|\s)email:\s*(?P<email>\S.*?)\s*$")


class AccessLine(NamedTuple):
    when: str  # "YYYY/MM/DD HH:MM:SS", the core's local time, fractions dropped
    ip: str  # the source address in canonical form; "" when the source is no address
    status: str  # "accepted" or "rejected"
    destination: str  # e.g. "tcp:example.com:443"; "" on some rejections
    inbound_tag: str  # "" when the core does not print it (V2Ray 4.34)
    outbound_tag: str  # "" when the connection was not routed (rejections)
    email: str  # "" when the connection has no user with an email


def parse_access_line(line: str) -> AccessLine | None:
    """One access-log line, or None for anything else (error-log lines included)."""
    match = ACCESS_LINE.match(line.rstrip("\r\n"))
    if match is None:
        return None
    inbound_tag, outbound_tag = _split_detour(match["detour"] or "")
    email = EMAIL.search(match["rest"])
    return AccessLine(
        when=match["when"],
        ip=canonical_ip(match["host"]),
        status=match["status"],
        destination=match["destination"] or "",
        inbound_tag=inbound_tag,
        outbound_tag=outbound_tag,
        email=email["email"] if email else "",
    )


def _split_detour(detour: str) -> tuple[str, str]:
    for arrow in DETOUR_ARROWS:
        if arrow in detour:
            inbound_tag, _, outbound_tag = detour.partition(arrow)
            return inbound_tag.strip(), outbound_tag.strip()
    return "", detour.strip()


def canonical_ip(host: str) -> str:
    """`host` as an IP address in its standard spelling (brackets and zone dropped, an
    IPv4-mapped IPv6 address as plain IPv4); "" when it is not an address."""
    text = host.strip("[]").split("%", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return ""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def log_path(config: dict | None, key: str) -> str:
    """The file the config sends log `key` ("access" or "error") to; "" for none (the
    error log then goes to the core's output)."""
    section = (config or {}).get("log")
    value = section.get(key) if isinstance(section, dict) else None
    return value if isinstance(value, str) and value.strip().lower() not in DISABLED else ""


def own_log_path(config: dict | None, key: str, places: FilePlaces) -> str:
    """The file the config sends log `key` to when it is the panel's own file for that
    log; "" for none or for any other file."""
    path = log_path(config, key)
    return path if places.is_core_log(key, path) else ""


# ---- following a file that the core appends to -------------------------------------------


class LogTail:
    """The complete lines appended to a file since the last read.

    Only the position is kept, in memory: a panel that starts again begins at the end of
    the file (what was there was read by the previous run or is history). A file that
    shrank or was replaced (log rotation, a trim) is read from its start again."""

    def __init__(self, path: str, read_limit: int = READ_LIMIT):
        self.path = path
        self.read_limit = read_limit
        self.offset, self.inode = 0, 0
        # Inside a line longer than `read_limit`, whose rest is skipped up to its newline.
        self.skipping = False
        self.skip_to_end()

    def skip_to_end(self) -> None:
        self.skipping = False
        try:
            status = os.stat(self.path)
        except OSError:
            # Not there yet: everything the core writes into it later is new.
            self.offset, self.inode = 0, 0
            return
        self.offset, self.inode = status.st_size, status.st_ino

    def read(self) -> list[str]:
        """New complete lines, at most `read_limit` bytes of them; a line longer than
        that is skipped whole."""
        try:
            with open(self.path, "rb") as fh:
                status = os.fstat(fh.fileno())
                if status.st_ino != self.inode or status.st_size < self.offset:
                    self.offset, self.inode, self.skipping = 0, status.st_ino, False
                if status.st_size == self.offset:
                    return []
                fh.seek(self.offset)
                chunk = fh.read(min(status.st_size - self.offset, self.read_limit))
        except OSError:
            return []
        if self.skipping:
            chunk = self._past_long_line(chunk)
        end = chunk.rfind(b"\n")
        if end < 0:
            if len(chunk) >= self.read_limit:
                self.offset += len(chunk)
                self.skipping = True
            return []
        self.offset += end + 1
        # Split at newlines only: str.splitlines() also breaks at U+2028 and the like,
        # which an email may hold, and would credit half a line to another client.
        return [line.decode("utf-8", errors="replace") for line in chunk[:end].split(b"\n")]

    def _past_long_line(self, chunk: bytes) -> bytes:
        """What follows the end of the long line being skipped; b"" while it goes on."""
        end = chunk.find(b"\n")
        if end < 0:
            if len(chunk) >= self.read_limit:
                self.offset += len(chunk)
            return b""
        self.offset += end + 1
        self.skipping = False
        return chunk[end + 1 :]


def trim(path: str, limit: int, keep: int) -> bool:
    """Cut the file at `path` back to its newest `keep` bytes (whole lines) once it is
    larger than `limit`; whether it did. The writer must append with O_APPEND (the core
    and the panel do): its next line then lands at the new end. A line written in the
    instant between reading the tail and truncating is lost, which a log can afford."""
    try:
        with open(path, "r+b") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size <= limit:
                return False
            fh.seek(size - keep)
            tail = fh.read(keep)
            first = tail.find(b"\n")
            tail = tail[first + 1 :] if first >= 0 else b""
            fh.seek(0)
            fh.write(tail)
            fh.truncate()
    except OSError:
        return False
    return True


def lines_backwards(path: str, max_bytes: int = SCAN_LIMIT) -> Iterator[str]:
    """The lines of the file at `path`, newest first, reading at most `max_bytes` from
    its end (a partial oldest line is dropped); nothing when it cannot be read."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the generator's finally
    except OSError:
        return
    try:
        position = os.fstat(fh.fileno()).st_size
        floor = max(0, position - max_bytes)
        pending = b""
        while position > floor:
            step = min(BLOCK, position - floor)
            position -= step
            fh.seek(position)
            pending = fh.read(step) + pending
            parts = pending.split(b"\n")
            pending = parts[0]
            for part in reversed(parts[1:]):
                if part:
                    yield part.decode("utf-8", errors="replace")
        if floor == 0 and pending:
            yield pending.decode("utf-8", errors="replace")
    finally:
        fh.close()


# ---- server/corelogs ------------------------------------------------------------------------

ROUTE_FLAGS = (("direct", "showDirect"), ("blocked", "showBlocked"), ("proxy", "showProxy"))


def recent_core_logs(
    config: dict, output: list[str], count: Any, form: Any, places: FilePlaces
) -> str:
    """The last `count` lines of the core's access and error logs, oldest first, that pass
    the filters of `server/corelogs`.

    `config` is the config the core runs (its `log` section says where the logs are, its
    outbounds what each tag is); `output` the core's recent output, which holds the
    error log when the config writes it to no file. A log file is read only when it is
    the panel's own for that log (`places`); any other file a config names is not read.
    Rules:

    - `filter`: a line is shown only when it contains this text (case-insensitive).
    - An access line is classed by its outbound: a `freedom` outbound (or a tag named
      `direct` that the config does not define) is direct, a `blackhole` one (or a tag
      named `blocked`) is blocked, any other outbound is proxy. Each class is hidden
      unless its flag (`showDirect`, `showBlocked`, `showProxy`) is "true".
    - Access lines without an outbound (rejected connections) and error-log lines are
      not routed, so only `filter` applies to them.
    - The panel's own calls to the core's API (outbound `api`) are never shown."""
    wanted = parse_count(count)
    if not isinstance(form, dict):
        raise ServiceError("send filter, showDirect, showBlocked and showProxy as a form")
    text = form.get("filter") or ""
    if not isinstance(text, str):
        raise ServiceError("filter must be text to look for in the log lines")
    shown = {route: _flag(form, name) for route, name in ROUTE_FLAGS}
    protocols = _outbound_protocols(config)

    def keep(line: str) -> bool:
        if text and text.casefold() not in line.casefold():
            return False
        entry = parse_access_line(line)
        if entry is None or not entry.outbound_tag:
            return True
        route = route_class(entry.outbound_tag, protocols)
        return route != API_TAG and shown[route]

    access_path, error_path = (
        own_log_path(config, "access", places),
        own_log_path(config, "error", places),
    )
    access = lines_backwards(access_path) if access_path else []
    errors = lines_backwards(error_path) if error_path else reversed(output)
    lines = heapq.merge(
        _timed(_newest(access, keep, wanted)),
        _timed(_newest(errors, keep, wanted)),
        key=lambda pair: pair[0],
    )
    return "\n".join(line for _, line in list(lines)[-wanted:])


def route_class(outbound_tag: str, protocols: dict[str, str]) -> str:
    """The class of an outbound: direct, blocked, proxy, or api (the panel's own calls)."""
    if outbound_tag == API_TAG:
        return API_TAG
    protocol = protocols.get(outbound_tag)
    if protocol == "freedom" or (protocol is None and outbound_tag == "direct"):
        return "direct"
    if protocol == "blackhole" or (protocol is None and outbound_tag == "blocked"):
        return "blocked"
    return "proxy"


def _outbound_protocols(config: dict) -> dict[str, str]:
    outbounds = config.get("outbounds") if isinstance(config, dict) else None
    return {
        outbound["tag"]: str(outbound.get("protocol", ""))
        for outbound in outbounds or []
        if isinstance(outbound, dict) and isinstance(outbound.get("tag"), str)
    }


def _flag(form: dict, name: str) -> bool:
    value = form.get(name, "false")
    if value in (True, "true"):
        return True
    if value in (False, "false", ""):
        return False
    raise ServiceError(f"{name} must be true or false (got {value!r})")


def _newest(lines: Iterable[str], keep: Callable[[str], bool], count: int) -> list[str]:
    """Up to `count` of `lines` (newest first) that `keep` accepts, oldest first."""
    found = list(itertools.islice(filter(keep, lines), count))
    found.reverse()
    return found


def _timed(lines: list[str]) -> Iterator[tuple[str, str]]:
    """(timestamp, line) in the given order; a line without a timestamp (a banner, a
    wrapped message) sorts with the line before it."""
    last = ""
    for line in lines:
        if match := TIMESTAMP.match(line):
            last = match.group(0)[:19]
        yield last, line
