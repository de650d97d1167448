"""API tokens end to end: create, list, enable/disable and delete through
/panel/api/setting/apiTokens, storage as SHA-256 in the database, and what a token can do
as an `Authorization: Bearer` credential, over real HTTP.
"""

from __future__ import annotations

import hashlib
import time

import pytest
import requests
from helpers import database_bytes, db_rows

BASE = "/panel/api/setting/apiTokens"
STATUS = "/panel/api/server/status"
VIEW_KEYS = {"id", "name", "enabled", "createdAt", "scope", "expiresAt"}


def create(api, name) -> dict:
    return api.post(BASE + "/create", json={"name": name})


def created(api, name) -> dict:
    reply = create(api, name)
    assert reply["success"] is True, reply
    return reply["obj"]


def bearer(panel, method: str, path: str, token: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.request(method, panel.url + path, headers=headers, timeout=10, **kwargs)


def names(api) -> list[str]:
    reply = api.get(BASE)
    assert reply["success"] is True
    return [row["name"] for row in reply["obj"]]


def token_rows(panel) -> list[tuple]:
    return db_rows(panel, "SELECT id, name, token_hash, enabled FROM api_token")


def assert_unauthorized(response: requests.Response) -> None:
    assert response.status_code == 401, response.text
    reply = response.json()
    assert reply["success"] is False
    assert reply["msg"]


def test_create_shows_the_token_once_and_the_list_never(api):
    view = created(api, "deploy script")
    assert set(view) == VIEW_KEYS | {"token"}
    assert view["name"] == "deploy script"
    assert view["enabled"] is True
    assert isinstance(view["createdAt"], int) and view["createdAt"] > 1_600_000_000
    assert len(view["token"]) >= 40
    listing = api.get(BASE)
    assert listing["success"] is True
    rows = [row for row in listing["obj"] if row["id"] == view["id"]]
    assert rows == [{key: view[key] for key in VIEW_KEYS}]
    assert all(set(row) == VIEW_KEYS for row in listing["obj"])
    assert view["token"] not in api.http.get(api.url + BASE, timeout=10).text


def test_tokens_are_stored_as_sha256_only(panel, api):
    view = created(api, "hash check")
    rows = {row[0]: row for row in token_rows(panel)}
    _, name, token_hash, enabled = rows[view["id"]]
    assert name == "hash check"
    assert token_hash == hashlib.sha256(view["token"].encode()).hexdigest()
    assert enabled == 1
    raw = database_bytes(panel)
    assert view["token"].encode() not in raw
    assert view["token"][4:].encode() not in raw


@pytest.mark.parametrize("length", [1, 64])
def test_names_of_1_to_64_characters_are_accepted(api, length):
    name = "n" * (length - 1) + str(length)[-1]
    assert created(api, name)["name"] == name
    assert name in names(api)


@pytest.mark.parametrize(
    "name, msg",
    [
        ("", "name must be 1-64 characters"),
        ("   ", "name must be 1-64 characters"),
        ("x" * 65, "name must be 1-64 characters"),
        (None, "name must be 1-64 characters"),
        (42, "name must be 1-64 characters"),
        ("tab\there", "name may not contain control or invisible characters"),
        ("nul\u0000", "name may not contain control or invisible characters"),
    ],
)
def test_bad_names_are_refused_and_nothing_is_created(api, name, msg):
    before = api.get(BASE)["obj"]
    reply = create(api, name)
    assert reply == {"success": False, "msg": msg, "obj": None}
    assert api.get(BASE)["obj"] == before


def test_a_name_with_an_unpaired_surrogate_is_an_envelope_error(api):
    response = api.raw(
        "POST",
        BASE + "/create",
        data='{"name": "\\ud800"}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 200
    assert response.json()["success"] is False
    assert "not valid Unicode" in response.json()["msg"]


def test_a_duplicate_name_is_refused_saying_it_exists(api):
    created(api, "ci")
    before = api.get(BASE)["obj"]
    reply = create(api, "ci")
    assert reply["success"] is False
    assert reply["msg"] == "an API token named 'ci' already exists"
    assert api.get(BASE)["obj"] == before


def test_a_token_is_a_full_admin_credential(panel, api):
    token = created(api, "full admin")["token"]
    settings = bearer(panel, "POST", "/panel/api/setting/all", token)
    assert settings.status_code == 200
    assert settings.json()["success"] is True
    assert settings.json()["obj"]["webBasePath"] == "/"
    inbound = {"remark": "made by token", "protocol": "vless", "port": 32017}
    added = bearer(panel, "POST", "/panel/api/inbounds/add", token, json=inbound)
    assert added.status_code == 200
    assert added.json()["success"] is True, added.text
    listed = bearer(panel, "GET", "/panel/api/inbounds/list", token).json()
    assert "made by token" in [row["remark"] for row in listed["obj"]]
    assert "made by token" in [row["remark"] for row in api.get("/panel/api/inbounds/list")["obj"]]
    other = bearer(panel, "POST", BASE + "/create", token, json={"name": "made by a token"})
    assert other.json()["success"] is True
    assert "made by a token" in names(api)


def test_a_disabled_token_is_refused_on_the_next_request(panel, api):
    view = created(api, "switchable")
    assert bearer(panel, "GET", STATUS, view["token"]).status_code == 200
    reply = api.post(f"{BASE}/setEnabled/{view['id']}", json={"enabled": False})
    assert reply["success"] is True
    assert_unauthorized(bearer(panel, "GET", STATUS, view["token"]))
    row = [r for r in api.get(BASE)["obj"] if r["id"] == view["id"]]
    assert row[0]["enabled"] is False
    assert api.post(f"{BASE}/setEnabled/{view['id']}", json={"enabled": True})["success"]
    assert bearer(panel, "GET", STATUS, view["token"]).status_code == 200


@pytest.mark.parametrize(
    "path, body, msg",
    [
        ("/setEnabled/{id}", {"enabled": "no"}, "enabled must be true or false"),
        ("/setEnabled/{id}", {}, "enabled must be true or false"),
        ("/setEnabled/999999", {"enabled": False}, "no API token with id 999999"),
        ("/setEnabled/abc", {"enabled": False}, "token id must be a positive integer"),
        ("/delete/999999", None, "no API token with id 999999"),
        ("/delete/0", None, "token id must be a positive integer"),
    ],
)
def test_bad_token_changes_are_refused_and_change_nothing(panel, api, path, body, msg):
    view = created(api, f"untouched {len(names(api))}")
    before = api.get(BASE)["obj"]
    reply = api.post(BASE + path.format(id=view["id"]), json=body)
    assert reply["success"] is False
    assert msg in reply["msg"]
    assert api.get(BASE)["obj"] == before
    assert bearer(panel, "GET", STATUS, view["token"]).status_code == 200


def test_a_deleted_token_is_refused_on_the_next_request(panel, api):
    view = created(api, "short lived")
    assert bearer(panel, "GET", STATUS, view["token"]).status_code == 200
    assert api.post(f"{BASE}/delete/{view['id']}")["success"] is True
    assert_unauthorized(bearer(panel, "GET", STATUS, view["token"]))
    assert "short lived" not in names(api)
    assert view["id"] not in [row[0] for row in token_rows(panel)]


def test_a_token_can_delete_itself_and_is_refused_after(panel, api):
    view = created(api, "self destruct")
    response = bearer(panel, "POST", f"{BASE}/delete/{view['id']}", view["token"])
    assert response.json()["success"] is True
    assert_unauthorized(bearer(panel, "GET", STATUS, view["token"]))


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer apl_unknown0000000000000000000000000000000000",
        "Bearer unknown-token",
        "Bearer ",
        "bearer apl_" + "x" * 300,
    ],
)
def test_unknown_tokens_are_refused(panel, authorization):
    response = requests.get(
        panel.url + STATUS, headers={"Authorization": authorization}, timeout=10
    )
    assert_unauthorized(response)


def test_a_token_that_is_not_utf8_is_refused_not_a_crash(panel):
    response = requests.post(
        panel.url + "/panel/api/setting/all",
        headers={"Authorization": b"Bearer apl_\xed\xa0\x80"},
        timeout=10,
    )
    assert_unauthorized(response)


def test_a_token_does_not_open_the_websocket(panel, api):
    token = created(api, "no websocket")["token"]
    response = bearer(panel, "GET", "/ws", token)
    assert_unauthorized(response)


# ---- scopes and expiry --------------------------------------------------------------------

UNKNOWN = "apl_unknown0000000000000000000000000000000000"
INBOUND = {"protocol": "socks", "settings": {"auth": "noauth"}}


def scoped(api, name: str, scope: str, expires_at: int = 0) -> dict:
    reply = api.post(BASE + "/create", json={"name": name, "scope": scope, "expiresAt": expires_at})
    assert reply["success"] is True, reply
    return reply["obj"]


def refused_like_unknown(panel, method: str, path: str, token: str, **kwargs) -> None:
    """The same answer, status and words, as a token that never existed gets."""
    response = bearer(panel, method, path, token, **kwargs)
    unknown = bearer(panel, method, path, UNKNOWN, **kwargs)
    assert unknown.status_code == 401
    assert (response.status_code, response.json()) == (unknown.status_code, unknown.json())


def test_a_token_made_without_a_scope_is_admin_and_never_expires(api):
    view = created(api, "plain")
    assert (view["scope"], view["expiresAt"]) == ("admin", 0)


def test_the_list_shows_scope_and_expiry(api):
    later = int(time.time() * 1000) + 86_400_000
    view = scoped(api, "listed reader", "read", later)
    row = [r for r in api.get(BASE)["obj"] if r["id"] == view["id"]]
    assert row == [{key: view[key] for key in VIEW_KEYS}]
    assert (row[0]["scope"], row[0]["expiresAt"]) == ("read", later)


def test_a_read_token_reads_and_is_refused_every_action(panel, api):
    token = scoped(api, "monitor", "read")["token"]
    for method, path in [
        ("GET", STATUS),
        ("GET", "/panel/api/inbounds/list"),
        ("POST", "/panel/api/setting/all"),
        ("POST", "/panel/api/clients/onlines"),
        ("GET", "/panel/api/audit/list"),
    ]:
        response = bearer(panel, method, path, token)
        assert response.status_code == 200 and response.json()["success"] is True, path
    before = api.get("/panel/api/inbounds/list")["obj"]
    inbound = {**INBOUND, "port": 32018}
    refused_like_unknown(panel, "POST", "/panel/api/inbounds/add", token, json=inbound)
    refused_like_unknown(panel, "POST", BASE + "/create", token, json={"name": "escalated"})
    refused_like_unknown(panel, "POST", "/panel/api/setting/update", token, json={"pageSize": 9})
    refused_like_unknown(panel, "GET", "/panel/api/server/getDb", token)
    assert api.get("/panel/api/inbounds/list")["obj"] == before
    assert "escalated" not in names(api)


def test_a_node_token_drives_inbounds_and_clients_only(panel, api):
    token = scoped(api, "managing panel", "node")["token"]
    inbound = {
        "protocol": "vless",
        "port": 32019,
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "none"},
    }
    added = bearer(panel, "POST", "/panel/api/inbounds/add", token, json=inbound).json()
    assert added["success"] is True, added
    client = {"client": {"email": "node-made@example.com"}, "inboundIds": [added["obj"]["id"]]}
    assert bearer(panel, "POST", "/panel/api/clients/add", token, json=client).json()["success"]
    assert bearer(panel, "GET", STATUS, token).json()["success"] is True
    assert bearer(panel, "GET", "/panel/api/core/getOutboundsTraffic", token).status_code == 200
    restart = bearer(panel, "POST", "/panel/api/server/restartCoreService", token)
    assert restart.status_code == 200  # allowed; the panel runs without a core here
    refused_like_unknown(panel, "POST", "/panel/api/setting/all", token)
    refused_like_unknown(panel, "POST", BASE + "/create", token, json={"name": "node-made"})
    refused_like_unknown(panel, "GET", "/panel/api/server/getDb", token)
    emails = [c["email"] for c in api.get("/panel/api/clients/list")["obj"]]
    assert "node-made@example.com" in emails


def test_an_out_of_scope_call_is_audited_under_the_token_name(panel, api):
    token = scoped(api, "audited reader", "read")["token"]
    refused_like_unknown(panel, "POST", "/panel/api/inbounds/resetAllTraffics", token)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = api.get("/panel/api/audit/list", params={"actor": "audited reader"})["obj"]
        if found["items"]:
            break
        time.sleep(0.1)
    entry = found["items"][0]
    assert (entry["actorKind"], entry["route"], entry["status"]) == (
        "token",
        "/panel/api/inbounds/resetAllTraffics",
        401,
    )
    assert entry["success"] is False


def test_an_expired_token_is_refused_like_an_unknown_one(panel, api):
    view = scoped(api, "expiring", "admin", int(time.time() * 1000) + 3_600_000)
    assert bearer(panel, "GET", STATUS, view["token"]).status_code == 200
    past = int(time.time() * 1000) - 1
    db_rows(panel, "UPDATE api_token SET expires_at = ? WHERE id = ?", (past, view["id"]))
    refused_like_unknown(panel, "GET", STATUS, view["token"])
    refused_like_unknown(panel, "POST", "/panel/api/inbounds/resetAllTraffics", view["token"])


@pytest.mark.parametrize(
    "extra, msg",
    [
        ({"scope": "root"}, "scope must be one of admin, read, node"),
        ({"scope": 1}, "scope must be one of admin, read, node"),
        ({"expiresAt": "tomorrow"}, "expiresAt must be a Unix time in milliseconds"),
        ({"expiresAt": 1.5}, "expiresAt must be a Unix time in milliseconds"),
        ({"expiresAt": True}, "expiresAt must be a Unix time in milliseconds"),
        ({"expiresAt": -1}, "expiresAt must be a time in the future"),
        ({"expiresAt": 1_700_000_000_000}, "expiresAt must be a time in the future"),
        ({"expiresAt": 10**16}, "expiresAt must be a time in the future"),
    ],
)
def test_bad_scopes_and_expiries_are_refused_and_create_nothing(api, extra, msg):
    before = api.get(BASE)["obj"]
    reply = api.post(BASE + "/create", json={"name": "refused", **extra})
    assert reply["success"] is False and reply["obj"] is None
    assert msg in reply["msg"]
    assert api.get(BASE)["obj"] == before
