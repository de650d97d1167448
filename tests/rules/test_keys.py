"""X25519 pairs in Xray's encoding and UUID v4 strings from appliance.services.keys."""

import base64
import uuid

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from appliance.services.tools.keys import new_uuid, new_x25519


def decode_raw_url(text: str) -> bytes:
    assert "=" not in text and "+" not in text and "/" not in text
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_new_uuid_is_canonical_version_4():
    value = new_uuid()
    parsed = uuid.UUID(value)
    assert parsed.version == 4
    assert str(parsed) == value
    assert len(value) == 36


def test_new_uuid_differs_between_calls():
    assert len({new_uuid() for _ in range(100)}) == 100


def test_x25519_keys_are_43_char_unpadded_url_safe_base64_of_32_bytes():
    pair = new_x25519()
    assert set(pair) == {"privateKey", "publicKey"}
    for text in pair.values():
        assert len(text) == 43
        assert len(decode_raw_url(text)) == 32


def test_x25519_private_key_is_clamped_as_rfc_7748():
    for _ in range(50):
        scalar = decode_raw_url(new_x25519()["privateKey"])
        assert scalar[0] & 0b111 == 0
        assert scalar[31] & 0x80 == 0
        assert scalar[31] & 0x40 == 0x40


def test_x25519_public_key_is_derived_from_private_key():
    pair = new_x25519()
    private = X25519PrivateKey.from_private_bytes(decode_raw_url(pair["privateKey"]))
    derived = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert derived == decode_raw_url(pair["publicKey"])


def test_x25519_public_key_agrees_with_a_peer_exchange():
    pair = new_x25519()
    server = X25519PrivateKey.from_private_bytes(decode_raw_url(pair["privateKey"]))
    client = X25519PrivateKey.generate()
    server_public = X25519PublicKey.from_public_bytes(decode_raw_url(pair["publicKey"]))
    assert client.exchange(server_public) == server.exchange(client.public_key())


def test_x25519_pairs_differ_between_calls():
    first, second = new_x25519(), new_x25519()
    assert first["privateKey"] != second["privateKey"]
    assert first["publicKey"] != second["publicKey"]
