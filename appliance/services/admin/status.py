"""Host status for `server/status` and the six-hour history behind `server/history`.

Why this module exists: the panel pushes a status snapshot every 2 seconds (GET status,
WebSocket `status` message) and draws charts of the last ~6 hours from the same samples.
Both must stay cheap and bounded on a small VPS that may carry 100k proxied sockets.

Approach:

- `StatusSampler.sample()` reads psutil counters that are O(1) to obtain. CPU percent is
  psutil's non-blocking form (usage since the previous call); network rates come from the
  delta of the interface counters between two samples. Socket counts come from the
  kernel's own tallies in /proc/net/sockstat{,6} (sockets in use plus TCP's TIME-WAIT
  ones: the rows /proc/net/{tcp,tcp6,udp,udp6} would list), a few lines whatever the
  number of sockets, never from those tables (100,000 proxied sockets are megabytes of
  text for the kernel to write on every sample) nor from `psutil.net_connections()`,
  which builds one Python object per socket and also walks every process's file
  descriptors. The core counts, which never change, are read once.
- `StatusSampler.history_values()` is the part the charts need (CPU, memory, network,
  load, online): the panel takes it alone while no browser watches the status, so an
  idle panel does not build snapshots nobody reads.
- `History` keeps one sample per metric every `STEP_SECONDS` in preallocated
  `array('d')` ring buffers sized for `WINDOW_SECONDS`. A slot is addressed by
  `int(t) // STEP_SECONDS` modulo the capacity and carries the slot number it was written
  for, so stale slots left over from before a gap are recognised and skipped without ever
  being cleared. Memory is fixed at construction: 8 metrics x 10800 slots x 8 bytes plus
  the slot stamps, about 0.8 MB.

The panel runs as one gevent process and neither `record` nor `series` yields, so they
need no lock.
"""

from __future__ import annotations

import math
import os
import time
from array import array
from collections.abc import Callable
from typing import Any

import psutil

from appliance.errors import ServiceError

METRICS = ("cpu", "mem", "netUp", "netDown", "online", "load1", "load5", "load15")
BUCKETS = (2, 30, 60, 120, 180, 300)
WINDOW_SECONDS = 6 * 3600
STEP_SECONDS = 2

_EMPTY_SLOT = -1
_SOCKSTAT_FILES = ("/proc/net/sockstat", "/proc/net/sockstat6")
# The sockstat fields whose sum is the number of rows of the /proc/net socket tables:
# sockets in use per protocol (IPv4 and IPv6 apart), and TCP's TIME-WAIT sockets, which
# the tables list but "inuse" leaves out (counted once, for both address families).
_TCP_FIELDS = (("TCP:", "inuse"), ("TCP:", "tw"), ("TCP6:", "inuse"))
_UDP_FIELDS = (("UDP:", "inuse"), ("UDP6:", "inuse"))


def parse_bucket(bucket: int | str) -> int:
    """Return `bucket` as an int from BUCKETS; it may arrive as a URL string like "30"."""
    value: int | None = None
    if isinstance(bucket, int) and not isinstance(bucket, bool):
        value = bucket
    elif isinstance(bucket, str) and bucket.strip().isdigit():
        value = int(bucket.strip())
    if value not in BUCKETS:
        allowed = ", ".join(str(b) for b in BUCKETS)
        raise ServiceError(f"bucket must be one of {allowed} seconds (got {bucket!r})")
    return value


def parse_metric(metric: str) -> str:
    """Return `metric` unchanged when it is one of METRICS, else raise ServiceError."""
    if metric not in METRICS:
        raise ServiceError(f"metric must be one of {', '.join(METRICS)} (got {metric!r})")
    return metric


class History:
    """Fixed-memory ring buffers holding the last WINDOW_SECONDS of samples per metric.

    One slot per STEP_SECONDS. Recording twice into the same slot keeps the later sample.
    A metric missing from a recorded sample is stored as NaN and left out of the means.
    The window is measured back from the most recently recorded sample, so a wall clock
    that jumps backwards does not blank the charts for six hours.
    """

    def __init__(self) -> None:
        self.capacity = WINDOW_SECONDS // STEP_SECONDS
        # Slot numbers fit in a double exactly for any realistic unix time.
        self._stamps = array("d", [_EMPTY_SLOT]) * self.capacity
        self._values = {m: array("d", [math.nan]) * self.capacity for m in METRICS}
        self._latest_slot: int | None = None

    def record(self, t: float, values: dict[str, float]) -> None:
        """Store the sample taken at unix time `t` (seconds) for the metrics in `values`."""
        unknown = set(values) - set(METRICS)
        if unknown:
            raise ValueError(f"unknown history metrics {sorted(unknown)}; allowed: {METRICS}")
        slot = int(t) // STEP_SECONDS
        index = slot % self.capacity
        self._stamps[index] = slot
        for metric, column in self._values.items():
            value = values.get(metric)
            column[index] = math.nan if value is None else float(value)
        self._latest_slot = slot

    def series(self, metric: str, bucket: int | str) -> list[dict[str, Any]]:
        """Return `[{"t": bucket start, "v": mean}]`, oldest first, for buckets with samples.

        Buckets are aligned to multiples of `bucket` seconds since the epoch, so the same
        instant always falls into the same bucket whatever the request time.
        """
        column = self._values[parse_metric(metric)]
        bucket_seconds = parse_bucket(bucket)
        if self._latest_slot is None:
            return []
        newest = self._latest_slot
        oldest = newest - self.capacity + 1
        sums: dict[int, float] = {}
        counts: dict[int, int] = {}
        for index, slot in enumerate(self._stamps):
            # A stamp outside the window is a leftover from before a gap, or from a clock
            # that has since jumped backwards: skip it rather than clearing it on write.
            if slot < oldest or slot > newest:
                continue
            value = column[index]
            if math.isnan(value):
                continue
            key = int(slot) * STEP_SECONDS // bucket_seconds * bucket_seconds
            if key in sums:
                sums[key] += value
                counts[key] += 1
            else:
                sums[key] = value
                counts[key] = 1
        return [{"t": key, "v": round(sums[key] / counts[key], 2)} for key in sorted(sums)]


def socket_counts(paths: tuple[str, ...] | None = None) -> tuple[int, int]:
    """(TCP, UDP) sockets of this network namespace, as many as /proc/net/{tcp,tcp6} and
    /proc/net/{udp,udp6} have rows, from the kernel's tallies in `paths` (the sockstat
    files by default). A file that cannot be read (no IPv6) or a field it lacks counts
    as 0."""
    fields: dict[tuple[str, str], int] = {}
    for path in _SOCKSTAT_FILES if paths is None else paths:
        try:
            with open(path, "rb") as sockstat:
                text = sockstat.read().decode("ascii", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if not words:
                continue
            pairs = words[1:]
            for name, value in zip(pairs[::2], pairs[1::2], strict=False):
                if value.isdigit():
                    fields[(words[0], name)] = int(value)
    tcp = sum(fields.get(field, 0) for field in _TCP_FIELDS)
    udp = sum(fields.get(field, 0) for field in _UDP_FIELDS)
    return tcp, udp


class StatusSampler:
    """Takes the status snapshot served by `server/status` and pushed over the WebSocket.

    Keep one instance for the life of the process: CPU percent and network rates are
    computed against the previous call, so the first sample reports 0 B/s.
    """

    def __init__(
        self,
        panel_version: str,
        core_info: Callable[[], dict],
        online_count: Callable[[], int],
    ) -> None:
        self.panel_version = panel_version
        self._core_info = core_info
        self._online_count = online_count
        self._process = psutil.Process()
        self._boot_time = psutil.boot_time()
        self._previous_net: tuple[float, int, int] | None = None
        self._logical = psutil.cpu_count(logical=True) or 0
        # Containers and some VMs do not expose physical cores; report logical then.
        self._cores = psutil.cpu_count(logical=False) or self._logical
        psutil.cpu_percent(interval=None)  # primes the counter; the first reading is 0.0

    def sample(self, now: float | None = None) -> dict[str, Any]:
        """Return the status dict; `now` (unix seconds) defaults to the current time."""
        if now is None:
            now = time.time()
        memory = psutil.virtual_memory()
        swap = psutil.swap_memory()
        disk = psutil.disk_usage("/")
        sent, recv = _net_totals()
        up, down = self._net_rates(now, sent, recv)
        load1, load5, load15 = os.getloadavg()
        tcp, udp = socket_counts()
        with self._process.oneshot():
            threads = self._process.num_threads()
            rss = self._process.memory_info().rss
            process_started = self._process.create_time()
        return {
            "cpu": psutil.cpu_percent(interval=None),
            "cpuCores": self._cores,
            "logicalPro": self._logical,
            # "Used" is total minus available: page cache the kernel can drop is free.
            "mem": {"current": memory.total - memory.available, "total": memory.total},
            "swap": {"current": swap.used, "total": swap.total},
            "disk": {"current": disk.used, "total": disk.total},
            "netIO": {"up": up, "down": down},
            "netTraffic": {"sent": sent, "recv": recv},
            "core": self._core_info(),
            "tcpCount": tcp,
            "udpCount": udp,
            "load": {"load1": load1, "load5": load5, "load15": load15},
            "uptime": max(int(now - self._boot_time), 0),
            "appStats": {
                "threads": threads,
                "mem": rss,
                "uptime": max(int(now - process_started), 0),
            },
            "panelVersion": self.panel_version,
        }

    def metrics(self, status: dict[str, Any]) -> dict[str, float]:
        """History values for `status`, with `online` taken from the online_count callable."""
        return metrics(status, online=self._online_count())

    def history_values(self, now: float | None = None) -> dict[str, float]:
        """The History values alone, without the rest of a snapshot: what the charts
        need while nobody reads the status. CPU and network are measured since the
        previous call of either this or `sample`."""
        if now is None:
            now = time.time()
        memory = psutil.virtual_memory()
        up, down = self._net_rates(now, *_net_totals())
        load1, load5, load15 = os.getloadavg()
        status = {
            "cpu": psutil.cpu_percent(interval=None),
            "mem": {"current": memory.total - memory.available, "total": memory.total},
            "netIO": {"up": up, "down": down},
            "load": {"load1": load1, "load5": load5, "load15": load15},
        }
        return self.metrics(status)

    def _net_rates(self, now: float, sent: int, recv: int) -> tuple[int, int]:
        previous, self._previous_net = self._previous_net, (now, sent, recv)
        if previous is None:
            return 0, 0
        elapsed = now - previous[0]
        if elapsed <= 0:
            return 0, 0
        # Counters go backwards when an interface disappears; report 0, not a negative rate.
        up = max(sent - previous[1], 0) / elapsed
        down = max(recv - previous[2], 0) / elapsed
        return int(up), int(down)


def metrics(status: dict[str, Any], online: int = 0) -> dict[str, float]:
    """Map a status dict to History values.

    cpu is percent; mem is percent of RAM used (0 when total is unknown), so the chart
    reads the same on any host; netUp/netDown are bytes per second; online is the number
    of clients the caller counts as online (the status dict does not carry it, so
    `StatusSampler.metrics` passes its `online_count()`); load* are load averages.
    """
    mem = status["mem"]
    mem_percent = mem["current"] * 100.0 / mem["total"] if mem["total"] else 0.0
    return {
        "cpu": float(status["cpu"]),
        "mem": mem_percent,
        "netUp": float(status["netIO"]["up"]),
        "netDown": float(status["netIO"]["down"]),
        "online": float(online),
        "load1": float(status["load"]["load1"]),
        "load5": float(status["load"]["load5"]),
        "load15": float(status["load"]["load15"]),
    }


def _net_totals() -> tuple[int, int]:
    try:
        counters = psutil.net_io_counters()
    except (OSError, RuntimeError):
        return 0, 0
    if counters is None:  # no network interfaces at all
        return 0, 0
    return counters.bytes_sent, counters.bytes_recv
