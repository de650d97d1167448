"""The subscription server under the load client apps put on it: 10,000 clients, each
polling its own subscription, 50 connections at once.

`subs_10k` has 10,000 active clients over four inbounds (VLESS REALITY, VMess WS, Trojan
TLS, Shadowsocks), one in five attached to two of them, each with its own subId; the
VLESS inbound has two hosts. Requests pick a random subId of the 10,000 (a wrk Lua
script), as a crowd of apps would, after one unmeasured pass that renders and caches
every body (its duration is logged: the cost of 10,000 renders). The figures are the
steady state the server lives in, where a request costs one indexed read and a cached
body.

Throughput and p99 come from wrk (`--latency`). Each measured run is paired with a run
of the hello-world ceiling at 50 connections just before it, and `rps_ratio_to_hello_50`
is the median of the per-pair ratios: on a shared, noisy machine the pair sees the same
load, where two figures taken a minute apart may not. The runner's own `rps_ratio`
divides by the baseline scenario's 32-connection figure.
"""

from __future__ import annotations

import http.client
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import time
import urllib.parse
import urllib.request

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
# (format, path on the subscription server)
FORMATS = (("base64", "/sub/"), ("json", "/json/"), ("yaml", "/yaml/"))
SUB_LISTENING = re.compile(r"subscription server listening on http://[^:/]+:(\d+)/")
RANDOM_SUB = """
math.randomseed(%d)
request = function()
  return wrk.format("GET", "%s" .. string.format("sub%%05d", math.random(0, %d)))
end
"""


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
    )
)


@scenario("subscription", dataset=DATASET, mutates=True)
def subscription(ctx: Context) -> dict:
    """The subscription server at 10,000 clients: base64, JSON and YAML bodies for random
    subIds over 50 connections (wrk), req/s and p99, each run paired with a run of the
    hello ceiling at 50 connections."""
    if not shutil.which("wrk"):
        raise BenchError("the subscription scenario needs wrk on PATH")
    client = ctx.panel.client()
    client.call("POST", "/panel/api/setting/update", {"subJsonEnable": True, "subYamlEnable": True})
    sub_url = _sub_url(ctx.panel.lines)
    hello = ctx.start(HelloServer())
    for _, path in FORMATS:
        _fill_cache(sub_url + path)
    figures = {}
    for name, path in FORMATS:
        script = ctx.bench.workdir / f"random-{name}.lua"
        script.write_text(RANDOM_SUB % (SEED, path, CLIENT_COUNT - 1))
        pairs = [
            (_wrk(hello.url + "/hello"), _wrk(sub_url + path, script=str(script)))
            for _ in range(ctx.runs)
        ]
        figure = {
            "rps": round(statistics.median(served["rps"] for _, served in pairs)),
            "p99_ms": round(statistics.median(served["p99_ms"] for _, served in pairs), 2),
            "connections": CONNECTIONS,
            "tool": "wrk",
            "hello_50_rps": round(statistics.median(ceiling["rps"] for ceiling, _ in pairs)),
            "hello_50_p99_ms": round(statistics.median(c["p99_ms"] for c, _ in pairs), 2),
            "rps_ratio_to_hello_50": round(
                statistics.median(served["rps"] / ceiling["rps"] for ceiling, served in pairs), 3
            ),
            "response_bytes": len(_get(sub_url + path + sub_id(4))),
        }
        if name == "base64":
            figure["target"] = "rps >= 60 % of hello's (50 connections, paired runs)"
            figure["met"] = figure["rps_ratio_to_hello_50"] >= 0.6
        figures[name] = figure
    return figures


def _sub_url(lines: list[str]) -> str:
    for line in lines:
        if match := SUB_LISTENING.search(line):
            return f"http://127.0.0.1:{match.group(1)}"
    raise BenchError("the panel printed no subscription server address")


def _fill_cache(url: str) -> None:
    """Request every subscription once, unmeasured: later requests find them rendered."""
    started = time.perf_counter()
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        for index in range(CLIENT_COUNT):
            connection.request("GET", parts.path + sub_id(index))
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise BenchError(f"{url}{sub_id(index)}: HTTP {response.status}")
    finally:
        connection.close()
    log(f"  rendered {CLIENT_COUNT} bodies of {url} in {time.perf_counter() - started:.1f} s")


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def _wrk(url: str, script: str = "", seconds: float = SECONDS) -> dict:
    """req/s and p99 (ms) of one wrk run with CONNECTIONS connections."""
    argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--latency"]
    if script:
        argv += ["-s", script]
    output = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in output or "Socket errors" in output:
        raise BenchError(f"wrk saw failed requests on {url}:\n{output}")
    rate = re.search(r"Requests/sec:\s*([\d.]+)", output)
    p99 = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", output, re.MULTILINE)
    if not rate or not p99:
        raise BenchError(f"wrk printed no Requests/sec or 99% line:\n{output}")
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    log(f"  {url}: {float(rate.group(1)):.0f} req/s")
    return {"rps": float(rate.group(1)), "p99_ms": float(p99.group(1)) * scale}
