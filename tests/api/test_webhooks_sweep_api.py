"""Webhook events no API call raises: the traffic sweep switching off a client over its
quota (client.limited) or past its expiry (client.expired), and the reminders of an
expiry near or a day past and of a share of the quota used, each once, on a panel whose
core is the stand-in Xray so that the sweep and the reminders run every second; and a
client's first traffic (client.first_connected), once; and the core, seen running,
stopped (core.stopped)."""

from __future__ import annotations

import time

from access_log import wait_until
from fake_xray_panel import add_clients, calls, fake_xray_panel, write_state
from helpers import ok
from webhook_receiver import Receiver

CLIENTS = "/panel/api/clients"
SECRET = "a-secret-of-sixteen-or-more"


def hooked_inbound(api, receiver: Receiver, name: str, events: list[str], port: int) -> dict:
    """An endpoint at `receiver` for `events`, and a VLESS inbound on `port` to add the
    clients of a test to."""
    hook = {"name": name, "url": receiver.url, "secret": SECRET, "allowPrivate": True}
    ok(api.post("/panel/api/webhooks/add", {**hook, "events": events}))
    inbound = {"protocol": "vless", "port": port, "settings": {"decryption": "none"}}
    return ok(api.post("/panel/api/inbounds/add", inbound))


def swept(api, receiver: Receiver, inbound: dict, clients, email: str, up: int, down: int):
    """Adds `clients`, sets the traffic of `email`, and returns the events the sweeps
    raised: two at least, then three seconds more of sweeps that must raise nothing more.
    A repeat of one delivery (at least once) is one event; two ids would be two."""
    for client in clients:
        ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound["id"]]}))
    ok(api.post(f"{CLIENTS}/updateTraffic/{email}", {"upload": up, "download": down}))
    receiver.wait_for(2, timeout=30)
    time.sleep(3)
    return list({e["id"]: e for e in receiver.events()}.values())


def test_the_sweep_raises_limited_and_expired_once_each(tmp_path):
    receiver = Receiver().start()
    panel = fake_xray_panel(tmp_path)
    try:
        api = panel.client()
        events = ["client.limited", "client.expired"]
        inbound = hooked_inbound(api, receiver, "sweep", events, 4433)
        past = int(time.time() * 1000) - 60_000
        clients = (
            {"email": "capped@example.com", "totalGB": 1000},
            {"email": "late@example.com", "expiryTime": past},
        )
        found = swept(api, receiver, inbound, clients, "capped@example.com", 600, 600)
        assert sorted((e["event"], e["data"]["email"]) for e in found) == [
            ("client.expired", "late@example.com"),
            ("client.limited", "capped@example.com"),
        ]
        assert all(e["data"]["enable"] is False for e in found)
    finally:
        receiver.stop()
        panel.stop()


def test_a_client_with_a_reset_period_starts_a_new_one_at_expiry_instead_of_being_cut_off(
    tmp_path,
):
    """`reset` days, as 3x-ui's auto-renew: at its expiry the client's counters go to
    zero, its expiry moves on by whole periods until it lies ahead, and it stays enabled
    (one client.traffic_reset, no client.expired); a client without one is cut off."""
    receiver = Receiver().start()
    panel = fake_xray_panel(tmp_path)
    try:
        api = panel.client()
        events = ["client.traffic_reset", "client.expired"]
        inbound = hooked_inbound(api, receiver, "renew", events, 4434)
        day = 86_400_000
        # Two periods and an hour ago: the next expiry is the third period's end.
        past = int(time.time() * 1000) - 2 * 30 * day - 3_600_000
        # Added with its expiry ahead, so that no sweep renews it before its traffic is
        # set; then its expiry is moved into the past.
        ahead = past + 3 * 30 * day + day
        monthly = {"email": "monthly@example.com", "expiryTime": ahead, "reset": 30}
        ok(api.post(f"{CLIENTS}/add", {"client": monthly, "inboundIds": [inbound["id"]]}))
        body = {"upload": 600, "download": 700}
        ok(api.post(f"{CLIENTS}/updateTraffic/monthly@example.com", body))
        stored = ok(api.get(f"{CLIENTS}/get/monthly@example.com"))["client"]
        assert (stored["traffic"]["up"], stored["traffic"]["down"]) == (600, 700)
        ok(api.post(f"{CLIENTS}/update/monthly@example.com", {**stored, "expiryTime": past}))
        clients = ({"email": "once@example.com", "expiryTime": past},)
        found = swept(api, receiver, inbound, clients, "once@example.com", 1, 1)
        assert sorted((e["event"], e["data"]["email"]) for e in found) == [
            ("client.expired", "once@example.com"),
            ("client.traffic_reset", "monthly@example.com"),
        ]
        renewed = ok(api.get(f"{CLIENTS}/get/monthly@example.com"))["client"]
        assert renewed["expiryTime"] == past + 3 * 30 * day
        assert renewed["enable"] is True
        assert (renewed["traffic"]["up"], renewed["traffic"]["down"]) == (0, 0)
        assert renewed["traffic"]["enable"] is True
        assert ok(api.get(f"{CLIENTS}/get/once@example.com"))["client"]["enable"] is False
    finally:
        receiver.stop()
        panel.stop()


def test_reminders_are_raised_once_each_at_the_nearest_threshold_and_again_after_a_reset(tmp_path):
    receiver = Receiver().start()
    panel = fake_xray_panel(tmp_path)
    try:
        api = panel.client()
        events = [
            "client.expires_in_72_hours",
            "client.expires_in_48_hours",
            "client.expires_in_24_hours",
            "client.expired_24_hours_ago",
            "client.usage_reached",
        ]
        inbound = hooked_inbound(api, receiver, "remind", events, 4434)
        hour = 3_600_000
        now = int(time.time() * 1000)
        for client in (
            {"email": "soon@example.com", "expiryTime": now + 30 * hour},
            {"email": "gone@example.com", "expiryTime": now - 25 * hour},
            {"email": "heavy@example.com", "totalGB": 1000},
        ):
            ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound["id"]]}))
        heavy = f"{CLIENTS}/updateTraffic/heavy@example.com"
        ok(api.post(heavy, {"upload": 850, "download": 0}))
        receiver.wait_for(3, timeout=30)
        ok(api.post(heavy, {"upload": 950, "download": 0}))
        receiver.wait_for(4, timeout=30)
        time.sleep(3)  # more passes: nothing more is raised
        assert len(receiver.events()) == 4
        ok(api.post(f"{CLIENTS}/resetTraffic/heavy@example.com"))
        time.sleep(3)  # a pass sees the client back under its first share
        ok(api.post(heavy, {"upload": 800, "download": 0}))
        receiver.wait_for(5, timeout=30)
        time.sleep(3)
        found = sorted(
            (e["event"], e["data"]["email"], e["data"].get("percent")) for e in receiver.events()
        )
        assert found == [
            ("client.expired_24_hours_ago", "gone@example.com", None),
            ("client.expires_in_48_hours", "soon@example.com", None),
            ("client.usage_reached", "heavy@example.com", 80),
            ("client.usage_reached", "heavy@example.com", 80),
            ("client.usage_reached", "heavy@example.com", 90),
        ]
    finally:
        receiver.stop()
        panel.stop()


def test_first_traffic_of_a_client_raises_first_connected_once(tmp_path):
    receiver = Receiver().start()
    panel = fake_xray_panel(tmp_path)
    try:
        api = panel.client()
        hook = {"name": "first", "url": receiver.url, "secret": SECRET, "allowPrivate": True}
        ok(api.post("/panel/api/webhooks/add", {**hook, "events": ["client.first_connected"]}))
        add_clients(api, {"new@example.com": 0, "idle@example.com": 0})
        # Counters set before the core's last restart would be taken as its starting point.
        reads = len(calls(tmp_path / "calls.jsonl"))
        wait_until(lambda: len(calls(tmp_path / "calls.jsonl")) > reads + 4, "a few more ticks")
        counter = "user>>>new@example.com>>>traffic>>>uplink"
        write_state(tmp_path / "state.json", counters={counter: 100})
        [event] = receiver.wait_for(1, timeout=30)
        assert event["data"]["email"] == "new@example.com"
        write_state(tmp_path / "state.json", counters={counter: 500})
        wait_until(
            lambda: ok(api.get(f"{CLIENTS}/get/new@example.com"))["client"]["traffic"]["up"] >= 500,
            "the second tick is counted",
        )
        time.sleep(2)
        assert len(receiver.events()) == 1
    finally:
        receiver.stop()
        panel.stop()


def test_a_core_seen_running_then_stopped_raises_core_stopped(tmp_path):
    receiver = Receiver().start()
    panel = fake_xray_panel(tmp_path)
    try:
        api = panel.client()
        hook = {"name": "core", "url": receiver.url, "secret": SECRET, "allowPrivate": True}
        ok(api.post("/panel/api/webhooks/add", {**hook, "events": ["core.stopped"]}))
        time.sleep(5)  # the watch sees the core running
        assert receiver.events() == []
        ok(api.post("/panel/api/server/stopCoreService"))
        [event] = receiver.wait_for(1, timeout=30)
        assert (event["event"], event["data"]["state"]) == ("core.stopped", "stop")
    finally:
        receiver.stop()
        panel.stop()
