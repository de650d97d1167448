"""The traffic tick's CPU at 100,000 clients with 90 days of usage history present, as a
ratio to the same tick over an empty history, in one run and one process.

    python bench/history_bench.py [--runs N] [--active N]

Builds `clients_100k` (see clients_dataset.py) in a temporary directory and calls the
services the panel uses, as core_bench.py does. Each tick moves every client's two
counters (200,000 counters). Two kinds of tick are timed, each under a clock of its own:
`same_hour` ticks all fall in one hour (each client's bucket is there already: the
upsert adds to it, as nearly every tick of a running panel does) and `new_hour` ticks
each fall in the next hour (every client's bucket is inserted). Both are timed first on
an empty history, then after 90 days and a day of hourly buckets are written for
`--active` clients an hour (a different set each hour) and every inbound, and the last
day is rolled into days by the pruning job (`prune`); `no_history_writes` times the same
ticks with the history not written, for scale. CPU time (`time.process_time`)
is what the ratios speak of; the issue asks for constant cost per tick, i.e. ratios near
1. Prints JSON; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from clients_dataset import DATASET_NAME
from core_bench import measure
from harness import opened_dataset

from appliance.config import DB_FILE
from appliance.core.config import build_config
from appliance.core.template import default_template
from appliance.services.clients import usage
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.clients.traffic import TrafficAccounting
from appliance.services.clients.usage import DAY, HOUR, HOURLY_DAYS, UsageHistory
from appliance.services.inbounds.core_reads import CoreInbounds
from appliance.services.webhooks.outbox import Outbox

API_PORT = 10085


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--active", type=int, default=5000, help="clients with traffic in each past hour"
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="appliance-history-bench-"))
    try:
        store, settings = opened_dataset(DATASET_NAME, workdir)
        presence = Presence()
        query = ClientQuery(store, settings, presence)
        inbounds = CoreInbounds(store, settings.places, lambda: [])
        config = build_config(default_template(), inbounds.for_core(query.core_clients), API_PORT)
        counters = {
            f"user>>>{client['email']}>>>traffic>>>{direction}": 0
            for inbound in config["inbounds"]
            for client in inbound.get("settings", {}).get("clients", []) or []
            for direction in ("uplink", "downlink")
        }
        # Every tick moves every counter by the same step, from where the last one left.
        step = [0]
        now = int(time.time()) // HOUR * HOUR
        clock = Clock(now)
        accounting = TrafficAccounting(store, presence, Outbox(store), lambda: "bench", clock=clock)
        accounting.tick(counters, generation=1)

        def tick() -> None:
            step[0] += 1000
            accounting.tick(dict.fromkeys(counters, step[0]), generation=1)

        def ticks(start_hour: int) -> dict:
            clock.now = start_hour + 60
            tick()  # the hour's buckets exist from here on
            same = measure(tick, args.runs)

            def next_hour_tick() -> None:
                clock.now += HOUR
                tick()

            return {"same_hour": same, "new_hour": measure(next_hour_tick, args.runs)}

        figures: dict = {"counters": len(counters)}
        # For scale: the same ticks with the history not written at all.
        writing = usage.record
        usage.record = lambda *args: None
        figures["no_history_writes"] = ticks(now + 364 * DAY)
        usage.record = writing
        # Ticks of the empty history happen a year ahead, past what the fill writes.
        figures["empty_history"] = ticks(now + 365 * DAY)
        before = history_rows(store)
        fill_started = time.perf_counter()
        written = fill(store, now, args.active)
        figures["history"] = {
            "hours": written["hours"],
            "active_clients_per_hour": args.active,
            "client_rows": written["client_rows"],
            "inbound_rows": written["inbound_rows"],
            "fill_s": round(time.perf_counter() - fill_started, 1),
            "database_mib": round(os.path.getsize(workdir / DB_FILE) / 2**20, 1),
        }
        prune_clock = Clock(now)
        cpu = time.process_time()
        rolled = UsageHistory(store, clock=prune_clock).prune()
        figures["prune"] = {
            "hours_rolled": rolled,
            "cpu_s": round(time.process_time() - cpu, 3),
            "cpu_ms_per_hour": round(1000 * (time.process_time() - cpu) / max(rolled, 1), 2),
        }
        figures["with_history"] = ticks(now + 366 * DAY)
        figures["rows_before_fill"] = before
        for kind in ("same_hour", "new_hour"):
            empty = figures["empty_history"][kind]["cpu_s"]
            full = figures["with_history"][kind]["cpu_s"]
            figures[f"cpu_ratio_{kind}"] = round(full / empty, 3) if empty else None
        figures["target"] = "cpu ratios about 1 (constant cost per tick)"
        store.close()
        json.dump({"scenarios": {"history_tick": figures}}, sys.stdout, indent=1)
        print()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def history_rows(store) -> int:
    conn = store.raw_connect()
    try:
        return conn.execute("SELECT COUNT(*) FROM client_usage").fetchone()[0]
    finally:
        conn.close()


def fill(store, now: int, active: int) -> dict:
    """Hourly buckets for the 91 days before `now`: `active` clients an hour, a different
    slice of them each hour, and every inbound; the oldest day is past 90 days, so the
    pruning job has a day to roll up."""
    conn = store.raw_connect()
    try:
        keys = [row[0] for row in conn.execute("SELECT email_key FROM client_traffic")]
        inbound_ids = [row[0] for row in conn.execute("SELECT id FROM inbound")]
        hours = (HOURLY_DAYS + 1) * 24
        client_rows = inbound_rows = 0
        conn.execute("BEGIN")
        for index in range(1, hours + 1):
            at = now - index * HOUR
            start = index * active % len(keys)
            chosen = (keys + keys)[start : start + active]
            conn.executemany(
                "INSERT INTO client_usage (email_key, at, up, down) VALUES (?, ?, ?, ?)",
                [(key, at, 1000 + index, 5000 + index) for key in chosen],
            )
            conn.executemany(
                "INSERT INTO inbound_usage (inbound_id, at, up, down) VALUES (?, ?, ?, ?)",
                [(inbound_id, at, 10**6, 5 * 10**6) for inbound_id in inbound_ids],
            )
            client_rows += len(chosen)
            inbound_rows += len(inbound_ids)
        conn.execute("COMMIT")
        return {"hours": hours, "client_rows": client_rows, "inbound_rows": inbound_rows}
    finally:
        conn.close()


if __name__ == "__main__":
    raise SystemExit(main())
