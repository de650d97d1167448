"""GET clients/list/paged over HTTP against the real server: paging, search, every
filter and sort key in both directions, the summary (which covers every client, not the
filtered ones, and follows each change at once), and refusal of every bad parameter.

The module builds one known set of clients on its own panel; tests that change clients
use a panel of their own."""

from __future__ import annotations

import math
import time
import unicodedata

import pytest
from helpers import create_inbound, free_port, ok, refused
from panels import start_panel

API = "/panel/api/clients"
PAGED = f"{API}/list/paged"
DAY_MS = 86_400_000
GB = 1024**3
SLIM_KEYS = {
    "email",
    "subId",
    "enable",
    "totalGB",
    "expiryTime",
    "limitIp",
    "deviceLimit",
    "devices",
    "reset",
    "group",
    "inboundIds",
    "traffic",
    "createdAt",
    "updatedAt",
}
SECRET_KEYS = {"id", "uuid", "password", "auth", "flow", "security", "reverse", "tgId"}


def inbound(api, protocol: str) -> int:
    payload = {"protocol": protocol, "port": free_port(), "settings": {}}
    if protocol == "vless":
        payload["settings"] = {"decryption": "none"}
    if protocol == "shadowsocks":
        payload["settings"] = {"method": "2022-blake3-aes-256-gcm"}
    return create_inbound(api, payload)["id"]


def page(api, **params) -> dict:
    return ok(api.get(PAGED, params=params))


def found(api, **params) -> list[str]:
    return [item["email"] for item in page(api, pageSize=200, **params)["items"]]


def set_traffic(api, email: str, used: int) -> None:
    ok(
        api.post(
            f"{API}/updateTraffic/{email}", {"upload": used // 2, "download": used - used // 2}
        )
    )


class Data:
    """The module's clients, by what each is meant to exercise."""

    def __init__(self, api):
        self.vless, self.trojan, self.ss = (
            inbound(api, p) for p in ("vless", "trojan", "shadowsocks")
        )
        now = int(time.time() * 1000)
        v, t, s = [self.vless], [self.trojan], [self.ss]
        spec = [
            (
                {
                    "email": "alpha@ex",
                    "totalGB": 10 * GB,
                    "expiryTime": now + 30 * DAY_MS,
                    "subId": "SubAlpha",
                    "group": "Team A",
                },
                v,
                1 * GB,
            ),
            ({"email": "Bravo@ex", "comment": "Zürich Office", "group": "Team A"}, v + t, 0),
            ({"email": "charlie@ex", "totalGB": GB}, t, GB),
            ({"email": "delta@ex", "expiryTime": now - DAY_MS}, v, 0),
            ({"email": "echo@ex", "expiryTime": now + 2 * DAY_MS}, v, 5),
            ({"email": "foxtrot@ex", "totalGB": 10 * GB}, t, 9 * GB + GB // 2),
            ({"email": "golf@ex", "enable": False, "group": "team b"}, v, 0),
            ({"email": "hotel@ex", "expiryTime": -5 * DAY_MS, "totalGB": 3 * GB}, s, 0),
            ({"email": "india_1%@ex", "comment": "50% off_sale"}, v, 0),
            ({"email": "india11@ex", "comment": "50 percent offXsale"}, v, 0),
            ({"email": "juliet@ex", "expiryTime": now + 100 * DAY_MS}, v, 7),
        ]
        ok(api.post(f"{API}/bulkCreate", [{"client": c, "inboundIds": ids} for c, ids, _ in spec]))
        for client, _, used in spec:
            if used:
                set_traffic(api, client["email"], used)
        ok(api.post(f"{API}/juliet@ex/detach", {"inboundIds": v}))
        ok(api.post("/panel/api/setting/update", {"expireDiff": 7, "trafficDiff": 1}))
        self.emails = [client["email"] for client, _, _ in spec]


@pytest.fixture(scope="module")
def data(panel) -> Data:
    return Data(panel.client())


def key(email: str) -> str:
    return unicodedata.normalize("NFKC", email).casefold()


# ---- shape and paging ------------------------------------------------------------------


def test_defaults_and_slim_rows(api, data):
    reply = page(api)
    assert reply["page"] == 1 and reply["pageSize"] == 25
    assert reply["total"] == reply["filtered"] == len(data.emails)
    assert [item["email"] for item in reply["items"]] == sorted(data.emails, key=key)
    for item in reply["items"]:
        assert set(item) == SLIM_KEYS
        assert not SECRET_KEYS & set(item)
        assert set(item["traffic"]) == {"up", "down", "enable"}
    alpha = next(item for item in reply["items"] if item["email"] == "alpha@ex")
    assert alpha["inboundIds"] == [data.vless]
    assert alpha["totalGB"] == 10 * GB
    assert alpha["traffic"]["up"] + alpha["traffic"]["down"] == GB
    assert alpha["subId"] == "SubAlpha"
    bravo = next(item for item in reply["items"] if item["email"] == "Bravo@ex")
    assert bravo["inboundIds"] == sorted([data.vless, data.trojan])


def test_pages_cover_everything_once(api, data):
    expected = sorted(data.emails, key=key)
    seen = []
    for number in (1, 2, 3):
        reply = page(api, page=number, pageSize=4)
        assert reply["page"] == number and reply["pageSize"] == 4
        assert reply["filtered"] == len(expected)
        seen += [item["email"] for item in reply["items"]]
    assert seen == expected
    assert len(page(api, page=3, pageSize=4)["items"]) == len(expected) - 8
    past = page(api, page=4, pageSize=4)
    assert past["items"] == [] and past["filtered"] == len(expected)
    assert page(api, page=10**6, pageSize=200)["items"] == []
    assert len(page(api, pageSize=200)["items"]) == len(expected)
    assert len(page(api, pageSize=1)["items"]) == 1


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"page": "0"}, ["page", "1"]),
        ({"page": "-1"}, ["page"]),
        ({"page": "abc"}, ["page", "whole number"]),
        ({"page": "1.5"}, ["page"]),
        ({"page": "²"}, ["page"]),
        ({"page": "\u0661"}, ["page"]),
        ({"page": "9" * 40}, ["page"]),
        ({"pageSize": "abc"}, ["pageSize"]),
        ({"pageSize": "0"}, ["pageSize"]),
        ({"pageSize": "201"}, ["pageSize", "200"]),
        ({"pageSize": "100000"}, ["pageSize", "200"]),
        ({"filter": "bogus"}, ["filter", "online"]),
        ({"sort": "password"}, ["sort", "email"]),
        ({"order": "up"}, ["order", "ascend"]),
        ({"protocol": "socks"}, ["protocol"]),
        ({"protocol": "bogus"}, ["protocol"]),
        ({"search": "x" * 256}, ["search"]),
        ({"group": "g" * 300}, ["group"]),
        ({"inboundId": "abc"}, ["inboundId", "positive integer"]),
        ({"inboundId": "0"}, ["inboundId"]),
        ({"inboundId": "-3"}, ["inboundId"]),
    ],
)
def test_bad_parameters_are_refused(api, data, params, words):
    refused(api.get(PAGED, params=params), *words)


@pytest.mark.parametrize("query", ["search=%FF", "group=%FF%FE", "protocol=%C3"])
def test_a_query_that_is_not_utf8_is_refused(api, data, query):
    response = api.raw("GET", f"{PAGED}?{query}")
    assert response.status_code == 200
    refused(response.json())


# ---- search ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("search", "expected"),
    [
        ("ALPHA", ["alpha@ex"]),
        ("bravo", ["Bravo@ex"]),
        ("subalpha", ["alpha@ex"]),
        ("zürich", ["Bravo@ex"]),
        ("ZÜRICH OFF", ["Bravo@ex"]),
        ("office", ["Bravo@ex"]),
        ("a_1", ["india_1%@ex"]),
        ("1%", ["india_1%@ex"]),
        ("50%", ["india_1%@ex"]),
        ("off_", ["india_1%@ex"]),
        ("%", ["india_1%@ex"]),
        ("_", ["india_1%@ex"]),
        ("india", ["india11@ex", "india_1%@ex"]),
        ("  india11  ", ["india11@ex"]),
        ("nothing-matches", []),
        ("!", []),
    ],
)
def test_search_is_a_literal_case_insensitive_substring(api, data, search, expected):
    reply = page(api, search=search, pageSize=200)
    assert sorted(item["email"] for item in reply["items"]) == sorted(expected)
    assert reply["filtered"] == len(expected)
    assert reply["total"] == len(data.emails)


# ---- filters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("depleted", ["charlie@ex", "delta@ex"]),
        ("deactive", ["golf@ex"]),
        ("expiring", ["echo@ex", "foxtrot@ex"]),
        ("online", []),
        (
            "active",
            [
                "alpha@ex",
                "Bravo@ex",
                "echo@ex",
                "foxtrot@ex",
                "hotel@ex",
                "india_1%@ex",
                "india11@ex",
                "juliet@ex",
            ],
        ),
    ],
)
def test_filters(api, data, name, expected):
    reply = page(api, filter=name, pageSize=200)
    assert sorted(item["email"] for item in reply["items"]) == sorted(expected, key=str)
    assert reply["filtered"] == len(expected)
    assert reply["total"] == len(data.emails)
    summary = reply["summary"]
    if name != "active":
        assert sorted(summary[name]) == sorted(expected)
    else:
        assert summary["active"] == len(expected)


def test_summary_covers_every_client_whatever_the_filter(api, data):
    full = page(api)["summary"]
    assert full["total"] == len(data.emails)
    for params in (
        {"filter": "deactive"},
        {"search": "alpha"},
        {"protocol": "trojan"},
        {"page": 9},
    ):
        assert page(api, **params)["summary"] == full


def test_protocol_and_group_filters(api, data):
    assert sorted(found(api, protocol="trojan")) == ["Bravo@ex", "charlie@ex", "foxtrot@ex"]
    assert found(api, protocol="shadowsocks") == ["hotel@ex"]
    assert "juliet@ex" not in found(api, protocol="vless")
    assert found(api, protocol="hysteria") == []
    assert found(api, group="Team A") == ["alpha@ex", "Bravo@ex"]
    assert found(api, group="team a") == ["alpha@ex", "Bravo@ex"]
    assert found(api, group="team b") == ["golf@ex"]
    assert found(api, group="nobody") == []
    assert found(api, group="Team A", filter="active", protocol="trojan") == ["Bravo@ex"]
    assert found(api, group="Team A", search="bravo") == ["Bravo@ex"]


def test_inbound_filter_pages_the_clients_of_one_inbound(api, data):
    trojan = page(api, inboundId=str(data.trojan), pageSize=2)
    assert trojan["filtered"] == 3
    assert [item["email"] for item in trojan["items"]] == ["Bravo@ex", "charlie@ex"]
    assert all(data.trojan in item["inboundIds"] for item in trojan["items"])
    assert [
        i["email"] for i in page(api, inboundId=str(data.trojan), page=2, pageSize=2)["items"]
    ] == ["foxtrot@ex"]
    assert found(api, inboundId=str(data.ss)) == ["hotel@ex"]
    assert "juliet@ex" not in found(api, inboundId=str(data.vless))
    assert found(api, inboundId=str(data.vless), filter="depleted") == ["delta@ex"]
    assert page(api, inboundId="987654")["filtered"] == 0


# ---- sorting ---------------------------------------------------------------------------------


def sort_key(name: str, item: dict):
    used = item["traffic"]["up"] + item["traffic"]["down"]
    if name == "enable":
        return int(item["enable"])
    if name == "email":
        return key(item["email"])
    if name == "inboundIds":
        return min(item["inboundIds"], default=math.inf)
    if name == "traffic":
        return used
    if name == "remaining":
        return math.inf if item["totalGB"] == 0 else item["totalGB"] - used
    expiry = item["expiryTime"]  # expiryTime: dated < not started (by duration) < unlimited
    if expiry == 0:
        return (2, 0)
    return (1, -expiry) if expiry < 0 else (0, expiry)


@pytest.mark.parametrize("order", ["ascend", "descend"])
@pytest.mark.parametrize(
    "name", ["enable", "email", "inboundIds", "traffic", "remaining", "expiryTime"]
)
def test_sort_orders(api, data, name, order):
    items = page(api, sort=name, order=order, pageSize=200)["items"]
    assert sorted(item["email"] for item in items) == sorted(data.emails)
    keys = [sort_key(name, item) for item in items]
    assert keys == sorted(keys, reverse=order == "descend")
    assert len(set(map(str, keys))) > 1
    if name in ("remaining", "expiryTime"):
        unlimited = [sort_key(name, item) for item in items if _unlimited(name, item)]
        assert unlimited, "the data set has unlimited clients"
        edge = keys[-len(unlimited) :] if order == "ascend" else keys[: len(unlimited)]
        assert edge == unlimited


def _unlimited(name: str, item: dict) -> bool:
    return item["totalGB" if name == "remaining" else "expiryTime"] == 0


def test_sort_pages_are_stable_across_ties(api, data):
    """Many clients share enable=true: paging by it still lists everyone exactly once."""
    for order in ("ascend", "descend"):
        seen = []
        for number in range(1, 5):
            seen += [
                i["email"]
                for i in page(api, sort="enable", order=order, page=number, pageSize=3)["items"]
            ]
        assert sorted(seen) == sorted(data.emails)


def test_emails_sort_in_natural_order_on_every_page(tmp_path):
    """Numbers in emails sort by value (bulk2 before bulk10), case and leading zeros aside,
    the same on every backend, page after page, and reversed when descending."""
    natural = [
        "bulk-x@ex",
        "bulk1@ex",
        "Bulk2@ex",
        "bulk9@ex",
        "bulk10@ex",
        "bulk011@ex",
        "bulk20@ex",
        "bulk100@ex",
        "bulk100a@ex",
        "bulk1000@ex",
        "bulk@ex",
        "bulka@ex",
        "v2-bulk3@ex",
        "v10-bulk1@ex",
    ]
    server = start_panel(tmp_path)
    try:
        api = server.client()
        shuffled = natural[::2] + natural[1::2]
        ids = [inbound(api, "vless")]
        items = [{"client": {"email": e}, "inboundIds": ids} for e in shuffled]
        assert ok(api.post(f"{API}/bulkCreate", items))["created"] == len(natural)
        for order, expected in (("ascend", natural), ("descend", natural[::-1])):
            seen = []
            for number in range(1, 6):
                items = page(api, sort="email", order=order, page=number, pageSize=3)["items"]
                seen += [item["email"] for item in items]
            assert seen == expected
        assert found(api, search="bulk1") == [
            "bulk1@ex",
            "bulk10@ex",
            "bulk100@ex",
            "bulk100a@ex",
            "bulk1000@ex",
            "v10-bulk1@ex",
        ]
    finally:
        server.stop()


def test_default_sort_is_by_email_ascending(api, data):
    assert found(api) == found(api, sort="email", order="ascend")
    assert found(api, order="descend") == list(reversed(found(api)))


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"filter": "active"},
        {"filter": "depleted"},
        {"filter": "deactive"},
        {"filter": "expiring"},
        {"protocol": "trojan"},
        {"protocol": "vless", "filter": "active"},
        {"search": "ex", "group": "Team A"},
        {"filter": "active", "sort": "traffic", "order": "descend"},
    ],
)
def test_filtered_counts_the_matches_on_every_page(api, data, params):
    """The count comes from the summary, a cache or a scan, depending on the conditions:
    whichever it is, it is the number of rows the pages list, on the first page and
    on the later ones."""
    everything = found(api, **params)
    for number in (1, 2, 3):
        result = page(api, page=number, pageSize=2, **params)
        assert result["filtered"] == len(everything)
        assert [i["email"] for i in result["items"]] == everything[2 * number - 2 : 2 * number]


# ---- the summary follows changes at once -------------------------------------------------------


@pytest.fixture
def own(tmp_path):
    server = start_panel(tmp_path)
    yield server
    server.stop()


def test_summary_reflects_each_change_immediately(own):
    api = own.client()
    vless_id = inbound(api, "vless")
    assert page(api)["summary"]["total"] == 0
    ok(
        api.post(
            f"{API}/add", {"client": {"email": "a@now", "totalGB": 1000}, "inboundIds": [vless_id]}
        )
    )
    first = page(api)
    assert first["total"] == 1 and first["summary"]["active"] == 1
    set_traffic(api, "a@now", 1000)
    assert page(api)["summary"]["depleted"] == ["a@now"]
    ok(api.post(f"{API}/resetTraffic/a@now"))
    assert page(api)["summary"]["depleted"] == []
    set_traffic(api, "a@now", 1)
    assert page(api)["summary"]["expiring"] == ["a@now"]  # trafficDiff 1 GB by default
    ok(api.post("/panel/api/setting/update", {"trafficDiff": 0}))
    assert page(api)["summary"]["expiring"] == []
    ok(
        api.post(
            f"{API}/bulkCreate",
            [{"client": {"email": "b@now", "enable": False}, "inboundIds": [vless_id]}],
        )
    )
    summary = page(api)["summary"]
    assert summary["total"] == 2 and summary["deactive"] == ["b@now"]
    ok(api.post(f"{API}/bulkDel", {"emails": ["b@now"]}))
    assert page(api)["summary"]["deactive"] == []
    ok(api.post(f"{API}/bulkAdjust", {"emails": ["a@now"], "addBytes": -999}))
    assert page(api)["summary"]["depleted"] == ["a@now"]
    ok(api.post(f"{API}/del/a@now"))
    assert page(api)["summary"]["total"] == 0
    assert page(api)["summary"]["depleted"] == []


def test_filtered_counts_follow_each_change(own):
    api = own.client()
    vless_id, trojan_id = inbound(api, "vless"), inbound(api, "trojan")
    for email in ("a@count", "b@count", "c@count"):
        ok(api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [vless_id]}))
    assert page(api, protocol="trojan")["filtered"] == 0
    assert page(api, protocol="vless", search="count")["filtered"] == 3
    ok(api.post(f"{API}/b@count/attach", {"inboundIds": [trojan_id]}))
    assert page(api, protocol="trojan")["filtered"] == 1
    ok(api.post(f"{API}/del/c@count"))
    assert page(api, protocol="vless", search="count")["filtered"] == 2
    assert page(api, filter="active")["filtered"] == 2
    ok(api.post(f"{API}/update/a@count", {"email": "a@count", "enable": False}))
    assert page(api, filter="active")["filtered"] == 1
    assert page(api, filter="deactive")["filtered"] == 1
    assert page(api, inboundId=str(trojan_id))["filtered"] == 1
    ok(api.post(f"{API}/a@count/attach", {"inboundIds": [trojan_id]}))
    assert page(api, inboundId=str(trojan_id))["filtered"] == 2


def test_expiring_follows_expire_diff(own):
    api = own.client()
    vless_id = inbound(api, "vless")
    now = int(time.time() * 1000)
    ok(
        api.post(
            f"{API}/add",
            {
                "client": {"email": "soon@x", "expiryTime": now + 5 * DAY_MS},
                "inboundIds": [vless_id],
            },
        )
    )
    ok(api.post("/panel/api/setting/update", {"expireDiff": 3}))
    assert page(api, filter="expiring")["items"] == []
    ok(api.post("/panel/api/setting/update", {"expireDiff": 6}))
    reply = page(api, filter="expiring")
    assert [item["email"] for item in reply["items"]] == ["soon@x"]
    assert reply["summary"]["expiring"] == ["soon@x"]
