"""A core left running by a panel that crashed: found by its pid, and ended.

The supervisor's state file (written here, replaced whole so a crash leaves the old one or
the new one) names the core process it ran, its API port, counter generation and API
prefix; after a crash of the panel
that process may still run (and hold counters not yet collected), or the pid may by
then belong to any other process after a reboot, which must be left alone.
"""

from __future__ import annotations

import contextlib
import json
import os

import gevent
import psutil

STATE_FILE = "core-state.json"
ORPHAN_GRACE_STEPS = 50  # of 0.1 s: how long an orphaned core gets to exit on SIGTERM


def core_of(pid: int, config_path: str) -> psutil.Process | None:
    """The process `pid` if it still is a core running on `config_path`, else None. After
    a reboot the pid in a state file may belong to any process, which must be left alone."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE or config_path not in process.cmdline():
            return None
    except psutil.Error:
        return None
    return process


def terminate(process: psutil.Process) -> None:
    """SIGTERM, then SIGKILL if the core is still there after the grace period."""
    with contextlib.suppress(psutil.Error):
        process.terminate()
        for _ in range(ORPHAN_GRACE_STEPS):
            if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
                return
            gevent.sleep(0.1)
        process.kill()


def save_state(workdir: str, pid: int, api_port: int, generation: int, prefix: str) -> None:
    """Name the running core in the state file, for the panel that starts after a crash."""
    path = os.path.join(workdir, STATE_FILE)
    state = {"pid": pid, "apiPort": api_port, "generation": generation, "prefix": prefix}
    with open(path + ".tmp", "w") as fh:
        json.dump(state, fh)
    os.replace(path + ".tmp", path)


def forget_state(workdir: str) -> None:
    """No core runs any more that a later panel would have to collect."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(workdir, STATE_FILE))


def saved_state(workdir: str) -> tuple[int, int, int, str] | None:
    """(pid, API port, generation, prefix) of the state file, None without a readable one."""
    try:
        with open(os.path.join(workdir, STATE_FILE)) as fh:
            state = json.load(fh)
        return (
            int(state["pid"]),
            int(state["apiPort"]),
            int(state["generation"]),
            str(state["prefix"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
