"""Run bench scenarios against the real panel and print their figures as JSON.

    python bench/run.py [scenario ...] [--runs N] [--out FILE]

With no scenario named, every registered one runs. The hello-world ceiling always runs
first, because every other figure is also given as a ratio to it (`latency_ratio`:
median over the ceiling's median; `rps_ratio`: throughput over the ceiling's). A scenario
that breaks is reported with its error and the others still run; targets are reported,
never enforced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import client_scenarios  # noqa: F401  (registers the clients scenarios)
import cluster_scenarios  # noqa: F401  (registers several panels on one database)
import db_scenarios  # noqa: F401  (registers the backends scenario)
import device_scenarios  # noqa: F401  (registers the device limit's cost)
import edit_scenarios  # noqa: F401  (registers the client edit scenarios)
import heavy_scenarios  # noqa: F401  (registers the heavy-request stalls)
import idle_scenarios  # noqa: F401  (registers idle CPU)
import metrics_scenarios  # noqa: F401  (registers the /metrics scrape)
import mtproto_scenarios  # noqa: F401  (registers the MTProto proxy figures)
import node_scenarios  # noqa: F401  (registers the central panel with ten nodes)
import scenarios  # noqa: F401  (registers the scenarios)
import sub_scenarios  # noqa: F401  (registers the subscription scenario)
import template_scenarios  # noqa: F401  (registers the subscription templates scenario)
import wait_scenarios  # noqa: F401  (registers never_wait)
import webhook_scenarios  # noqa: F401  (registers the webhooks load figures)
import worker_scenarios  # noqa: F401  (registers the subscription workers scenario)
from harness import SCENARIOS, Bench, Context, Panel, log

from appliance import __version__

BASELINE = "hello"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [BASELINE] + [name for name in args.scenarios or SCENARIOS if name != BASELINE]
    workdir = Path(tempfile.mkdtemp(prefix="appliance-bench-"))
    bench = Bench(workdir, args.runs)
    started = time.perf_counter()
    results = {}
    try:
        for name in names:
            results[name] = run_scenario(bench, name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "meta": meta(bench, time.perf_counter() - started),
        "scenarios": results,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print_summary(results)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "scenarios",
        nargs="*",
        metavar="scenario",
        help="scenarios to run (default: all): " + ", ".join(SCENARIOS),
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (default 5)")
    parser.add_argument("--out", type=Path, help="also write the JSON to this file")
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def run_scenario(bench: Bench, name: str) -> dict:
    spec = SCENARIOS[name]
    log(f"{name}: {spec.description}")
    ctx = Context(bench)
    started = time.perf_counter()
    try:
        if spec.dataset is not None:
            ctx.panel = ctx.start_panels([spec.dataset])[0]
            if spec.mutates:
                bench.check(ctx.panel)
        figures = spec.run(ctx)
        for child in ctx.children:
            if isinstance(child, Panel) and not spec.mutates:
                bench.check(child)
    except Exception as exc:  # a broken scenario is a result too; the others still run
        log(f"{name} failed: {exc!r}")
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        ctx.stop()
    if name == BASELINE:
        bench.baseline = figures
    else:
        add_ratios(figures, bench.baseline)
    result = {"dataset": spec.dataset, **figures} if spec.dataset else figures
    log(f"{name}: done in {time.perf_counter() - started:.1f} s")
    return result


def add_ratios(figures: dict, baseline: dict) -> None:
    """Next to every median latency and throughput, its ratio to the ceiling."""
    ceiling_ms = baseline.get("latency", {}).get("median_ms")
    ceiling_rps = baseline.get("throughput", {}).get("rps")
    for figure in figures.values():
        if not isinstance(figure, dict):
            continue
        if "median_ms" in figure and ceiling_ms:
            figure["latency_ratio"] = round(figure["median_ms"] / ceiling_ms, 1)
        if "rps" in figure and ceiling_rps:
            figure["rps_ratio"] = round(figure["rps"] / ceiling_rps, 3)


def meta(bench: Bench, seconds: float) -> dict:
    return {
        "panel_version": __version__,
        "commit": _commit(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "runs": bench.runs,
        "wrk": shutil.which("wrk") is not None,
        "datasets_checked": bench.checked,
        "seconds": round(seconds, 1),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def print_summary(results: dict) -> None:
    """One line per figure on stderr, for a reader who does not want the JSON."""
    for name, figures in results.items():
        if "error" in figures:
            log(f"{name}: ERROR {figures['error'].splitlines()[0]}")
            continue
        for label, figure in figures.items():
            if isinstance(figure, dict):
                log(f"{name}.{label}: {_describe(figure)}")


def _describe(figure: dict) -> str:
    parts = []
    if "median_ms" in figure:
        parts.append(f"median {figure['median_ms']} ms, p99 {figure['p99_ms']} ms")
    if "rps" in figure:
        parts.append(f"{figure['rps']} req/s ({figure['tool']}, {figure['connections']} conns)")
    if "median_s" in figure:
        parts.append(f"median {figure['median_s']} s")
    if "response_bytes" in figure:
        parts.append(f"{figure['response_bytes']} bytes")
    if "rss_after_export_mb" in figure:
        parts.append(
            ", ".join(
                f"{key[4:-3]} {value} MiB" for key, value in figure.items() if key[:4] == "rss_"
            )
        )
    if "rss_idle_mb" in figure:
        parts.append(
            f"RSS {figure['rss_after_start_mb']} MiB at start, {figure['rss_idle_mb']} MiB idle, "
            f"{figure['rss_after_sign_in_mb']} MiB after sign-in, "
            f"{figure['rss_after_list_mb']} MiB after a list"
        )
    if "panel_cpu_percent" in figure:
        parts.append(
            f"panel {figure['panel_cpu_percent']} % of a core, core "
            f"{figure['core_cpu_percent']} %, over {figure['idle_seconds']} s idle"
        )
    if "slowest_ms" in figure and "p50_ms" in figure:
        parts.append(
            f"p50 {figure['p50_ms']} ms, p99 {figure['p99_ms']} ms, slowest "
            f"{figure['slowest_ms']} ms of {figure['requests']} light requests"
        )
        if "heavy_request_s" in figure:
            parts.append(f"heavy request {figure['heavy_request_s']} s")
    if "skipped" in figure:
        parts.append(f"skipped: {figure['skipped']}")
    if "slowest_reply_ms" in figure:
        parts.append(
            f"slowest reply {figure['slowest_reply_ms']} ms, median reply "
            f"{figure['median_reply_ms']} ms ({figure['clients_in_core']} clients in the core)"
        )
    if "seconds" in figure:
        parts.append(f"{figure['seconds']} s")
    for ratio in ("latency_ratio", "rps_ratio", "ratio_to_sqlite"):
        if ratio in figure:
            parts.append(f"{ratio} {figure[ratio]}")
    if "target" in figure:
        parts.append(f"target {figure['target']}: {'met' if figure['met'] else 'NOT met'}")
    return "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
