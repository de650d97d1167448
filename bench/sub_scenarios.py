"""The subscription server under the load client apps put on it: 10,000 clients, each
polling its own subscription, 50 connections at once.

`subs_10k` has 10,000 active clients over four inbounds (VLESS REALITY, VMess WS, Trojan
TLS, Shadowsocks), one in five attached to two of them, each with its own subId; the
VLESS inbound has two hosts.

Each format is measured two ways (wrk Lua scripts):

- `cold`, the headline: the body cache is emptied the way the panel empties it, by a
  harmless change (a host saved with the values it has: unlike a setting or a client, a
  host does not make the panel sync the core, whose config build would stall the pass),
  then every one of the 10,000 subIds is requested exactly once, in a shuffled order,
  and wrk stops after the 10,000th reply. Each client app fetches its subscription every
  few hours, so almost every real request finds no rendered body: this is the path
  users hit.
- `warm`: right after, random subIds of the 10,000 for a few seconds, every body
  rendered by the cold pass: one indexed read and a cached body per request.

Throughput and p99 come from wrk (`--latency`). Each measured run is paired with a run
of the hello-world ceiling at 50 connections just before it, and `rps_ratio_to_hello_50`
is the median of the per-pair ratios: on a shared, noisy machine the pair sees the same
load, where two figures taken a minute apart may not. The runner's own `rps_ratio`
divides by the baseline scenario's 32-connection figure.
"""

from __future__ import annotations

import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import scenarios  # noqa: F401  (the first scenarios register, and so run, before these)
from harness import (
    BenchError,
    Client,
    Context,
    Dataset,
    HelloServer,
    insert_clients,
    insert_inbound,
    log,
    reality_stream,
    register_dataset,
    scenario,
)

from appliance.domain.client_rules import email_key, normalize_client
from appliance.services.clients.records import columns_of

DATASET = "subs_10k"
CLIENT_COUNT = 10_000
FIRST_PORT = 40000
CONNECTIONS = 50
SECONDS = 3
SEED = 20261122
TLS = {
    "serverName": "bench.example.com",
    "certificates": [{"certificateFile": "/etc/ssl/b.pem", "keyFile": "/etc/ssl/b.key"}],
}
INBOUNDS = (
    ("vless reality", "vless", {"decryption": "none"}, None),
    (
        "vmess ws",
        "vmess",
        {},
        {"network": "ws", "wsSettings": {"path": "/ws", "headers": {"Host": "cdn.example.com"}}},
    ),
    ("trojan tls", "trojan", {}, {"network": "tcp", "security": "tls", "tlsSettings": TLS}),
    ("ss", "shadowsocks", {"method": "aes-256-gcm", "password": "bench"}, {"network": "tcp"}),
)
# (format, path on the subscription server); the JSON format is the core's client config.
FORMATS = (("base64", "/sub/"), ("json", "/json/"), ("yaml", "/yaml/"))
# A cold pass ends after its 10,000 replies; this only bounds a server that stalls.
COLD_LIMIT_SECONDS = 120
COLD_TARGET = 0.5
WARM_TARGET = 0.6
SUB_LISTENING = re.compile(r"subscription server listening on http://[^:/]+:(\d+)/")
RANDOM_SUB = """
math.randomseed(%d)
request = function()
  return wrk.format("GET", "%s" .. string.format("sub%%05d", math.random(0, %d)))
end
"""
# Every subId once, shuffled. At the last reply the script writes a file: the pass's
# rate is 10,000 over the time from starting wrk to that file appearing (polled every
# millisecond), and the bench then stops wrk with SIGINT. Requests sent after the last
# subId ask for the first ones again; wrk's p99 includes the few of them answered
# before it stops.
EVERY_SUB_ONCE = """
local count = %d
local order = {}
for i = 1, count do order[i] = i - 1 end
math.randomseed(%d)
for i = count, 2, -1 do
  local j = math.random(i)
  order[i], order[j] = order[j], order[i]
end
local sent, replies = 0, 0
request = function()
  sent = sent + 1
  return sub_request(order[(sent - 1) %% count + 1])
end
response = function(status, headers, body)
  replies = replies + 1
  if replies == count then
    local marker = io.open("%s", "w")
    marker:close()
  end
end
"""
# The request of subId `index` that EVERY_SUB_ONCE sends, defined before it.
PLAIN_REQUEST = """
local function sub_request(index)
  return wrk.format("GET", "%s" .. string.format("sub%%05d", index))
end
"""
POLL_SECONDS = 0.001


def sub_id(index: int) -> str:
    return f"sub{index:05d}"


def seed_subscriptions(conn: sqlite3.Connection) -> None:
    """Inbounds, hosts, clients (each with its own subId), attachments, traffic."""
    rng = random.Random(SEED)
    now = int(time.time() * 1000)
    records = {}
    for inbound_id, (remark, protocol, settings, stream) in enumerate(INBOUNDS, start=1):
        if stream is None:
            stream = reality_stream()
        payload = {
            "remark": remark,
            "protocol": protocol,
            "port": FIRST_PORT + inbound_id,
            "settings": settings,
            "streamSettings": stream,
        }
        records[inbound_id] = insert_inbound(conn, inbound_id, payload, now)
    conn.executemany(
        "INSERT INTO host (inbound_id, remark, address, port, security, sni, tags, enable, "
        "sort_order) VALUES (1, ?, ?, ?, 'same', '', '[]', 1, ?)",
        [("edge A", "a.example.com", 443, 0), ("edge B", "b.example.com", 8443, 1)],
    )
    clients, attachments, traffic = [], [], []
    for index in range(CLIENT_COUNT):
        first = index % len(INBOUNDS) + 1
        ids = [first] if rng.random() < 0.8 else sorted({first, first % len(INBOUNDS) + 1})
        payload = {
            "email": f"user{index:05d}@bench.example",
            "subId": sub_id(index),
            "totalGB": rng.choice((0, 50 * 1024**3)),
            "expiryTime": rng.choice((0, now + 90 * 86_400_000)),
        }
        record = normalize_client(payload, [records[i] for i in ids])
        key = email_key(record["email"])
        columns = columns_of(record)
        clients.append((index + 1, key, *columns.values(), now, now))
        attachments += [(index + 1, inbound_id) for inbound_id in ids]
        up = rng.randrange(10**9)
        traffic.append((key, record["email"], up, up * 7, True, now))
    insert_clients(conn, list(columns), clients, attachments, traffic)


def check_subscriptions(client: Client) -> str:
    """A sampled subscription lists one link per inbound it is on, the VLESS one once
    per host."""
    links = client.call("GET", f"/panel/api/clients/subLinks/{sub_id(4)}")
    if len(links) != 2 or not all(link.startswith("vless://") for link in links):
        raise BenchError(f"subLinks of {sub_id(4)} (VLESS with two hosts): {links}")
    return f"subLinks of {sub_id(4)}: {len(links)} VLESS links, one per host"


register_dataset(
    Dataset(
        DATASET,
        "10,000 clients with their own subIds over VLESS REALITY, VMess WS, Trojan TLS and "
        "Shadowsocks inbounds; two hosts on the VLESS one",
        seed=seed_subscriptions,
        check=check_subscriptions,
        without_core=True,
    )
)


@scenario("subscription", dataset=DATASET, mutates=True)
def subscription(ctx: Context) -> dict:
    """The subscription server at 10,000 clients: base64, JSON and YAML bodies over 50
    connections (wrk), each cold (cache emptied, every subId once) and warm (random
    subIds, every body cached): req/s and p99, each run paired with a run of the hello
    ceiling at 50 connections."""
    if not shutil.which("wrk"):
        raise BenchError("the subscription scenario needs wrk on PATH")
    client = ctx.panel.client()
    switches = {"subJsonEnable": True, "subYamlEnable": True}
    client.call("POST", "/panel/api/setting/update", switches)
    sub_url = _sub_url(ctx.panel.lines)
    hello = ctx.start(HelloServer())
    host = client.call("GET", "/panel/api/hosts/get/1")
    pairs: dict[str, list[tuple[dict, dict]]] = {}
    for run in range(ctx.runs):
        for name, path in FORMATS:
            cold = ctx.bench.workdir / f"every-{name}-{run}.lua"
            done = ctx.bench.workdir / f"every-{name}-{run}.done"
            once = EVERY_SUB_ONCE % (CLIENT_COUNT, SEED + run, done)
            cold.write_text(PLAIN_REQUEST % path + once)
            warm = ctx.bench.workdir / f"random-{name}-{run}.lua"
            warm.write_text(RANDOM_SUB % (SEED + run, path, CLIENT_COUNT - 1))
            ceiling = _wrk(hello.url + "/hello")
            # The same values again: nothing changes but the caches the panel empties.
            client.call("POST", "/panel/api/hosts/update/1", host)
            served = _wrk(sub_url + path, script=str(cold), until=done)
            if served["requests"] < CLIENT_COUNT:
                raise BenchError(f"cold {name}: {served['requests']} replies, not {CLIENT_COUNT}")
            pairs.setdefault(f"{name}_cold", []).append((ceiling, served))
            pairs.setdefault(f"{name}_warm", []).append(
                (_wrk(hello.url + "/hello"), _wrk(sub_url + path, script=str(warm)))
            )
    figures = {}
    for name, path in FORMATS:
        size = len(_get(sub_url + path + sub_id(4)))
        for temperature, target in (("cold", COLD_TARGET), ("warm", WARM_TARGET)):
            figure = _paired(pairs[f"{name}_{temperature}"])
            figure["response_bytes"] = size
            figure["target"] = f"rps >= {target * 100:.0f} % of hello's (50 connections, paired)"
            figure["met"] = figure["rps_ratio_to_hello_50"] >= target
            figures[f"{name}_{temperature}"] = figure
    return figures


def _paired(pairs: list[tuple[dict, dict]]) -> dict:
    """Medians of the served runs and of their hello ceilings, and of the ratios."""
    return {
        "rps": round(statistics.median(served["rps"] for _, served in pairs)),
        "p99_ms": round(statistics.median(served["p99_ms"] for _, served in pairs), 2),
        "connections": CONNECTIONS,
        "tool": "wrk",
        "hello_50_rps": round(statistics.median(ceiling["rps"] for ceiling, _ in pairs)),
        "hello_50_p99_ms": round(statistics.median(c["p99_ms"] for c, _ in pairs), 2),
        "rps_ratio_to_hello_50": round(
            statistics.median(served["rps"] / ceiling["rps"] for ceiling, served in pairs), 3
        ),
        "timeouts_over_2s": max(served["timeouts"] for _, served in pairs),
    }


def _sub_url(lines: list[str]) -> str:
    for line in lines:
        if match := SUB_LISTENING.search(line):
            return f"http://127.0.0.1:{match.group(1)}"
    raise BenchError("the panel printed no subscription server address")


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def _wrk(url: str, script: str = "", until: Path | None = None) -> dict:
    """req/s, p99 (ms) and replies of one wrk run with CONNECTIONS connections: SECONDS
    long; or, with `until`, until the script writes that file, its req/s then being
    CLIENT_COUNT over the time that took (see EVERY_SUB_ONCE)."""
    seconds = SECONDS if until is None else COLD_LIMIT_SECONDS
    argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--latency"]
    if script:
        argv += ["-s", script]
    started = time.perf_counter()
    with subprocess.Popen([*argv, url], stdout=subprocess.PIPE, text=True) as wrk:
        while until is not None and wrk.poll() is None and not until.exists():
            time.sleep(POLL_SECONDS)
        elapsed = time.perf_counter() - started
        if until is not None and wrk.poll() is None:
            wrk.send_signal(signal.SIGINT)  # wrk then prints its figures for the run so far
        output = wrk.communicate()[0]
    if wrk.returncode != 0:
        raise BenchError(f"wrk exited with {wrk.returncode} on {url}:\n{output}")
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    connect, read, write, timeouts = map(int, errors.groups()) if errors else (0, 0, 0, 0)
    if "Non-2xx" in output or connect or read or write:
        raise BenchError(f"wrk saw failed requests on {url}:\n{output}")
    rate = re.search(r"Requests/sec:\s*([\d.]+)", output)
    count = re.search(r"^\s*(\d+) requests in ", output, re.MULTILINE)
    p99 = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", output, re.MULTILINE)
    if not rate or not p99 or not count:
        raise BenchError(f"wrk printed no Requests/sec, request count or 99% line:\n{output}")
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    rps = float(rate.group(1)) if until is None else CLIENT_COUNT / elapsed
    log(f"  {url}: {rps:.0f} req/s, {count.group(1)} replies")
    return {
        "rps": rps,
        "p99_ms": float(p99.group(1)) * scale,
        "requests": int(count.group(1)),
        # Replies slower than wrk's 2 s timeout: a figure of an overloaded server, which
        # its p99 cannot show (wrk leaves them out of the latencies).
        "timeouts": timeouts,
    }
