"""Webhooks over HTTP, to a receiver on loopback: endpoints and every refusal, the
signature a receiver verifies, each client event raised once by the call that causes
it, a receiver down for a while then back, a panel killed between its answer and the
delivery, and a bulk create of 10,000 clients delivered in batches."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time

import pytest
import requests
from helpers import create_plain_vless, db_rows, ok, refused
from panels import start_panel, stop_and_drop
from webhook_receiver import Receiver, verified

API = "/panel/api/webhooks"
CLIENTS = "/panel/api/clients"
SECRET = "a-secret-of-sixteen-or-more"
_ports = itertools.count(27100)
_names = itertools.count(1)


@pytest.fixture
def receiver():
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture
def hooks(api):
    """Endpoints a test adds, deleted when it ends so the next test's are alone."""
    added: list[int] = []
    yield added
    for endpoint_id in added:
        api.post(f"{API}/del/{endpoint_id}")


def add_endpoint(api, hooks, url: str, **fields) -> dict:
    body = {"name": f"hook-{next(_names)}", "url": url, "secret": SECRET, "allowPrivate": True}
    endpoint = ok(api.post(f"{API}/add", {**body, **fields}))
    hooks.append(endpoint["id"])
    return endpoint


def add_client(api, inbound_id: int, email: str, **fields) -> dict:
    client = {"email": email, **fields}
    return ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]}))


# ---- endpoints ------------------------------------------------------------------------------


def test_an_endpoint_is_stored_without_showing_its_secret(api, hooks, receiver, panel):
    endpoint = add_endpoint(api, hooks, receiver.url, events=["client.created"], batch=True)
    assert endpoint["hasSecret"] is True
    assert "secret" not in endpoint
    assert endpoint["events"] == ["client.created"]
    assert (endpoint["batch"], endpoint["withSecrets"], endpoint["enabled"]) == (True, False, True)
    listed = [e for e in ok(api.get(f"{API}/list")) if e["id"] == endpoint["id"]]
    assert listed[0]["name"] == endpoint["name"] and "secret" not in listed[0]
    stored = db_rows(panel, "SELECT secret FROM webhook_endpoint WHERE id = ?", (endpoint["id"],))
    assert stored[0][0].startswith("sealed:v1:") and SECRET not in stored[0][0]
    changed = ok(api.post(f"{API}/update/{endpoint['id']}", {**endpoint, "events": []}))
    assert changed["events"] == [] and changed["hasSecret"] is True
    assert (
        db_rows(panel, "SELECT secret FROM webhook_endpoint WHERE id = ?", (endpoint["id"],))[0][0]
        == stored[0][0]
    )
    ok(api.post(f"{API}/del/{endpoint['id']}"))
    assert all(e["id"] != endpoint["id"] for e in ok(api.get(f"{API}/list")))
    refused(api.post(f"{API}/del/{endpoint['id']}"), "no webhook")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"url": "ftp://127.0.0.1/x"}, ["http(s)"]),
        ({"url": "http://127.0.0.1:99999/"}, ["port"]),
        ({"url": "not a url"}, ["url"]),
        ({"url": ""}, ["url"]),
        ({"secret": "short"}, ["secret", "16"]),
        ({"secret": None}, ["secret"]),
        ({"events": ["client.nope"]}, ["unknown event", "client.created"]),
        ({"events": "client.created"}, ["events must be an array"]),
        ({"name": ""}, ["name"]),
        ({"name": "x" * 65}, ["name"]),
        ({"enabled": "yes"}, ["enabled must be true or false"]),
        ({"allowPrivate": 1}, ["allowPrivate must be true or false"]),
        ({"allowPrivate": False}, ["loopback", "allowPrivate"]),
        ({"url": "http://10.1.2.3/hook", "allowPrivate": False}, ["private", "allowPrivate"]),
        ({"url": "http://169.254.169.254/latest", "allowPrivate": True}, ["metadata"]),
        ({"url": "http://[::ffff:127.0.0.1]:81/", "allowPrivate": False}, ["loopback"]),
    ],
)
def test_bad_endpoints_are_refused_and_change_nothing(api, fields, words):
    before = ok(api.get(f"{API}/list"))
    body = {"name": "bad", "url": "http://127.0.0.1:8/hook", "secret": SECRET, "allowPrivate": True}
    refused(api.post(f"{API}/add", {**body, **fields}), *words)
    assert ok(api.get(f"{API}/list")) == before


def test_names_are_unique_and_bodies_must_be_objects(api, hooks, receiver):
    endpoint = add_endpoint(api, hooks, receiver.url)
    body = {"name": endpoint["name"], "url": receiver.url, "secret": SECRET, "allowPrivate": True}
    refused(api.post(f"{API}/add", body), "already exists")
    refused(api.post(f"{API}/add", [1, 2]), "JSON object")
    refused(api.post(f"{API}/update/abc", body), "webhook id")
    refused(api.get(f"{API}/deliveries/999999"), "no webhook")


# ---- what is sent ---------------------------------------------------------------------------


def test_a_delivery_is_signed_and_carries_the_client_without_its_secrets(api, hooks, receiver):
    inbound_id = create_plain_vless(api, next(_ports))
    endpoint = add_endpoint(api, hooks, receiver.url, events=["client.created"])
    view = add_client(api, inbound_id, "signed@example.com")
    [event] = receiver.wait_for(1)
    headers, body, _ = receiver.requests[0]
    assert verified(SECRET, headers, body)
    assert not verified("another-secret-entirely", headers, body)
    assert headers["X-Webhook-Event"] == "client.created"
    assert headers["X-Webhook-Id"] == event["id"]
    assert set(event) == {"id", "event", "timestamp", "data"}
    assert event["data"]["email"] == "signed@example.com"
    assert event["data"]["inboundIds"] == [inbound_id]
    assert not {"id", "password", "auth", "subId", "secret"} & set(event["data"])
    [delivery] = ok(api.get(f"{API}/deliveries/{endpoint['id']}"))
    assert (delivery["id"], delivery["status"], delivery["code"]) == (event["id"], "delivered", 200)
    assert delivery["attempts"] == 1
    ok(api.post(f"{API}/update/{endpoint['id']}", {**endpoint, "withSecrets": True}))
    add_client(api, inbound_id, "secrets@example.com")
    with_secrets = receiver.wait_for(2)[1]["data"]
    assert with_secrets["id"] != view["id"] and len(with_secrets["subId"]) > 0


def test_a_test_event_reaches_the_endpoint(api, hooks, receiver):
    endpoint = add_endpoint(api, hooks, receiver.url, events=["client.deleted"])
    queued = ok(api.post(f"{API}/test/{endpoint['id']}"))
    [event] = receiver.wait_for(1)
    assert (event["id"], event["event"]) == (queued["id"], "endpoint.test")
    assert event["data"]["endpoint"] == endpoint["name"]


def test_each_client_call_raises_its_event_once(api, hooks, receiver):
    inbound_id = create_plain_vless(api, next(_ports))
    add_endpoint(api, hooks, receiver.url)
    email = "events@example.com"
    view = add_client(api, inbound_id, email)
    ok(api.post(f"{CLIENTS}/update/{email}", {**view, "comment": "changed"}))
    ok(api.post(f"{CLIENTS}/update/{email}", {**view, "enable": False}))
    ok(api.post(f"{CLIENTS}/bulkEnable", {"emails": [email], "enable": True}))
    ok(api.post(f"{CLIENTS}/resetTraffic/{email}"))
    ok(api.post(f"{CLIENTS}/bulkResetTraffic", {"emails": [email]}))
    ok(api.post(f"{CLIENTS}/updateTraffic/{email}", {"upload": 5, "download": 7}))
    ok(api.post(f"{CLIENTS}/resetAllTraffics"))
    ok(api.post(f"{CLIENTS}/resetAllTraffics"))  # nothing moved: nothing raised
    ok(api.post(f"{CLIENTS}/bulkEnable", {"emails": [email], "enable": False}))
    ok(api.post(f"{CLIENTS}/del/{email}"))
    expected = [
        "client.created",
        "client.modified",
        "client.modified",
        "client.disabled",
        "client.enabled",
        "client.traffic_reset",
        "client.traffic_reset",
        "client.traffic_reset",
        "client.disabled",
        "client.deleted",
    ]
    receiver.wait_for(1, event="client.deleted")
    time.sleep(1)
    events = [e for e in receiver.events() if e["data"]["email"] == email]
    assert [e["event"] for e in events] == expected
    assert (events[7]["data"]["traffic"]["up"], events[7]["data"]["traffic"]["down"]) == (0, 0)
    assert len({e["id"] for e in events}) == len(expected)
    assert events[1]["data"]["comment"] == "changed"
    assert events[-1]["data"]["email"] == email


def test_a_refused_call_raises_nothing(api, hooks, receiver, panel):
    inbound_id = create_plain_vless(api, next(_ports))
    endpoint = add_endpoint(api, hooks, receiver.url)
    add_client(api, inbound_id, "twice@example.com")
    body = {"client": {"email": "twice@example.com"}, "inboundIds": [inbound_id]}
    refused(api.post(f"{CLIENTS}/add", body), "already in use")
    receiver.wait_for(1)
    rows = db_rows(
        panel, "SELECT event FROM webhook_outbox WHERE endpoint_id = ?", (endpoint["id"],)
    )
    assert rows == [("client.created",)]


def test_a_refused_sign_in_raises_admin_login_failed(api, hooks, receiver, panel):
    add_endpoint(api, hooks, receiver.url, events=["admin.login_failed"])
    stranger = panel.client(login=False)
    refused(stranger.sign_in(panel.username, "not-the-password"), "wrong")
    [event] = receiver.wait_for(1)
    assert event["event"] == "admin.login_failed"
    assert event["data"]["username"] == panel.username
    assert event["data"]["address"] == "127.0.0.1"
    assert "not-the-password" not in json.dumps(event)


def device_fetcher(api, hooks, receiver, panel, event: str, email: str, headers: dict, **fields):
    """With device limits on, an endpoint for `event` and a new client: the status its
    subscription answers a device id sent with the app's `headers`."""
    ok(api.post("/panel/api/setting/update", {"hwidEnable": True, "hwidRequired": False}))
    inbound_id = create_plain_vless(api, next(_ports))
    add_endpoint(api, hooks, receiver.url, events=[event])
    client = add_client(api, inbound_id, email, **fields)
    time.sleep(3)  # the first pass starts at the rows already there

    def fetch(hwid: str) -> int:
        url = f"{panel.sub_url}/sub/{client['subId']}"
        return requests.get(url, headers={**headers, "x-hwid": hwid}, timeout=10).status_code

    return fetch


def test_a_device_admitted_raises_device_added_once(api, hooks, receiver, panel):
    app = {"User-Agent": "Happ/3.7.0", "x-device-model": "iPhone15,2"}
    event, email = "client.device_added", "phone@example.com"
    fetch = device_fetcher(api, hooks, receiver, panel, event, email, app)
    assert fetch("phone-one") == 200
    [event] = receiver.wait_for(1)
    assert event["data"]["email"] == "phone@example.com"
    assert (event["data"]["device"]["hwid"], event["data"]["device"]["model"]) == (
        "phone-one",
        "iPhone15,2",
    )
    assert fetch("phone-one") == 200
    assert fetch("phone-two") == 200
    events = receiver.wait_for(2)
    time.sleep(3)
    assert [e["data"]["device"]["hwid"] for e in receiver.events()] == ["phone-one", "phone-two"]
    assert len(events) == 2


def test_a_device_refused_raises_device_refused_once_until_a_place_is_freed(
    api, hooks, receiver, panel
):
    app = {"User-Agent": "v2RayTun/5.1", "x-device-os": "Android"}
    event, email = "client.device_refused", "tablet@example.com"
    fetch = device_fetcher(api, hooks, receiver, panel, event, email, app, deviceLimit=1)
    assert fetch("tablet-one") == 200
    assert [fetch("tablet-two"), fetch("tablet-two"), fetch("tablet-three")] == [403] * 3
    receiver.wait_for(2)
    time.sleep(3)  # more passes: a refused device asking again raises nothing more
    assert [e["data"]["device"]["hwid"] for e in receiver.events()] == [
        "tablet-two",
        "tablet-three",
    ]
    event = receiver.events()[0]
    assert event["data"]["email"] == "tablet@example.com"
    assert event["data"]["device"]["os"] == "Android"
    ok(api.post(f"{CLIENTS}/devices/tablet@example.com/del", {"hwid": "tablet-one"}))
    assert fetch("tablet-two") == 200
    assert fetch("tablet-three") == 403
    receiver.wait_for(3)
    time.sleep(3)
    assert [e["data"]["device"]["hwid"] for e in receiver.events()][2:] == ["tablet-three"]


# ---- durability -----------------------------------------------------------------------------


def test_a_receiver_down_then_back_gets_everything_in_order_per_client(api, hooks):
    receiver = Receiver()  # not started: down
    inbound_id = create_plain_vless(api, next(_ports))
    endpoint = add_endpoint(api, hooks, receiver.url)
    emails = [f"order{n}@example.com" for n in range(3)]
    for email in emails:
        view = add_client(api, inbound_id, email)
        ok(api.post(f"{CLIENTS}/update/{email}", {**view, "comment": "one"}))
        ok(api.post(f"{CLIENTS}/update/{email}", {**view, "comment": "two"}))
    pending = ok(api.get(f"{API}/deliveries/{endpoint['id']}"))
    assert {d["status"] for d in pending} == {"pending"}
    receiver.status = 500  # back, but failing for a while
    receiver.start()
    try:
        while len(receiver.requests) < 2:
            time.sleep(0.1)
        receiver.status = 200
        receiver.wait_for(len(emails) * 3)
        accepted = receiver.events()
        for email in emails:
            # At least once: a repeat may come, but first arrivals keep the order raised.
            firsts = {}
            for event in accepted:
                if event["data"]["email"] == email:
                    firsts.setdefault(event["id"], event["data"]["comment"])
            assert list(firsts.values()) == ["", "one", "two"]
        done = ok(api.get(f"{API}/deliveries/{endpoint['id']}"))
        assert {d["status"] for d in done} == {"delivered"}
        assert max(d["attempts"] for d in done) >= 2
        assert any(d["code"] == 200 for d in done)
    finally:
        receiver.stop()


def test_a_delivery_refused_for_a_day_is_marked_failed_and_the_next_one_goes(
    api, hooks, receiver, panel
):
    receiver.status = 500
    inbound_id = create_plain_vless(api, next(_ports))
    endpoint = add_endpoint(api, hooks, receiver.url, events=["client.created", "client.modified"])
    view = add_client(api, inbound_id, "refused@example.com")
    deadline = time.time() + 30
    while not receiver.requests and time.time() < deadline:
        time.sleep(0.1)
    [first] = ok(api.get(f"{API}/deliveries/{endpoint['id']}"))
    assert (first["status"], first["code"]) == ("pending", 500)
    assert first["error"] == "the endpoint answered 500"
    # A day of retries, as the database would hold it after one: the event's time goes
    # back 25 hours and its next try is due now.
    day = 25 * 3_600_000
    db_rows(
        panel,
        "UPDATE webhook_outbox SET created_at = created_at - ?, next_at = 0 WHERE id = ?",
        (day, first["row"]),
    )
    deadline = time.time() + 30
    while ok(api.get(f"{API}/deliveries/{endpoint['id']}"))[0]["status"] == "pending":
        assert time.time() < deadline, "the delivery was not given up"
        time.sleep(0.2)
    [failed] = ok(api.get(f"{API}/deliveries/{endpoint['id']}"))
    assert (failed["status"], failed["code"], failed["nextAt"]) == ("failed", 500, 0)
    assert failed["attempts"] >= 2
    listed = next(e for e in ok(api.get(f"{API}/list")) if e["id"] == endpoint["id"])
    assert (listed["failed"], listed["pending"]) == (1, 0)
    # The failed event holds nothing back: the client's next event is delivered.
    receiver.status = 200
    ok(api.post(f"{CLIENTS}/update/refused@example.com", {**view, "comment": "later"}))
    [event] = receiver.wait_for(1, event="client.modified")
    assert event["data"]["comment"] == "later"
    assert [e["event"] for e in receiver.events()] == ["client.modified"]


def test_an_event_committed_before_a_kill_is_delivered_after_the_restart(tmp_path):
    receiver = Receiver()  # down while the panel answers and dies
    server = start_panel(tmp_path)
    try:
        api = server.client()
        inbound_id = create_plain_vless(api, next(_ports))
        body = {"name": "kill", "url": receiver.url, "secret": SECRET, "allowPrivate": True}
        ok(api.post(f"{API}/add", body))
        add_client(api, inbound_id, "survivor@example.com")
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait()
        receiver.start()
        server.start()
        events = receiver.wait_for(1, timeout=60, event="client.created")
        assert events[0]["data"]["email"] == "survivor@example.com"
    finally:
        receiver.stop()
        stop_and_drop(server)


def test_ten_thousand_clients_from_one_bulk_create_arrive_in_batches(api, hooks, receiver):
    inbound_id = create_plain_vless(api, next(_ports))
    add_endpoint(api, hooks, receiver.url, events=["client.created"], batch=True)
    items = [
        {"client": {"email": f"bulk{n}@example.com"}, "inboundIds": [inbound_id]}
        for n in range(10_000)
    ]
    reply = api.http.post(api.url + f"{CLIENTS}/bulkCreate", json=items, timeout=300).json()
    assert ok(reply)["created"] == 10_000
    events = receiver.wait_for(10_000, timeout=240)
    assert {e["data"]["email"] for e in events} == {f"bulk{n}@example.com" for n in range(10_000)}
    sizes = [len(json.loads(body)) for _, body, _ in receiver.requests]
    assert max(sizes) == 100 and len(receiver.requests) <= 200
