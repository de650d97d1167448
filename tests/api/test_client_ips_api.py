"""server/clientIps: the whole client address table, read and merged over HTTP.

Clients are created through the API; addresses arrive through the POST under test (and
once straight into the database, as the access-log collector writes them). What the GET
answers, what clients/ips/:email lists and the rows in the panel's SQLite file are the
observable results.
"""

from __future__ import annotations

import time
import uuid

import pytest
from helpers import REALITY, create_inbound, db_rows, free_port, ok, refused

SERVER = "/panel/api/server"
CLIENTS = "/panel/api/clients"


@pytest.fixture(scope="module")
def emails(panel) -> list[str]:
    api = panel.client()
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": free_port(),
            "remark": "ips",
            "settings": {"decryption": "none"},
            "streamSettings": REALITY,
        },
    )
    names = ["Alice@example.org", "bob@example.org", "carol@example.org"]
    for email in names:
        client = {"email": email, "id": str(uuid.uuid4())}
        ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound["id"]]}))
    return names


def table(api) -> dict[str, list[dict]]:
    rows = ok(api.get(f"{SERVER}/clientIps"))
    assert all(set(row) == {"email", "ips"} for row in rows)
    return {row["email"]: row["ips"] for row in rows}


def merge(api, entries) -> dict:
    return ok(api.post(f"{SERVER}/clientIps", {"ips": entries}))


def test_the_table_starts_empty(api, emails):
    assert ok(api.get(f"{SERVER}/clientIps")) == []


def test_merged_addresses_appear_newest_first(api, emails):
    alice, bob, _ = emails
    result = merge(
        api,
        [
            {
                "email": alice,
                "ips": [
                    {"ip": "198.51.100.1", "timestamp": 1_700_000_000},
                    {"ip": "198.51.100.2", "timestamp": 1_700_000_500},
                ],
            },
            {"email": bob, "ips": [{"ip": "2001:db8::1", "timestamp": 1_700_000_100}]},
        ],
    )
    assert result == {"clients": 2, "addresses": 3, "skipped": []}
    assert table(api) == {
        alice: [
            {"ip": "198.51.100.2", "timestamp": 1_700_000_500},
            {"ip": "198.51.100.1", "timestamp": 1_700_000_000},
        ],
        bob: [{"ip": "2001:db8::1", "timestamp": 1_700_000_100}],
    }
    listed = ok(api.post(f"{CLIENTS}/ips/{alice}"))
    assert listed == ["198.51.100.2 (1700000500)", "198.51.100.1 (1700000000)"]


def test_a_merge_keeps_what_is_known_and_the_later_time(api, emails):
    alice = emails[0]
    merge(
        api,
        [
            {
                # The email matches whatever its case, as everywhere in the panel.
                "email": alice.upper(),
                "ips": [
                    {"ip": "198.51.100.1", "timestamp": 1_600_000_000},  # older: ignored
                    {"ip": "198.51.100.2", "timestamp": 1_700_009_000},  # newer: taken
                    {"ip": "::ffff:203.0.113.7", "timestamp": 1_700_001_000},  # new
                ],
            }
        ],
    )
    assert table(api)[alice] == [
        {"ip": "198.51.100.2", "timestamp": 1_700_009_000},
        {"ip": "203.0.113.7", "timestamp": 1_700_001_000},
        {"ip": "198.51.100.1", "timestamp": 1_700_000_000},
    ]


def test_addresses_the_collector_recorded_are_listed_and_kept(panel, api, emails):
    carol = emails[2]
    db_rows(
        panel,
        "INSERT INTO client_ip (email_key, ip, seen_at) VALUES (?, ?, ?)",
        (carol, "192.0.2.44", 1_700_000_044),
    )
    merge(api, [{"email": carol, "ips": [{"ip": "192.0.2.45", "timestamp": 1_700_000_045}]}])
    assert table(api)[carol] == [
        {"ip": "192.0.2.45", "timestamp": 1_700_000_045},
        {"ip": "192.0.2.44", "timestamp": 1_700_000_044},
    ]


def test_unknown_clients_are_skipped_and_the_rest_merged(panel, api, emails):
    bob = emails[1]
    result = merge(
        api,
        [
            {"email": "ghost@example.org", "ips": [{"ip": "192.0.2.9", "timestamp": 5}]},
            {"email": bob, "ips": [{"ip": "192.0.2.10", "timestamp": 1_700_000_200}]},
        ],
    )
    assert result["skipped"] == [
        {"email": "ghost@example.org", "reason": "no client has this email"}
    ]
    assert result["clients"] == 1
    assert "ghost@example.org" not in table(api)
    assert db_rows(
        panel, "SELECT count(*) FROM client_ip WHERE email_key = 'ghost@example.org'"
    ) == [(0,)]
    assert {"ip": "192.0.2.10", "timestamp": 1_700_000_200} in table(api)[bob]


def test_a_time_in_the_future_counts_as_now(api, emails):
    bob = emails[1]
    before = int(time.time())
    merge(api, [{"email": bob, "ips": [{"ip": "192.0.2.77", "timestamp": 4_000_000_000}]}])
    stamp = next(entry for entry in table(api)[bob] if entry["ip"] == "192.0.2.77")["timestamp"]
    assert before <= stamp <= int(time.time()) + 1


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, ["send {ips"]),
        ({"ips": "1.2.3.4"}, ["ips must be a list"]),
        ({"ips": [5]}, ["ips[1] must be an object with an email"]),
        ({"ips": [{"email": "", "ips": []}]}, ["ips[1] needs a non-empty email"]),
        ({"ips": [{"email": "bob@example.org"}]}, ["needs a non-empty email and an ips list"]),
        (
            {"ips": [{"email": "bob@example.org", "ips": [{"ip": "nope", "timestamp": 1}]}]},
            ["with an IP address"],
        ),
        (
            {"ips": [{"email": "bob@example.org", "ips": [{"ip": 7, "timestamp": 1}]}]},
            ["with an IP address"],
        ),
        (
            {"ips": [{"email": "bob@example.org", "ips": ["192.0.2.1"]}]},
            ["{ip, timestamp}"],
        ),
        (
            {"ips": [{"email": "bob@example.org", "ips": [{"ip": "192.0.2.1", "timestamp": "1"}]}]},
            ["timestamp of 192.0.2.1 must be unix seconds"],
        ),
        (
            {"ips": [{"email": "bob@example.org", "ips": [{"ip": "192.0.2.1", "timestamp": -1}]}]},
            ["non-negative integer"],
        ),
        (
            {
                "ips": [
                    {"email": "bob@example.org", "ips": [{"ip": "192.0.2.1", "timestamp": True}]}
                ]
            },
            ["unix seconds"],
        ),
    ],
)
def test_bad_shapes_are_refused_and_change_nothing(api, emails, body, words):
    before = table(api)
    # A good entry first: a refusal must not have written it either.
    good = {"email": emails[2], "ips": [{"ip": "192.0.2.200", "timestamp": 1_700_000_300}]}
    if isinstance(body.get("ips"), list):
        body = {"ips": [good, *body["ips"]]}
        words = [word.replace("ips[1]", "ips[2]") for word in words]
    refused(api.post(f"{SERVER}/clientIps", body), *words)
    assert table(api) == before


def test_a_body_that_is_not_an_object_is_refused(api):
    refused(api.post(f"{SERVER}/clientIps", ["x"]), "JSON object")


def test_the_table_needs_a_signed_in_caller(panel):
    refused(panel.client(login=False).get(f"{SERVER}/clientIps"), "sign in")
