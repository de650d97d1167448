"""The one-file binary as a VPS meets it: its size, how soon it answers after a start, and
what it holds in memory while idle.

    python bench/binary_bench.py [--binary dist/appliance] [--runs 5] [--idle 10]

Build the binary first (scripts/build-binary). Each run starts the binary as a user does,
on a port chosen beforehand, and polls it over HTTP until the first response of any
status: `first_start` on an empty data directory (creates and migrates the database and
hashes the new admin's password), `restart` on the data directory the first start left.
The CPU seconds both processes used until that response are reported beside the wall
time: on a machine busy with other work they stay put while the wall time grows.
Idle RSS is read from /proc after `--idle` seconds without requests, for the Python
process and for the bootloader that unpacked it (one-file binaries run as two processes).
Prints JSON with the issue's targets next to the figures; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZE_TARGET_MB = 45
START_TARGET_S = 1.5
START_TIMEOUT = 60
POLL_SECONDS = 0.005


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def environment() -> dict[str, str]:
    """No APPLIANCE_ variable from the caller, and no core: the panel alone is measured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env["APPLIANCE_CORE"] = "/nonexistent/core"
    return env


def start(binary: str, data_dir: str) -> tuple[subprocess.Popen, float, float]:
    """Start the binary; returns the process, the seconds until it answered HTTP and the
    CPU seconds its processes used until then (the figure a busy machine does not skew)."""
    port = free_port()
    ports = ("--port", str(port), "--sub-port", str(free_port()))
    began = time.perf_counter()
    process = subprocess.Popen(
        [binary, "run", "--data-dir", data_dir, "--listen", "127.0.0.1", *ports],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment(),
    )
    while time.perf_counter() - began < START_TIMEOUT:
        if process.poll() is not None:
            raise SystemExit(f"{binary} exited with code {process.returncode} before answering")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/")
            conn.getresponse().read()
            conn.close()
            elapsed = time.perf_counter() - began
            pids = [process.pid, *child_pids(process.pid)]
            return process, elapsed, sum(cpu_seconds(pid) for pid in pids)
        except OSError:
            time.sleep(POLL_SECONDS)
    stop(process)
    raise SystemExit(f"{binary} did not answer within {START_TIMEOUT} s")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User plus system time of `pid` so far, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(word) for word in children.read().split()]
    except OSError:
        return []


def measure(binary: str, runs: int, idle: float) -> dict:
    size = os.path.getsize(binary)
    first, restart, first_cpu, restart_cpu = [], [], [], []
    idle_python, idle_bootloader = [], []
    for _ in range(runs):
        data_dir = tempfile.mkdtemp(prefix="binary-bench-")
        try:
            process, seconds, cpu = start(binary, data_dir)
            first.append(seconds)
            first_cpu.append(cpu)
            stop(process)
            process, seconds, cpu = start(binary, data_dir)
            restart.append(seconds)
            restart_cpu.append(cpu)
            time.sleep(idle)
            python = child_pids(process.pid)
            idle_bootloader.append(rss_mib(process.pid))
            idle_python.append(rss_mib(python[0]) if python else 0.0)
            stop(process)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    first_s = round(statistics.median(first), 3)
    restart_s = round(statistics.median(restart), 3)
    return {
        "binary": binary,
        "runs": runs,
        "size": {
            "mb": round(size / 1_000_000, 1),
            "target": f"mb < {SIZE_TARGET_MB}",
            "met": size / 1_000_000 < SIZE_TARGET_MB,
        },
        "first_request": {
            "first_start_s": first_s,
            "restart_s": restart_s,
            "all_first_start_s": [round(s, 3) for s in first],
            "all_restart_s": [round(s, 3) for s in restart],
            "first_start_cpu_s": round(statistics.median(first_cpu), 3),
            "restart_cpu_s": round(statistics.median(restart_cpu), 3),
            "target": f"median < {START_TARGET_S} s",
            "met": max(first_s, restart_s) < START_TARGET_S,
        },
        "idle_rss_mib": {
            "after_s": idle,
            "python": statistics.median(idle_python),
            "bootloader": statistics.median(idle_bootloader),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=str(ROOT / "dist" / "appliance"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds idle before RSS")
    args = parser.parse_args()
    if not os.access(args.binary, os.X_OK):
        print(f"no binary at {args.binary}: build it with scripts/build-binary", file=sys.stderr)
        return 2
    print(json.dumps(measure(args.binary, args.runs, args.idle), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
