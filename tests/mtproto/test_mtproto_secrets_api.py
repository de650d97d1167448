"""MTProto secrets are random and each client's own: an MTProto proxy tells its users
apart by their keys alone, so two clients with one key would be one user counted as
another, and a key somebody chose (all zeros, one byte repeated) is one others can guess.

Each save path is tried (add, update, bulkCreate, import) and two adds of one key at
once, which only the store's unique index can settle on the networked databases.
"""

from __future__ import annotations

import collections
import json
import os

import pytest
from helpers import ok, post_at_once, refused
from test_mtproto_api import add_client, mtproto_inbound, unique

API = "/panel/api/clients"
CHOSEN = [
    ("0" * 32, "1 of its 16 bytes differ and its two halves are equal"),
    ("ab" * 16, "1 of its 16 bytes differ"),
    ("0123456789abcdef" * 2, "its two halves are equal"),
    ("000000000000000000000000ff010203", "5 of its 16 bytes differ"),
]


@pytest.fixture(scope="module")
def inbound_id(panel) -> int:
    return mtproto_inbound(panel.client())["id"]


def emails(api) -> set[str]:
    return {client["email"] for client in ok(api.get(f"{API}/list"))}


def holders(api, secret: str) -> list[str]:
    return [c["email"] for c in ok(api.get(f"{API}/list")) if c["secret"] == secret]


@pytest.mark.parametrize(("secret", "words"), CHOSEN)
def test_a_chosen_secret_is_refused_on_add_and_update(api, inbound_id, secret, words):
    email = unique()
    body = {"client": {"email": email, "secret": secret}, "inboundIds": [inbound_id]}
    refused(api.post(f"{API}/add", body), "not a random key", words, "at least 8 different")
    assert email not in emails(api)
    client = add_client(api, [inbound_id])
    reply = api.post(f"{API}/update/{client['email']}", {"client": {**client, "secret": secret}})
    refused(reply, "not a random key", words)
    assert holders(api, client["secret"]) == [client["email"]]


def test_a_secret_another_client_holds_is_refused_on_every_path(api, inbound_id):
    # The keys the panel generates are random, and each client's own.
    items = [{"client": {"email": unique("gen")}, "inboundIds": [inbound_id]} for _ in range(200)]
    assert ok(api.post(f"{API}/bulkCreate", items))["created"] == 200
    made = {item["client"]["email"] for item in items}
    keys = [c["secret"] for c in ok(api.get(f"{API}/list")) if c["email"] in made]
    assert len(keys) == 200 and len(set(keys)) == 200
    for generated in keys:
        raw = bytes.fromhex(generated)
        assert len(raw) == 16 and len(set(raw)) >= 8 and raw[:8] != raw[8:]

    alice = add_client(api, [inbound_id])
    taken = f"is already the MTProto key of client '{alice['email']}'"
    key = alice["secret"]

    body = {"client": {"email": unique(), "secret": key.upper()}, "inboundIds": [inbound_id]}
    refused(api.post(f"{API}/add", body), f"secret {key}", taken, "omit secret")

    bob = add_client(api, [inbound_id])
    reply = api.post(f"{API}/update/{bob['email']}", {"client": {**bob, "secret": key}})
    refused(reply, taken)
    assert holders(api, bob["secret"]) == [bob["email"]]

    shared = os.urandom(16).hex()
    carol, dave, erin = unique(), unique(), unique()
    items = [
        {"client": {"email": carol, "secret": key}, "inboundIds": [inbound_id]},
        {"client": {"email": dave, "secret": shared}, "inboundIds": [inbound_id]},
        {"client": {"email": erin, "secret": shared}, "inboundIds": [inbound_id]},
    ]
    result = ok(api.post(f"{API}/bulkCreate", items))
    assert result["created"] == 1
    reasons = {item["email"]: item["reason"] for item in result["skipped"]}
    assert taken in reasons[carol]
    assert f"is already the MTProto key of client '{dave}'" in reasons[erin]

    frank = unique()
    exported = [{"client": {"email": frank, "secret": shared}, "inboundIds": [inbound_id]}]
    result = ok(api.post(f"{API}/import", {"data": json.dumps(exported)}))
    assert result["created"] == 0
    assert f"is already the MTProto key of client '{dave}'" in result["skipped"][0]["reason"]

    assert holders(api, key) == [alice["email"]]
    assert holders(api, shared) == [dave]
    assert not {carol, erin, frank} & emails(api)


def test_parallel_adds_of_one_secret_create_one_client(api, inbound_id):
    key = os.urandom(16).hex()
    bodies = [
        {"client": {"email": unique("race"), "secret": key}, "inboundIds": [inbound_id]}
        for _ in range(20)
    ]
    results = post_at_once(api, f"{API}/add", bodies)
    assert collections.Counter(status for status, _ in results) == {200: 20}
    created = [body["obj"]["email"] for _, body in results if body["success"]]
    failures = [body["msg"] for _, body in results if not body["success"]]
    assert len(created) == 1 and len(failures) == 19
    for message in failures:
        assert f"secret {key} is already the MTProto key of " in message, message
    assert holders(api, key) == created
