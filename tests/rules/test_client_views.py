"""A client as an inbound record shows it (appliance.domain.client_views), from client
records built by hand: the entries of `settings.clients`, `clientStats` and list/slim."""

from __future__ import annotations

from appliance.domain.client_views import client_api_view, client_stat, slim_entry
from appliance.domain.clients import ClientRecord

ALICE = ClientRecord(
    row_id=7,
    uuid="6f1c1f6e-0000-4000-8000-000000000001",
    email="Alice",
    password="",
    auth="",
    flow="",
    security="auto",
    reverse_tag="",
    method="",
    enable=1,
    total_bytes=1000,
    expiry_time=0,
    up=100,
    down=200,
    traffic_enable=0,
    sub_id="alice-sub",
    reset_days=30,
    created_at=1,
    updated_at=2,
)


def test_a_client_inside_an_inbound():
    entry = (ALICE, 1_700_000_000_000)  # the record, then when it was last online
    view = client_api_view(entry)
    assert view["email"] == "Alice"
    assert view["subId"] == "alice-sub"
    assert view["inboundIds"] == []
    assert view["reverse"] is None
    assert view["traffic"] == {"up": 100, "down": 200, "enable": False}
    assert client_stat(4, view, entry) == {
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


def test_a_client_never_online_shows_zero():
    assert client_stat(4, client_api_view((ALICE, None)), (ALICE, None))["lastOnline"] == 0


def test_the_slim_entry_of_list_slim():
    assert slim_entry(("Alice", 0, "note")) == {
        "email": "Alice",
        "enable": False,
        "comment": "note",
    }
