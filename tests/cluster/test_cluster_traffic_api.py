"""Several panels on one database, each with a core of its own: every core's bytes are
added to the shared totals once, also when an instance is killed and collects its
orphaned core on its restart beside the others, and a client over quota is cut off on
every instance's core.

The cores are the stand-in Xray (fake_xray.py): three real cores would each bind the
inbounds' ports on this one host. Each instance's stand-in answers the counters its own
state file names, and records the calls its panel made.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from urllib.parse import quote

import pytest
from cluster_panels import PROPAGATION_SECONDS, three_instances, wait_for
from core_panel import wait_until
from fake_xray import HANDLER
from fake_xray_panel import calls, counting, fake_xray_env, in_config, write_state
from helpers import create_inbound, ok

CLIENTS = "/panel/api/clients"
TICK_SECONDS = 1
_ports = itertools.count(32600)


@pytest.fixture(scope="module")
def cores(tmp_path_factory):
    """Three instances, each on its stand-in core, counting traffic every second."""
    places = {}

    def env_of(place):
        places[len(places)] = place
        return fake_xray_env(place)

    def prepare(first):
        api = first.client()
        ok(api.post("/panel/api/setting/update", {"trafficInterval": TICK_SECONDS}))
        mark = len(first.lines)
        ok(api.post("/panel/api/setting/restartPanel"))
        first.wait_listening(mark)

    with three_instances(tmp_path_factory, env_of, prepare) as servers:
        instances = [Instance(server, places[n]) for n, server in enumerate(servers)]
        for instance in instances:
            wait_until(instance.core_runs, f"the core of {instance.server.url} runs")
        yield instances


class Instance:
    """A panel of the cluster, its stand-in core's state file and the counters written."""

    def __init__(self, server, place):
        self.server = server
        self.place = place
        self.counters: dict[str, int] = {}

    def api(self):
        return self.server.client()

    def core_runs(self) -> bool:
        return ok(self.api().get("/panel/api/server/status"))["core"]["state"] == "running"

    def count(self, email: str, value: int) -> None:
        """The core's uplink counter of `email` is now `value`."""
        self.counters[f"user>>>{email}>>>traffic>>>uplink"] = value
        write_state(self.place / "state.json", counters=self.counters)

    def runs_client(self, email: str) -> bool:
        return in_config(self.api(), email)

    def alterations(self) -> list[bytes]:
        return [
            request or b""
            for method, request in calls(self.place / "calls.jsonl")
            if method == HANDLER + "AlterInbound"
        ]


def shared_client(cores, **fields) -> str:
    """A client of a new inbound, once every instance's core runs it."""
    api = cores[0].api()
    inbound = create_inbound(
        api,
        {"protocol": "vless", "port": next(_ports), "settings": {"decryption": "none"}},
    )
    email = f"{uuid.uuid4().hex[:8]}@cluster"
    client = {"email": email, **fields}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound["id"]]}))
    for instance in cores:
        wait_until(lambda i=instance: i.runs_client(email), "every core runs the client")
        counting(instance.place)
    return email


def uplink(instance, email: str) -> int:
    return ok(instance.api().get(f"{CLIENTS}/traffic/{quote(email)}"))["up"]


def test_each_core_is_counted_once_also_across_a_kill_of_its_instance(cores):
    a, b, c = cores
    email = shared_client(cores)
    for instance, value in ((a, 1000), (b, 2000), (c, 3000)):
        instance.count(email, value)
    wait_until(lambda: uplink(c, email) == 6000, "each core's bytes in the shared total")

    a.server.process.kill()
    a.server.process.wait()
    # The killed instance's core runs on; it and another move on while it is down.
    a.count(email, 1500)
    b.count(email, 2500)
    a.server.start()
    # The restarted instance reads what its orphaned core counted since its last tick
    # against its own kept values, whatever the others kept meanwhile.
    wait_until(lambda: uplink(b, email) >= 7000, "the orphaned core's last bytes counted")
    time.sleep(3 * TICK_SECONDS)
    assert {uplink(instance, email) for instance in cores} == {7000}
    wait_until(a.core_runs, "the restarted instance runs a new core")


def test_a_client_over_quota_is_cut_off_on_every_instances_core(cores):
    a, _, c = cores
    email = shared_client(cores, totalGB=10_000)
    before = {id(instance): len(instance.alterations()) for instance in cores}
    c.count(email, 20_000)
    wait_until(
        lambda: ok(a.api().get(f"{CLIENTS}/traffic/{quote(email)}"))["enable"] is False,
        "the client over quota disabled",
        step=0.05,
    )
    deadline = time.monotonic() + PROPAGATION_SECONDS + TICK_SECONDS

    def removed(instance) -> bool:
        return any(
            email.encode() in request for request in instance.alterations()[before[id(instance)] :]
        )

    for instance in cores:
        wait_for(
            lambda i=instance: removed(i),
            max(deadline - time.monotonic(), 0.1),
            "the client removed from every instance's core",
        )
        assert not instance.runs_client(email)
    states = {json.dumps(ok(i.api().get(f"{CLIENTS}/traffic/{quote(email)}"))) for i in cores}
    assert len(states) == 1
