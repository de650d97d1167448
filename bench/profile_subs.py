"""Where the time of a subscription request goes, in process, at 10,000 clients.

    python bench/profile_subs.py [--cprofile N] [--count N]

Builds `subs_10k` into a temporary directory, opens a `Store` on it as the panel does and
calls `Subscriptions` directly, the way the subscription server does for each request:
the lookup, then the body. Each format is timed cold (the cache emptied, then every
subId of the first `--count` once) and warm (the same subIds again), per request in
microseconds, so the part of a request that is ours can be told from what the HTTP
server adds. `--cprofile N` also prints the N most expensive functions of each cold
pass. Figures go to stdout; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

from harness import DATASETS, build_database
from sub_scenarios import CLIENT_COUNT, DATASET, sub_id

from appliance.config import DB_FILE
from appliance.runtime.changes import ChangeNotice
from appliance.services.admin.settings import Settings
from appliance.services.clients.subscriptions import Subscriptions
from appliance.store import Store

FORMATS = ("links", "json", "yaml", "singbox")
ADDRESS = "sub.example.com"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    parser.add_argument("--count", type=int, default=CLIENT_COUNT, metavar="N")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="appliance-profile-"))
    try:
        path = workdir / DB_FILE
        build_database(DATASETS[DATASET], path)
        profile(path, min(args.count, CLIENT_COUNT), args.cprofile)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def profile(path: Path, count: int, top: int) -> None:
    store = Store(str(path))
    store.open()
    settings = Settings(store, None, ChangeNotice())  # reading needs no file places
    settings.load()
    subscriptions = Subscriptions(store, settings)
    sub_ids = [sub_id(index) for index in range(count)]
    print(f"{'format':<8}{'cold us/request':>18}{'warm us/request':>18}")
    for kind in FORMATS:
        subscriptions.invalidate()
        profiler = cProfile.Profile() if top else None
        cold = _pass(subscriptions, kind, sub_ids, profiler)
        warm = _pass(subscriptions, kind, sub_ids, None)
        print(f"{kind:<8}{cold:>18.0f}{warm:>18.0f}", flush=True)
        if profiler is not None:
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(top)
    subscriptions.close()
    store.close()


def _pass(subscriptions: Subscriptions, kind: str, sub_ids: list[str], profiler) -> float:
    """Microseconds per request of one lookup and render of every subId in turn."""
    if profiler is not None:
        profiler.enable()
    started = time.perf_counter()
    for value in sub_ids:
        lookup = subscriptions.lookup(value)
        if lookup is None or not subscriptions.render(kind, lookup, ADDRESS).found:
            raise SystemExit(f"{value}: nothing served")
    elapsed = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
    return elapsed / len(sub_ids) * 1e6


if __name__ == "__main__":
    sys.exit(main())
