"""What an idle panel costs its host in CPU: the panel process's own CPU time over a
minute with no requests, read from /proc/PID/stat (utime + stime), as a percentage of
one core. The machine may be busy with other work; a process's own CPU seconds are
still its own, so the figure stays meaningful where latencies would not.

Worker processes the panel starts (any descendant running Python) are counted with it,
since the host pays for them too; the core (the proxy binary) is reported apart.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from harness import Context, scenario, with_target

SETTLE_SECONDS = 10
IDLE_CPU_SECONDS = 60
TICKS = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _descendants(pid: int) -> list[int]:
    found, todo = [], _children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += _children(child)
    return found


def _cpu_seconds(pid: int) -> float:
    """utime + stime of one process, 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def _is_python(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return b"python" in os.path.basename(argv0)


def cpu_readings(pid: int) -> dict[str, float]:
    """CPU seconds so far of the panel with its Python workers, and of everything else
    it started (the core)."""
    others = _descendants(pid)
    workers = [child for child in others if _is_python(child)]
    return {
        "panel": _cpu_seconds(pid) + sum(_cpu_seconds(child) for child in workers),
        "core": sum(_cpu_seconds(child) for child in others if child not in workers),
    }


@scenario("idle_cpu", dataset=None)
def idle_cpu(ctx: Context) -> dict:
    """CPU of an idle panel (no browser, no requests) over IDLE_CPU_SECONDS, after
    SETTLE_SECONDS from start, on an empty database and on 1,000 inbounds: one panel per
    run and dataset, all idle together; medians, in percent of one core."""
    datasets = ["empty", "inbounds_1k"]
    panels = ctx.start_panels([name for name in datasets for _ in range(ctx.runs)])
    time.sleep(SETTLE_SECONDS)
    before = {panel: cpu_readings(panel.pid) for panel in panels}
    started = time.monotonic()
    time.sleep(IDLE_CPU_SECONDS)
    after = {panel: cpu_readings(panel.pid) for panel in panels}
    elapsed = time.monotonic() - started
    figures = {}
    for name in datasets:
        mine = [panel for panel in panels if panel.dataset == name]
        percent = {
            part: round(
                statistics.median(
                    100 * (after[panel][part] - before[panel][part]) / elapsed for panel in mine
                ),
                3,
            )
            for part in ("panel", "core")
        }
        figure = {
            "panel_cpu_percent": percent["panel"],
            "core_cpu_percent": percent["core"],
            "idle_seconds": round(elapsed, 1),
            "panels": len(mine),
        }
        figures[name] = with_target(figure, "panel_cpu_percent", 0.5, "% of a core")
    return figures
