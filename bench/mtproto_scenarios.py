"""What the MTProto proxy process costs: memory per idle connection, relay throughput
next to a plain TCP relay, and the time the panel's `PUT /secrets` takes at 10,000 secrets.

The proxy runs as the panel runs it (`python -m appliance mtproto-proxy CONFIG`, token
on stdin), in front of a stand-in data centre (`mtproto_peers.py sink`); the plain relay
is `mtproto_peers.py relay`, the same gevent server and copy loop without the handshake
and the ciphers. The client side is the obfuscated2 opening a Telegram app sends for a
"dd" secret, written here with `cryptography`.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from harness import Context, log, scenario

from appliance.mtproto.wire import PADDED_TAG, accept_opening

PEERS = str(Path(__file__).with_name("mtproto_peers.py"))
IDLE_CONNECTIONS = 5000
PAYLOAD_MB = 64
SECRETS = 10_000


def ctr(key: bytes, iv: bytes):
    return Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor()


def client_opening(key: bytes, dc: int = 2) -> tuple[bytes, object]:
    """An app's 64-byte opening for a "dd" secret, and its encrypting cipher."""
    while True:
        raw = bytearray(os.urandom(64))
        if raw[0] != 0xEF and bytes(raw[:4]) not in (b"GET ", b"POST", b"HEAD", PADDED_TAG):
            break
    encrypt = ctr(hashlib.sha256(bytes(raw[8:40]) + key).digest(), bytes(raw[40:56]))
    raw[56:60] = PADDED_TAG
    raw[60:62] = dc.to_bytes(2, "little", signed=True)
    sealed = encrypt.update(bytes(raw))
    return bytes(raw[:56]) + sealed[56:], encrypt


class Proxy:
    def __init__(self, workdir: Path, dc_port: int, secrets: dict):
        self.token = os.urandom(16).hex()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = workdir / f"mtproto-{self.port}.json"
        config.write_text(
            json.dumps(
                {
                    "listen": "127.0.0.1",
                    "port": self.port,
                    "domain": "",
                    "dataCenters": [f"127.0.0.1:{dc_port}"] * 5,
                    "secrets": secrets,
                }
            )
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "appliance", "mtproto-proxy", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.process.stdin.write(json.dumps({"token": self.token}).encode() + b"\n")
        self.process.stdin.flush()
        self.api_port = json.loads(self.process.stdout.readline())["managementPort"]

    def call(self, method: str, path: str, body: bytes | None = None) -> dict:
        connection = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=120)
        try:
            connection.request(method, path, body, {"Authorization": f"Bearer {self.token}"})
            reply = connection.getresponse()
            return json.loads(reply.read())
        finally:
            connection.close()

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def peer(*args: str) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, PEERS, *args], stdout=subprocess.PIPE)
    return process, int(process.stdout.readline())


def send_through(port: int, opening: bytes, body: bytes) -> float:
    """Seconds from connect until the sink said it received opening and body."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(opening)
        sock.sendall(body)
        if not sock.recv(1):
            raise RuntimeError("the sink did not confirm")
    return time.perf_counter() - started


def idle_connections(proxy: Proxy, key: bytes, count: int) -> dict:
    before = proxy.rss_mib()
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", proxy.port))
        sock.sendall(client_opening(key)[0])
        held.append(sock)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proxy.call("GET", "/stats")["users"].get("bench", {}).get("connections") == count:
            break
        time.sleep(0.2)
    time.sleep(1)
    after = proxy.rss_mib()
    for sock in held:
        sock.close()
    grown = max(after - before, 1e-9)
    return {
        "connections": count,
        "rss_before_mib": round(before, 1),
        "rss_after_mib": round(after, 1),
        "connections_per_mib": round(count / grown, 1),
        "kib_per_connection": round(grown * 1024 / count, 2),
    }


@scenario("mtproto", dataset=None)
def mtproto(ctx: Context) -> dict:
    """The MTProto proxy process: idle connections held per MiB of its RSS, relay
    throughput next to a plain TCP relay in the same run, `PUT /secrets` at 10,000
    secrets, and the handshake's CPU when the matching secret is the last of 10,000."""
    key = os.urandom(16)
    payload = os.urandom(PAYLOAD_MB << 20)
    sink, sink_port = peer("sink", str(64 + len(payload)))
    relay, relay_port = peer("relay", f"127.0.0.1:{sink_port}")
    proxy = Proxy(ctx.bench.workdir, sink_port, {"bench": {"secret": key.hex(), "adTag": ""}})
    try:
        log(f"  mtproto: {IDLE_CONNECTIONS} idle connections")
        idle = idle_connections(proxy, key, IDLE_CONNECTIONS)
        proxied, plain = [], []
        for _ in range(ctx.runs):
            opening, encrypt = client_opening(key)
            body = encrypt.update(payload)
            proxied.append(len(payload) / send_through(proxy.port, opening, body) / 2**20)
            plain.append(len(payload) / send_through(relay_port, opening, body) / 2**20)
        throughput = {
            "payload_mib": PAYLOAD_MB,
            "mtproto_mib_s": round(statistics.median(proxied), 1),
            "plain_relay_mib_s": round(statistics.median(plain), 1),
        }
        throughput["ratio_to_plain"] = round(
            throughput["mtproto_mib_s"] / throughput["plain_relay_mib_s"], 3
        )
        many = {f"user{n}": {"secret": os.urandom(16).hex(), "adTag": ""} for n in range(SECRETS)}
        bodies = [json.dumps({"secrets": many}).encode()]
        changed = dict(many, user0={"secret": key.hex(), "adTag": "ab" * 16})
        bodies.append(json.dumps({"secrets": changed}).encode())
        timings = []
        for run in range(ctx.runs):
            started = time.perf_counter()
            reply = proxy.call("PUT", "/secrets", bodies[run % 2])
            timings.append(time.perf_counter() - started)
            if reply.get("active") != SECRETS:
                raise RuntimeError(f"PUT /secrets answered {reply}")
        keys = [(name, bytes.fromhex(entry["secret"])) for name, entry in many.items()]
        keys.append(("last", key))
        handshakes = []
        for _ in range(ctx.runs):
            opening = client_opening(key)[0]
            started = time.perf_counter()
            if accept_opening(opening, keys, (PADDED_TAG,)).name != "last":
                raise RuntimeError("the opening was not matched to its secret")
            handshakes.append(time.perf_counter() - started)
        secrets = {
            "secrets": SECRETS,
            "put_secrets_ms": round(statistics.median(timings) * 1000, 1),
            "handshake_cpu_ms_last_of_10k": round(statistics.median(handshakes) * 1000, 1),
            "proxy_rss_mib_with_10k_secrets": round(proxy.rss_mib(), 1),
        }
    finally:
        proxy.stop()
        for process in (sink, relay):
            process.kill()
            process.wait()
    return {"idle": idle, "throughput": throughput, "secrets": secrets}
