"""Unit tests of `client_rules`: how a client payload becomes a record, how emails are
compared and how the MTProto advertising tag is checked. Plain functions, no server.

Emails are unique across the panel after Unicode NFKC normalisation and case folding:
"Bob", "bob", "BOB" and the fullwidth "\uff42\uff4f\uff42" are one email, so the second of them
to arrive is refused as already in use (the API tests check that end to end)."""

from __future__ import annotations

import base64
import json
import random
import uuid

import pytest

from appliance.domain.client_rules import (
    check_ad_tag,
    check_group,
    email_key,
    fit_inbounds,
    legacy_method,
    normalize_client,
    random_text,
)
from appliance.errors import ServiceError

VLESS = {"id": 1, "protocol": "vless", "settings": {"decryption": "none"}}
TROJAN = {"id": 2, "protocol": "trojan", "settings": {}}


def ss(method: str, inbound_id: int = 3) -> dict:
    return {"id": inbound_id, "protocol": "shadowsocks", "settings": {"method": method}}


def key_bytes(text: str) -> int:
    return len(base64.b64decode(text, validate=True))


# ---- normalize_client ------------------------------------------------------------------


def test_omitted_fields_take_defaults_and_secrets_are_generated():
    record = normalize_client({"email": "alice"}, [VLESS])
    assert uuid.UUID(record["id"]).version == 4
    assert len(record["password"]) == 16 and record["password"].isalnum()
    assert len(record["auth"]) == 16 and record["auth"].isalnum()
    assert len(record["subId"]) == 16
    assert {k: record[k] for k in ("flow", "security", "reverse", "method", "adTag")} == {
        "flow": "",
        "security": "auto",
        "reverse": None,
        "method": "",
        "adTag": "",
    }
    assert record["enable"] is True
    assert (record["totalGB"], record["expiryTime"], record["limitIp"], record["tgId"]) == (
        0,
        0,
        0,
        0,
    )
    other = normalize_client({"email": "alice"}, [VLESS])
    assert other["id"] != record["id"] and other["password"] != record["password"]


def test_given_values_are_kept_and_uuid_is_canonical():
    given = {
        "email": "bob@example.com",
        "id": "1B9D6BCD-BBFD-4B2D-9B5D-AB8DFBBD4BED",
        "password": "p4ss",
        "auth": "h-auth",
        "flow": "xtls-rprx-vision",
        "security": "aes-128-gcm",
        "subId": "sub_1",
        "totalGB": 10 * 1024**3,
        "expiryTime": 1_900_000_000_000,
        "limitIp": 3,
        "reset": 30,
        "tgId": 123456,
        "comment": "vip",
        "enable": False,
        "group": "  team  ",
    }
    record = normalize_client(given, [VLESS])
    assert record["id"] == "1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed"
    assert record["group"] == "team"
    for field in ("password", "auth", "flow", "security", "subId", "totalGB", "comment"):
        assert record[field] == given[field]
    assert record["enable"] is False


def test_negative_expiry_means_start_on_first_use():
    assert normalize_client({"email": "a", "expiryTime": -7 * 86_400_000}, [])["expiryTime"] == (
        -7 * 86_400_000
    )


@pytest.mark.parametrize("value", [{"tag": "r1"}, '{"tag": "r1"}', {"tag": " r1 "}])
def test_reverse_as_object_or_json_text(value):
    assert normalize_client({"email": "a", "reverse": value}, [VLESS])["reverse"] == {"tag": "r1"}


@pytest.mark.parametrize("value", [None, "", {"tag": ""}, "{}"])
def test_empty_reverse_is_none(value):
    assert normalize_client({"email": "a", "reverse": value}, [VLESS])["reverse"] is None


@pytest.mark.parametrize(
    "value", ["not json", "[1]", '{"tag": 5}', [1], 5, {"tag": None}, "[" * 100_000]
)
def test_bad_reverse_is_refused(value):
    with pytest.raises(ServiceError, match="reverse"):
        normalize_client({"email": "a", "reverse": value}, [VLESS])


@pytest.mark.parametrize(
    ("method", "length"),
    [
        ("2022-blake3-aes-128-gcm", 16),
        ("2022-blake3-aes-256-gcm", 32),
    ],
)
def test_ss2022_key_has_the_cipher_length(method, length):
    generated = normalize_client({"email": "a"}, [ss(method)])
    assert key_bytes(generated["password"]) == length
    bad = normalize_client({"email": "a", "password": "short"}, [ss(method)])
    assert key_bytes(bad["password"]) == length
    good_key = base64.b64encode(bytes(range(length))).decode()
    assert normalize_client({"email": "a", "password": good_key}, [ss(method)])["password"] == (
        good_key
    )
    wrong_length = base64.b64encode(bytes(48 - length)).decode()
    replaced = normalize_client({"email": "a", "password": wrong_length}, [ss(method)])
    assert key_bytes(replaced["password"]) == length
    assert generated["method"] == ""


@pytest.mark.parametrize(
    "method", ["aes-128-gcm", "aes-256-gcm", "chacha20-ietf-poly1305", "xchacha20-poly1305"]
)
def test_legacy_cipher_is_copied_onto_the_client(method):
    record = normalize_client({"email": "a", "password": "any secret"}, [VLESS, ss(method)])
    assert record["method"] == method
    assert record["password"] == "any secret"
    assert legacy_method(method) == method


@pytest.mark.parametrize("method", ["none", "plain", "", "2022-blake3-aes-128-gcm", None, 5])
def test_no_client_method_for_other_ciphers(method):
    assert legacy_method(method) == ""


def test_a_key_cannot_fit_two_2022_key_lengths():
    inbounds = [ss("2022-blake3-aes-128-gcm", 7), ss("2022-blake3-aes-256-gcm", 8)]
    with pytest.raises(ServiceError) as refused:
        normalize_client({"email": "a"}, inbounds)
    assert "inbound 7" in refused.value.msg and "inbound 8" in refused.value.msg


def test_same_length_2022_ciphers_share_one_key():
    inbounds = [ss("2022-blake3-aes-256-gcm", 7), ss("2022-blake3-aes-256-gcm", 8)]
    record = normalize_client({"email": "a"}, inbounds)
    assert key_bytes(record["password"]) == 32


def test_the_single_user_2022_cipher_takes_no_clients():
    """Xray serves 2022-blake3-chacha20-poly1305 to the inbound's own key only and
    refuses a config that gives it clients (tests/core/test_xray_real.py runs both)."""
    for inbounds in (
        [ss("2022-blake3-chacha20-poly1305", 9)],
        [VLESS, ss("2022-blake3-chacha20-poly1305", 9)],
    ):
        with pytest.raises(ServiceError) as refused:
            normalize_client({"email": "a"}, inbounds)
        assert "inbound 9" in refused.value.msg
        assert "one user" in refused.value.msg and "2022-blake3-aes-256-gcm" in refused.value.msg


def test_fit_inbounds_replaces_only_what_does_not_fit():
    key = base64.b64encode(bytes(16)).decode()
    secrets = {"password": key, "method": ""}
    fit_inbounds(secrets, [VLESS, TROJAN, ss("2022-blake3-aes-128-gcm")])
    assert secrets == {"password": key, "method": ""}
    fit_inbounds(secrets, [ss("2022-blake3-aes-256-gcm")])
    assert key_bytes(secrets["password"]) == 32


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("email", None),
        ("email", ""),
        ("email", 5),
        ("email", ["a"]),
        ("email", " padded "),
        ("email", "a/b"),
        ("email", "a>>>b"),
        ("email", "tab\there"),
        ("email", "zero\u200bwidth"),
        ("email", "x" * 256),
        ("email", "."),
        ("email", ".."),
        ("id", "not-a-uuid"),
        ("id", 5),
        ("id", {"a": 1}),
        ("password", 5),
        ("password", " spaced"),
        ("password", "x" * 256),
        ("auth", ["a"]),
        ("flow", "xtls-rprx-direct"),
        ("flow", 1),
        ("security", "aes-256-cfb"),
        ("subId", "has space"),
        ("subId", 5),
        ("totalGB", -1),
        ("totalGB", "lots"),
        ("totalGB", 1.5),
        ("totalGB", True),
        ("totalGB", [1]),
        ("totalGB", {"n": 1}),
        ("totalGB", 2**63),
        ("expiryTime", "soon"),
        ("expiryTime", -(2**63)),
        ("limitIp", -1),
        ("limitIp", "two"),
        ("reset", -1),
        ("reset", [30]),
        ("tgId", -5),
        ("tgId", False),
        ("comment", 5),
        ("comment", "x" * 1025),
        ("enable", "yes"),
        ("enable", 1),
        ("enable", []),
        ("group", 5),
        ("group", "g" * 65),
        ("adTag", "0123"),
        ("adTag", 5),
    ],
)
def test_malformed_field_is_refused_by_name(field, value):
    payload = {"email": "someone", field: value}
    with pytest.raises(ServiceError) as refused:
        normalize_client(payload, [VLESS])
    assert field in refused.value.msg


@pytest.mark.parametrize("payload", [None, [], "a", 5, ["email"]])
def test_payload_must_be_an_object(payload):
    with pytest.raises(ServiceError, match="client must be a JSON object"):
        normalize_client(payload, [VLESS])


# ---- email_key -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Bob", "bob"),
        ("BOB@EXAMPLE.COM", "bob@example.com"),
        ("\uff42\uff4f\uff42", "bob"),  # fullwidth letters
        ("\uff22\uff4f\uff42", "bOB"),
        ("ﬁle", "FILE"),  # the fi ligature
        ("straße", "STRASSE"),
        ("①", "1"),
    ],
)
def test_equal_keys(a, b):
    assert email_key(a) == email_key(b)


@pytest.mark.parametrize(("a", "b"), [("bob", "bob2"), ("bob", "b.ob"), ("bób", "bob")])
def test_different_keys(a, b):
    assert email_key(a) != email_key(b)


def test_email_whose_normal_form_outgrows_the_column_is_refused():
    """One character, U+FDFA, normalises to 18: 100 of them make a 1,800-character key."""
    with pytest.raises(ServiceError, match="email may be at most 255 characters"):
        normalize_client({"email": "\ufdfa" * 100}, [])
    assert normalize_client({"email": "\ufdfa" * 14}, [])["email"] == "\ufdfa" * 14


def test_group_whose_normal_form_outgrows_the_column_is_refused():
    with pytest.raises(ServiceError, match="group must be a string of at most 64 characters"):
        check_group("\ufdfa" * 10)
    assert check_group("  \ufdfa\ufdfa\ufdfa  ") == "\ufdfa" * 3
    assert check_group(None) == ""


# ---- check_ad_tag ----------------------------------------------------------------------


def test_ad_tag_valid_values():
    assert check_ad_tag(None) == ""
    assert check_ad_tag("") == ""
    assert check_ad_tag("0123456789abcdef0123456789ABCDEF") == "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    "value",
    [
        "0123456789abcdef0123456789abcde",  # 31
        "0123456789abcdef0123456789abcdef0",  # 33
        "0123456789abcdef0123456789abcdeg",
        " 0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef\n",
        "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19abcdef0123456789abcdef",
        5,
        ["0123456789abcdef0123456789abcdef"],
        {"tag": "x"},
        True,
    ],
)
def test_ad_tag_invalid_values(value):
    with pytest.raises(ServiceError, match="adTag must be exactly 32 hexadecimal characters"):
        check_ad_tag(value)


# ---- fuzz ------------------------------------------------------------------------------

FIELDS = (
    "email",
    "id",
    "password",
    "auth",
    "flow",
    "security",
    "reverse",
    "subId",
    "totalGB",
    "expiryTime",
    "limitIp",
    "reset",
    "tgId",
    "comment",
    "enable",
    "group",
    "adTag",
    "method",
)
INBOUNDS = [
    VLESS,
    TROJAN,
    ss("2022-blake3-aes-128-gcm", 4),
    ss("2022-blake3-aes-256-gcm", 5),
    ss("aes-256-gcm", 6),
    {"id": 9, "protocol": "hysteria2", "settings": {"version": 2}},
]


def random_value(rng: random.Random, depth: int = 0):
    choice = rng.randrange(14 if depth < 3 else 9)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False])
    if choice == 2:
        return rng.choice(
            [0, -1, 1, 2**63, -(2**63), 2**64, 10**400, rng.randint(-(10**12), 10**12)]
        )
    if choice == 3:
        return rng.choice([0.5, -0.0, 1e308, float("inf"), float("nan"), 3.0])
    if choice == 4:
        return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(40)))
    if choice == 5:
        return "".join(
            rng.choice("aZ0 -_/>.@{}[]\"':\uff42\u0301\ufdfa") for _ in range(rng.randrange(70))
        )
    if choice == 6:
        return rng.choice(
            ["", " ", "xtls-rprx-vision", "auto", "0123456789abcdef0123456789abcdef", '{"tag":"t"}']
        )
    if choice == 7:
        return str(uuid.uuid4()).upper()
    if choice == 8:
        return "[" * rng.randrange(1, 5000)
    if choice in (9, 10):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        rng.choice(["tag", "a", ""]): random_value(rng, depth + 1) for _ in range(rng.randrange(3))
    }


def random_payload(rng: random.Random):
    if rng.random() < 0.05:
        return random_value(rng)
    payload = {}
    for field in FIELDS:
        if rng.random() < 0.1:
            payload[field] = random_value(rng)
    if rng.random() < 0.7:
        payload["email"] = rng.choice(["user", "\uff55ser", "u@x.y", random_value(rng)])
    if rng.random() < 0.2:
        payload[random_value(rng, 3) if rng.random() < 0.1 else "extra"] = random_value(rng)
    return payload


def test_fuzz_only_service_errors_come_out():
    """Whatever the payload, normalize_client returns a JSON-ready record or raises
    ServiceError with a sentence; nothing else escapes."""
    rng = random.Random(20240611)
    outcomes = {"accepted": 0, "refused": 0}
    for _ in range(5000):
        payload = random_payload(rng)
        inbounds = rng.sample(INBOUNDS, rng.randrange(len(INBOUNDS) + 1))
        try:
            record = normalize_client(payload, inbounds)
        except ServiceError as exc:
            assert isinstance(exc.msg, str) and exc.msg
            outcomes["refused"] += 1
            continue
        json.dumps(record, allow_nan=False)
        assert record["email"] == payload["email"]
        outcomes["accepted"] += 1
    assert outcomes["accepted"] > 100 and outcomes["refused"] > 100, outcomes


def test_fuzz_ad_tag_and_email_key():
    rng = random.Random(7)
    for _ in range(5000):
        value = random_value(rng)
        try:
            tag = check_ad_tag(value)
        except ServiceError as exc:
            assert exc.msg.startswith("adTag must be exactly 32 hexadecimal characters")
        else:
            assert tag == "" or (len(tag) == 32 and int(tag, 16) >= 0 and tag == tag.lower())
        if isinstance(value, str):
            assert isinstance(email_key(value), str)


def test_random_text_draws_every_character_of_the_alphabet_evenly():
    """Generated secrets and subIds: each character uniform over the alphabet, as
    `secrets.choice` draws it (62 letters and digits do not divide 256 bytes evenly)."""
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    texts = [random_text(alphabet, 16) for _ in range(20_000)]
    assert all(len(text) == 16 and set(text) <= set(alphabet) for text in texts)
    counts = {char: 0 for char in alphabet}
    for text in texts:
        for char in text:
            counts[char] += 1
    expected = 20_000 * 16 / len(alphabet)  # about 5,160, a standard deviation of 71
    assert all(abs(count - expected) < 0.1 * expected for count in counts.values())
    assert len(set(texts)) == len(texts)
