"""The core's hot paths at 100,000 clients, in process: building the config, one traffic
tick over every client's counters, and the live-change diff.

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
import statistics
import sys
import tempfile
import time
from pathlib import Path

from clients_dataset import DATASET_NAME
from harness import DATASETS, build_database

from appliance.config import DB_FILE
from appliance.core.config import build_config
from appliance.core.live import live_changes, running
from appliance.core.template import default_template
from appliance.services.client_query import ClientQuery
from appliance.services.inbounds import Inbounds
from appliance.services.presence import Presence
from appliance.services.settings import Settings
from appliance.services.traffic import TrafficAccounting
from appliance.store import Store

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
        path = workdir / DB_FILE
        build_database(DATASETS[DATASET_NAME], path)
        store = Store(str(path))
        store.open()
        settings = Settings(store)
        settings.load()
        presence = Presence()
        query = ClientQuery(store, settings, presence)
        inbounds = Inbounds(store, lambda: [], query.by_inbound)
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
        accounting = TrafficAccounting(store, presence)
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
        store.close()
        json.dump({"scenarios": figures}, sys.stdout, indent=1)
        print()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
