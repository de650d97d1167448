"""Client groups over HTTP against the real server: list (with persisted empty groups,
sorted case-insensitively), emails of a group by URL-encoded name, create, rename,
delete, bulkAdd and bulkRemove, names that differ only in case, and bad input.

Each test runs on a panel of its own: the list is global, so tests sharing a panel would
see each other's groups."""

from __future__ import annotations

import itertools
from urllib.parse import quote

import pytest
from helpers import create_inbound, ok, post_at_once, refused
from panels import start_panel

API = "/panel/api/clients"
GROUPS = f"{API}/groups"

_ports = itertools.count(28000)


@pytest.fixture
def api(tmp_path):
    server = start_panel(tmp_path)
    yield server.client()
    server.stop()


@pytest.fixture
def vless(api) -> int:
    payload = {"protocol": "vless", "port": next(_ports), "settings": {"decryption": "none"}}
    return create_inbound(api, payload)["id"]


def clients(api, vless: int, *specs: tuple[str, str]) -> None:
    items = [{"client": {"email": e, "group": g}, "inboundIds": [vless]} for e, g in specs]
    assert ok(api.post(f"{API}/bulkCreate", items))["created"] == len(specs)


def groups(api) -> list[dict]:
    return ok(api.get(GROUPS))


def members(api, name: str) -> list[str]:
    return ok(api.get(f"{GROUPS}/{quote(name, safe='')}/emails"))


def group_of(api, email: str) -> str:
    return ok(api.get(f"{API}/get/{email}"))["client"]["group"]


def test_list_counts_labels_and_keeps_empty_groups_sorted(api, vless):
    clients(api, vless, ("a@g", "beta"), ("b@g", "Alpha"), ("c@g", "beta"), ("d@g", ""))
    ok(api.post(f"{GROUPS}/create", {"name": "gamma"}))
    ok(api.post(f"{GROUPS}/create", {"name": "Delta"}))
    assert groups(api) == [
        {"name": "Alpha", "clientCount": 1},
        {"name": "beta", "clientCount": 2},
        {"name": "Delta", "clientCount": 0},
        {"name": "gamma", "clientCount": 0},
    ]


def test_emails_by_url_encoded_name(api, vless):
    clients(
        api,
        vless,
        ("z@g", "Team Blue"),
        ("a@g", "Team Blue"),
        ("u@g", "Équipe 東京"),
        ("p@g", "50% off"),
        ("o@g", ""),
    )
    assert members(api, "Team Blue") == ["a@g", "z@g"]
    assert members(api, "team blue") == ["a@g", "z@g"]
    assert members(api, "Équipe 東京") == ["u@g"]
    assert members(api, "50% off") == ["p@g"]
    assert members(api, "unknown") == []


def test_create_refuses_an_existing_name_in_any_case(api, vless):
    clients(api, vless, ("a@g", "Labelled"))
    assert ok(api.post(f"{GROUPS}/create", {"name": "Fresh"})) == {"name": "Fresh"}
    refused(api.post(f"{GROUPS}/create", {"name": "Fresh"}), "already exists")
    refused(api.post(f"{GROUPS}/create", {"name": "FRESH"}), "already exists")
    refused(api.post(f"{GROUPS}/create", {"name": "labelled"}), "already exists")
    assert [g["name"] for g in groups(api)] == ["Fresh", "Labelled"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, ["name", "required"]),
        ({"name": ""}, ["name", "required"]),
        ({"name": "   "}, ["name", "required"]),
        ({"name": 5}, ["name"]),
        ({"name": "x" * 65}, ["name", "64"]),
        ({"name": "a/b"}, ["/"]),
        ({"name": "tab\there"}, ["control"]),
    ],
)
def test_create_refuses_bad_names(api, body, words):
    refused(api.post(f"{GROUPS}/create", body), *words)
    assert groups(api) == []


def test_create_refuses_a_body_that_is_not_an_object(api):
    refused(api.post(f"{GROUPS}/create", ["x"]), "JSON object")


def test_rename_moves_every_client_and_the_persisted_name(api, vless):
    clients(api, vless, ("a@g", "old"), ("b@g", "old"), ("c@g", "other"))
    ok(api.post(f"{GROUPS}/create", {"name": "empty"}))
    assert ok(api.post(f"{GROUPS}/rename", {"oldName": "old", "newName": "New One"})) == {
        "affected": 2
    }
    assert group_of(api, "a@g") == group_of(api, "b@g") == "New One"
    assert group_of(api, "c@g") == "other"
    assert ok(api.post(f"{GROUPS}/rename", {"oldName": "empty", "newName": "Still Empty"})) == {
        "affected": 0
    }
    assert groups(api) == [
        {"name": "New One", "clientCount": 2},
        {"name": "other", "clientCount": 1},
        {"name": "Still Empty", "clientCount": 0},
    ]
    assert ok(api.post(f"{GROUPS}/rename", {"oldName": "new one", "newName": "NEW ONE"})) == {
        "affected": 2
    }
    assert members(api, "NEW ONE") == ["a@g", "b@g"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"oldName": "missing", "newName": "x"}, ["no group", "missing"]),
        ({"oldName": "first", "newName": "second"}, ["already exists"]),
        ({"oldName": "first", "newName": "SECOND"}, ["already exists"]),
        ({"oldName": "first"}, ["newName", "required"]),
        ({"newName": "x"}, ["oldName", "required"]),
        ({"oldName": "first", "newName": "a/b"}, ["/"]),
        ({"oldName": "first", "newName": "y" * 65}, ["64"]),
    ],
)
def test_rename_refuses_and_changes_nothing(api, vless, body, words):
    clients(api, vless, ("a@g", "first"), ("b@g", "second"))
    before = groups(api)
    refused(api.post(f"{GROUPS}/rename", body), *words)
    assert groups(api) == before
    assert group_of(api, "a@g") == "first"


def test_delete_ungroups_clients_and_keeps_them(api, vless):
    ok(api.post(f"{GROUPS}/create", {"name": "gone"}))
    clients(api, vless, ("a@g", "gone"), ("b@g", "Gone"), ("c@g", "stays"))
    assert ok(api.post(f"{GROUPS}/delete", {"name": "GONE"})) == {"affected": 2}
    assert group_of(api, "a@g") == group_of(api, "b@g") == ""
    assert groups(api) == [{"name": "stays", "clientCount": 1}]
    assert len(ok(api.get(f"{API}/list"))) == 3
    ok(api.post(f"{GROUPS}/create", {"name": "hollow"}))
    assert ok(api.post(f"{GROUPS}/delete", {"name": "hollow"})) == {"affected": 0}
    refused(api.post(f"{GROUPS}/delete", {"name": "hollow"}), "no group")
    refused(api.post(f"{GROUPS}/delete", {}), "required")


def test_bulk_add_and_remove(api, vless):
    clients(api, vless, ("a@g", ""), ("b@g", "other"), ("c@g", ""))
    result = ok(
        api.post(f"{GROUPS}/bulkAdd", {"emails": ["a@g", "b@g", "ghost@g"], "group": "New"})
    )
    assert result == {"affected": 2}
    assert group_of(api, "a@g") == group_of(api, "b@g") == "New"
    assert group_of(api, "c@g") == ""
    assert ok(api.post(f"{GROUPS}/bulkAdd", {"emails": ["a@g"], "group": "New"})) == {"affected": 0}
    assert groups(api) == [{"name": "New", "clientCount": 2}]
    assert ok(api.post(f"{GROUPS}/bulkRemove", {"emails": ["a@g", "c@g", "ghost@g"]})) == {
        "affected": 1
    }
    assert group_of(api, "a@g") == ""
    assert groups(api) == [{"name": "New", "clientCount": 1}]
    ok(api.post(f"{GROUPS}/bulkRemove", {"emails": ["b@g"]}))
    assert groups(api) == [{"name": "New", "clientCount": 0}]


def test_bulk_add_to_a_known_group_keeps_its_spelling(api, vless):
    clients(api, vless, ("a@g", ""), ("b@g", ""))
    ok(api.post(f"{GROUPS}/create", {"name": "vip"}))
    assert ok(api.post(f"{GROUPS}/bulkAdd", {"emails": ["a@g"], "group": "VIP"})) == {"affected": 1}
    assert group_of(api, "a@g") == "vip"
    assert groups(api) == [{"name": "vip", "clientCount": 1}]


@pytest.mark.parametrize(
    ("route", "body", "words"),
    [
        ("bulkAdd", {"emails": ["a@g"]}, ["group", "required"]),
        ("bulkAdd", {"emails": ["a@g"], "group": ""}, ["group", "required"]),
        ("bulkAdd", {"emails": "a@g", "group": "x"}, ["emails"]),
        ("bulkAdd", {"emails": [1], "group": "x"}, ["emails"]),
        ("bulkAdd", {"emails": ["a@g"], "group": "x/y"}, ["/"]),
        ("bulkRemove", {}, ["emails"]),
        ("bulkRemove", {"emails": [None]}, ["emails"]),
    ],
)
def test_bulk_group_calls_refuse_bad_input(api, vless, route, body, words):
    clients(api, vless, ("a@g", "kept"))
    refused(api.post(f"{GROUPS}/{route}", body), *words)
    assert group_of(api, "a@g") == "kept"
    assert groups(api) == [{"name": "kept", "clientCount": 1}]


def test_paged_list_filters_by_group(api, vless):
    clients(api, vless, ("a@g", "Ops"), ("b@g", "ops"), ("c@g", "dev"))
    reply = ok(api.get(f"{API}/list/paged", params={"group": "OPS"}))
    assert [item["email"] for item in reply["items"]] == ["a@g", "b@g"]
    assert groups(api) == [
        {"name": "dev", "clientCount": 1},
        {"name": "Ops", "clientCount": 2},
    ]


def test_parallel_creates_of_one_name_make_one_group(api):
    """On PostgreSQL and MariaDB two requests can pass the "exists?" check together; the
    unique index refuses the second, which must come back as a sentence, not a crash."""
    name = "Racing Team"
    bodies = [{"name": name if n % 2 else name.lower()} for n in range(20)]
    replies = post_at_once(api, f"{GROUPS}/create", bodies)
    assert {status for status, _ in replies} == {200}
    assert sum(body["success"] for _, body in replies) == 1
    for _, body in replies:
        assert body["success"] or "already exists" in body["msg"] or "collides" in body["msg"]
    groups = ok(api.get(GROUPS))
    assert [g["name"].casefold() for g in groups].count(name.casefold()) == 1
