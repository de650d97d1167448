"""The subscription server on every core: worker processes against the panel alone.

Three panels on the `subs_10k` dataset run side by side: one serving the subscription
port in its own process (`APPLIANCE_SUB_WORKERS=1`), one with a worker per core always
(`APPLIANCE_SUB_WORKERS=N`), and one as installed (`auto`: workers on demand). Each
round measures, back to back, the hello ceiling in one process, the single process, the
hello ceiling in as many processes as there are workers, the fixed workers and the auto
panel, so each ratio compares figures taken under the same load of a shared machine.
The auto panel gets an unmeasured wrk run first, which starts its workers (the figure
is the one a host under sustained load sees, not the start-up); its caches are then
emptied like the others' for the cold round:

- `cold_10k`: random subIds of the 10,000 right after every cache was emptied (a change
  through the API before the round): the path a client app polling every few hours takes.
- `warm_1k`: random subIds of the first 1,000 after an unmeasured round that rendered them,
  so nearly every body comes from a cache.

`rps_ratio_to_single` is the workers' rate over the single process's (target: 1.7 on two
cores), `auto_rps_ratio_to_single` the auto panel's, `rps_ratio_to_hello` each one's rate
over the hello ceiling with the same number of processes; all are medians of per-round
ratios. On a machine other work shares, the hello ceiling's own gain from more processes
(`hello_ratio_workers_to_single`) says how much of the other cores was there to be had;
`cpu_ms_per_request` (CPU time of the panel and its workers over the requests served)
says what a request costs either way, which load on the machine does not change.
`rss_idle_mb` gives the resident memory of the panel and of every worker after
IDLE_SECONDS without requests, their sum, and the sum of their proportional set sizes
(shared pages counted once), for each panel: the auto panel's is the panel alone, which
is what an idle host pays.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time

from harness import (
    BenchError,
    Context,
    HelloServer,
    Panel,
    children,
    log,
    scenario,
    tree_cpu_seconds,
)
from sub_scenarios import CLIENT_COUNT, DATASET, RANDOM_SUB, SEED

CONNECTIONS = 50
SECONDS = 3
WARM_SUBS = 1000
IDLE_SECONDS = 5
DEMAND_WAIT_SECONDS = 20
SUB_LISTENING = re.compile(r"subscription server listening on http://[^:/]+:(\d+)/")


class HelloProcesses(HelloServer):
    def __init__(self, processes: int):
        super().__init__()
        self.name = f"hello server ({processes} processes)"
        self.argv = [*self.argv, "--processes", str(processes)]


def _panel(ctx: Context, workers: str) -> Panel:
    panel = Panel(ctx.bench.data_dir(DATASET), DATASET)
    panel.env["APPLIANCE_SUB_WORKERS"] = workers
    return ctx.start(panel)


def _demand(panel: Panel, url: str, script: str, cores: int) -> None:
    """Load the auto panel (unmeasured) until it runs a worker per core."""
    deadline = time.monotonic() + DEMAND_WAIT_SECONDS
    while len(children(panel.pid)) < cores:
        if time.monotonic() > deadline:
            raise BenchError(f"the auto panel started no {cores} workers under load")
        _wrk(url + "/sub/", script)


@scenario("subscription_workers", dataset=None)
def subscription_workers(ctx: Context) -> dict:
    """Subscriptions at 10,000 clients from one worker per core against the panel's own
    process, cold and warm, each next to the hello ceiling with as many processes."""
    if not shutil.which("wrk"):
        raise BenchError("the subscription_workers scenario needs wrk on PATH")
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        return {"skipped": {"skipped": "one core: the panel serves subscriptions itself"}}
    panels = {
        "single": _panel(ctx, "1"),
        "workers": _panel(ctx, str(cores)),
        "auto": _panel(ctx, "auto"),
    }
    ctx.bench.check(panels["single"])
    time.sleep(IDLE_SECONDS)
    memory = {label: _rss_mb(panel.pid) for label, panel in panels.items()}
    hello_one, hello_many = ctx.start(HelloProcesses(1)), ctx.start(HelloProcesses(cores))
    clients = {label: panel.client() for label, panel in panels.items()}
    urls = {label: _sub_url(panel) for label, panel in panels.items()}
    scripts = {}
    for name, count in (("cold_10k", CLIENT_COUNT), ("warm_1k", WARM_SUBS)):
        scripts[name] = ctx.bench.workdir / f"workers-{name}.lua"
        scripts[name].write_text(RANDOM_SUB % (SEED, "/sub/", count - 1))
    figures = {}
    for name, script in scripts.items():
        rounds = []
        for _ in range(ctx.runs):
            measured = {}
            for label, hello in (
                ("single", hello_one),
                ("workers", hello_many),
                ("auto", None),
            ):
                if label == "auto":
                    _demand(panels[label], urls[label], str(script), cores)
                if name == "cold_10k":
                    clients[label].call("POST", "/panel/api/setting/update", {"subUpdates": 12})
                else:
                    _wrk(urls[label] + "/sub/", str(script))
                if hello is not None:
                    measured[f"hello_{label}"] = _wrk(hello.url + "/hello")
                panel = panels[label]
                cpu_before = tree_cpu_seconds(panel.pid)
                measured[label] = _wrk(urls[label] + "/sub/", str(script))
                cpu = tree_cpu_seconds(panel.pid) - cpu_before
                measured[label]["cpu_ms_per_request"] = cpu * 1000 / measured[label]["requests"]
            rounds.append(measured)
        figures[name] = _figure(rounds, cores)
    figures["rss_idle_mb"] = memory
    return figures


def _figure(rounds: list[dict], cores: int) -> dict:
    def median(key: str, field: str = "rps") -> float:
        return statistics.median(r[key][field] for r in rounds)

    def ratio(top: str, bottom: str) -> float:
        return round(statistics.median(r[top]["rps"] / r[bottom]["rps"] for r in rounds), 3)

    figure = {
        "rps": round(median("workers")),
        "p99_ms": round(median("workers", "p99_ms"), 2),
        "connections": CONNECTIONS,
        "tool": "wrk",
        "workers": cores,
        "single_rps": round(median("single")),
        "single_p99_ms": round(median("single", "p99_ms"), 2),
        "hello_single_rps": round(median("hello_single")),
        "hello_workers_rps": round(median("hello_workers")),
        "cpu_ms_per_request": round(median("workers", "cpu_ms_per_request"), 3),
        "single_cpu_ms_per_request": round(median("single", "cpu_ms_per_request"), 3),
        "auto_rps": round(median("auto")),
        "auto_p99_ms": round(median("auto", "p99_ms"), 2),
        "auto_cpu_ms_per_request": round(median("auto", "cpu_ms_per_request"), 3),
        "rps_ratio_to_single": ratio("workers", "single"),
        "auto_rps_ratio_to_single": ratio("auto", "single"),
        "auto_rps_ratio_to_workers": ratio("auto", "workers"),
        "rps_ratio_to_hello": ratio("workers", "hello_workers"),
        "single_rps_ratio_to_hello": ratio("single", "hello_single"),
        "hello_ratio_workers_to_single": ratio("hello_workers", "hello_single"),
        "target": f"rps_ratio_to_single >= 1.7 on {cores} cores",
    }
    figure["met"] = figure["rps_ratio_to_single"] >= 1.7
    return figure


def _rss_mb(pid: int) -> dict:
    """VmRSS of the panel and of each of its children (the workers) and their sum; and
    the sum of their proportional set sizes (Pss), which counts the pages they share
    (the interpreter, its libraries) once instead of once per process."""
    processes = {"panel": pid, **{f"worker_{c}": c for c in children(pid)}}
    each = {name: _vm_rss(process) for name, process in processes.items()}
    pss = sum(_pss(process) for process in processes.values())
    return {**each, "total": round(sum(each.values()), 1), "pss_total": round(pss, 1)}


def _pss(pid: int) -> float:
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"no Pss for process {pid}")


def _vm_rss(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    raise BenchError(f"no VmRSS for process {pid}")


def _sub_url(panel: Panel) -> str:
    for line in panel.lines:
        if match := SUB_LISTENING.search(line):
            return f"http://127.0.0.1:{match.group(1)}"
    raise BenchError("the panel printed no subscription server address")


def _wrk(url: str, script: str = "") -> dict:
    """req/s and p99 (ms) of one wrk run with CONNECTIONS connections for SECONDS."""
    argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{SECONDS}s", "--latency"]
    if script:
        argv += ["-s", script]
    output = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in output or "Socket errors" in output:
        raise BenchError(f"wrk saw failed requests on {url}:\n{output}")
    rate = re.search(r"Requests/sec:\s*([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    p99 = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", output, re.MULTILINE)
    if not rate or not p99 or not total:
        raise BenchError(f"wrk printed no Requests/sec or 99% line:\n{output}")
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    log(f"  {url}: {float(rate.group(1)):.0f} req/s")
    return {
        "rps": float(rate.group(1)),
        "p99_ms": float(p99.group(1)) * scale,
        "requests": int(total.group(1)),
    }
