"""The core supervisor against a real V2Ray binary: detection, config tests, start, stop,
restart, and recovery from a core that dies."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from core_helpers import V2RAY, V2RAY_PREFIX, inbound, server_config, wait_port
from helpers import free_port

from appliance.core.api import CoreApi, CoreApiError
from appliance.core.process import CoreMissing, CoreProcess
from appliance.errors import ServiceError

BAD_PROTOCOL = {"inbounds": [{"port": 1080, "protocol": "no-such-protocol"}]}
BAD_PORT = {"inbounds": [{"port": "abc", "protocol": "vless"}]}
WAIT = 15


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what}")
        time.sleep(0.05)


def core_pids() -> list[int]:
    """The v2ray processes this test process started, as the system sees them."""
    return [child.pid for child in psutil.Process().children() if child.name() == "v2ray"]


def stats_answer(api_port: int) -> dict[str, int]:
    api = CoreApi(f"127.0.0.1:{api_port}", V2RAY_PREFIX)
    try:
        return api.query_stats("inbound>>>")
    finally:
        api.close()


def answers(api_port: int) -> bool:
    try:
        return bool(stats_answer(api_port))
    except CoreApiError:
        return False


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
    except ConnectionRefusedError:
        return True
    return False


class Recorder:
    """An `on_state` listener that keeps each state with the error that came with it."""

    def __init__(self):
        self.process: CoreProcess | None = None
        self.events: list[tuple[str, str]] = []

    def __call__(self, state: str) -> None:
        self.events.append((state, self.process.error))

    @property
    def states(self) -> list[str]:
        return [state for state, _ in self.events]


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def core(tmp_path, recorder):
    process = CoreProcess(V2RAY, str(tmp_path / "core"), on_state=recorder)
    recorder.process = process
    yield process
    process.stop()


# ---- detection ------------------------------------------------------------------------


def test_detect_reports_flavor_version_and_api_prefix(core):
    printed = subprocess.run([V2RAY, "-version"], capture_output=True, text=True).stdout
    info = core.detect()
    assert (info.flavor, info.prefix) == ("v2fly", "v2ray.core")
    assert printed.startswith(f"V2Ray {info.version} ")
    assert core.version == info.version


def test_without_an_explicit_binary_the_path_is_searched(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "v2ray").symlink_to(V2RAY)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert CoreProcess(None, str(tmp_path)).detect().flavor == "v2fly"
    (bin_dir / "v2ray").unlink()
    with pytest.raises(CoreMissing) as missing:
        CoreProcess(None, str(tmp_path)).detect()
    assert "neither xray nor v2ray is on PATH" in missing.value.msg


def test_a_missing_binary_means_not_installed_without_raising(tmp_path, recorder):
    process = CoreProcess(str(tmp_path / "no-such-core"), str(tmp_path), on_state=recorder)
    recorder.process = process
    with pytest.raises(CoreMissing) as missing:
        process.detect()
    assert missing.value.msg.startswith("the core is not installed")
    process.start(server_config(free_port()))
    assert process.state == "not installed"
    assert recorder.states == ["not installed"]
    assert "no-such-core" in process.error
    assert process.version == ""
    with pytest.raises(CoreMissing):
        process.test(server_config(free_port()))


def test_a_binary_that_is_no_core_is_refused(tmp_path):
    with pytest.raises(ServiceError) as refused:
        CoreProcess("/bin/true", str(tmp_path)).detect()
    assert (
        refused.value.msg == "/bin/true is neither Xray nor V2Ray: its -version printed 'nothing'"
    )


# ---- testing configs ------------------------------------------------------------------


def test_a_good_config_passes_the_core_test(core):
    core.test(server_config(free_port()))
    assert os.listdir(core.workdir) == []


def test_a_refused_config_raises_the_cores_reason(core):
    with pytest.raises(ServiceError) as refused:
        core.test(BAD_PROTOCOL)
    assert refused.value.msg == (
        "the core refused the config: failed to read config files: [config.json] > "
        "failed to load inbound detour config. > unknown config id: no-such-protocol"
    )
    assert os.listdir(core.workdir) == []


def test_a_config_that_makes_the_core_panic_gives_the_panic_message(core):
    with pytest.raises(ServiceError) as refused:
        core.test(BAD_PORT)
    assert refused.value.msg == (
        'the core refused the config: failed to read config file > invalid port range: "abc"'
    )


# ---- running ----------------------------------------------------------------------------


def test_start_runs_the_core_on_its_config_and_stop_ends_it(core, recorder):
    api_port = free_port()
    config = server_config(api_port)
    core.start(config)
    assert core.state == "running"
    assert core.restarts == 1
    wait_port(api_port)
    assert "inbound>>>api>>>traffic>>>uplink" in stats_answer(api_port)
    written = Path(core.config_path)
    assert json.loads(written.read_text()) == config
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert len(core_pids()) == 1

    core.stop()
    assert core.state == "stop"
    assert recorder.states == ["running", "stop"]
    assert refuses_connections(api_port)
    assert core_pids() == []
    core.stop()
    assert recorder.states == ["running", "stop"]


def test_the_core_runs_in_its_own_process_group_without_ld_library_path(core, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/frozen/unpack/dir")
    core.start(server_config(free_port()))
    (pid,) = core_pids()
    assert os.getpgid(pid) == pid
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not any(item.startswith(b"LD_LIBRARY_PATH=") for item in environ)


def test_output_keeps_the_last_lines_the_core_printed(core):
    core.start(server_config(free_port()))
    wait_until(lambda: any(line.startswith("V2Ray ") for line in core.output(50)), "banner")
    assert len(core.output(1)) == 1
    assert core.output(0) == []


def test_restart_replaces_the_running_core(core, recorder):
    first_port, second_port = free_port(), free_port()
    core.start(server_config(first_port))
    wait_port(first_port)
    core.restart(server_config(second_port))
    assert core.restarts == 2
    wait_port(second_port)
    assert stats_answer(second_port)
    assert refuses_connections(first_port)
    assert len(core_pids()) == 1


def test_a_refused_config_leaves_the_running_core_alone(core, recorder):
    api_port = free_port()
    config = server_config(api_port)
    core.start(config)
    wait_port(api_port)
    (pid,) = core_pids()
    with pytest.raises(ServiceError) as refused:
        core.restart(BAD_PROTOCOL)
    assert "unknown config id: no-such-protocol" in refused.value.msg
    assert core.state == "running"
    assert core.restarts == 1
    assert core_pids() == [pid]
    assert stats_answer(api_port)
    assert json.loads(Path(core.config_path).read_text()) == config
    assert sorted(os.listdir(core.workdir)) == ["config.json"]
    assert recorder.states == ["running"]


def test_a_large_config_is_written_in_pieces_the_core_runs(tmp_path):
    """The panel lets other requests run between the pieces; the file is the same JSON."""
    pauses = []
    core = CoreProcess(V2RAY, str(tmp_path / "core"), pause=lambda: pauses.append(1))
    api_port, vless_port = free_port(), free_port()
    clients = [
        {"id": f"{n:08d}-0000-4000-8000-000000000000", "email": f"user{n}@example.com"}
        for n in range(12_000)
    ]
    config = server_config(api_port, inbound("many", "vless", vless_port, *clients))
    try:
        core.start(config)
        wait_port(vless_port)
        assert core.state == "running"
        assert Path(core.config_path).read_text() == json.dumps(config)
        # A pause after each piece: at least the three slices of the 12,000 entries.
        assert len(pauses) >= 3
        assert stats_answer(api_port)
    finally:
        core.stop()


# ---- crashes ----------------------------------------------------------------------------


def test_a_killed_core_is_restarted_and_every_state_is_reported(core, recorder):
    api_port = free_port()
    core.start(server_config(api_port))
    wait_port(api_port)
    (pid,) = core_pids()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: core.restarts == 2 and core.state == "running", "the restart")
    assert recorder.events[0] == ("running", "")
    assert recorder.events[1] == (
        "error",
        "the core exited unexpectedly (killed by SIGKILL); restarting in 1 s",
    )
    assert recorder.events[2] == ("running", "")
    wait_port(api_port)
    # Listening comes a moment before the API answers, more so on a loaded machine.
    wait_until(lambda: answers(api_port), "the restarted core answers for its counters")
    assert core_pids() != [pid]


def test_a_core_that_keeps_failing_is_retried_with_growing_delays(core, recorder):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        core.start(server_config(free_port(), inbound("vless-in", "vless", port)))
        wait_until(lambda: recorder.states.count("error") == 3, "three failed starts")
        core.stop()
    errors = [error for state, error in recorder.events if state == "error"]
    reason = f"listen tcp 127.0.0.1:{port}: bind: address already in use"
    assert [error.rsplit("; ", 1)[1] for error in errors] == [
        "restarting in 1 s",
        "restarting in 2 s",
        "restarting in 4 s",
    ]
    assert all(error.startswith("the core exited unexpectedly (exit code ") for error in errors)
    assert all(reason in error for error in errors)
    assert core.state == "stop"
    assert core.restarts == 3


GEVENT_SCRIPT = """
import gevent.monkey

gevent.monkey.patch_all()

import json, os, signal, sys, time

import gevent
import psutil

from appliance.core.api import CoreApi
from appliance.core.process import CoreProcess

v2ray, workdir, api_port, config = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
config = json.loads(config)
states = []
core = CoreProcess(v2ray, workdir, on_state=lambda state: states.append([state, core.error]))
core.start(config)
api = CoreApi(f"127.0.0.1:{api_port}", "v2ray.core")


def stats():
    deadline = time.monotonic() + 10
    while True:
        try:
            return api.query_stats("inbound>>>api")
        except Exception:
            if time.monotonic() > deadline:
                raise
            gevent.sleep(0.1)


try:
    answers = [stats()]
    for _ in range(12):
        core.restart(config)
        core.test(config)
        answers.append(stats())
    (child,) = psutil.Process().children()
    os.kill(child.pid, signal.SIGKILL)
    while core.restarts < 14 or core.state != "running":
        gevent.sleep(0.05)
    answers.append(stats())
finally:
    core.stop()
print(json.dumps({"states": states, "restarts": core.restarts, "answers": answers}))
"""


def test_under_gevent_the_supervisor_and_the_api_cooperate(tmp_path):
    """The panel's setting: monkey-patched, the core's API called on gevent's sockets
    across restarts and a crash of the core, cores forked by gevent."""
    api_port = free_port()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            GEVENT_SCRIPT,
            V2RAY,
            str(tmp_path),
            str(api_port),
            json.dumps(server_config(api_port)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["states"] == [
        ["running", ""],
        ["error", "the core exited unexpectedly (killed by SIGKILL); restarting in 1 s"],
        ["running", ""],
        ["stop", ""],
    ]
    assert outcome["restarts"] == 14
    assert all("inbound>>>api>>>traffic>>>uplink" in answer for answer in outcome["answers"])
