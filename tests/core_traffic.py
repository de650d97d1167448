"""A panel on the real core that counts traffic every second, and a client core to send
bytes through it: what the end-to-end tests of traffic, quotas, restarts and live edits
share.

The panel runs Debian's V2Ray 4.34 as its core, with `trafficInterval` stored and applied
by a panel restart, and the loopback template (the traffic of these tests goes to an echo
server on 127.0.0.1). A second V2Ray process plays the user's client: its local SOCKS
ports lead, as one panel client each, through the panel's inbounds to the echo server.
The core's process id is read from the core-state.json the panel keeps and from the
panel's child processes.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import uuid

import psutil
from core_helpers import (
    LOOPBACK,
    REFUSED_STREAM,
    V2RAY,
    client_config,
    running_core,
    socks_echo,
)
from core_panel import CORE_ENV, loopback_template, wait_until
from helpers import db_rows, free_port, ok
from panels import PanelServer, start_panel

INBOUNDS = "/panel/api/inbounds"
CLIENTS = "/panel/api/clients"
SMALL = b"ping" * 64
# Per-client counters are payload bytes; inbound counters add each protocol's framing and
# handshakes, a few per cent at most for the sizes sent here. The fixed part covers the
# small probes sent while waiting for a route to open.
OVERHEAD = 0.05
OVERHEAD_FIXED = 4096
STARTED_LINE = "started"

# Inbound payloads per protocol, each on plain TCP so V2Ray 4.34 runs all of them.
PLAIN = {"network": "tcp", "security": "none"}
INBOUND_SETTINGS = {
    "vless": {"decryption": "none"},
    "vmess": {},
    "trojan": {},
    "shadowsocks": {"method": "aes-256-gcm", "network": "tcp"},
    "socks": {"auth": "noauth", "udp": False},
    "http": {"allowTransparent": False},
}


# ---- helpers: the panel's core ------------------------------------------------------------


def traffic_core_panel(tmp_path, interval: int = 1) -> PanelServer:
    """A panel on the real core with `trafficInterval` stored and in effect (the traffic
    job reads it at start, so the panel restarts) and the loopback template."""
    server = start_panel(tmp_path, env=CORE_ENV)
    api = server.client()
    ok(api.post("/panel/api/setting/update", {"trafficInterval": interval}))
    ok(api.post("/panel/api/core/update", {"coreSetting": json.dumps(loopback_template(api))}))
    mark = len(server.lines)
    ok(api.post("/panel/api/setting/restartPanel"))
    server.wait_listening(mark)
    wait_until(lambda: core_pid(server), "the core runs after the panel restart")
    return server


def core_processes(server: PanelServer) -> list[psutil.Process]:
    """Every core process running on this panel's data directory, child or orphan."""
    config_dir = os.path.join(server.data_dir, "core")
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if process.info["status"] == psutil.STATUS_ZOMBIE or not cmdline:
            continue
        if cmdline[0] == V2RAY and any(arg.startswith(config_dir) for arg in cmdline):
            found.append(process)
    return found


def core_pid(server: PanelServer) -> int:
    """The pid of the running core, 0 when none runs. The panel's state file and its child
    processes must agree on it."""
    try:
        with open(os.path.join(server.data_dir, "core", "core-state.json")) as fh:
            recorded = json.load(fh)["pid"]
    except (OSError, ValueError):
        recorded = 0
    children = [
        child.pid for child in psutil.Process(server.process.pid).children() if is_core(child)
    ]
    return recorded if children == [recorded] else 0


def is_core(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE and process.exe() == V2RAY
    except psutil.Error:
        return False


def in_core(api, panel, *inbounds: dict) -> int:
    """Wait until the running core serves `inbounds` (adding one restarts the core); its pid.
    config.json names a new inbound before the old core ends, so the pid counts only once
    it holds still."""
    tags = {inbound["tag"] for inbound in inbounds}

    def serving() -> int:
        running = ok(api.get("/panel/api/server/getConfigJson"))
        if not tags <= {inbound.get("tag") for inbound in running["inbounds"]}:
            return 0
        pid = core_pid(panel)
        time.sleep(0.5)
        return pid if pid and core_pid(panel) == pid else 0

    return wait_until(serving, f"the core serves {sorted(tags)}")


def core_state(api) -> str:
    return ok(api.get("/panel/api/server/status"))["core"]["state"]


def started_count(api) -> int:
    """How many times the core printed its start line (its output is kept across runs)."""
    output = ok(api.get("/panel/api/core/getCoreResult"))
    return sum(STARTED_LINE in line for line in output.splitlines())


def settled_started_count(api) -> int:
    """`started_count` once it holds still: a core that was just (re)started runs before
    it prints its start line, and a line printed after the count was taken would look
    like one more restart."""

    def settled() -> int | None:
        before = started_count(api)
        time.sleep(1.0)
        return before if started_count(api) == before else None

    return wait_until(settled, "the core's start lines settle")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def add_inbound(api, protocol: str) -> dict:
    payload = {
        "protocol": protocol,
        "remark": f"e2e-{protocol}",
        "listen": LOOPBACK,
        "port": free_port(),
        "settings": INBOUND_SETTINGS[protocol],
        "streamSettings": PLAIN,
    }
    return ok(api.post(f"{INBOUNDS}/add", payload))


def add_refused_inbound(api, panel: PanelServer) -> dict:
    """An inbound V2Ray 4.34 refuses, on v2fly 5's meek transport, stored as a database restored
    from a panel on a newer V2Ray holds it: the API refuses to save what the core refuses."""
    payload = {
        "protocol": "vless",
        "listen": LOOPBACK,
        "port": free_port(),
        "streamSettings": {"network": "tcp", "security": "none"},
    }
    inbound = ok(api.post(f"{INBOUNDS}/add", payload))
    in_core(api, panel, inbound)
    stream = json.dumps(REFUSED_STREAM)
    db_rows(panel, "UPDATE inbound SET stream_settings = ? WHERE id = ?", (stream, inbound["id"]))
    return inbound


def add_client(api, inbound_id: int, **fields) -> dict:
    client = {"email": f"{uuid.uuid4().hex[:10]}@e2e", "id": str(uuid.uuid4()), **fields}
    return ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]}))


def traffic(api, email: str) -> dict:
    return ok(api.get(f"{CLIENTS}/traffic/{email}"))


def inbound_counters(api) -> dict[int, tuple[int, int]]:
    return {row["id"]: (row["up"], row["down"]) for row in ok(api.get(f"{INBOUNDS}/list"))}


def route(inbound: dict, client: dict | None) -> tuple[int, str, int, dict]:
    """A client-core route: a new local SOCKS port leading through `inbound` as `client`
    (None for the plain proxies, which have no panel clients)."""
    return (free_port(), inbound["protocol"], inbound["port"], client or {})


def client_core(tmp_path, routes):
    """The user's V2Ray, once its SOCKS ports (opened together) accept connections."""
    return running_core(tmp_path, client_config(routes), routes[-1][0])


def passes(socks_port: int, echo_port: int, payload: bytes = SMALL) -> bool:
    """Whether a new connection through `socks_port` gets `payload` back."""
    try:
        return socks_echo(socks_port, echo_port, payload) == payload
    except OSError:
        return False


def push(socks_port: int, echo_port: int, size: int) -> None:
    """Send `size` bytes to the echo server and get every one of them back."""
    payload = os.urandom(size)
    assert socks_echo(socks_port, echo_port, payload, timeout=10) == payload


def open_tunnel(socks_port: int, echo_port: int) -> socket.socket:
    """A connection to the echo server through `socks_port` that stays open."""
    sock = socket.create_connection((LOOPBACK, socks_port), 5)
    sock.sendall(b"\x05\x01\x00")
    assert sock.recv(2) == b"\x05\x00"
    sock.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(LOOPBACK) + struct.pack(">H", echo_port))
    reply = b""
    while len(reply) < 10:
        reply += sock.recv(10 - len(reply))
    assert reply[1] == 0, reply
    assert round_trip(sock), "the tunnel does not carry bytes"
    return sock


def round_trip(sock: socket.socket, payload: bytes = SMALL) -> bool:
    """Whether `payload` comes back over the open connection `sock`."""
    try:
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                return False
            received += chunk
    except OSError:
        return False
    return received == payload


def assert_counted(value: int, sent: int, overhead: float = OVERHEAD) -> None:
    """`value` counts `sent` bytes once, give or take the protocol's `overhead` and the
    few small probes that waited for a route to open."""
    assert sent <= value <= sent * (1 + overhead) + OVERHEAD_FIXED, (value, sent)
