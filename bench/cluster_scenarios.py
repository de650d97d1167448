"""Several panels on one database: `cluster`.

Per networked backend (PostgreSQL, then MariaDB), three instances of the real panel on
one fresh database of the bench's own (bench/db_scenarios.py's `ServerDatabase`):

- `propagation`: B renders (and caches) a client's subscription, then A gives the client
  a new UUID; the time from A's answer until B's subscription carries it (polled back to
  back on one connection), `20 x runs` edits, p50 and p99 in ms; `propagation_ratio_to_interval`
  is p50 over MariaDB's one-second read interval (PostgreSQL's NOTIFY needs none).
- `failover`: the leader is killed (`kill -9`) and a survivor's `server/cluster` is
  polled until another instance leads; seconds per handover, `runs` handovers (the
  killed one is started again from its data directory in between), median and slowest.
- `subscriptions`: 2,000 clients with their own subIds, random subIds over 50
  connections (wrk, 3 s) against A alone, then against A and B at once (a wrk each),
  `runs` times; `two_over_one` is the median ratio of the two instances' summed req/s to
  A's alone. The instances share this host, so each one's process tree is pinned to a
  core of its own (`taskset`) as if on a host of its own; the wrk processes share both.
"""

from __future__ import annotations

import base64
import re
import statistics
import subprocess
import threading
import time
import uuid

from db_scenarios import ServerDatabase
from harness import BenchError, Client, Context, Panel, children, log, percentile, scenario
from sub_scenarios import RANDOM_SUB, SEED, sub_id
from sub_scenarios import _wrk as wrk

KINDS = ("postgres", "mysql")
CLUSTER = "/panel/api/server/cluster"
SUB_RE = re.compile(r"subscription server listening on http://[^:/]+:(\d+)/")
PER_RUN = 20
POLL_SECONDS = 0.005
GIVE_UP_SECONDS = 60
LOG_READ_SECONDS = 1.0
SUB_CLIENTS = 2_000


class Instance(Panel):
    """A panel on a database another instance already set up: it prints no credentials
    (it signs in with the first one's)."""

    def __init__(self, data_dir, db: str, first: Panel | None):
        super().__init__(data_dir, "empty", db)
        self.first = first

    def ready(self, lines: list[str]) -> None:
        if self.first is None:
            super().ready(lines)
        else:
            self.username, self.password = self.first.username, self.first.password

    def sub_url(self) -> str:
        for line in self.lines:
            if match := SUB_RE.search(line):
                return f"http://127.0.0.1:{match.group(1)}"
        raise BenchError(f"{self.name}: no subscription port in its output")


@scenario("cluster", dataset=None)
def cluster(ctx: Context) -> dict:
    """Three instances on one PostgreSQL and one MariaDB database: change propagation
    (a client edited on A until B's cached subscription shows it, p50/p99) and failover (kill -9
    of the leader until another leads)."""
    figures = {}
    for kind in KINDS:
        log(f"cluster: {kind}")
        with ServerDatabase(kind) as database:
            try:
                figures[kind] = _measure(ctx, database.url)
            finally:
                ctx.stop()
    return figures


def _measure(ctx: Context, url: str) -> dict:
    dirs = [ctx.bench.workdir / "cluster" / f"{uuid.uuid4().hex[:8]}-{n}" for n in range(3)]
    for data_dir in dirs:
        data_dir.mkdir(parents=True)
    first = ctx.start(Instance(dirs[0], url, None))
    instances = [first] + [ctx.start(Instance(d, url, first)) for d in dirs[1:]]
    _wait(lambda: _leader(instances[1]) is not None, "a leader")
    return {
        "instances": len(instances),
        "propagation": _propagation(instances[0], instances[1], ctx.runs),
        "subscriptions": _subscriptions(ctx, instances[0], instances[1]),
        "failover": _failover(ctx, instances, url, dirs),
    }


def _propagation(a: Instance, b: Instance, runs: int) -> dict:
    api = a.client()
    inbound = _vless(api, 32700)
    sub = Client(b.sub_url(), keep_cookies=False)
    sub_id = uuid.uuid4().hex[:16]
    email = f"{sub_id}@bench"
    client = {"email": email, "subId": sub_id}
    api.call("POST", "/panel/api/clients/add", {"client": client, "inboundIds": [inbound]})
    _wait(lambda: sub.request("GET", f"/sub/{sub_id}").status == 200, "the client on B")
    stored = api.call("GET", f"/panel/api/clients/get/{email}")["client"]
    seconds = []
    for _ in range(PER_RUN * runs):
        # B renders (and caches) the subscription; A gives the client a new UUID.
        _links(sub, sub_id)
        fresh = str(uuid.uuid4())
        stored = {**stored, "id": fresh}
        api.call("POST", f"/panel/api/clients/update/{email}", stored)
        edited = time.perf_counter()
        while fresh not in _links(sub, sub_id):
            if time.perf_counter() - edited > GIVE_UP_SECONDS:
                raise BenchError("an edit on A never reached B's subscription")
            time.sleep(POLL_SECONDS)
        seconds.append(time.perf_counter() - edited)
    p50 = statistics.median(seconds)
    return {
        "p50_ms": round(p50 * 1000, 1),
        "p99_ms": round(percentile(seconds, 99) * 1000, 1),
        "slowest_ms": round(max(seconds) * 1000, 1),
        "changes": len(seconds),
        "propagation_ratio_to_interval": round(p50 / LOG_READ_SECONDS, 3),
        "target": "p99 < 2000 ms",
        "met": percentile(seconds, 99) < 2,
    }


def _subscriptions(ctx: Context, a: Instance, b: Instance) -> dict:
    api = a.client()
    inbound = _vless(api, 32730)
    items = [
        {"client": {"email": f"{sub_id(n)}@tp", "subId": sub_id(n)}, "inboundIds": [inbound]}
        for n in range(SUB_CLIENTS)
    ]
    api.call("POST", "/panel/api/clients/bulkCreate", items)
    last = f"/sub/{sub_id(SUB_CLIENTS - 1)}"
    sub_b = Client(b.sub_url(), keep_cookies=False)
    _wait(lambda: sub_b.request("GET", last).status == 200, "the clients on B")
    script = ctx.bench.workdir / "cluster-random.lua"
    script.write_text(RANDOM_SUB % (SEED, "/sub/", SUB_CLIENTS - 1))
    urls = [a.sub_url() + "/sub/", b.sub_url() + "/sub/"]
    for cpu, instance in enumerate((a, b)):
        _pin(instance, str(cpu))
    try:
        for url in urls:  # every body rendered once on each instance before measuring
            wrk(url, script=str(script))
        ratios, ones, twos = [], [], []
        for _ in range(ctx.runs):
            one = wrk(urls[0], script=str(script))["rps"]
            both = _at_once([lambda u=u: wrk(u, script=str(script))["rps"] for u in urls])
            ones.append(one)
            twos.append(sum(both))
            ratios.append(sum(both) / one)
    finally:
        for instance in (a, b):
            _pin(instance, "0-1")
    return {
        "clients": SUB_CLIENTS,
        "one_rps": round(statistics.median(ones)),
        "two_rps": round(statistics.median(twos)),
        "two_over_one": round(statistics.median(ratios), 3),
        "pinned": "one core per instance",
    }


def _vless(api: Client, first: int) -> int:
    """A VLESS inbound on a port of 30 from `first` (the bench's two never share one)."""
    port = first + uuid.uuid4().int % 30
    inbound = api.call(
        "POST",
        "/panel/api/inbounds/add",
        {
            "protocol": "vless",
            "port": port,
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )
    return inbound["id"]


def _pin(instance: Instance, cpus: str) -> None:
    """Every thread of the instance's process and of its workers to `cpus`."""
    for pid in (instance.pid, *children(instance.pid)):
        subprocess.run(
            ["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, stdout=subprocess.DEVNULL
        )


def _at_once(calls: list) -> list:
    """The results of `calls`, each run in its own thread at the same time."""
    results = [None] * len(calls)

    def run(index: int) -> None:
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if any(result is None for result in results):
        raise BenchError("a wrk run at once with another failed")
    return results


def _failover(ctx: Context, instances: list[Instance], url: str, dirs) -> dict:
    seconds = []
    for _ in range(ctx.runs):
        survivor = instances[0]
        leader = _leader(survivor)
        dead = next(i for i in instances if _own_guid(i) == leader)
        survivor = next(i for i in instances if i is not dead)
        dead.process.kill()
        dead.process.wait()
        killed = time.perf_counter()
        _wait(lambda s=survivor, old=leader: _leader(s) not in (None, old), "another leader")
        seconds.append(time.perf_counter() - killed)
        again = ctx.start(Instance(dirs[instances.index(dead)], url, instances[0]))
        instances[instances.index(dead)] = again
    return {
        "median_s": round(statistics.median(seconds), 2),
        "slowest_s": round(max(seconds), 2),
        "handovers": len(seconds),
        "target": "< 30 s",
        "met": max(seconds) < 30,
    }


def _links(sub: Client, sub_id: str) -> str:
    reply = sub.request("GET", f"/sub/{sub_id}")
    if reply.status != 200:
        raise BenchError(f"B's subscription answered HTTP {reply.status}")
    return base64.b64decode(reply.body).decode()


def _members(instance: Instance) -> list[dict]:
    client = instance.client()
    try:
        return client.call("GET", CLUSTER)
    finally:
        client.close()


def _leader(instance: Instance) -> str | None:
    leaders = [m["guid"] for m in _members(instance) if m["leader"]]
    return leaders[0] if len(leaders) == 1 else None


def _own_guid(instance: Instance) -> str:
    return next(m["guid"] for m in _members(instance) if m["self"])


def _wait(predicate, what: str) -> None:
    deadline = time.monotonic() + GIVE_UP_SECONDS
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise BenchError(f"{what} did not come within {GIVE_UP_SECONDS} s")
