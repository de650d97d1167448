"""Webhook events no API call raises: the traffic sweep switching off a client over its
quota (client.limited) or past its expiry (client.expired), each once, on a panel whose
core is the stand-in Xray so that the sweep runs every second."""

from __future__ import annotations

import time

from fake_xray_panel import fake_xray_panel
from helpers import ok
from webhook_receiver import Receiver

CLIENTS = "/panel/api/clients"
SECRET = "a-secret-of-sixteen-or-more"


def test_the_sweep_raises_limited_and_expired_once_each(tmp_path):
    receiver = Receiver().start()
    panel = fake_xray_panel(tmp_path)
    try:
        api = panel.client()
        hook = {"name": "sweep", "url": receiver.url, "secret": SECRET, "allowPrivate": True}
        events = ["client.limited", "client.expired"]
        ok(api.post("/panel/api/webhooks/add", {**hook, "events": events}))
        inbound = ok(
            api.post(
                "/panel/api/inbounds/add",
                {"protocol": "vless", "port": 4433, "settings": {"decryption": "none"}},
            )
        )
        past = int(time.time() * 1000) - 60_000
        for client in (
            {"email": "capped@example.com", "totalGB": 1000},
            {"email": "late@example.com", "expiryTime": past},
        ):
            ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound["id"]]}))
        body = {"upload": 600, "download": 600}
        ok(api.post(f"{CLIENTS}/updateTraffic/capped@example.com", body))
        found = receiver.wait_for(2, timeout=30)
        time.sleep(3)  # more sweeps: nothing more is raised
        found = receiver.events()
        assert sorted((e["event"], e["data"]["email"]) for e in found) == [
            ("client.expired", "late@example.com"),
            ("client.limited", "capped@example.com"),
        ]
        assert all(e["data"]["enable"] is False for e in found)
    finally:
        receiver.stop()
        panel.stop()
