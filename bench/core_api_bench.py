"""Per-call latency of the core's API client against a real core, as the panel calls it.

    python bench/core_api_bench.py [--core PATH] [--calls N] [--users N]

Starts the core (`--core`, or xray, else v2ray, on PATH) with one VLESS inbound of
`--users` clients, under gevent's monkey patching as in `appliance run`, and times on one
kept connection: a stats query of every counter (`QueryStats`, the traffic tick's call),
a stats query of one counter, and an AlterInbound round trip (a user added, then
removed). The target is under 1 ms a call on loopback. Prints JSON: median and p99 in
milliseconds per kind of call, and the median CPU time the panel's side spent on it (the
figure to compare on a machine shared with other work); nothing here is asserted.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402

from appliance.core.api import CoreApi, CoreApiError  # noqa: E402
from appliance.core.config import build_config  # noqa: E402
from appliance.core.process import CoreProcess  # noqa: E402
from appliance.core.template import default_template  # noqa: E402
from appliance.errors import ServiceError  # noqa: E402

INBOUND_TAG = "bench-api"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def milliseconds(call: Callable[[], object], calls: int) -> dict:
    """Median and p99 milliseconds of `call` over `calls` calls, after a few to warm up."""
    for _ in range(min(calls, 20)):
        call()
    times, cpu_times = [], []
    for _ in range(calls):
        start, cpu = time.perf_counter(), time.process_time()
        call()
        times.append((time.perf_counter() - start) * 1000)
        cpu_times.append((time.process_time() - cpu) * 1000)
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 3),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 3),
        "cpu_median_ms": round(statistics.median(cpu_times), 3),
        "calls": calls,
    }


def vless_inbound(port: int, users: int) -> dict:
    clients = [
        {"email": f"user{n}@bench", "id": str(uuid.uuid4()), "enable": True} for n in range(users)
    ]
    return {
        "tag": INBOUND_TAG,
        "protocol": "vless",
        "port": port,
        "listen": "127.0.0.1",
        "enable": True,
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp"},
        "clientRows": clients,
    }


def wait_for_api(api: CoreApi) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            api.query_stats()
            return
        except CoreApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def bench(core: str | None, calls: int, users: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="core-api-bench-") as workdir:
        process = CoreProcess(core, workdir)
        try:
            flavor, version, prefix = process.detect()
        except ServiceError as exc:
            return {"skipped": exc.msg}
        api_port = free_port()
        inbound = vless_inbound(free_port(), users)
        process.start(build_config(default_template(), [inbound], api_port, flavor=flavor))
        api = CoreApi(f"127.0.0.1:{api_port}", prefix)
        try:
            wait_for_api(api)
            counter = f"inbound>>>{INBOUND_TAG}>>>traffic>>>uplink"
            numbers = iter(range(10**9))

            def alter_round_trip() -> None:
                email = f"live{next(numbers)}@bench"
                api.add_user(INBOUND_TAG, "vless", {"id": str(uuid.uuid4()), "email": email})
                api.remove_user(INBOUND_TAG, email)

            return {
                "core": f"{flavor} {version}",
                "counters": len(api.query_stats()),
                "query_stats_all": milliseconds(api.query_stats, calls),
                "query_stats_one": milliseconds(lambda: api.query_stats(counter), calls),
                "alter_inbound_add_and_remove": milliseconds(alter_round_trip, calls),
            }
        finally:
            api.close()
            process.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", help="the core binary (default: xray, else v2ray, on PATH)")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--users", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(bench(args.core, args.calls, args.users), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
