"""The core's hot paths at 100,000 clients, in process: building the config, one traffic
tick over every client's counters and over 100,000 counters, the live-change diff, the
whole comparison a change costs when it does not name its clients (a bulk call, a group,
an inbound save: build, diff, config.json rewritten; a single-client edit costs that
client alone, see edit_scenarios.py), and the latency of one live user change against
the real core.

    python bench/core_bench.py [--runs N]

Builds `clients_100k` (see clients_dataset.py) in a temporary directory and calls the
services the panel uses. CPU time (`time.process_time`) is what the targets speak of:
config build under 1 s, a tick over 100,000 clients' counters under 0.5 s of CPU. Prints
JSON; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from clients_dataset import DATASET_NAME
from harness import opened_dataset

from appliance.core.api import CoreApi, CoreApiError
from appliance.core.config import build_config
from appliance.core.live import live_changes, running
from appliance.core.process import CoreProcess
from appliance.core.template import default_template
from appliance.errors import ServiceError
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.clients.traffic import TrafficAccounting
from appliance.services.inbounds.core_reads import CoreInbounds
from appliance.services.webhooks.outbox import Outbox

API_PORT = 10085


def measure(call, runs: int) -> dict:
    """Median wall and CPU seconds of `call` over `runs` runs."""
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        "median_s": round(statistics.median(walls), 3),
        "cpu_s": round(statistics.median(cpus), 3),
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="appliance-core-bench-"))
    try:
        store, settings = opened_dataset(DATASET_NAME, workdir)
        presence = Presence()
        query = ClientQuery(store, settings, presence)
        inbounds = CoreInbounds(store, settings.places, lambda: [])
        figures: dict = {}

        def build() -> dict:
            return build_config(default_template(), inbounds.for_core(query.core_clients), API_PORT)

        figures["config_build"] = {**measure(build, args.runs), "target": "cpu_s < 1"}
        config = build()
        figures["config_build"]["clients_in_config"] = sum(
            len(i.get("settings", {}).get("clients", [])) for i in config["inbounds"]
        )

        counters: dict[str, int] = {}
        for inbound in config["inbounds"]:
            for client in inbound.get("settings", {}).get("clients", []) or []:
                counters[f"user>>>{client['email']}>>>traffic>>>uplink"] = 0
                counters[f"user>>>{client['email']}>>>traffic>>>downlink"] = 0
        accounting = TrafficAccounting(store, presence, Outbox(store), lambda: "bench")
        accounting.tick(counters, generation=1)
        step = [0]

        def tick() -> None:
            step[0] += 1000
            accounting.tick({name: step[0] for name in counters}, generation=1)

        figures["traffic_tick_all_moving"] = {
            **measure(tick, args.runs),
            "counters": len(counters),
            "moving": len(counters),
            "target": "cpu_s < 0.5",
        }
        tenth = list(counters)[::10]
        current = dict.fromkeys(counters, step[0])

        def tick_tenth() -> None:
            for name in tenth:
                current[name] += 1000
            accounting.tick(current, generation=1)

        figures["traffic_tick_tenth_moving"] = {
            **measure(tick_tenth, args.runs),
            "counters": len(counters),
            "moving": len(tenth),
            "target": "cpu_s < 0.5",
        }

        changed = json.loads(json.dumps(config))
        vless = next(i for i in changed["inbounds"] if i.get("protocol") == "vless")
        vless["settings"]["clients"] = vless["settings"]["clients"][1:]
        kept = running(config)
        figures["live_diff"] = measure(lambda: live_changes(kept, changed), args.runs)
        recorder = CoreProcess(None, str(workdir / "sync"))

        def sync_one_change() -> None:
            wanted = build()
            live_changes(kept, wanted, running(wanted))
            recorder.record(wanted)

        figures["sync_one_change"] = {
            **measure(sync_one_change, args.runs),
            "steps": "build, live diff, config.json rewritten, fingerprints kept",
        }
        figures["traffic_tick_100k_counters"] = tick_of(store, presence, config, 100_000, args)
        figures["live_user_change"] = live_latency(workdir / "core", args.runs)
        store.close()
        json.dump({"scenarios": figures}, sys.stdout, indent=1)
        print()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def tick_of(store, presence, config: dict, count: int, args) -> dict:
    """A tick over exactly `count` counters (half of them uplinks), every one moving: the
    size the target names."""
    emails = [
        client["email"]
        for inbound in config["inbounds"]
        for client in inbound.get("settings", {}).get("clients", []) or []
    ][: count // 2]
    names = [f"user>>>{e}>>>traffic>>>{d}" for e in emails for d in ("uplink", "downlink")]
    accounting = TrafficAccounting(store, presence, Outbox(store), lambda: "bench")
    accounting.tick(dict.fromkeys(names, 0), generation=2)
    step = [0]

    def tick() -> None:
        step[0] += 1000
        accounting.tick(dict.fromkeys(names, step[0]), generation=2)

    return {**measure(tick, args.runs), "counters": len(names), "target": "cpu_s < 0.5"}


def live_latency(workdir: Path, runs: int) -> dict:
    """Milliseconds for one user added to, then removed from, a running VLESS inbound
    through the core's API (the live path: no restart), against the real core on PATH."""
    process = CoreProcess(None, str(workdir))
    try:
        flavor, version, prefix = process.detect()
    except ServiceError as exc:
        return {"skipped": exc.msg}
    api_port, inbound_port = free_port(), free_port()
    inbound = {
        "tag": "bench-live",
        "protocol": "vless",
        "port": inbound_port,
        "listen": "127.0.0.1",
        "enable": True,
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp"},
        "clientRows": [],
    }
    process.start(build_config(default_template(), [inbound], api_port, flavor=flavor))
    api = CoreApi(f"127.0.0.1:{api_port}", prefix)
    adds, removes = [], []
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                api.query_stats()
                break
            except CoreApiError:
                time.sleep(0.1)
        for n in range(runs * 20):
            email = f"live{n}@bench"
            entry = {"id": str(uuid.uuid4()), "email": email, "flow": ""}
            start = time.perf_counter()
            api.add_user("bench-live", "vless", entry)
            adds.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            api.remove_user("bench-live", email)
            removes.append((time.perf_counter() - start) * 1000)
    finally:
        api.close()
        process.stop()
    return {
        "core": f"{flavor} {version}",
        "add_median_ms": round(statistics.median(adds), 3),
        "remove_median_ms": round(statistics.median(removes), 3),
        "changes": len(adds),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
