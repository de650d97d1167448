"""server/coreMetricsState, coreMetricsHistory, coreObservatory and coreObservatoryHistory.

The panel runs the real core (V2Ray 4.34). It has neither Xray's metrics endpoint nor an
observatory, so: with the default template both states are empty; an observatory in the
template without a metrics address is asked of the core's API and the answer names what
the core lacks; a metrics address where nothing listens is reported in words. Where Xray
would serve its expvar document, a loopback HTTP server of the test serves one in Go's
expvar shape, and the panel's histories must show its figures.
"""

from __future__ import annotations

import json

import pytest
from core_panel import core_panel, http_server, loopback_template, use_template, wait_until
from helpers import free_port, ok, refused

from appliance.services.control.metrics import SeriesHistory, expvar_observatory, memstats_values

SERVER = "/panel/api/server"
PAUSES = [0] * 256
PAUSES[:3] = [1500, 2500, 3500]  # three collections so far, the newest took 3500 ns
MEMSTATS = {"Alloc": 7340032, "Sys": 20971520, "HeapObjects": 4321, "NumGC": 3, "PauseNs": PAUSES}
OBSERVED = {
    "direct": {
        "alive": True,
        "delay": 42,
        "outbound_tag": "direct",
        "last_seen_time": 1700000000,
        "last_try_time": 1700000000,
    },
    "blocked": {
        "outbound_tag": "blocked",
        "last_error_reason": "probe failed",
        "last_try_time": 1700000000,
    },
}
EMPTY_METRICS = {"enabled": False, "listen": "", "lastSample": 0, "values": {}, "error": ""}
EMPTY_OBSERVATORY = {"enabled": False, "updatedAt": 0, "outbounds": [], "error": ""}


@pytest.fixture(scope="module")
def panel_api(tmp_path_factory):
    server = core_panel(tmp_path_factory.mktemp("metrics"))
    api = server.client()
    yield api
    server.stop()


def with_sections(api, **sections) -> None:
    template = loopback_template(api)
    template.update(sections)
    use_template(api, template)


def test_not_configured_means_empty_states(panel_api):
    with_sections(panel_api)
    assert ok(panel_api.get(f"{SERVER}/coreMetricsState")) == EMPTY_METRICS
    assert ok(panel_api.get(f"{SERVER}/coreObservatory")) == EMPTY_OBSERVATORY
    assert ok(panel_api.get(f"{SERVER}/coreMetricsHistory/xrAlloc/30")) == []
    assert ok(panel_api.get(f"{SERVER}/coreObservatoryHistory/direct/30")) == []


def test_metrics_served_at_the_listen_address_fill_the_histories(panel_api):
    document = json.dumps({"cmdline": ["xray"], "memstats": MEMSTATS, "observatory": OBSERVED})
    with http_server({"/debug/vars": (200, document.encode())}) as (port, requested):
        listen = f"127.0.0.1:{port}"
        with_sections(
            panel_api,
            metrics={"tag": "metrics", "listen": listen},
            observatory={"subjectSelector": ["direct", "blocked"], "probeInterval": "10s"},
        )

        def sampled() -> dict:
            state = ok(panel_api.get(f"{SERVER}/coreMetricsState"))
            return state if state["values"] else {}

        state = wait_until(sampled, "the panel read the metrics document")
        assert state["enabled"] is True and state["listen"] == listen
        assert state["error"] == "" and state["lastSample"] > 0
        assert state["values"] == {
            "xrAlloc": 7340032,
            "xrSys": 20971520,
            "xrHeapObjects": 4321,
            "xrNumGC": 3,
            "xrPauseNs": 3500,
        }
        assert "/debug/vars" in requested
        for metric, value in state["values"].items():
            points = ok(panel_api.get(f"{SERVER}/coreMetricsHistory/{metric}/2"))
            assert points and {point["v"] for point in points} == {value}, (metric, points)

        observatory = ok(panel_api.get(f"{SERVER}/coreObservatory"))
        assert observatory["enabled"] is True and observatory["error"] == ""
        assert [(o["tag"], o["alive"], o["delay"]) for o in observatory["outbounds"]] == [
            ("blocked", False, 0),
            ("direct", True, 42),
        ]
        assert observatory["outbounds"][0]["lastErrorReason"] == "probe failed"
        delays = ok(panel_api.get(f"{SERVER}/coreObservatoryHistory/direct/30"))
        assert delays and {point["v"] for point in delays} == {42}
        # A dead outbound has no delay to chart.
        assert ok(panel_api.get(f"{SERVER}/coreObservatoryHistory/blocked/30")) == []


def test_nothing_at_the_metrics_address(panel_api):
    listen = f"127.0.0.1:{free_port()}"
    with_sections(panel_api, metrics={"tag": "metrics", "listen": listen})

    def reported() -> dict:
        state = ok(panel_api.get(f"{SERVER}/coreMetricsState"))
        return state if state["listen"] == listen and state["error"] else {}

    state = wait_until(reported, "the panel reports the unreadable metrics")
    assert state["enabled"] is True and state["values"] == {}
    assert f"http://{listen}/debug/vars" in state["error"]
    assert "nothing answers there" in state["error"]
    assert "the running core, v2fly 4.34.0, has no metrics; it needs Xray" in state["error"]


def test_metrics_without_listen_address(panel_api):
    with_sections(panel_api, metrics={"tag": "metrics"})

    def reported() -> dict:
        state = ok(panel_api.get(f"{SERVER}/coreMetricsState"))
        return state if "metrics.listen" in state["error"] else {}

    state = wait_until(reported, "the panel explains the missing address")
    assert state["enabled"] is False
    assert "set metrics.listen" in state["error"]


def test_observatory_without_metrics_asks_the_core(panel_api):
    with_sections(panel_api, observatory={"subjectSelector": ["direct"]})

    def reported() -> dict:
        state = ok(panel_api.get(f"{SERVER}/coreObservatory"))
        metrics = ok(panel_api.get(f"{SERVER}/coreMetricsState"))
        return state if state["error"] and not metrics["enabled"] else {}

    state = wait_until(reported, "the panel reports what the core answered")
    assert state["enabled"] is True and state["outbounds"] == []
    assert state["error"] == "the running core (v2fly 4.34.0) has no observatory; it needs Xray"
    assert ok(panel_api.get(f"{SERVER}/coreMetricsState")) == EMPTY_METRICS


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("coreMetricsHistory/cpu/30", ("metric must be one of xrAlloc",)),
        ("coreMetricsHistory/xrAlloc/7", ("bucket must be one of 2, 30",)),
        ("coreMetricsHistory/xrAlloc/abc", ("bucket must be one of",)),
        ("coreObservatoryHistory/direct/0", ("bucket must be one of",)),
        (f"coreObservatoryHistory/{'t' * 256}/30", ("tag must be an outbound tag",)),
    ],
)
def test_bad_history_requests(panel_api, path, words):
    refused(panel_api.get(f"{SERVER}/{path}"), *words)


# ---- the pure parts ------------------------------------------------------------------------


def test_memstats_values_take_the_newest_pause_of_the_ring():
    pauses = list(range(256))
    values = memstats_values({"NumGC": 300, "PauseNs": pauses, "Alloc": 1})
    assert values["xrPauseNs"] == (300 + 255) % 256
    assert values["xrAlloc"] == 1 and values["xrSys"] == 0
    assert memstats_values({"NumGC": 0, "PauseNs": pauses})["xrPauseNs"] == 0
    assert memstats_values(None) is None


def test_expvar_observatory_reads_protobuf_json_names():
    outbounds = expvar_observatory({"x": {"alive": True, "delay": 9.0}, "bad": "text"})
    assert outbounds == [
        {
            "tag": "x",
            "alive": True,
            "delay": 9,
            "lastErrorReason": "",
            "lastSeenTime": 0,
            "lastTryTime": 0,
        }
    ]
    assert expvar_observatory(["not", "a", "map"]) == []


def test_series_history_means_per_bucket_within_the_window():
    history = SeriesHistory(max_series=2)
    for t, value in ((1000, 1), (1010, 3), (1030, 10), (1031, 20)):
        history.record("a", t, value)
    assert history.series("a", 30) == [{"t": 990, "v": 2.0}, {"t": 1020, "v": 15.0}]
    history.record("a", 1000 + 6 * 3600 + 40, 7)  # the window moves past the first points
    assert [point["v"] for point in history.series("a", 30)] == [7]
    history.record("b", 1, 1)
    history.record("c", 1, 1)  # beyond max_series: not kept
    assert history.series("c", 30) == []
    with pytest.raises(Exception, match="bucket must be one of"):
        history.series("a", 31)
