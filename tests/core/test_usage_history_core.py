"""Usage history with the real core: bytes pushed through a panel inbound appear once, in
the current hour's bucket of their client and inbound, and a panel killed with SIGKILL
again and again while bytes flow leaves history and totals equal, whatever the kills
cost the totals."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest
from core_helpers import echo_server
from core_panel import wait_until
from core_traffic import (
    CLIENTS,
    INBOUNDS,
    add_client,
    add_inbound,
    client_core,
    in_core,
    passes,
    push,
    route,
    traffic,
    traffic_core_panel,
)
from helpers import db_rows, ok

HOUR = 3600


@pytest.fixture
def echo():
    with echo_server() as port:
        yield port


def inbound_totals(api, inbound_id: int) -> tuple[int, int]:
    row = next(r for r in ok(api.get(f"{INBOUNDS}/list")) if r["id"] == inbound_id)
    return row["up"], row["down"]


def test_pushed_bytes_land_once_in_the_current_hour(tmp_path, echo):
    panel = traffic_core_panel(tmp_path / "panel")
    try:
        api = panel.client()
        inbound = add_inbound(api, "vless")
        client = add_client(api, inbound["id"])
        in_core(api, panel, inbound)
        socks = route(inbound, client)
        sent = 250_000
        with client_core(tmp_path, [socks]):
            wait_until(lambda: passes(socks[0], echo), "vless carries bytes")
            started_hour = int(time.time()) // HOUR * HOUR
            push(socks[0], echo, sent)
            totals = wait_until(
                lambda: (t := traffic(api, client["email"]))["down"] >= sent and t,
                "the client's bytes are counted",
            )
        time.sleep(2.5)  # two more ticks: nothing is added twice
        totals = traffic(api, client["email"])
        history = ok(api.get(f"{CLIENTS}/history/{client['email']}"))
        assert history["step"] == "hour"
        hours = {bucket["at"] // 1000 for bucket in history["buckets"]}
        # One bucket: the hour the bytes moved in (two if the push straddled an hour).
        assert hours <= {started_hour, started_hour + HOUR} and hours
        assert (history["up"], history["down"]) == (totals["up"], totals["down"])
        inbound_history = ok(api.get(f"{INBOUNDS}/{inbound['id']}/history"))
        assert (inbound_history["up"], inbound_history["down"]) == inbound_totals(
            api, inbound["id"]
        )
        assert inbound_history["down"] >= sent
        # Reset zeroes the counters and leaves the history.
        ok(api.post(f"{CLIENTS}/resetTraffic/{client['email']}"))
        ok(api.post(f"{INBOUNDS}/resetAllTraffics"))
        assert traffic(api, client["email"])["down"] == 0
        again = ok(api.get(f"{CLIENTS}/history/{client['email']}", params={"step": "day"}))
        assert again["down"] == history["down"]
    finally:
        panel.stop()


def test_a_panel_killed_mid_tick_leaves_history_equal_to_totals(tmp_path, echo):
    panel = traffic_core_panel(tmp_path / "panel")
    try:
        api = panel.client()
        inbound = add_inbound(api, "vless")
        client = add_client(api, inbound["id"])
        in_core(api, panel, inbound)
        socks = route(inbound, client)
        stop = threading.Event()

        def keep_pushing() -> None:
            while not stop.is_set():
                try:
                    push(socks[0], echo, 64_000)
                except (OSError, AssertionError):
                    time.sleep(0.05)

        with client_core(tmp_path, [socks]):
            wait_until(lambda: passes(socks[0], echo), "vless carries bytes")
            pusher = threading.Thread(target=keep_pushing, daemon=True)
            pusher.start()
            for _ in range(3):
                time.sleep(1.5 + random.random())  # somewhere within a tick
                panel.process.send_signal(signal.SIGKILL)
                panel.process.wait(10)
                panel.start()
                api = panel.client()
            time.sleep(1.5)
            stop.set()
            pusher.join(15)
            time.sleep(2.5)  # the last bytes counted
        assert traffic(api, client["email"])["down"] > 0
        key = client["email"].lower()
        assert db_rows(
            panel, "SELECT SUM(up), SUM(down) FROM client_usage WHERE email_key = ?", (key,)
        ) == db_rows(panel, "SELECT up, down FROM client_traffic WHERE email_key = ?", (key,))
        assert db_rows(
            panel,
            "SELECT SUM(up), SUM(down) FROM inbound_usage WHERE inbound_id = ?",
            (inbound["id"],),
        ) == db_rows(panel, "SELECT up, down FROM inbound WHERE id = ?", (inbound["id"],))
    finally:
        panel.stop()
