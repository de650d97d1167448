"""Bulk client operations over HTTP against the real server: bulkCreate, import and export
(with a full round trip), bulkAdjust, bulkEnable, bulkDel, bulkAttach/bulkDetach, bulkResetTraffic,
resetAllTraffics and the sweeps delDepleted and delOrphans, checked through the API and,
where the spec names tables (traffic, IP log, external links), in the SQLite file.

Every bulk call is sequential: a bad item is reported with its reason and the rest is
committed. Whole-table operations run on a panel of their own so they cannot touch the
clients of other tests."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from helpers import create_inbound, db_rows, free_port, ok, refused
from panels import start_panel

API = "/panel/api/clients"
DAY_MS = 86_400_000
GB = 1024**3
SS_KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="  # 32 bytes, for 2022-blake3-aes-256
UUID = "1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed"

_names = itertools.count(1)


# ---- helpers -------------------------------------------------------------------------


def inbound(api, protocol: str = "vless", **settings) -> int:
    payload = {"protocol": protocol, "port": free_port(), "remark": protocol}
    if protocol == "vless":
        payload["settings"] = {"decryption": "none"}
        payload["streamSettings"] = {"network": "tcp", "security": "none"}
    elif protocol == "shadowsocks":
        payload["settings"] = {"method": "2022-blake3-aes-256-gcm", "network": "tcp,udp"}
    elif protocol == "socks":
        payload["settings"] = {"auth": "noauth"}
    else:
        payload["settings"] = {}
    payload["settings"].update(settings)
    return create_inbound(api, payload)["id"]


def emails(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{next(_names)}@bulk.test" for _ in range(count)]


def create(api, inbound_ids: list[int], *clients: dict) -> list[str]:
    result = ok(
        api.post(f"{API}/bulkCreate", [{"client": c, "inboundIds": inbound_ids} for c in clients])
    )
    assert result == {"created": len(clients), "skipped": []}
    return [c["email"] for c in clients]


def get(api, email: str) -> dict:
    return ok(api.get(f"{API}/get/{email}"))


def missing(api, email: str) -> bool:
    reply = api.get(f"{API}/get/{email}")
    assert reply["success"] is False
    return "no client" in reply["msg"]


def set_traffic(api, email: str, up: int, down: int = 0) -> None:
    ok(api.post(f"{API}/updateTraffic/{email}", {"upload": up, "download": down}))


def export_by_email(api) -> dict[str, dict]:
    return {item["client"]["email"]: item for item in ok(api.get(f"{API}/export"))}


@pytest.fixture
def own(tmp_path):
    """A panel of the test's own, for whole-table operations."""
    server = start_panel(tmp_path)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def vless(panel) -> int:
    return inbound(panel.client())


@pytest.fixture(scope="module")
def trojan(panel) -> int:
    return inbound(panel.client(), "trojan")


# ---- bulkCreate ------------------------------------------------------------------------


def test_bulk_create_creates_every_item_with_its_fields(api, vless, trojan):
    a, b = emails("create", 2)
    result = ok(
        api.post(
            f"{API}/bulkCreate",
            [
                {
                    "client": {"email": a, "totalGB": 5 * GB, "comment": "first"},
                    "inboundIds": [vless],
                },
                {"client": {"email": b, "id": UUID, "limitIp": 2}, "inboundIds": [vless, trojan]},
            ],
        )
    )
    assert result == {"created": 2, "skipped": []}
    first, second = get(api, a), get(api, b)
    assert first["inboundIds"] == [vless]
    assert first["client"]["totalGB"] == 5 * GB
    assert first["client"]["comment"] == "first"
    assert first["client"]["id"] and first["client"]["password"] and first["client"]["auth"]
    assert second["inboundIds"] == sorted([vless, trojan])
    assert second["client"]["id"] == UUID
    assert second["client"]["limitIp"] == 2


def test_bulk_create_skips_bad_items_with_reasons_and_commits_the_rest(api, vless):
    existing, good, dup, no_ids, empty_ids, bad_uuid, unknown_inbound, after = emails("mix", 8)
    create(api, [vless], {"email": existing, "comment": "original"})
    before = get(api, existing)
    socks = inbound(api, "socks")
    items = [
        {"client": {"email": good}, "inboundIds": [vless]},
        {"client": {"email": existing.upper(), "comment": "overwrite?"}, "inboundIds": [vless]},
        {"client": {"email": dup}, "inboundIds": [vless]},
        {"client": {"email": dup.upper()}, "inboundIds": [vless]},
        {"client": {"email": no_ids}},
        {"client": {"email": empty_ids}, "inboundIds": []},
        {"client": {"email": bad_uuid, "id": "not-a-uuid"}, "inboundIds": [vless]},
        {"client": {"email": unknown_inbound}, "inboundIds": [987654]},
        {"client": {"email": "socks@bulk.test"}, "inboundIds": [socks]},
        {"client": {"email": "bad/slash"}, "inboundIds": [vless]},
        {"client": "not an object", "inboundIds": [vless]},
        17,
        {"client": {"email": after}, "inboundIds": [vless]},
    ]
    result = ok(api.post(f"{API}/bulkCreate", items))
    assert result["created"] == 3
    reasons = {entry["email"]: entry["reason"] for entry in result["skipped"]}
    assert len(result["skipped"]) == 10
    assert "already in use" in reasons[existing.upper()]
    assert "already in use" in reasons[dup.upper()]
    assert "inboundIds" in reasons[no_ids]
    assert "inboundIds" in reasons[empty_ids]
    assert "UUID" in reasons[bad_uuid]
    assert "no inbound with id 987654" in reasons[unknown_inbound]
    assert "takes no clients" in reasons["socks@bulk.test"]
    assert "/" in reasons["bad/slash"]
    assert "each item" in reasons["item 10"]
    assert "each item" in reasons["item 11"]
    for email in (good, dup, after):
        assert get(api, email)["inboundIds"] == [vless]
    for email in (no_ids, empty_ids, bad_uuid, unknown_inbound, "socks@bulk.test"):
        assert missing(api, email)
    assert get(api, existing) == before


@pytest.mark.parametrize(
    "payload",
    [{"client": {"email": "x@y"}, "inboundIds": [1]}, "text", 5, None],
    ids=["object", "string", "number", "null"],
)
def test_bulk_create_needs_an_array(api, payload):
    refused(api.post(f"{API}/bulkCreate", payload), "array")


def test_bulk_create_of_nothing_creates_nothing(api):
    assert ok(api.post(f"{API}/bulkCreate", [])) == {"created": 0, "skipped": []}


def test_bulk_create_refuses_a_form_body(api):
    reply = api.raw("POST", f"{API}/bulkCreate", data={"client": "x"}).json()
    refused(reply, "array")


# ---- import and export ----------------------------------------------------------------


def test_export_lists_attached_and_unattached_clients(api, vless, trojan):
    attached, unattached = emails("export", 2)
    create(api, [vless, trojan], {"email": attached}, {"email": unattached})
    ok(api.post(f"{API}/{unattached}/detach", {"inboundIds": [vless, trojan]}))
    exported = export_by_email(api)
    assert exported[attached]["inboundIds"] == sorted([vless, trojan])
    assert exported[unattached]["inboundIds"] == []
    assert set(exported[attached]) == {"client", "inboundIds"}
    client = exported[attached]["client"]
    assert client == {k: v for k, v in get(api, attached)["client"].items() if k != "inboundIds"}
    assert "inboundIds" not in client


def test_import_restores_unattached_items_and_never_overwrites(api, vless):
    existing, attached, unattached = emails("import", 3)
    create(api, [vless], {"email": existing, "comment": "keep me", "totalGB": GB})
    before = get(api, existing)
    data = [
        {
            "client": {"email": existing, "comment": "overwritten!", "totalGB": 9},
            "inboundIds": [vless],
        },
        {"client": {"email": attached, "traffic": {"up": 5, "down": 6}}, "inboundIds": [vless]},
        {"client": {"email": unattached, "createdAt": 1000, "updatedAt": 2000}, "inboundIds": []},
        {"client": {"email": "noinbound@bulk.test"}, "inboundIds": [987654]},
    ]
    result = ok(api.post(f"{API}/import", {"data": json.dumps(data)}))
    assert result["created"] == 2
    assert [entry["email"] for entry in result["skipped"]] == [existing, "noinbound@bulk.test"]
    assert "already in use" in result["skipped"][0]["reason"]
    assert "987654" in result["skipped"][1]["reason"]
    assert get(api, existing) == before
    restored = get(api, attached)
    assert restored["inboundIds"] == [vless]
    assert restored["client"]["traffic"]["up"] == 5
    assert restored["client"]["traffic"]["down"] == 6
    lone = get(api, unattached)
    assert lone["inboundIds"] == []
    assert (lone["client"]["createdAt"], lone["client"]["updatedAt"]) == (1000, 2000)
    assert missing(api, "noinbound@bulk.test")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, ["data"]),
        ({"data": 5}, ["data"]),
        ({"data": [{"client": {"email": "a@b"}}]}, ["data"]),
        ({"data": "{not json"}, ["not valid JSON"]),
        ({"data": '{"client": {}}'}, ["array"]),
        ({"data": "null"}, ["array"]),
    ],
    ids=["no data", "number", "array not text", "bad json", "object", "null"],
)
def test_import_refuses_bad_data(api, body, words):
    before = len(ok(api.get(f"{API}/export")))
    refused(api.post(f"{API}/import", body), *words)
    assert len(ok(api.get(f"{API}/export"))) == before


def test_export_streams_more_clients_than_one_batch_each_once(own):
    """The export is read a batch at a time: no client is lost or repeated where one
    batch ends and the next begins, and the reply is one JSON document."""
    api = own.client()
    vless_id = inbound(api)
    emails = [f"batch{n:04d}@export" for n in range(2_345)]
    ok(
        api.post(
            f"{API}/bulkCreate",
            [{"client": {"email": e}, "inboundIds": [vless_id]} for e in emails],
        )
    )
    exported = ok(api.get(f"{API}/export"))
    assert [item["client"]["email"] for item in exported] == emails
    assert all(item["inboundIds"] == [vless_id] for item in exported)


def test_export_delete_import_round_trips_every_field(own):
    api = own.client()
    vless_id = inbound(api)
    trojan_id = inbound(api, "trojan")
    ss_id = inbound(api, "shadowsocks")
    legacy_id = inbound(api, "shadowsocks", method="aes-256-gcm", password="")
    now = int(time.time() * 1000)
    clients = [
        (
            {
                "email": "Full@Round.Trip",
                "id": UUID,
                "subId": "sub-full",
                "password": SS_KEY,
                "auth": "hy-secret",
                "flow": "",
                "security": "aes-128-gcm",
                "reverse": {"tag": "rev1"},
                "totalGB": 50 * GB,
                "expiryTime": now + 30 * DAY_MS,
                "limitIp": 3,
                "reset": 30,
                "tgId": 123456789,
                "comment": "Zürich — ünïcode",
                "enable": False,
                "group": "Team A",
            },
            [vless_id, trojan_id, ss_id],
        ),
        ({"email": "start@first.use", "expiryTime": -7 * DAY_MS, "group": "b"}, [vless_id]),
        ({"email": "legacy@ss", "totalGB": GB}, [legacy_id]),
        ({"email": "lonely@unattached", "comment": "no inbound"}, [vless_id]),
    ]
    ok(api.post(f"{API}/bulkCreate", [{"client": c, "inboundIds": ids} for c, ids in clients]))
    set_traffic(api, "Full@Round.Trip", 1234, 5678)
    set_traffic(api, "legacy@ss", GB // 2, 7)
    ok(api.post(f"{API}/lonely@unattached/detach", {"inboundIds": [vless_id]}))
    db_rows(own, "UPDATE client_traffic SET enable = 0 WHERE email = ?", ("legacy@ss",))
    before = ok(api.get(f"{API}/export"))
    assert len(before) == 4
    assert {item["client"]["email"]: item["client"]["method"] for item in before}[
        "legacy@ss"
    ] == "aes-256-gcm"
    assert (
        next(i for i in before if i["client"]["email"] == "legacy@ss")["client"]["traffic"][
            "enable"
        ]
        is False
    )

    every = [item["client"]["email"] for item in before]
    assert ok(api.post(f"{API}/bulkDel", {"emails": every})) == {"deleted": 4, "skipped": []}
    assert ok(api.get(f"{API}/export")) == []
    assert db_rows(own, "SELECT COUNT(*) FROM client_traffic") == [(0,)]

    result = ok(api.post(f"{API}/import", {"data": json.dumps(before)}))
    assert result == {"created": 4, "skipped": []}
    assert ok(api.get(f"{API}/export")) == before


# ---- bulkAdjust ------------------------------------------------------------------------


def test_bulk_adjust_moves_expiry_and_quota(api, vless):
    now = int(time.time() * 1000)
    dated, pending, unlimited, quota_only = emails("adjust", 4)
    create(
        api,
        [vless],
        {"email": dated, "expiryTime": now + 10 * DAY_MS, "totalGB": 10 * GB},
        {"email": pending, "expiryTime": -3 * DAY_MS, "totalGB": 0},
        {"email": unlimited},
        {"email": quota_only, "totalGB": GB},
    )
    result = ok(
        api.post(
            f"{API}/bulkAdjust",
            {
                "emails": [dated, pending, unlimited, quota_only, "ghost@bulk.test"],
                "addDays": 5,
                "addBytes": GB,
            },
        )
    )
    assert result["adjusted"] == 3
    skipped = [(entry["email"], entry["reason"]) for entry in result["skipped"]]
    assert (pending, "unlimited traffic; bytes not added") in skipped
    assert (unlimited, "unlimited expiry; days not added") in skipped
    assert (unlimited, "unlimited traffic; bytes not added") in skipped
    assert (quota_only, "unlimited expiry; days not added") in skipped
    assert any(email == "ghost@bulk.test" and "no client" in why for email, why in skipped)
    assert len(skipped) == 5
    assert get(api, dated)["client"]["expiryTime"] == now + 15 * DAY_MS
    assert get(api, dated)["client"]["totalGB"] == 11 * GB
    assert get(api, pending)["client"]["expiryTime"] == -8 * DAY_MS
    assert get(api, pending)["client"]["totalGB"] == 0
    assert get(api, unlimited)["client"]["expiryTime"] == 0
    assert get(api, quota_only)["client"]["totalGB"] == 2 * GB


def test_bulk_adjust_subtracts(api, vless):
    now = int(time.time() * 1000)
    dated, pending, small = emails("subtract", 3)
    create(
        api,
        [vless],
        {"email": dated, "expiryTime": now + 10 * DAY_MS, "totalGB": 10 * GB},
        {"email": pending, "expiryTime": -3 * DAY_MS},
        {"email": small, "expiryTime": -DAY_MS, "totalGB": GB},
    )
    result = ok(
        api.post(
            f"{API}/bulkAdjust",
            {"emails": [dated, pending, small], "addDays": -2, "addBytes": -2 * GB},
        )
    )
    assert result["adjusted"] == 2
    reasons = {(entry["email"], entry["reason"]) for entry in result["skipped"]}
    assert (pending, "unlimited traffic; bytes not added") in reasons
    assert (small, "the duration would drop to zero") in reasons
    assert (small, "the quota would drop to zero or below") in reasons
    assert get(api, dated)["client"]["expiryTime"] == now + 8 * DAY_MS
    assert get(api, dated)["client"]["totalGB"] == 8 * GB
    assert get(api, pending)["client"]["expiryTime"] == -DAY_MS
    assert get(api, small)["client"]["expiryTime"] == -DAY_MS
    assert get(api, small)["client"]["totalGB"] == GB


def test_bulk_adjust_never_overflows(api, vless):
    (big,) = emails("huge", 1)
    create(api, [vless], {"email": big, "totalGB": 2**63 - 10, "expiryTime": 2**63 - 10})
    result = ok(api.post(f"{API}/bulkAdjust", {"emails": [big], "addDays": 1, "addBytes": 2**52}))
    assert result["adjusted"] == 0
    assert {entry["reason"] for entry in result["skipped"]} == {
        "the quota would overflow",
        "the expiry would overflow",
    }
    assert get(api, big)["client"]["totalGB"] == 2**63 - 10


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"emails": "a@b", "addDays": 1}, ["emails"]),
        ({"emails": [1], "addDays": 1}, ["emails"]),
        ({"addDays": 1}, ["emails"]),
        ({"emails": ["{email}"], "addDays": "5"}, ["addDays"]),
        ({"emails": ["{email}"], "addDays": 1.5}, ["addDays"]),
        ({"emails": ["{email}"], "addDays": True}, ["addDays"]),
        ({"emails": ["{email}"], "addBytes": [1]}, ["addBytes"]),
        ({"emails": ["{email}"], "addBytes": 2**60}, ["addBytes"]),
    ],
)
def test_bulk_adjust_refuses_bad_input_and_changes_nothing(api, vless, body, words):
    (email,) = emails("badadjust", 1)
    create(api, [vless], {"email": email, "totalGB": GB, "expiryTime": 10**13})
    before = get(api, email)
    sent = {k: ([email] if v == ["{email}"] else v) for k, v in body.items()}
    refused(api.post(f"{API}/bulkAdjust", sent), *words)
    assert get(api, email) == before


# ---- bulkDel ---------------------------------------------------------------------------


def test_bulk_delete_deletes_and_reports_unknown(panel, api, vless):
    a, b, kept = emails("del", 3)
    create(api, [vless], {"email": a}, {"email": b}, {"email": kept})
    set_traffic(api, a, 10, 20)
    result = ok(api.post(f"{API}/bulkDel", {"emails": [a, b, "ghost@bulk.test", a]}))
    assert result["deleted"] == 2
    assert len(result["skipped"]) == 1
    assert result["skipped"][0]["email"] == "ghost@bulk.test"
    assert "no client" in result["skipped"][0]["reason"]
    assert missing(api, a) and missing(api, b)
    assert get(api, kept)["client"]["email"] == kept
    assert db_rows(panel, "SELECT COUNT(*) FROM client_traffic WHERE email = ?", (a,)) == [(0,)]


def test_bulk_delete_can_keep_traffic(panel, api, vless):
    (email,) = emails("keep", 1)
    create(api, [vless], {"email": email})
    set_traffic(api, email, 111, 222)
    assert ok(api.post(f"{API}/bulkDel", {"emails": [email], "keepTraffic": True}))["deleted"] == 1
    assert missing(api, email)
    assert db_rows(panel, "SELECT up, down FROM client_traffic WHERE email = ?", (email,)) == [
        (111, 222)
    ]
    create(api, [vless], {"email": email})
    assert get(api, email)["client"]["traffic"]["up"] == 111


@pytest.mark.parametrize(
    "body",
    [
        {"emails": "x"},
        {"emails": ["{email}"], "keepTraffic": "yes"},
        {"emails": ["{email}"], "keepTraffic": 1},
    ],
)
def test_bulk_delete_refuses_bad_input(api, vless, body):
    (email,) = emails("baddel", 1)
    create(api, [vless], {"email": email})
    sent = {k: ([email] if v == ["{email}"] else v) for k, v in body.items()}
    assert api.post(f"{API}/bulkDel", sent)["success"] is False
    assert get(api, email)["client"]["email"] == email


# ---- bulkAttach / bulkDetach ---------------------------------------------------------------


def test_bulk_attach_and_detach(api, vless, trojan):
    fresh, partly, full = emails("attach", 3)
    create(api, [vless], {"email": fresh}, {"email": partly})
    create(api, [vless, trojan], {"email": full})
    ok(api.post(f"{API}/{fresh}/detach", {"inboundIds": [vless]}))
    result = ok(
        api.post(
            f"{API}/bulkAttach",
            {"emails": [fresh, partly, full, "ghost@bulk.test"], "inboundIds": [vless, trojan]},
        )
    )
    assert result["attached"] == [fresh, partly]
    assert result["skipped"] == [full]
    assert len(result["errors"]) == 1 and "ghost@bulk.test" in result["errors"][0]
    for email in (fresh, partly, full):
        assert get(api, email)["inboundIds"] == sorted([vless, trojan])

    ok(api.post(f"{API}/{partly}/detach", {"inboundIds": [trojan]}))
    result = ok(
        api.post(
            f"{API}/bulkDetach",
            {"emails": [fresh, partly, "ghost@bulk.test"], "inboundIds": [trojan, 987654]},
        )
    )
    assert result["detached"] == [fresh]
    assert result["skipped"] == [partly]
    assert len(result["errors"]) == 1 and "ghost@bulk.test" in result["errors"][0]
    assert get(api, fresh)["inboundIds"] == [vless]
    assert get(api, partly)["inboundIds"] == [vless]

    result = ok(
        api.post(f"{API}/bulkDetach", {"emails": [fresh, full], "inboundIds": [vless, trojan]})
    )
    assert result == {"detached": [fresh, full], "skipped": [], "errors": []}
    assert get(api, fresh)["inboundIds"] == []
    assert get(api, full)["inboundIds"] == []


def test_bulk_attach_reports_a_client_the_inbound_cannot_take(api, vless):
    ss256 = inbound(api, "shadowsocks")
    ss128 = inbound(api, "shadowsocks", method="2022-blake3-aes-128-gcm")
    keyed, plain = emails("cipher", 2)
    create(api, [ss256], {"email": keyed})
    create(api, [vless], {"email": plain})
    before = get(api, keyed)
    result = ok(api.post(f"{API}/bulkAttach", {"emails": [keyed, plain], "inboundIds": [ss128]}))
    assert result["attached"] == [plain]
    assert result["skipped"] == []
    assert len(result["errors"]) == 1 and result["errors"][0].startswith(f"{keyed}: ")
    assert get(api, keyed) == before
    assert get(api, plain)["inboundIds"] == sorted([vless, ss128])


@pytest.mark.parametrize(
    ("route", "body", "words"),
    [
        ("bulkAttach", {"emails": ["{email}"], "inboundIds": [987654]}, ["987654"]),
        ("bulkAttach", {"emails": ["{email}"], "inboundIds": ["{trojan}", 987654]}, ["987654"]),
        ("bulkAttach", {"emails": ["{email}"], "inboundIds": ["{socks}"]}, ["takes no clients"]),
        ("bulkAttach", {"emails": ["{email}"], "inboundIds": []}, ["inboundIds"]),
        ("bulkAttach", {"emails": ["{email}"]}, ["inboundIds"]),
        ("bulkAttach", {"emails": ["{email}"], "inboundIds": ["x"]}, ["inboundIds"]),
        ("bulkAttach", {"inboundIds": ["{trojan}"]}, ["emails"]),
        ("bulkDetach", {"emails": ["{email}"], "inboundIds": []}, ["inboundIds"]),
        ("bulkDetach", {"emails": ["{email}"], "inboundIds": [0]}, ["inboundIds"]),
        ("bulkDetach", {"emails": "{email}", "inboundIds": ["{vless}"]}, ["emails"]),
    ],
)
def test_bulk_attach_detach_refuse_bad_input(api, vless, trojan, route, body, words):
    (email,) = emails("badattach", 1)
    create(api, [vless], {"email": email})
    socks = inbound(api, "socks")
    names = {"{email}": email, "{vless}": vless, "{trojan}": trojan, "{socks}": socks}

    def fill(value):
        if isinstance(value, list):
            return [fill(v) for v in value]
        return names.get(value, value) if isinstance(value, str) else value

    refused(api.post(f"{API}/{route}", {k: fill(v) for k, v in body.items()}), *words)
    assert get(api, email)["inboundIds"] == [vless]


# ---- bulkEnable --------------------------------------------------------------------------


def core_emails(api, inbound_id: int) -> set[str]:
    """The clients the assembled core config gives the inbound."""
    tag = ok(api.get(f"/panel/api/inbounds/get/{inbound_id}"))["tag"]
    config = ok(api.get("/panel/api/server/getConfigJson"))
    entry = next(i for i in config["inbounds"] if i.get("tag") == tag)
    return {c["email"] for c in entry["settings"].get("clients") or []}


def test_bulk_enable_switches_many_clients_in_one_call(api, vless):
    names = emails("switch", 20)
    other, off = emails("switch-kept", 2)
    create(api, [vless], *({"email": e} for e in [*names, other]), {"email": off, "enable": False})

    result = ok(
        api.post(f"{API}/bulkEnable", {"emails": [*names, "ghost@bulk.test"], "enable": False})
    )
    assert result == {
        "affected": 20,
        "skipped": [
            {"email": "ghost@bulk.test", "reason": "no client with email 'ghost@bulk.test'"}
        ],
    }
    assert {get(api, e)["client"]["enable"] for e in names} == {False}
    assert get(api, other)["client"]["enable"] is True
    assert not core_emails(api, vless) & set(names)
    assert other in core_emails(api, vless)

    result = ok(api.post(f"{API}/bulkEnable", {"emails": [names[0], off], "enable": True}))
    assert result == {"affected": 2, "skipped": []}
    assert get(api, names[0])["client"]["enable"] is get(api, off)["client"]["enable"] is True
    assert get(api, names[1])["client"]["enable"] is False
    assert {names[0], off} <= core_emails(api, vless)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"emails": ["a@bulk.test"]}, ("enable", "true or false")),
        ({"emails": ["a@bulk.test"], "enable": "yes"}, ("enable", "true or false")),
        ({"emails": "a@bulk.test", "enable": True}, ("emails", "array")),
        ({"emails": [1], "enable": True}, ("emails", "strings")),
        (["a@bulk.test"], ("object",)),
    ],
)
def test_bulk_enable_refuses_bad_input_and_changes_nothing(api, vless, body, words):
    (email,) = emails("switch-bad", 1)
    create(api, [vless], {"email": email})
    if isinstance(body, dict) and isinstance(body.get("emails"), list) and body["emails"] != [1]:
        body = {**body, "emails": [email]}
    refused(api.post(f"{API}/bulkEnable", body), *words)
    assert get(api, email)["client"]["enable"] is True


# ---- traffic resets ---------------------------------------------------------------------


def test_bulk_reset_traffic(api, vless):
    a, b, other = emails("reset", 3)
    create(api, [vless], {"email": a, "totalGB": GB}, {"email": b}, {"email": other})
    for email in (a, b, other):
        set_traffic(api, email, 100, 200)
    result = ok(api.post(f"{API}/bulkResetTraffic", {"emails": [a, b, "ghost@bulk.test"]}))
    assert result == {"affected": 2}
    assert get(api, a)["client"]["traffic"] == {"up": 0, "down": 0, "enable": True}
    assert get(api, a)["client"]["totalGB"] == GB
    assert get(api, b)["client"]["traffic"]["down"] == 0
    assert get(api, other)["client"]["traffic"]["down"] == 200
    refused(api.post(f"{API}/bulkResetTraffic", {"emails": None}), "emails")


def test_reset_all_traffics_keeps_quotas_and_expiry(own):
    api = own.client()
    vless_id = inbound(api)
    create(
        api,
        [vless_id],
        {"email": "a@reset.all", "totalGB": GB, "expiryTime": 10**13},
        {"email": "b@reset.all", "expiryTime": -DAY_MS},
    )
    set_traffic(api, "a@reset.all", 5, 6)
    set_traffic(api, "b@reset.all", 7, 8)
    before = export_by_email(api)
    ok(api.post(f"{API}/resetAllTraffics"))
    after = export_by_email(api)
    for email in ("a@reset.all", "b@reset.all"):
        assert after[email]["client"]["traffic"] == {"up": 0, "down": 0, "enable": True}
        for field in ("totalGB", "expiryTime", "enable"):
            assert after[email]["client"][field] == before[email]["client"][field]


# ---- sweeps ------------------------------------------------------------------------------


def test_del_depleted_deletes_exactly_the_used_up_and_expired(own):
    api = own.client()
    vless_id = inbound(api)
    now = int(time.time() * 1000)
    create(
        api,
        [vless_id],
        {"email": "quota@used", "totalGB": 1000},
        {"email": "quota@over", "totalGB": 1000},
        {"email": "quota@left", "totalGB": 1000},
        {"email": "expired@past", "expiryTime": now - DAY_MS},
        {"email": "future@date", "expiryTime": now + DAY_MS},
        {"email": "first@use", "expiryTime": -DAY_MS},
        {"email": "no@limits"},
        {"email": "reset@period", "totalGB": 1000, "reset": 30},
        {"email": "disabled@fine", "enable": False},
    )
    set_traffic(api, "quota@used", 600, 400)
    set_traffic(api, "reset@period", 600, 400)
    set_traffic(api, "quota@left", 500, 499)
    db_rows(own, "UPDATE client_traffic SET up = 2000 WHERE email = ?", ("quota@over",))
    assert ok(api.post(f"{API}/delDepleted")) == {"deleted": 3}
    left = sorted(export_by_email(api))
    assert left == sorted(
        ["quota@left", "future@date", "first@use", "no@limits", "reset@period", "disabled@fine"]
    )
    assert db_rows(own, "SELECT COUNT(*) FROM client_traffic WHERE email = 'quota@used'") == [(0,)]
    assert ok(api.post(f"{API}/delDepleted")) == {"deleted": 0}


def test_del_orphans_deletes_unattached_with_their_rows(own):
    api = own.client()
    vless_id = inbound(api)
    create(api, [vless_id], {"email": "orphan@one"}, {"email": "orphan@two"}, {"email": "kept@one"})
    links = {
        "externalLinks": [
            {"kind": "link", "value": "vless://x@example.com:443", "remark": "a"},
            {"kind": "subscription", "value": "https://example.com/sub", "remark": "b"},
        ]
    }
    for email in ("orphan@one", "kept@one"):
        ok(api.post(f"{API}/{email}/externalLinks", links))
        set_traffic(api, email, 1, 2)
        db_rows(
            own,
            "INSERT INTO client_ip (email_key, ip, seen_at) VALUES (?, '10.0.0.1', 1)",
            (email,),
        )
    ok(
        api.post(
            f"{API}/bulkDetach", {"emails": ["orphan@one", "orphan@two"], "inboundIds": [vless_id]}
        )
    )
    orphan_id = db_rows(own, "SELECT id FROM client WHERE email = 'orphan@one'")[0][0]
    assert ok(api.post(f"{API}/delOrphans")) == {"deleted": 2}
    assert sorted(export_by_email(api)) == ["kept@one"]
    assert db_rows(own, "SELECT email_key FROM client_traffic") == [("kept@one",)]
    assert db_rows(own, "SELECT email_key FROM client_ip") == [("kept@one",)]
    assert db_rows(own, "SELECT COUNT(*) FROM client_link WHERE client_id = ?", (orphan_id,)) == [
        (0,)
    ]
    assert len(get(api, "kept@one")["externalLinks"]) == 2
    assert ok(api.post(f"{API}/delOrphans")) == {"deleted": 0}


# ---- two thousand clients ------------------------------------------------------------------


def test_two_thousand_clients_in_one_call_stay_consistent(own):
    api = own.client()
    vless_id, trojan_id = inbound(api), inbound(api, "trojan")
    now = int(time.time() * 1000)
    items = []
    for n in range(2000):
        client = {"email": f"user{n:04d}@scale.test"}
        if n % 10 == 0:
            client["enable"] = False
        if n % 10 == 1:
            client["expiryTime"] = now - DAY_MS
        if n % 10 == 2:
            client["expiryTime"] = now + DAY_MS
        items.append({"client": client, "inboundIds": [vless_id] if n % 2 else [trojan_id]})
    assert ok(api.post(f"{API}/bulkCreate", items)) == {"created": 2000, "skipped": []}

    assert len(ok(api.get(f"{API}/export"))) == 2000
    first = ok(api.get(f"{API}/list/paged", params={"pageSize": 200}))
    summary = first["summary"]
    assert first["total"] == first["filtered"] == summary["total"] == 2000
    assert len(summary["deactive"]) == 200
    assert len(summary["depleted"]) == 200
    assert len(summary["expiring"]) == 200
    assert summary["active"] == 1600
    seen = []
    for page in range(1, 11):
        reply = ok(api.get(f"{API}/list/paged", params={"pageSize": 200, "page": page}))
        seen += [item["email"] for item in reply["items"]]
    assert seen == [f"user{n:04d}@scale.test" for n in range(2000)]
    for name, count in (("deactive", 200), ("depleted", 200), ("expiring", 200), ("active", 1600)):
        reply = ok(api.get(f"{API}/list/paged", params={"filter": name}))
        assert reply["filtered"] == count, name
    assert ok(api.get(f"{API}/list/paged", params={"protocol": "trojan"}))["filtered"] == 1000
    assert ok(api.post(f"{API}/delDepleted")) == {"deleted": 200}
    assert ok(api.get(f"{API}/list/paged"))["total"] == 1800
    assert len(ok(api.get(f"{API}/export"))) == 1800
