"""A panel whose core is the stand-in Xray (fake_xray.py): the state file a test writes to
steer what the stand-in answers, the calls it records, and clients with IP limits added
through the API. For the tests of what only Xray serves: online users and their
addresses, and traffic ticks a test holds in the middle of their read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from access_log import wait_until
from helpers import TESTS, ok
from panels import start_panel

FAKE_XRAY = TESTS / "fake_xray.py"


def write_state(path: Path, **state) -> None:
    """Replaces the fake core's state at once: it never reads a half-written file."""
    scratch = path.with_name(path.name + ".new")
    scratch.write_text(json.dumps(state))
    scratch.replace(path)


def calls(path: Path) -> list[tuple[str, bytes]]:
    if not path.exists():
        return []
    return [
        (call["method"], None if call["request"] is None else bytes.fromhex(call["request"]))
        for call in map(json.loads, path.read_text().splitlines())
    ]


def fake_xray_env(place: Path, **state) -> dict:
    """The environment of a panel whose core is fake_xray.py, steered by `place`'s
    state.json (written with `state`) and recording its calls in `place`'s calls.jsonl."""
    binary = place / "xray"
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_XRAY}" "$@"\n')
    binary.chmod(0o755)
    write_state(place / "state.json", **state)
    return {
        "APPLIANCE_CORE": str(binary),
        "FAKE_XRAY_STATE": str(place / "state.json"),
        "FAKE_XRAY_CALLS": str(place / "calls.jsonl"),
    }


def counting(place: Path) -> None:
    """Wait until the stand-in core of `place` answers a read of its counters after now:
    it has read its state file, and counters written from now on are bytes it counted
    (written before, they would be its starting point)."""
    path = place / "calls.jsonl"
    before = len(calls(path))
    wait_until(
        lambda: any(method.endswith("/QueryStats") for method, _ in calls(path)[before:]),
        "the stand-in core answers for its counters",
    )


def in_config(api, email: str) -> bool:
    """Whether the core config the panel wrote lists the client `email`."""
    config = ok(api.get("/panel/api/server/getConfigJson"))
    return any(
        client.get("email") == email
        for inbound in config["inbounds"]
        for client in inbound.get("settings", {}).get("clients", [])
    )


def fake_xray_panel(tmp_path, **state):
    """A panel running fake_xray.py as its core, traffic ticks every second, IP limit on."""
    server = start_panel(tmp_path, env=fake_xray_env(tmp_path, **state))
    api = server.client()
    ok(api.post("/panel/api/setting/update", {"trafficInterval": 1, "ipLimitEnable": True}))
    mark = len(server.lines)
    ok(api.post("/panel/api/setting/restartPanel"))
    server.wait_listening(mark)
    wait_until(
        lambda: ok(server.client().get("/panel/api/server/status"))["core"]["state"] == "running",
        "the core runs",
    )
    return server


def add_clients(api, limits: dict[str, int]) -> None:
    """One inbound with these clients (email: limitIp), once the core runs them all."""
    inbound = ok(
        api.post(
            "/panel/api/inbounds/add",
            {"protocol": "vless", "port": 4433, "settings": {"decryption": "none"}},
        )
    )
    for email, limit in limits.items():
        client = {"email": email, "limitIp": limit}
        ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))

    def running() -> bool:
        config = ok(api.get("/panel/api/server/getConfigJson"))
        entries = [i for i in config["inbounds"] if i.get("port") == inbound["port"]]
        return bool(entries) and len(entries[0]["settings"]["clients"]) == len(limits)

    wait_until(running, "the core runs the new clients")
