"""A core left running by a panel that crashed: found by its pid, and ended.

The supervisor's state file names the core process it ran; after a crash of the panel
that process may still run (and hold counters not yet collected), or the pid may by
then belong to any other process after a reboot, which must be left alone.
"""

from __future__ import annotations

import contextlib

import gevent
import psutil

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
