"""The usage history over HTTP: the panel's history routes (what they answer, what they
refuse and why) and the subscription's own usage this month, as JSON (`?format=info`) and
on its page. History rows are written straight into the database here, as the traffic tick
writes them (tests/core/test_usage_history_core.py pushes real bytes)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from urllib.parse import quote

import requests
from helpers import create_inbound, db_rows, free_port, ok, refused

CLIENTS = "/panel/api/clients"
INBOUNDS = "/panel/api/inbounds"
HOUR = 3600
DAY = 86400


def add_inbound(api) -> dict:
    return create_inbound(
        api,
        {
            "protocol": "vless",
            "port": free_port(),
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )


def add_client(api, inbound_id: int, sub_id: str) -> str:
    email = f"{uuid.uuid4().hex[:10]}@History"
    client = {"email": email, "subId": sub_id}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]}))
    return email


def this_hour() -> int:
    return int(time.time()) // HOUR * HOUR


def test_a_client_and_an_inbound_answer_their_buckets(api, panel):
    inbound = add_inbound(api)
    email = add_client(api, inbound["id"], uuid.uuid4().hex[:16])
    hour = this_hour()
    for at, up, down in ((hour - 2 * HOUR, 10, 100), (hour, 20, 200)):
        db_rows(
            panel,
            "INSERT INTO client_usage (email_key, at, up, down) VALUES (?, ?, ?, ?)",
            (email.lower(), at, up, down),
        )
    db_rows(
        panel,
        "INSERT INTO inbound_usage (inbound_id, at, up, down) VALUES (?, ?, ?, ?)",
        (inbound["id"], hour, 5, 6),
    )
    history = ok(api.get(f"{CLIENTS}/history/{quote(email)}"))
    assert history["step"] == "hour"
    assert history["buckets"] == [
        {"at": (hour - 2 * HOUR) * 1000, "up": 10, "down": 100},
        {"at": hour * 1000, "up": 20, "down": 200},
    ]
    assert (history["up"], history["down"]) == (30, 300)
    one = ok(
        api.get(
            f"{CLIENTS}/history/{quote(email)}",
            params={"from": (hour - HOUR) * 1000, "to": hour * 1000},
        )
    )
    assert one["buckets"] == [{"at": hour * 1000, "up": 20, "down": 200}]
    days = ok(api.get(f"{CLIENTS}/history/{quote(email)}", params={"step": "day"}))
    assert sum(b["down"] for b in days["buckets"]) == 300
    assert all(b["at"] % (DAY * 1000) == 0 for b in days["buckets"])
    of_inbound = ok(api.get(f"{INBOUNDS}/{inbound['id']}/history"))
    assert of_inbound["buckets"] == [{"at": hour * 1000, "up": 5, "down": 6}]


def test_bad_queries_are_refused_with_a_sentence(api):
    inbound = add_inbound(api)
    email = add_client(api, inbound["id"], uuid.uuid4().hex[:16])
    path = f"{CLIENTS}/history/{quote(email)}"
    refused(api.get(path, params={"step": "week"}), "step must be hour or day")
    refused(api.get(path, params={"from": "soon"}), "from must be a time in milliseconds")
    refused(api.get(path, params={"to": "1e99"}), "to must be a time in milliseconds")
    refused(api.get(path, params={"from": 5000, "to": 1000}), "from must be before to")
    refused(api.get(path, params={"from": 0}), "may span at most 2232 hours")
    refused(api.get(path, params={"from": 0, "step": "day"}), "may span at most 400 days")
    refused(api.get(f"{CLIENTS}/history/nobody@nowhere"), "no client with email")
    refused(api.get(f"{INBOUNDS}/999999/history"), "no inbound with id 999999")
    refused(api.get(f"{INBOUNDS}/abc/history"), "inbound id")


def test_the_subscription_shows_its_own_usage_this_month(api, panel):
    inbound = add_inbound(api)
    sub_id = uuid.uuid4().hex[:16]
    mine = [add_client(api, inbound["id"], sub_id) for _ in range(2)]
    other = add_client(api, inbound["id"], uuid.uuid4().hex[:16])
    hour = this_hour()
    for email, down in ((mine[0], 1000), (mine[1], 24), (other, 7_000_000)):
        db_rows(
            panel,
            "INSERT INTO client_usage (email_key, at, up, down) VALUES (?, ?, ?, ?)",
            (email.lower(), hour, 1, down),
        )
    info = requests.get(f"{panel.sub_url}/sub/{sub_id}?format=info", timeout=10)
    assert info.status_code == 200
    assert info.headers["Content-Type"].startswith("application/json")
    month = info.json()["month"]
    today = datetime.now(UTC)
    assert len(month["days"]) == today.day
    assert month["days"][-1] == {"at": hour // DAY * DAY * 1000, "up": 2, "down": 1024}
    assert (month["up"], month["down"]) == (2, 1024)
    page = requests.get(f"{panel.sub_url}/sub/{sub_id}?html=1", timeout=10).text
    assert "Your usage this month" in page
    assert page.count('class="bar"') == today.day
    assert f"{today:%Y-%m-%d}: 1.00 KiB" in page


def test_every_reset_keeps_the_history(api, panel):
    inbound = add_inbound(api)
    emails = [add_client(api, inbound["id"], uuid.uuid4().hex[:16]) for _ in range(2)]
    hour = this_hour()
    for email in emails:
        db_rows(
            panel,
            "UPDATE client_traffic SET up = 7, down = 70 WHERE email_key = ?",
            (email.lower(),),
        )
        db_rows(
            panel,
            "INSERT INTO client_usage (email_key, at, up, down) VALUES (?, ?, ?, ?)",
            (email.lower(), hour, 7, 70),
        )
    db_rows(
        panel,
        "INSERT INTO inbound_usage (inbound_id, at, up, down) VALUES (?, ?, ?, ?)",
        (inbound["id"], hour, 14, 140),
    )
    ok(api.post(f"{CLIENTS}/bulkResetTraffic", {"emails": [emails[0]]}))
    ok(api.post(f"{CLIENTS}/resetAllTraffics"))
    ok(api.post(f"{INBOUNDS}/{inbound['id']}/resetTraffic"))
    for email in emails:
        traffic = ok(api.get(f"{CLIENTS}/traffic/{quote(email)}"))
        assert (traffic["up"], traffic["down"]) == (0, 0)
        history = ok(api.get(f"{CLIENTS}/history/{quote(email)}"))
        assert (history["up"], history["down"]) == (7, 70)
    history = ok(api.get(f"{INBOUNDS}/{inbound['id']}/history"))
    assert (history["up"], history["down"]) == (14, 140)
    # Deleting the inbound drops its history with it.
    ok(api.post(f"{INBOUNDS}/del/{inbound['id']}"))
    assert db_rows(
        panel, "SELECT COUNT(*) FROM inbound_usage WHERE inbound_id = ?", (inbound["id"],)
    ) == [(0,)]
