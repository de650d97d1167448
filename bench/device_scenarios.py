"""What the device limit costs the subscription server: 10,000 client apps that send their
device id, with `hwidEnable` off and on, cold and warm.

Every request carries the headers a device-aware app sends (`x-hwid`, stable per
subscription, `x-device-os`, `x-ver-os`, `x-device-model`), so the only difference
between the two panels' work is the admission. `subs_10k` is the dataset; the panel runs
as installed (its workers on demand), so the workers' own admission is measured too.

Before the measured rounds every device is admitted once with `hwidEnable` on (the
first request of a new device writes its row; `admitted` is that pass's rate, a figure
for the day an install turns the limit on). Then, each round, for each switch state:

- `cold`: the body cache emptied by a harmless host save, then every subId once, shuffled
  (the path almost every real request takes: each app asks every few hours);
- `warm`: random subIds for a few seconds, every body cached.

`rps_ratio_to_off` is the median of the per-round ratios of the figure with the limit on
to the one with it off, taken back to back so both see the same load of the machine
(which of the two goes first alternates).
The target is 0.9 for both. Beside it, `cpu_us_per_request` is the CPU the panel and its
workers spent per reply of the pass (wrk's own not counted), and `cpu_ratio_to_off` the
median of its per-round ratios: what the admission costs, which other work on the
machine shifts less than it shifts the rate.
"""

from __future__ import annotations

import shutil
import statistics

from harness import BenchError, Context, scenario, tree_cpu_seconds
from sub_scenarios import (
    CLIENT_COUNT,
    CONNECTIONS,
    DATASET,
    EVERY_SUB_ONCE,
    SEED,
    _sub_url,
    _wrk,
)

TARGET = 0.9
DEVICE_LIMIT = 3
PATH = "/sub/"
# wrk's request with the headers of one device per subscription (dev-<index>).
HEADERS = """
local function sub_request(index)
  local headers = {}
  headers["x-hwid"] = string.format("dev-%%05d", index)
  headers["x-device-os"] = "Android"
  headers["x-ver-os"] = "14"
  headers["x-device-model"] = "Pixel 8"
  headers["User-Agent"] = "v2RayTun/5.9 Android"
  return wrk.format("GET", "%s" .. string.format("sub%%05d", index), headers)
end
"""
RANDOM_DEVICE = (
    HEADERS
    + """
math.randomseed(%d)
request = function()
  return sub_request(math.random(0, %d))
end
"""
)


@scenario("subscription_devices", dataset=DATASET, mutates=True)
def subscription_devices(ctx: Context) -> dict:
    """The subscription server at 10,000 device-aware client apps with the device limit
    off and on (limit 3), cold and warm, in back-to-back pairs: req/s, p99 and the ratio
    of on to off."""
    if not shutil.which("wrk"):
        raise BenchError("the devices scenario needs wrk on PATH")
    client = ctx.panel.client()
    sub_url = _sub_url(ctx.panel.lines) + PATH
    host = client.call("GET", "/panel/api/hosts/get/1")
    workdir = ctx.bench.workdir

    def switch(enabled: bool) -> None:
        settings = {"hwidEnable": enabled, "hwidDefaultLimit": DEVICE_LIMIT}
        client.call("POST", "/panel/api/setting/update", settings)

    def every_once(tag: str) -> dict:
        script, done = workdir / f"devices-{tag}.lua", workdir / f"devices-{tag}.done"
        script.write_text(HEADERS % PATH + EVERY_SUB_ONCE % (CLIENT_COUNT, SEED, done))
        return measured_pass(tag, script, until=done)

    def measured_pass(tag: str, script, until=None) -> dict:
        cpu = tree_cpu_seconds(ctx.panel.pid)
        served = _wrk(sub_url, script=str(script), until=until)
        served["cpu_us"] = (tree_cpu_seconds(ctx.panel.pid) - cpu) / served["requests"] * 1e6
        if until is not None and served["requests"] < CLIENT_COUNT:
            raise BenchError(f"{tag}: {served['requests']} replies, not {CLIENT_COUNT}")
        return served

    switch(True)
    admitted = every_once("admit")
    devices = client.call("GET", "/panel/api/clients/devices/user00004@bench.example")
    if len(devices) != 1:
        raise BenchError(f"after the admission pass user00004 has {len(devices)} devices")
    rounds: dict[str, list[tuple[dict, dict]]] = {"cold": [], "warm": []}
    for run in range(ctx.runs):
        warm_script = workdir / f"devices-warm-{run}.lua"
        warm_script.write_text(RANDOM_DEVICE % (PATH, SEED + run, CLIENT_COUNT - 1))
        measured = {}
        # Which state goes first alternates, and each is served unmeasured for a while
        # before its cold pass: the second of a pair would find the workers the first
        # one's load started.
        for enabled in (False, True) if run % 2 == 0 else (True, False):
            switch(enabled)
            _wrk(sub_url, script=str(warm_script))
            client.call("POST", "/panel/api/hosts/update/1", host)
            cold = every_once(f"cold-{run}-{enabled}")
            measured[enabled] = (cold, measured_pass(f"warm-{run}", warm_script))
        rounds["cold"].append((measured[False][0], measured[True][0]))
        rounds["warm"].append((measured[False][1], measured[True][1]))
    figures = {
        "admitted": {
            "rps": round(admitted["rps"]),
            "p99_ms": admitted["p99_ms"],
            "connections": CONNECTIONS,
            "tool": "wrk",
        }
    }
    for temperature, pairs in rounds.items():
        ratio = statistics.median(on["rps"] / off["rps"] for off, on in pairs)
        figures[temperature] = {
            "rps_off": round(statistics.median(off["rps"] for off, _ in pairs)),
            "rps_on": round(statistics.median(on["rps"] for _, on in pairs)),
            "p99_ms_off": round(statistics.median(off["p99_ms"] for off, _ in pairs), 2),
            "p99_ms_on": round(statistics.median(on["p99_ms"] for _, on in pairs), 2),
            "rps_ratio_to_off": round(ratio, 3),
            "cpu_us_per_request_off": round(statistics.median(off["cpu_us"] for off, _ in pairs)),
            "cpu_us_per_request_on": round(statistics.median(on["cpu_us"] for _, on in pairs)),
            "cpu_ratio_to_off": round(
                statistics.median(on["cpu_us"] / off["cpu_us"] for off, on in pairs), 3
            ),
            "target": f"rps with the limit on >= {TARGET * 100:.0f} % of off (paired)",
            "met": ratio >= TARGET,
        }
    return figures
