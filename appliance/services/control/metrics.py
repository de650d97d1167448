"""The core's own runtime figures and its observatory, sampled into six-hour histories.

Why: memory, heap objects and GC pauses of the core tell whether it is about to run a
small VPS out of memory, and the observatory's probe delays tell which outbound is
healthy; both need history to be read as trends, next to the host charts of
`services.status`.

Where the figures come from: Xray serves Go's expvar document (`/debug/vars`) on the
address of the template's `metrics.listen`. Its `memstats` give Alloc, Sys, HeapObjects,
NumGC and PauseNs (a ring of the last 256 pauses, of which the newest is recorded), and
its `observatory` var maps each observed outbound tag to its latest probe. Without a
metrics address, an observatory configured in the template (`observatory` or
`burstObservatory`) is read through the core's ObservatoryService instead. The job runs
every STEP_SECONDS; when the template configures neither, it does nothing and the states
are empty. A core that does not serve what the template asks for (V2Ray 4.34 has neither)
shows up as the state's `error`, in words.

Histories keep one point per sample in bounded deques: five metrics, and one delay series
per observed outbound, at most MAX_OBSERVED_TAGS of them.
"""

from __future__ import annotations

import time
from collections import deque

from appliance.core.api import CoreApiError, CoreApiUnsupported, lacks_xray_api
from appliance.errors import ServiceError
from appliance.runtime.reader import Unreadable, parse_json
from appliance.services.admin.status import STEP_SECONDS, WINDOW_SECONDS, parse_bucket

METRICS = {
    "xrAlloc": "Alloc",
    "xrSys": "Sys",
    "xrHeapObjects": "HeapObjects",
    "xrNumGC": "NumGC",
    "xrPauseNs": "PauseNs",
}
FETCH_TIMEOUT = 2.0
METRICS_LIMIT = 16 << 20
MAX_OBSERVED_TAGS = 200
TAG_LIMIT = 255
OBSERVATORY_SECTIONS = ("observatory", "burstObservatory")


class SeriesHistory:
    """Named series of (t, value) points over the last WINDOW_SECONDS, read as means per
    bucket. The window is measured back from the newest point recorded in any series."""

    def __init__(self, max_series: int):
        self.max_series = max_series
        self._points: dict[str, deque[tuple[float, float]]] = {}
        self._latest = 0.0

    def record(self, name: str, t: float, value: float) -> None:
        points = self._points.get(name)
        if points is None:
            if len(self._points) >= self.max_series:
                return
            points = self._points[name] = deque(maxlen=WINDOW_SECONDS // STEP_SECONDS)
        points.append((t, float(value)))
        self._latest = max(self._latest, t)

    def series(self, name: str, bucket) -> list[dict]:
        """[{t: bucket start, v: mean}] oldest first; [] for a series never recorded."""
        seconds = parse_bucket(bucket)
        oldest = self._latest - WINDOW_SECONDS
        sums: dict[int, list[float]] = {}
        for t, value in self._points.get(name, ()):
            if t <= oldest:
                continue
            key = int(t) // seconds * seconds
            total = sums.setdefault(key, [0.0, 0])
            total[0] += value
            total[1] += 1
        return [
            {"t": key, "v": round(total / count, 2)} for key, (total, count) in sorted(sums.items())
        ]


class CoreMetrics:
    def __init__(self, core):
        """`core` is the CoreService: the running config says what to read, its API
        client reads the observatory when no metrics address is configured."""
        self.core = core
        self.history = SeriesHistory(len(METRICS))
        self.observed = SeriesHistory(MAX_OBSERVED_TAGS)
        self._metrics = _empty_metrics()
        self._observatory = _empty_observatory()

    # ---- the job -------------------------------------------------------------------------

    def collect(self) -> None:
        """Take one sample of whatever the running config configures."""
        running = self.core.running if self.core.process.state == "running" else None
        config = running.skeleton if running is not None else {}
        now = time.time()
        listen = metrics_listen(config)
        document, fetch_error = None, ""
        if listen:
            document, fetch_error = self._fetch(listen)
        self._metrics = self._metrics_state(config, listen, document, fetch_error, now)
        if any(isinstance(config.get(key), dict) for key in OBSERVATORY_SECTIONS):
            self._observatory = self._observe(document, listen, fetch_error, now)
        else:
            self._observatory = _empty_observatory()

    def _fetch(self, listen: str) -> tuple[dict | None, str]:
        # Imported here: most templates configure no metrics, and `requests` with what it
        # imports holds megabytes a panel that never fetches would carry for nothing.
        import requests

        url = f"http://{listen}/debug/vars"
        try:
            reply = requests.get(url, timeout=FETCH_TIMEOUT)
            reply.raise_for_status()
            document = parse_json(reply.content, METRICS_LIMIT, dict)
        except requests.RequestException as exc:
            return None, f"cannot read the core's metrics at {url}: {_short(exc)}" + self._lacks()
        except Unreadable as exc:
            return None, f"the core's metrics at {url} are not a JSON object: {exc.msg}"
        return document, ""

    def _lacks(self) -> str:
        info = self.core.process.info
        if info is not None and info.flavor != "xray":
            return (
                f" (the running core, {info.flavor} {info.version}, has no metrics; it needs Xray)"
            )
        return ""

    def _metrics_state(self, config, listen, document, error, now) -> dict:
        section = config.get("metrics")
        if not isinstance(section, dict):
            return _empty_metrics()
        state = {**_empty_metrics(), "enabled": bool(listen), "listen": listen}
        if not listen:
            state["error"] = (
                "the core template's metrics section has no listen address; set "
                "metrics.listen (for example 127.0.0.1:11111) for the panel to read it"
            )
            return state
        if document is None:
            return {**state, "error": error}
        values = memstats_values(document.get("memstats"))
        if values is None:
            return {**state, "error": "the core's metrics document has no memstats"}
        for metric, value in values.items():
            self.history.record(metric, now, value)
        return {**state, "lastSample": int(now), "values": values}

    def _observe(self, document, listen, fetch_error, now) -> dict:
        state = {**_empty_observatory(), "enabled": True}
        if listen:
            if document is None:
                return {**state, "error": fetch_error}
            outbounds = expvar_observatory(document.get("observatory"))
        else:
            try:
                outbounds = self._observatory_api()
            except ServiceError as exc:
                return {**state, "error": exc.msg}
        for outbound in outbounds:
            if outbound["alive"]:
                self.observed.record(outbound["tag"], now, outbound["delay"])
        return {**state, "updatedAt": int(now), "outbounds": outbounds}

    def _observatory_api(self) -> list[dict]:
        api = self.core.api
        if api is None:
            raise ServiceError("the core is not running")
        info = self.core.process.info
        lacking = lacks_xray_api(info, "observatory")
        if lacking:
            raise ServiceError(lacking)
        try:
            return sorted(api.outbound_status(), key=lambda status: status["tag"])
        except CoreApiUnsupported:
            if info is not None:
                raise ServiceError(
                    'the core\'s API does not serve ObservatoryService: add "ObservatoryService" '
                    "to api.services in the core template, or set metrics.listen"
                ) from None
            unknown = "the running core (unknown) has no observatory; it needs Xray"
            raise ServiceError(unknown) from None
        except CoreApiError as exc:
            raise ServiceError(exc.msg) from None

    # ---- what the routes serve -----------------------------------------------------------------

    def state(self) -> dict:
        return dict(self._metrics)

    def series(self, metric: str, bucket) -> list[dict]:
        if metric not in METRICS:
            raise ServiceError(f"metric must be one of {', '.join(METRICS)} (got {metric!r})")
        return self.history.series(metric, bucket)

    def observatory(self) -> dict:
        return dict(self._observatory)

    def observatory_series(self, tag: str, bucket) -> list[dict]:
        if not tag or len(tag) > TAG_LIMIT:
            raise ServiceError(f"tag must be an outbound tag of 1 to {TAG_LIMIT} characters")
        return self.observed.series(tag, bucket)


def metrics_listen(config: dict) -> str:
    """host:port of the core's metrics HTTP server, "" when the config names none."""
    section = config.get("metrics")
    listen = section.get("listen") if isinstance(section, dict) else None
    return listen.strip() if isinstance(listen, str) else ""


def memstats_values(memstats) -> dict[str, float] | None:
    """The five history values out of Go's runtime.MemStats as expvar prints it; the pause
    recorded is the newest in the PauseNs ring (0 before the first collection)."""
    if not isinstance(memstats, dict):
        return None
    values = {}
    for metric, key in METRICS.items():
        if key == "PauseNs":
            continue
        value = memstats.get(key)
        values[metric] = float(value) if isinstance(value, int | float) else 0.0
    pauses = memstats.get("PauseNs")
    collections = int(values["xrNumGC"])
    newest = 0.0
    if isinstance(pauses, list) and pauses and collections > 0:
        pause = pauses[(collections + len(pauses) - 1) % len(pauses)]
        newest = float(pause) if isinstance(pause, int | float) else 0.0
    values["xrPauseNs"] = newest
    return values


def expvar_observatory(observed) -> list[dict]:
    """The `observatory` expvar ({tag: OutboundStatus in protobuf JSON names}) as the
    panel's outbound entries, sorted by tag."""
    if not isinstance(observed, dict):
        return []
    outbounds = []
    for tag, status in observed.items():
        if not isinstance(status, dict):
            continue
        outbounds.append(
            {
                "tag": str(status.get("outbound_tag") or tag),
                "alive": bool(status.get("alive")),
                "delay": _number(status.get("delay")),
                "lastErrorReason": str(status.get("last_error_reason") or ""),
                "lastSeenTime": _number(status.get("last_seen_time")),
                "lastTryTime": _number(status.get("last_try_time")),
            }
        )
    return sorted(outbounds, key=lambda outbound: outbound["tag"])


def _number(value) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _short(exc: Exception) -> str:
    import requests

    if isinstance(exc, requests.ConnectionError):
        return "nothing answers there"
    if isinstance(exc, requests.Timeout):
        return f"no answer within {FETCH_TIMEOUT:g} s"
    return str(exc)


def _empty_metrics() -> dict:
    return {"enabled": False, "listen": "", "lastSample": 0, "values": {}, "error": ""}


def _empty_observatory() -> dict:
    return {"enabled": False, "updatedAt": 0, "outbounds": [], "error": ""}
