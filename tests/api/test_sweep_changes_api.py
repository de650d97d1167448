"""A change no API call made still reaches everything that follows it: the core's traffic
sweep, a job of its own, disables a client over quota, and the change notice carries that
client to the core (live, the core keeps running), to its subscription and to the
browsers' WebSockets, as it would after a call."""

from __future__ import annotations

import time
import uuid

import requests
from core_panel import wait_until
from core_traffic import (
    add_client,
    add_inbound,
    client_core,
    core_pid,
    in_core,
    passes,
    push,
    route,
    traffic_core_panel,
)
from helpers import PUSH_WAIT, connect, next_message, ok

CLIENTS = "/panel/api/clients"


def enabled(api, email: str) -> bool:
    return ok(api.get(f"{CLIENTS}/get/{email}"))["client"]["enable"]


def subscription(panel, sub_id: str) -> int:
    return requests.get(f"{panel.sub_url}/sub/{sub_id}", timeout=10).status_code


def test_the_sweep_disabling_a_client_reaches_the_core_its_subscription_and_the_browsers(
    tmp_path, echo
):
    panel = traffic_core_panel(tmp_path / "panel")
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
            ws = connect(panel, api)
            try:
                push(capped_route[0], echo, 100_000)
                deadline = time.time() + PUSH_WAIT
                next_message(ws, "invalidate", deadline, resource="clients")
            finally:
                ws.close()
            assert enabled(api, capped["email"]) is False
            wait_until(
                lambda: not passes(capped_route[0], echo), "the core refuses the swept client"
            )
            assert passes(other_route[0], echo)
            assert subscription(panel, capped["subId"]) == 404
            assert subscription(panel, other["subId"]) == 200
        assert core_pid(panel) == pid, "the core was restarted"
    finally:
        panel.stop()
