"""The audit log over real HTTP: one entry per call that may change something, written
for every such route of the table (read from openapi.json), with who, what, from where,
when and how it ended; never a secret; pruned by age; paged, filtered and exported.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pyotp
import pytest
import requests
from helpers import create_plain_vless, db_rows, free_port, ok, refused
from panels import start_panel, stop_and_drop
from test_openapi import BODIES, FORMS, NOT_CALLED, OWN_SESSION, STAGED, concrete

from appliance.services.admin.audit import concrete_path, record_names

AUDIT = "/panel/api/audit"
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
# POST routes that only read: no entry. Kept here by hand, apart from the route table,
# so that a route wrongly marked as a read fails the test below. Routes that make the
# panel connect somewhere (node tests, subscription parsing) are actions, audited.
READS = {
    "/getTwoFactorEnable",
    "/panel/api/clients/ips/{email}",
    "/panel/api/clients/onlines",
    "/panel/api/clients/onlinesByGuid",
    "/panel/api/clients/clientIpsByGuid",
    "/panel/api/clients/activeInbounds",
    "/panel/api/clients/lastOnline",
    "/panel/api/clients/counters",
    "/panel/api/clients/recentIps",
    "/panel/api/core/",
    "/panel/api/core/balancerStatus",
    "/panel/api/core/outboundFromLink",
    "/panel/api/core/routeTest",
    "/panel/api/server/corelogs/{count}",
    "/panel/api/server/logs/{count}",
    "/panel/api/setting/all",
    "/panel/api/setting/defaultSettings",
    "/panel/api/server/getNewEchCert",
    "/panel/api/server/getCertHash",
}


def entries(api, **filters) -> dict:
    query = {"pageSize": 200, **filters}
    return ok(api.get(f"{AUDIT}/list", params=query))


def newest(api) -> dict:
    return entries(api, pageSize=1)["items"][0]


def total(api) -> int:
    return entries(api, pageSize=1)["total"]


def pattern_of(openapi_path: str) -> str:
    return re.sub(r"\{(\w+)\}", r"<\1>", openapi_path)


def wait_for(predicate, what: str, seconds: float = 15):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {seconds} s")


# ---- one entry per action ------------------------------------------------------------------


def test_every_route_that_acts_writes_exactly_one_entry(panel):
    api = panel.client()
    document = api.raw("GET", "/panel/api/openapi.json").json()
    written, skipped = [], []
    for path, item in document["paths"].items():
        for method in item:
            key = (method.upper(), path)
            if key[0] not in UNSAFE or key in NOT_CALLED:
                continue
            caller = panel.client() if key in OWN_SESSION else api
            options = {"data": FORMS[key]} if key in FORMS else {"json": BODIES.get(key, {})}
            before = total(api)
            response = caller.raw(key[0], concrete(path), **options)
            after = total(api)
            if path in READS:
                assert after == before, (path, "a read wrote an entry")
                assert item[method]["x-audited"] is False, path
                skipped.append(path)
                continue
            assert after == before + 1, (path, before, after, response.text)
            assert item[method]["x-audited"] is True, path
            entry = newest(api)
            assert entry["route"] == pattern_of(path)
            assert entry["method"] == key[0]
            assert entry["path"] == concrete(path)
            assert entry["status"] == response.status_code
            assert entry["address"] == "127.0.0.1"
            actor = "nobody" if path == "/login" else panel.username
            assert (entry["actor"], entry["actorKind"]) == (actor, "admin"), path
            reply = response.json() if "json" in response.headers.get("Content-Type", "") else {}
            if reply.get("success") is False and key not in STAGED:
                assert entry["success"] is False and entry["msg"] == reply["msg"], path
            written.append(path)
    assert len(written) > 60 and len(skipped) == len(READS)


def test_reads_and_unknown_callers_write_nothing(panel):
    api = panel.client()
    before = total(api)
    assert ok(api.get("/panel/api/inbounds/list")) is not None
    ok(api.post("/panel/api/setting/all"))
    anonymous = requests.post(panel.url + "/panel/api/inbounds/add", json={}, timeout=10)
    assert anonymous.status_code == 401
    stranger = requests.post(panel.url + "/logout", timeout=10)
    assert stranger.json()["success"] is True
    assert total(api) == before


def test_an_entry_says_who_what_which_record_and_which_fields(panel):
    api = panel.client()
    inbound_id = create_plain_vless(api, free_port())
    email = f"audit-{uuid.uuid4().hex[:8]}@example.com"
    ok(api.post("/panel/api/clients/add", {"client": {"email": email}, "inboundIds": [inbound_id]}))
    started = int(time.time() * 1000)
    ok(api.post(f"/panel/api/clients/update/{email}", {"email": email, "comment": "vip"}))
    entry = newest(api)
    assert entry["route"] == "/panel/api/clients/update/<email>"
    assert entry["path"] == f"/panel/api/clients/update/{email}"
    assert entry["target"] == f"email={email}"
    assert entry["fields"] == ["email", "comment"]
    assert entry["success"] is True and entry["status"] == 200 and entry["msg"] == ""
    assert started - 1000 <= entry["at"] <= int(time.time() * 1000) + 1000

    ok(api.post(f"/panel/api/inbounds/setEnable/{inbound_id}", {"enable": False}))
    assert newest(api)["target"] == f"id={inbound_id}"
    refused(api.post("/panel/api/setting/update", {"pageSize": 0}), "pageSize")
    entry = newest(api)
    assert entry["success"] is False and "pageSize" in entry["msg"]
    assert entry["fields"] == ["pageSize"]


def test_sign_in_and_sign_out_are_written(panel):
    admin = panel.client()
    api = panel.client(login=False)
    assert api.sign_in(panel.username, "wrong password")["success"] is False
    failed = newest(admin)
    assert (failed["route"], failed["actor"], failed["success"]) == (
        "/login",
        panel.username,
        False,
    )
    assert failed["msg"] == "wrong username or password"
    assert api.sign_in(panel.username, panel.password)["success"] is True
    signed_in = [e for e in entries(admin, route="/login")["items"] if e["success"]]
    assert signed_in and signed_in[0]["actor"] == panel.username
    assert api.post("/logout")["success"] is True
    entry = entries(admin, route="/logout")["items"][0]
    assert (entry["actor"], entry["success"]) == (panel.username, True)


def test_the_address_honours_trusted_proxies_only(panel):
    api = panel.client()
    spoofed = {"X-Forwarded-For": "203.0.113.7"}
    ok(api.post("/panel/api/setting/update", {"pageSize": 30}, headers=spoofed))
    assert newest(api)["address"] == "127.0.0.1"
    ok(api.post("/panel/api/setting/update", {"trustedProxies": "127.0.0.1"}))
    try:
        ok(api.post("/panel/api/setting/update", {"pageSize": 31}, headers=spoofed))
        assert newest(api)["address"] == "203.0.113.7"
    finally:
        ok(api.post("/panel/api/setting/update", {"trustedProxies": ""}))


# ---- secrets --------------------------------------------------------------------------------


def test_no_secret_reaches_any_column(fresh_panel):
    api = fresh_panel.client()
    inbound_id = create_plain_vless(api, free_port())
    secrets = {
        "uuid": str(uuid.uuid4()),
        "password": "clientpw-" + uuid.uuid4().hex,
        "subId": "subsecret" + uuid.uuid4().hex[:12],
        "bad subId": uuid.uuid4().hex[:20] + "!",
        "long bad subId": uuid.uuid4().hex + uuid.uuid4().hex[:20] + "!",
        "admin password": "Admin-pw-" + uuid.uuid4().hex,
        "tgBotToken": "123456:" + uuid.uuid4().hex,
        "smtpPassword": "smtp-" + uuid.uuid4().hex,
        "totp": pyotp.random_base32(),
    }
    client = {
        "email": "secretive@example.com",
        "id": secrets["uuid"],
        "password": secrets["password"],
        "subId": secrets["subId"],
    }
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound_id]}))
    for bad_sub_id in (secrets["bad subId"], secrets["long bad subId"]):
        bad = {**client, "email": "other@example.com", "subId": bad_sub_id}
        reply = api.post("/panel/api/clients/add", {"client": bad, "inboundIds": [inbound_id]})
        refused(reply, "subId", bad_sub_id[:16])  # the refusal quotes it, whole or cut short
    secret_settings = {k: secrets[k] for k in ("tgBotToken", "smtpPassword")}
    ok(api.post("/panel/api/setting/update", secret_settings))
    token = ok(api.post("/panel/api/setting/apiTokens/create", {"name": "ci"}))["token"]
    change = {
        "oldUsername": fresh_panel.username,
        "oldPassword": fresh_panel.password,
        "newUsername": fresh_panel.username,
        "newPassword": secrets["admin password"],
    }
    ok(api.post("/panel/api/setting/updateUser", change))
    fresh_panel.password = secrets["admin password"]
    wrong = fresh_panel.client(login=False)
    assert wrong.sign_in(fresh_panel.username, secrets["admin password"] + "x")["success"] is False
    code = pyotp.TOTP(secrets["totp"]).now()
    two_factor = {"twoFactorEnable": True, "twoFactorToken": secrets["totp"], "twoFactorCode": code}
    ok(api.post("/panel/api/setting/update", two_factor))

    rows = db_rows(fresh_panel, "SELECT * FROM audit_entry")
    assert len(rows) >= 8
    cells = [str(cell) for row in rows for cell in row]
    for name, secret in [*secrets.items(), ("token", token), ("token body", token[4:])]:
        assert not any(secret[:16] in cell for cell in cells), name
    refusals = [e for e in entries(api, route="clients/add")["items"] if not e["success"]]
    assert len(refusals) == 2 and all("subId must be" in e["msg"] for e in refusals)
    fields = [e["fields"] for e in entries(api, route="setting/update")["items"]]
    assert ["twoFactorEnable", "twoFactorToken", "twoFactorCode"] in fields
    assert ["tgBotToken", "smtpPassword"] in fields


# ---- paging, filters, export ----------------------------------------------------------------


def test_paging_and_filters(panel):
    api = panel.client()
    for size in (21, 22, 23):
        ok(api.post("/panel/api/setting/update", {"pageSize": size}))
    everything = entries(api)
    first = entries(api, page=1, pageSize=2)
    second = entries(api, page=2, pageSize=2)
    assert first["total"] == everything["total"] >= 3
    assert [e["id"] for e in first["items"] + second["items"]] == [
        e["id"] for e in everything["items"][:4]
    ]
    ids = [e["id"] for e in everything["items"]]
    assert ids == sorted(ids, reverse=True)
    by_route = entries(api, route="SETTING/UPDATEU")["items"]
    assert by_route and {e["route"] for e in by_route} == {"/panel/api/setting/updateUser"}
    assert entries(api, route="100%_!")["items"] == []
    mine = entries(api, actor=panel.username)
    assert mine["total"] >= 3 and {e["actor"] for e in mine["items"]} == {panel.username}
    assert entries(api, actor="someone else")["total"] == 0


@pytest.mark.parametrize(
    "query, words",
    [
        ({"page": 0}, ("page must be from 1",)),
        ({"pageSize": 201}, ("pageSize must be from 1 to 200",)),
        ({"pageSize": "ten"}, ("pageSize must be a whole number",)),
        ({"actor": "x" * 65}, ("actor must be",)),
        ({"route": "x" * 256}, ("route must be",)),
    ],
)
def test_bad_list_queries_are_refused_in_words(panel, query, words):
    refused(panel.client().get(f"{AUDIT}/list", params=query), *words)


def test_export_gives_the_entries_as_json_lines(panel):
    api = panel.client()
    ok(api.post("/panel/api/setting/update", {"pageSize": 24}))
    response = api.raw("GET", f"{AUDIT}/export")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/x-ndjson")
    disposition = response.headers["Content-Disposition"]
    assert re.fullmatch(r'attachment; filename="audit-\d{8}-\d{6}\.jsonl"', disposition)
    lines = [json.loads(line) for line in response.text.splitlines()]
    listed = entries(api)
    assert len(lines) == listed["total"]
    assert lines[: len(listed["items"])] == listed["items"]
    only = api.raw("GET", f"{AUDIT}/export", params={"route": "apiTokens/create"}).text
    assert {json.loads(line)["route"] for line in only.splitlines()} == {
        "/panel/api/setting/apiTokens/create"
    }
    refused(api.raw("GET", f"{AUDIT}/export", params={"actor": "x" * 65}).json(), "actor")


# ---- pruning --------------------------------------------------------------------------------


def test_entries_older_than_the_retention_are_pruned(tmp_path):
    server = start_panel(tmp_path)
    try:
        api = server.client()
        refused(api.post("/panel/api/setting/update", {"auditRetentionDays": 0}), "from 1 to")
        ok(api.post("/panel/api/setting/update", {"auditRetentionDays": 30}))
        day = 86_400_000
        now = int(time.time() * 1000)
        for age, actor in ((31, "old"), (29, "young")):
            db_rows(
                server,
                "INSERT INTO audit_entry (at, actor, actor_kind, method, route, path, target, "
                "address, success, status, message, fields) "
                "VALUES (?, ?, 'admin', 'POST', '/x', '/x', '', '', ?, 200, '', '')",
                (now - age * day, actor, True),
            )
        assert {e["actor"] for e in entries(api)["items"]} >= {"old", "young"}
        server.stop()
        server.start()
        api = server.client()
        wait_for(lambda: "old" not in {e["actor"] for e in entries(api)["items"]}, "pruning")
        assert "young" in {e["actor"] for e in entries(api)["items"]}
    finally:
        stop_and_drop(server)


# ---- what a path may show -------------------------------------------------------------------


def test_path_parts_other_than_record_names_are_redacted():
    params = {"subId": "s3cret-sub", "email": "a@example.com", "token": "apl_x"}
    assert concrete_path("/panel/api/clients/subLinks/<subId>", params) == (
        "/panel/api/clients/subLinks/<redacted>"
    )
    assert concrete_path("/x/<email>/<token:re:.+>", params) == "/x/a@example.com/<redacted>"
    assert record_names(params) == "email=a@example.com"
