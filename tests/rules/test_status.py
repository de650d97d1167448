"""History ring buffers and the status sampler from appliance.services.status."""

import os
import time
from types import SimpleNamespace

import psutil
import pytest

from appliance.errors import ServiceError
from appliance.services.admin import status
from appliance.services.admin.status import (
    BUCKETS,
    METRICS,
    STEP_SECONDS,
    WINDOW_SECONDS,
    History,
    StatusSampler,
    metrics,
    parse_bucket,
    socket_counts,
)

# A start time aligned to every bucket size, so bucket boundaries are easy to predict.
BASE = 1_800_000_000 // 300 * 300


def full_sample(**overrides):
    values = dict.fromkeys(METRICS, 0.0)
    values.update(overrides)
    return values


def test_constants_match_the_spec():
    assert BUCKETS == (2, 30, 60, 120, 180, 300)
    assert WINDOW_SECONDS == 21600
    assert STEP_SECONDS == 2
    assert History().capacity == 10800


@pytest.mark.parametrize("given, expected", [(30, 30), ("30", 30), (" 300 ", 300), ("2", 2)])
def test_parse_bucket_accepts_allowed_sizes_as_int_or_url_string(given, expected):
    assert parse_bucket(given) == expected


@pytest.mark.parametrize("given", ["x", "", "7", 7, "30.0", 30.0, True, None, "-30"])
def test_parse_bucket_rejects_other_values_naming_the_allowed_ones(given):
    with pytest.raises(ServiceError) as error:
        parse_bucket(given)
    assert error.value.msg == (
        f"bucket must be one of 2, 30, 60, 120, 180, 300 seconds (got {given!r})"
    )


def test_bucket_error_message_for_a_url_string():
    with pytest.raises(ServiceError, match=r"\(got 'x'\)$"):
        History().series("cpu", "x")


def test_unknown_metric_names_the_allowed_metrics():
    with pytest.raises(ServiceError) as error:
        History().series("disk", 30)
    assert error.value.msg == (
        "metric must be one of cpu, mem, netUp, netDown, online, load1, load5, load15 (got 'disk')"
    )


def test_empty_history_has_no_points():
    assert History().series("cpu", 2) == []


def test_bucket_means_of_samples_recorded_at_known_times():
    history = History()
    for i in range(60):  # two minutes of samples, cpu = 0, 1, ..., 59
        history.record(BASE + i * STEP_SECONDS, full_sample(cpu=i, load1=i / 3))
    assert history.series("cpu", 30) == [
        {"t": BASE, "v": 7.0},  # mean of 0..14
        {"t": BASE + 30, "v": 22.0},
        {"t": BASE + 60, "v": 37.0},
        {"t": BASE + 90, "v": 52.0},
    ]
    assert history.series("cpu", "60") == [{"t": BASE, "v": 14.5}, {"t": BASE + 60, "v": 44.5}]
    assert history.series("cpu", 300) == [{"t": BASE, "v": 29.5}]
    two = history.series("cpu", 2)
    assert len(two) == 60
    assert two[:2] == [{"t": BASE, "v": 0.0}, {"t": BASE + 2, "v": 1.0}]
    assert history.series("load1", 2)[1] == {"t": BASE + 2, "v": 0.33}  # rounded to 2 places


def test_bucket_t_is_integer_bucket_start_for_unaligned_sample_times():
    history = History()
    history.record(BASE + 31.7, full_sample(cpu=5))
    assert history.series("cpu", 2) == [{"t": BASE + 30, "v": 5.0}]
    assert history.series("cpu", 30) == [{"t": BASE + 30, "v": 5.0}]
    assert isinstance(history.series("cpu", 30)[0]["t"], int)


def test_only_buckets_with_samples_are_returned():
    history = History()
    history.record(BASE, full_sample(mem=10))
    history.record(BASE + 600, full_sample(mem=30))
    assert history.series("mem", 60) == [{"t": BASE, "v": 10.0}, {"t": BASE + 600, "v": 30.0}]


def test_each_metric_keeps_its_own_values():
    history = History()
    history.record(BASE, {m: float(i) for i, m in enumerate(METRICS)})
    for i, metric in enumerate(METRICS):
        assert history.series(metric, 2) == [{"t": BASE, "v": float(i)}]


def test_metric_missing_from_a_sample_is_left_out_of_the_means():
    history = History()
    history.record(BASE, {"cpu": 10.0, "mem": 50.0})
    history.record(BASE + 2, {"cpu": 20.0})
    assert history.series("cpu", 30) == [{"t": BASE, "v": 15.0}]
    assert history.series("mem", 30) == [{"t": BASE, "v": 50.0}]
    assert history.series("online", 30) == []


def test_record_rejects_unknown_metric_names():
    with pytest.raises(ValueError, match="cpuu"):
        History().record(BASE, {"cpuu": 1.0})


def test_second_sample_in_the_same_step_replaces_the_first():
    history = History()
    history.record(BASE, full_sample(cpu=1))
    history.record(BASE + 1.5, full_sample(cpu=9))
    assert history.series("cpu", 2) == [{"t": BASE, "v": 9.0}]


def test_window_drops_samples_older_than_six_hours():
    history = History()
    history.record(BASE, full_sample(cpu=1))
    history.record(BASE + 2, full_sample(cpu=2))
    history.record(BASE + 100, full_sample(cpu=3))
    # Newest sample 6 h + 50 s later: BASE and BASE+2 fall out, BASE+100 stays.
    newest = BASE + WINDOW_SECONDS + 50
    history.record(newest, full_sample(cpu=4))
    assert history.series("cpu", 2) == [{"t": BASE + 100, "v": 3.0}, {"t": newest, "v": 4.0}]


def test_window_keeps_exactly_the_last_capacity_steps():
    history = History()
    newest = BASE + WINDOW_SECONDS
    oldest_kept = newest - WINDOW_SECONDS + STEP_SECONDS
    history.record(oldest_kept - STEP_SECONDS, full_sample(cpu=1))
    history.record(oldest_kept, full_sample(cpu=2))
    history.record(newest, full_sample(cpu=3))
    assert [p["t"] for p in history.series("cpu", 2)] == [oldest_kept, newest]


def test_ring_buffers_reuse_memory_after_wrap_around():
    history = History()
    columns = [history._stamps, *history._values.values()]
    addresses = [c.buffer_info() for c in columns]
    steps = history.capacity * 2 + 123  # wraps twice
    for i in range(steps):
        history.record(BASE + i * STEP_SECONDS, full_sample(cpu=i % 150))
    assert [c.buffer_info() for c in columns] == addresses  # same address, same length
    points = history.series("cpu", 2)
    assert len(points) == history.capacity
    newest = BASE + (steps - 1) * STEP_SECONDS
    assert points[-1] == {"t": newest, "v": float((steps - 1) % 150)}
    assert points[0]["t"] == newest - WINDOW_SECONDS + STEP_SECONDS
    # 150 steps of 2 s = 300 s: every complete 300 s bucket averages 0..149.
    assert {p["v"] for p in history.series("cpu", 300)[1:-1]} == {74.5}
    assert len(history.series("cpu", 300)) in (72, 73)


def test_clock_jumping_backwards_keeps_the_history_before_the_jump():
    history = History()
    history.record(BASE, full_sample(cpu=1))
    history.record(BASE + 3600, full_sample(cpu=2))
    history.record(BASE + 1800, full_sample(cpu=3))  # clock set back by 30 minutes
    # The window ends at the newest recorded sample; samples "from the future" wait.
    assert history.series("cpu", 2) == [{"t": BASE, "v": 1.0}, {"t": BASE + 1800, "v": 3.0}]


SOCKSTAT = """sockets: used 252
TCP: inuse 225 orphan 0 tw 150 alloc 235 mem 77
UDP: inuse 4 mem 1
UDPLITE: inuse 0
RAW: inuse 0
FRAG: inuse 0 memory 0
"""
SOCKSTAT6 = """TCP6: inuse 9
UDP6: inuse 2
UDPLITE6: inuse 0
RAW6: inuse 0
FRAG6: inuse 0 memory 0
"""


def write_sockstat(tmp_path) -> tuple[str, str]:
    four, six = tmp_path / "sockstat", tmp_path / "sockstat6"
    four.write_text(SOCKSTAT)
    six.write_text(SOCKSTAT6)
    return str(four), str(six)


def test_socket_counts_add_sockets_in_use_and_time_wait_of_both_families(tmp_path):
    four, six = write_sockstat(tmp_path)
    # TCP: 225 in use + 150 in TIME-WAIT (IPv4) + 9 in use (IPv6); UDP: 4 + 2.
    assert socket_counts((four, six)) == (384, 6)
    assert socket_counts((four,)) == (375, 4)
    # No IPv6 (the file is missing): IPv4 alone; nothing readable at all: zeros.
    assert socket_counts((four, str(tmp_path / "missing"))) == (375, 4)
    assert socket_counts((str(tmp_path / "missing"),)) == (0, 0)


def test_socket_counts_match_the_socket_tables_of_a_quiet_namespace():
    """The kernel's tallies and its tables describe the same sockets: on this host the
    two agree but for sockets opened or closed between the reads."""
    tables = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path, "rb") as table:
            tables += max(table.read().count(b"\n") - 1, 0)
    tcp, _ = socket_counts()
    assert abs(tcp - tables) <= max(20, tables // 10)


class FakeCounters:
    def __init__(self):
        self.values = [(1_000, 5_000)]

    def __call__(self):
        sent, recv = self.values.pop(0)
        return SimpleNamespace(bytes_sent=sent, bytes_recv=recv)


def make_sampler(core=None, online=7):
    core = core if core is not None else {"state": "stop", "version": ""}
    return StatusSampler("1.2.3", lambda: core, lambda: online)


def test_sample_returns_exactly_the_status_shape(tmp_path, monkeypatch):
    monkeypatch.setattr(status, "_SOCKSTAT_FILES", write_sockstat(tmp_path))
    core = {"state": "running", "version": "25.1.1", "extra": [1]}
    result = make_sampler(core=core).sample()
    assert set(result) == {
        "cpu", "cpuCores", "logicalPro", "mem", "swap", "disk", "netIO", "netTraffic",
        "core", "tcpCount", "udpCount", "load", "uptime", "appStats", "panelVersion",
    }  # fmt: skip
    for key in ("mem", "swap", "disk"):
        assert set(result[key]) == {"current", "total"}
        assert 0 <= result[key]["current"] <= result[key]["total"]
    assert result["mem"]["total"] == psutil.virtual_memory().total
    assert result["disk"]["total"] == psutil.disk_usage("/").total
    assert set(result["netIO"]) == {"up", "down"}
    assert set(result["netTraffic"]) == {"sent", "recv"}
    assert set(result["load"]) == {"load1", "load5", "load15"}
    assert set(result["appStats"]) == {"threads", "mem", "uptime"}
    assert result["core"] == core
    assert result["panelVersion"] == "1.2.3"
    assert result["tcpCount"] == 384
    assert result["udpCount"] == 6
    assert isinstance(result["cpu"], float) and 0.0 <= result["cpu"] <= 100.0
    assert result["logicalPro"] == psutil.cpu_count()
    assert 1 <= result["cpuCores"] <= result["logicalPro"]
    assert result["appStats"]["threads"] >= 1
    assert result["appStats"]["mem"] > 1_000_000  # RSS of a Python process
    assert result["load"]["load1"] == pytest.approx(os.getloadavg()[0], abs=5)


def test_uptimes_are_host_and_process_seconds():
    now = time.time()
    result = make_sampler().sample(now)
    assert result["uptime"] == int(now - psutil.boot_time())
    assert result["appStats"]["uptime"] == int(now - psutil.Process().create_time())


def test_net_rates_are_bytes_per_second_between_samples(monkeypatch):
    counters = FakeCounters()
    counters.values += [(3_000, 9_000), (3_000, 9_000), (500, 100)]
    monkeypatch.setattr(status.psutil, "net_io_counters", counters)
    sampler = make_sampler()
    first = sampler.sample(BASE)
    assert first["netIO"] == {"up": 0, "down": 0}
    assert first["netTraffic"] == {"sent": 1_000, "recv": 5_000}
    second = sampler.sample(BASE + 2)
    assert second["netIO"] == {"up": 1_000, "down": 2_000}
    assert second["netTraffic"] == {"sent": 3_000, "recv": 9_000}
    assert sampler.sample(BASE + 4)["netIO"] == {"up": 0, "down": 0}
    # Counters that went backwards (interface removed) give 0, never a negative rate.
    assert sampler.sample(BASE + 6)["netIO"] == {"up": 0, "down": 0}


def test_net_rate_is_zero_when_no_time_passed(monkeypatch):
    counters = FakeCounters()
    counters.values += [(9_000, 9_000)]
    monkeypatch.setattr(status.psutil, "net_io_counters", counters)
    sampler = make_sampler()
    sampler.sample(BASE)
    assert sampler.sample(BASE)["netIO"] == {"up": 0, "down": 0}


def test_sampling_repeatedly_is_a_sanity_check_not_a_timing():
    sampler = make_sampler()
    results = [sampler.sample() for _ in range(20)]
    assert all(r["panelVersion"] == "1.2.3" for r in results)


def test_metrics_maps_status_to_history_values():
    sample = {
        "cpu": 12.5,
        "mem": {"current": 1_000, "total": 4_000},
        "netIO": {"up": 300, "down": 4_000},
        "load": {"load1": 0.5, "load5": 0.25, "load15": 0.125},
    }
    assert metrics(sample, online=3) == {
        "cpu": 12.5,
        "mem": 25.0,
        "netUp": 300.0,
        "netDown": 4_000.0,
        "online": 3.0,
        "load1": 0.5,
        "load5": 0.25,
        "load15": 0.125,
    }
    assert metrics({**sample, "mem": {"current": 0, "total": 0}})["mem"] == 0.0


def test_sampler_metrics_use_online_count_and_feed_history():
    sampler = make_sampler(online=42)
    result = sampler.sample(BASE)
    values = sampler.metrics(result)
    assert set(values) == set(METRICS)
    assert values["online"] == 42.0
    assert values["mem"] == pytest.approx(result["mem"]["current"] * 100 / result["mem"]["total"])
    history = History()
    history.record(BASE, values)
    assert history.series("online", 2) == [{"t": BASE, "v": 42.0}]


def test_history_values_are_the_metrics_of_a_full_sample():
    """What the job records while nobody watches equals what a snapshot would give."""
    sampler = make_sampler(online=5)
    values = sampler.history_values(BASE)
    assert set(values) == set(METRICS)
    assert values["online"] == 5.0
    assert 0.0 <= values["cpu"] <= 100.0
    assert 0.0 < values["mem"] < 100.0
    assert values["load1"] == pytest.approx(os.getloadavg()[0], abs=5)
    full = sampler.metrics(sampler.sample(BASE + 2))
    assert set(full) == set(values)
