"""A client's record from its row (appliance.domain.client_views), checked on rows built
by hand: the shapes the clients API, the subscriptions and the inbound records share."""

from __future__ import annotations

from appliance.domain.client_views import (
    CLIENT_COLUMNS,
    client_api_view,
    client_stat,
    client_view,
    slim_entry,
    traffic_of,
)

VALUES = {
    "uuid": "6f1c1f6e-0000-4000-8000-000000000001",
    "email": "Alice",
    "sub_id": "alice-sub",
    "password": "",
    "auth": "",
    "flow": "",
    "security": "auto",
    "reverse_tag": "",
    "total_bytes": 1000,
    "expiry_time": 0,
    "limit_ip": 0,
    "reset_days": 30,
    "tg_id": 0,
    "comment": "",
    "enable": 1,
    "group_name": "",
    "ad_tag": "",
    "mt_secret": "",
    "method": "",
    "created_at": 1,
    "updated_at": 2,
}
ROW = tuple(VALUES[column] for column in CLIENT_COLUMNS)


def test_a_row_becomes_the_api_record():
    view = client_view(ROW, [3, 5], (10, 20, 1))
    assert view["email"] == "Alice"
    assert view["subId"] == "alice-sub"
    assert view["totalGB"] == 1000
    assert view["reset"] == 30
    assert view["enable"] is True
    assert view["reverse"] is None
    assert view["inboundIds"] == [3, 5]
    assert view["traffic"] == {"up": 10, "down": 20, "enable": True}


def test_a_missing_traffic_row_counts_as_nothing_used_and_enabled():
    assert traffic_of((None, None, None)) == (0, 0, True)
    assert traffic_of((7, None, 0)) == (7, 0, False)


def test_a_client_inside_an_inbound():
    row = (*ROW, 100, 200, 0, 1_700_000_000_000)  # traffic joined, then last online
    view = client_api_view(row)
    assert view["inboundIds"] == []
    assert view["traffic"] == {"up": 100, "down": 200, "enable": False}
    assert client_stat(4, view, row) == {
        "inboundId": 4,
        "email": "Alice",
        "up": 100,
        "down": 200,
        "total": 1000,
        "expiryTime": 0,
        "reset": 30,
        "enable": False,
        "lastOnline": 1_700_000_000_000,
    }
    assert slim_entry(("Alice", 0, "note")) == {
        "email": "Alice",
        "enable": False,
        "comment": "note",
    }
