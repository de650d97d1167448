"""Device limits over HTTP, with the headers real client apps send: who is served and who
gets the 403 with `x-hwid-max-devices-reached` and the Announce text, in every format;
hwidRequired; known devices kept after the limit is reached or lowered; the devices API
(list, remove one, clear) freeing slots; bounded headers; search by device id; two new
devices at once against a limit of one, on the panel and through subscription workers;
the subscription page's list and its remove button.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
import uuid
from urllib.parse import quote

import pytest
import requests
from helpers import create_inbound, ok, refused
from panels import start_panel, stop_and_drop

CLIENTS = "/panel/api/clients"
SETTINGS = "/panel/api/setting/update"
_ports = itertools.count(27600)


def happ(hwid: str) -> dict:
    return {
        "User-Agent": "Happ/3.7.0",
        "x-hwid": hwid,
        "x-device-os": "iOS",
        "x-ver-os": "18.1",
        "x-device-model": "iPhone15,2",
    }


def v2raytun(hwid: str) -> dict:
    return {
        "User-Agent": "v2RayTun/5.9 Android",
        "x-hwid": hwid,
        "x-device-os": "Android",
        "x-ver-os": "14",
        "x-device-model": "Pixel 8",
    }


def flclashx(hwid: str) -> dict:
    return {
        "User-Agent": "FlClashX/0.3.2 clash-verge Platform/windows",
        "x-hwid": hwid,
        "x-device-os": "Windows",
        "x-ver-os": "10.0.22631",
        "x-device-model": "DESKTOP-7Q2",
    }


def new_hwid() -> str:
    return uuid.uuid4().hex


def add_inbound(api) -> dict:
    return create_inbound(
        api,
        {
            "protocol": "vless",
            "remark": "devices",
            "port": next(_ports),
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )


def add_client(api, inbound_id: int, **fields) -> dict:
    client = {"email": f"{uuid.uuid4().hex[:10]}@dev", "subId": uuid.uuid4().hex[:16], **fields}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]}))
    return ok(api.get(f"{CLIENTS}/get/{quote(client['email'])}"))["client"]


def sub(panel, sub_id: str, headers: dict, path: str = "/sub/", query: str = ""):
    return requests.get(
        f"{panel.sub_url}{path}{sub_id}{query}",
        headers={"Connection": "close", **headers},
        timeout=10,
    )


def assert_refused(response: requests.Response, announce: str = "") -> None:
    assert response.status_code == 403, response.text
    assert response.headers["x-hwid-max-devices-reached"] == "true"
    if announce:
        encoded = response.headers["Announce"].removeprefix("base64:")
        assert base64.b64decode(encoded).decode() == announce
    assert b"vless://" not in response.content


@pytest.fixture(scope="module")
def inbound(panel):
    api = panel.client()
    ok(
        api.post(
            SETTINGS,
            {
                "hwidEnable": True,
                "hwidDefaultLimit": 0,
                "hwidRequired": False,
                "hwidAnnounce": "Too many devices\nremove one on your page",
                "subJsonEnable": True,
                "subYamlEnable": True,
            },
        )
    )
    return add_inbound(api)


def test_a_new_device_beyond_the_limit_gets_no_configuration_in_any_format(panel, api, inbound):
    client = add_client(api, inbound["id"], deviceLimit=1)
    phone = new_hwid()
    assert sub(panel, client["subId"], happ(phone)).status_code == 200
    other = v2raytun(new_hwid())
    announce = "Too many devices\nremove one on your page"
    for path, query in [
        ("/sub/", ""),
        ("/json/", ""),
        ("/yaml/", ""),
        ("/sub/", "?format=singbox"),
        ("/sub/", "?format=info"),
        ("/sub/", "?html=1"),
    ]:
        assert_refused(sub(panel, client["subId"], other, path, query), announce)
        assert sub(panel, client["subId"], happ(phone), path, query).status_code == 200


def test_a_cached_body_is_never_served_to_a_refused_device(panel, api, inbound):
    client = add_client(api, inbound["id"], deviceLimit=1)
    first = happ(new_hwid())
    assert sub(panel, client["subId"], first).status_code == 200
    assert sub(panel, client["subId"], first).status_code == 200  # now cached
    assert_refused(sub(panel, client["subId"], happ(new_hwid())))


def test_without_a_device_id_the_subscription_is_served_uncounted_unless_required(
    panel, api, inbound
):
    client = add_client(api, inbound["id"], deviceLimit=1)
    plain = {"User-Agent": "Happ/3.7.0"}
    assert sub(panel, client["subId"], plain).status_code == 200
    assert ok(api.get(f"{CLIENTS}/devices/{quote(client['email'])}")) == []
    ok(api.post(SETTINGS, {"hwidRequired": True}))
    try:
        response = sub(panel, client["subId"], plain)
        assert response.status_code == 403
        assert b"vless://" not in response.content
        assert sub(panel, client["subId"], happ(new_hwid())).status_code == 200
    finally:
        ok(api.post(SETTINGS, {"hwidRequired": False}))


def test_known_devices_stay_served_when_the_limit_is_reached_or_lowered(panel, api, inbound):
    client = add_client(api, inbound["id"], deviceLimit=2)
    phone, laptop = happ(new_hwid()), flclashx(new_hwid())
    assert sub(panel, client["subId"], phone).status_code == 200
    assert sub(panel, client["subId"], laptop).status_code == 200
    assert_refused(sub(panel, client["subId"], v2raytun(new_hwid())))
    ok(api.post(f"{CLIENTS}/update/{quote(client['email'])}", {**client, "deviceLimit": 1}))
    assert sub(panel, client["subId"], phone).status_code == 200
    assert sub(panel, client["subId"], laptop).status_code == 200
    assert_refused(sub(panel, client["subId"], v2raytun(new_hwid())))


def test_the_default_limit_and_no_limit(panel, api, inbound):
    ok(api.post(SETTINGS, {"hwidDefaultLimit": 1}))
    try:
        default = add_client(api, inbound["id"])
        unlimited = add_client(api, inbound["id"], deviceLimit=-1)
        assert sub(panel, default["subId"], happ(new_hwid())).status_code == 200
        assert_refused(sub(panel, default["subId"], happ(new_hwid())))
        for _ in range(4):
            assert sub(panel, unlimited["subId"], happ(new_hwid())).status_code == 200
    finally:
        ok(api.post(SETTINGS, {"hwidDefaultLimit": 0}))


def test_the_devices_api_lists_removes_and_clears_freeing_slots(panel, api, inbound):
    client = add_client(api, inbound["id"], deviceLimit=1)
    email = quote(client["email"])
    phone = new_hwid()
    assert sub(panel, client["subId"], happ(phone)).status_code == 200
    [device] = ok(api.get(f"{CLIENTS}/devices/{email}"))
    assert device["hwid"] == phone
    assert (device["os"], device["osVersion"], device["model"]) == ("iOS", "18.1", "iPhone15,2")
    assert device["userAgent"] == "Happ/3.7.0"
    assert device["address"] == "127.0.0.1"
    assert device["firstSeen"] > 0 and device["lastSeen"] >= device["firstSeen"]
    tablet = new_hwid()
    assert_refused(sub(panel, client["subId"], v2raytun(tablet)))
    ok(api.post(f"{CLIENTS}/devices/{email}/del", {"hwid": phone}))
    assert sub(panel, client["subId"], v2raytun(tablet)).status_code == 200
    assert_refused(sub(panel, client["subId"], happ(phone)))
    ok(api.post(f"{CLIENTS}/devices/{email}/clear", {}))
    assert ok(api.get(f"{CLIENTS}/devices/{email}")) == []
    assert sub(panel, client["subId"], happ(phone)).status_code == 200


def test_the_devices_api_refuses_unknown_emails_and_devices(panel, api, inbound):
    client = add_client(api, inbound["id"])
    email = quote(client["email"])
    refused(api.get(f"{CLIENTS}/devices/no-such@dev"), "no-such@dev")
    refused(api.post(f"{CLIENTS}/devices/no-such@dev/clear", {}), "no-such@dev")
    refused(api.post(f"{CLIENTS}/devices/{email}/del", {"hwid": "nope"}), "no device 'nope'")
    refused(api.post(f"{CLIENTS}/devices/{email}/del", {"hwid": 5}), "hwid")
    refused(api.post(f"{CLIENTS}/devices/{email}/del", {}), "hwid")


def test_bad_device_headers_count_as_none_or_are_cut(panel, api, inbound):
    client = add_client(api, inbound["id"], deviceLimit=1)
    email = quote(client["email"])
    too_long = {"User-Agent": "Happ/3.7.0", "x-hwid": "h" * 129}
    assert sub(panel, client["subId"], too_long).status_code == 200
    broken = {"User-Agent": "Happ/3.7.0", "x-hwid": "abc\x7fdef"}
    assert sub(panel, client["subId"], broken).status_code == 200
    assert ok(api.get(f"{CLIENTS}/devices/{email}")) == []
    hwid = new_hwid()
    headers = {**happ(hwid), "x-device-model": "M" * 400, "x-device-os": "iOS\x01"}
    assert sub(panel, client["subId"], headers).status_code == 200
    [device] = ok(api.get(f"{CLIENTS}/devices/{email}"))
    assert device["model"] == "M" * 255
    assert device["os"] == ""


def test_a_search_by_device_id_finds_the_client(panel, api, inbound):
    client = add_client(api, inbound["id"])
    hwid = "HW-" + uuid.uuid4().hex.upper()
    assert sub(panel, client["subId"], happ(hwid)).status_code == 200
    page = ok(api.get(f"{CLIENTS}/list/paged?search={quote(hwid)}"))
    assert [row["email"] for row in page["items"]] == [client["email"]]
    assert page["items"][0]["devices"] == 1


def test_the_device_limit_travels_through_bulk_create_and_adjust(panel, api, inbound):
    emails = [f"{uuid.uuid4().hex[:8]}@bulk-dev" for _ in range(2)]
    ok(
        api.post(
            f"{CLIENTS}/bulkCreate",
            [
                {"client": {"email": email, "deviceLimit": 3}, "inboundIds": [inbound["id"]]}
                for email in emails
            ],
        )
    )
    for email in emails:
        assert ok(api.get(f"{CLIENTS}/get/{quote(email)}"))["client"]["deviceLimit"] == 3
    ok(api.post(f"{CLIENTS}/bulkAdjust", {"emails": emails, "deviceLimit": -1}))
    for email in emails:
        assert ok(api.get(f"{CLIENTS}/get/{quote(email)}"))["client"]["deviceLimit"] == -1
    refused(api.post(f"{CLIENTS}/bulkAdjust", {"emails": emails, "deviceLimit": -2}), "deviceLimit")
    refused(
        api.post(
            f"{CLIENTS}/add",
            {"client": {"email": "x@dev", "deviceLimit": "many"}, "inboundIds": [inbound["id"]]},
        ),
        "deviceLimit",
    )


def test_the_device_limit_travels_through_update_export_and_import(api, inbound):
    client = add_client(api, inbound["id"], deviceLimit=2)
    email = client["email"]
    stored = ok(api.get(f"{CLIENTS}/get/{quote(email)}"))["client"]
    ok(api.post(f"{CLIENTS}/update/{quote(email)}", {"client": {**stored, "deviceLimit": 5}}))
    assert ok(api.get(f"{CLIENTS}/get/{quote(email)}"))["client"]["deviceLimit"] == 5
    exported = [i for i in ok(api.get(f"{CLIENTS}/export")) if i["client"]["email"] == email]
    assert [item["client"]["deviceLimit"] for item in exported] == [5]
    ok(api.post(f"{CLIENTS}/del/{quote(email)}"))
    ok(api.post(f"{CLIENTS}/import", {"data": json.dumps(exported)}))
    assert ok(api.get(f"{CLIENTS}/get/{quote(email)}"))["client"]["deviceLimit"] == 5


def race(panel, sub_id: str, count: int) -> list[int]:
    """`count` new devices asking at the same moment; their status codes."""
    start = threading.Barrier(count)
    codes: list[int] = []

    def ask() -> None:
        headers = happ(new_hwid())
        start.wait()
        codes.append(sub(panel, sub_id, headers).status_code)

    threads = [threading.Thread(target=ask) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


def test_two_new_devices_at_once_against_a_limit_of_one(panel, api, inbound):
    for _ in range(3):
        client = add_client(api, inbound["id"], deviceLimit=1)
        assert sorted(race(panel, client["subId"], 2)) == [200, 403]
        assert len(ok(api.get(f"{CLIENTS}/devices/{quote(client['email'])}"))) == 1


def test_the_sub_page_lists_devices_and_removes_one(panel, api, inbound):
    client = add_client(api, inbound["id"], deviceLimit=1)
    hwid = new_hwid()
    assert sub(panel, client["subId"], happ(hwid)).status_code == 200
    page = sub(panel, client["subId"], {"Accept": "text/html"})
    assert page.status_code == 200
    assert hwid in page.text and "iPhone15,2" in page.text
    assert "form-action 'self'" in page.headers["Content-Security-Policy"]
    assert_refused(sub(panel, client["subId"], happ(new_hwid())))
    removed = requests.post(
        f"{panel.sub_url}/sub/{client['subId']}?deleteDevice={quote(hwid)}",
        allow_redirects=False,
        timeout=10,
    )
    assert removed.status_code == 303
    assert removed.headers["Location"].endswith(f"/sub/{client['subId']}")
    assert ok(api.get(f"{CLIENTS}/devices/{quote(client['email'])}")) == []
    assert sub(panel, client["subId"], happ(new_hwid())).status_code == 200


@pytest.fixture(scope="module")
def worker_panel(tmp_path_factory):
    server = start_panel(tmp_path_factory.mktemp("devices"), env={"APPLIANCE_SUB_WORKERS": "2"})
    yield server
    stop_and_drop(server)


def test_sub_workers_admit_exactly_once_like_the_panel(worker_panel):
    api = worker_panel.client()
    ok(api.post(SETTINGS, {"hwidEnable": True}))
    inbound = add_inbound(api)
    for _ in range(3):
        client = add_client(api, inbound["id"], deviceLimit=1)
        assert sorted(race(worker_panel, client["subId"], 4)) == [200, 403, 403, 403]
        [device] = ok(api.get(f"{CLIENTS}/devices/{quote(client['email'])}"))
        known = happ(device["hwid"])
        assert sub(worker_panel, client["subId"], known).status_code == 200


def test_a_device_behind_a_trusted_proxy_is_logged_at_the_forwarded_address(panel, api, inbound):
    client = add_client(api, inbound["id"])
    ok(api.post(SETTINGS, {"trustedProxies": "127.0.0.1"}))
    try:
        headers = {**happ(new_hwid()), "X-Forwarded-For": "203.0.113.7"}
        assert sub(panel, client["subId"], headers).status_code == 200
    finally:
        ok(api.post(SETTINGS, {"trustedProxies": ""}))
    [device] = ok(api.get(f"{CLIENTS}/devices/{quote(client['email'])}"))
    assert device["address"] == "203.0.113.7"


def test_a_known_device_asking_again_is_seen_later(panel, api, inbound):
    client = add_client(api, inbound["id"])
    email = quote(client["email"])
    headers = happ(new_hwid())
    assert sub(panel, client["subId"], headers).status_code == 200
    [first] = ok(api.get(f"{CLIENTS}/devices/{email}"))
    time.sleep(0.01)
    assert sub(panel, client["subId"], {**headers, "Connection": "close"}).status_code == 200
    deadline = time.monotonic() + 30  # written behind, in the next batch
    while time.monotonic() < deadline:
        [device] = ok(api.get(f"{CLIENTS}/devices/{email}"))
        if device["lastSeen"] > first["lastSeen"]:
            break
        time.sleep(0.5)
    assert device["lastSeen"] > first["lastSeen"]
    assert device["firstSeen"] == first["firstSeen"]


def test_the_announce_text_is_bounded(api):
    refused(api.post(SETTINGS, {"hwidAnnounce": "x" * 1001}), "hwidAnnounce", "1000")
    refused(api.post(SETTINGS, {"hwidDefaultLimit": -1}), "hwidDefaultLimit")
