"""A change no API call made still reaches everything that follows it: the core's traffic
sweep, a job of its own, disables a client over quota, and the change notice carries that
client to the core (live, the core keeps running), to its subscription and to the
browsers' WebSockets, as it would after a call."""

from __future__ import annotations

import json
import time
import uuid

import requests
from core_panel import WAIT, wait_until
from test_core_e2e import (
    add_client,
    add_inbound,
    client_core,
    client_record,
    core_panel,
    core_pid,
    core_socket,
    in_core,
    passes,
    push,
    route,
)


def next_invalidation(ws, resource: str) -> dict:
    """The next `invalidate` push for `resource`, skipping the messages between."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ws.settimeout(max(deadline - time.monotonic(), 0.1))
        message = json.loads(ws.recv())
        if message.get("type") == "invalidate" and message.get("resource") == resource:
            return message
    raise AssertionError(f"no invalidate push for {resource}")


def subscription(panel, sub_id: str) -> int:
    return requests.get(f"{panel.sub_url}/sub/{sub_id}", timeout=10).status_code


def test_the_sweep_disabling_a_client_reaches_the_core_its_subscription_and_the_browsers(
    tmp_path, echo
):
    panel = core_panel(tmp_path / "panel")
    try:
        api = panel.client()
        inbound = add_inbound(api, "vless")
        capped = add_client(api, inbound["id"], totalGB=50_000, subId=uuid.uuid4().hex[:16])
        other = add_client(api, inbound["id"], subId=uuid.uuid4().hex[:16])
        pid = in_core(api, panel, inbound)
        capped_route, other_route = route(inbound, capped), route(inbound, other)
        with client_core(tmp_path, [capped_route, other_route]):
            wait_until(lambda: passes(capped_route[0], echo), "the capped client connects")
            assert subscription(panel, capped["subId"]) == 200
            ws = core_socket(panel, api)
            try:
                push(capped_route[0], echo, 100_000)
                next_invalidation(ws, "clients")
            finally:
                ws.close()
            assert client_record(api, capped["email"])["enable"] is False
            wait_until(
                lambda: not passes(capped_route[0], echo), "the core refuses the swept client"
            )
            assert passes(other_route[0], echo)
            assert subscription(panel, capped["subId"]) == 404
            assert subscription(panel, other["subId"]) == 200
        assert core_pid(panel) == pid, "the core was restarted"
    finally:
        panel.stop()
