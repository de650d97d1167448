"""Key generators of /panel/api/server: ML-DSA-65, ML-KEM-768, VLESS encryption pairs and
ECH keys, fetched from a running panel over HTTP and checked by using them.

Each key is decoded from the encoding Xray's commands print (base64url without padding,
or standard base64 for ECH) and put to work with `cryptography`: the public half is
derived again from the private half, signatures verify, encapsulated secrets decapsulate,
and an HPKE message sealed to the ECH config's key opens with the key set's private key.
The ECHConfigList is read field by field by the small parser below, as a TLS library
would read it.
"""

from __future__ import annotations

import base64
import struct

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA65PrivateKey, MLDSA65PublicKey
from cryptography.hazmat.primitives.asymmetric.mlkem import MLKEM768PrivateKey, MLKEM768PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from helpers import ok, refused

SERVER = "/panel/api/server"


def raw_url(text: str) -> bytes:
    """Go's base64.RawURLEncoding: URL alphabet, no padding."""
    assert "=" not in text and "+" not in text and "/" not in text, text
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# ---- ML-DSA-65 -----------------------------------------------------------------------------


def test_mldsa65_seed_derives_the_public_key_and_signs(api):
    key = ok(api.get(f"{SERVER}/getNewmldsa65"))
    assert set(key) == {"privateKey", "publicKey", "seed"}
    seed = raw_url(key["seed"])
    assert len(seed) == 32
    assert raw_url(key["privateKey"]) == seed
    public = raw_url(key["publicKey"])
    assert len(public) == 1952
    private = MLDSA65PrivateKey.from_seed_bytes(seed)
    assert private.public_key().public_bytes_raw() == public
    signature = private.sign(b"reality handshake")
    verifier = MLDSA65PublicKey.from_public_bytes(public)
    verifier.verify(signature, b"reality handshake")
    with pytest.raises(InvalidSignature):
        verifier.verify(signature, b"another message")


def test_mldsa65_keys_differ_between_calls(api):
    seeds = {ok(api.get(f"{SERVER}/getNewmldsa65"))["seed"] for _ in range(3)}
    assert len(seeds) == 3


# ---- ML-KEM-768 ----------------------------------------------------------------------------


def check_mlkem_pair(server_key: bytes, client_key: bytes) -> None:
    """The 64-byte seed derives the 1,184-byte encapsulation key, and a secret
    encapsulated to that key decapsulates with the seed's key."""
    assert len(server_key) == 64
    assert len(client_key) == 1184
    private = MLKEM768PrivateKey.from_seed_bytes(server_key)
    assert private.public_key().public_bytes_raw() == client_key
    shared, ciphertext = MLKEM768PublicKey.from_public_bytes(client_key).encapsulate()
    assert len(ciphertext) == 1088
    assert private.decapsulate(ciphertext) == shared
    stranger = MLKEM768PrivateKey.generate()
    assert stranger.decapsulate(ciphertext) != shared


def test_mlkem768_seed_and_client_key_work_together(api):
    key = ok(api.get(f"{SERVER}/getNewmlkem768"))
    assert set(key) == {"clientKey", "serverKey"}
    check_mlkem_pair(raw_url(key["serverKey"]), raw_url(key["clientKey"]))


# ---- VLESS encryption ----------------------------------------------------------------------


def split_vless(value: str) -> tuple[str, str, str, str]:
    method, look, rtt, key = value.split(".")
    return method, look, rtt, key


def test_vless_encryption_has_an_x25519_and_an_mlkem_pair(api):
    auths = ok(api.get(f"{SERVER}/getNewVlessEnc"))["auths"]
    assert [auth["id"] for auth in auths] == [1, 2]
    assert [auth["label"] for auth in auths] == [
        "X25519, not Post-Quantum",
        "ML-KEM-768, Post-Quantum",
    ]
    for auth in auths:
        assert set(auth) == {"id", "label", "encryption", "decryption"}
        assert split_vless(auth["decryption"])[:3] == ("mlkem768x25519plus", "native", "600s")
        assert split_vless(auth["encryption"])[:3] == ("mlkem768x25519plus", "native", "0rtt")


def test_vless_x25519_pair_agrees_on_a_shared_secret(api):
    x25519 = ok(api.get(f"{SERVER}/getNewVlessEnc"))["auths"][0]
    private_bytes = raw_url(split_vless(x25519["decryption"])[3])
    public_bytes = raw_url(split_vless(x25519["encryption"])[3])
    assert len(private_bytes) == len(public_bytes) == 32
    server = X25519PrivateKey.from_private_bytes(private_bytes)
    derived = server.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert derived == public_bytes
    client = X25519PrivateKey.generate()
    assert client.exchange(X25519PublicKey.from_public_bytes(public_bytes)) == server.exchange(
        client.public_key()
    )


def test_vless_mlkem_pair_encapsulates_and_decapsulates(api):
    mlkem = ok(api.get(f"{SERVER}/getNewVlessEnc"))["auths"][1]
    check_mlkem_pair(
        raw_url(split_vless(mlkem["decryption"])[3]), raw_url(split_vless(mlkem["encryption"])[3])
    )


# ---- ECH -----------------------------------------------------------------------------------


class Reader:
    """TLS presentation-language reads over a byte string."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        assert self.at + size <= len(self.data), "truncated"
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack("!H", self.take(2))[0]

    def vector8(self) -> bytes:
        return self.take(self.u8())

    def vector16(self) -> bytes:
        return self.take(self.u16())

    def done(self) -> bool:
        return self.at == len(self.data)


def parse_ech_config(reader: Reader) -> dict:
    """One ECHConfig (draft-ietf-tls-esni, version 0xfe0d) from `reader`."""
    version = reader.u16()
    contents = Reader(reader.vector16())
    config = {"version": version, "config_id": contents.u8(), "kem_id": contents.u16()}
    config["public_key"] = contents.vector16()
    suites = Reader(contents.vector16())
    config["cipher_suites"] = []
    while not suites.done():
        config["cipher_suites"].append((suites.u16(), suites.u16()))
    config["maximum_name_length"] = contents.u8()
    config["public_name"] = contents.vector8()
    config["extensions"] = contents.vector16()
    assert contents.done(), "bytes after the extensions"
    return config


def parse_ech_config_list(data: bytes) -> list[dict]:
    outer = Reader(data)
    body = Reader(outer.vector16())
    assert outer.done()
    configs = []
    while not body.done():
        configs.append(parse_ech_config(body))
    return configs


def parse_key_set(data: bytes) -> list[tuple[bytes, bytes]]:
    """Xray's echServerKeys: (private key, ECHConfig bytes) per entry."""
    reader, entries = Reader(data), []
    while not reader.done():
        entries.append((reader.vector16(), reader.vector16()))
    return entries


def test_ech_config_list_parses_field_by_field(api):
    ech = ok(api.post(f"{SERVER}/getNewEchCert", data={"sni": "Cdn.Example.com"}))
    assert set(ech) == {"echKeySet", "echServerKeys", "echConfigList"}
    configs = parse_ech_config_list(base64.b64decode(ech["echConfigList"], validate=True))
    assert len(configs) == 1
    config = configs[0]
    assert config["version"] == 0xFE0D
    assert config["public_name"] == b"cdn.example.com"
    # RFC 9180 section 7: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM.
    assert config["kem_id"] == 0x0020
    assert config["cipher_suites"] == [(0x0001, 0x0001)]
    assert len(config["public_key"]) == 32
    assert config["maximum_name_length"] == 0
    assert config["extensions"] == b""


def test_ech_key_set_holds_the_private_key_of_the_config(api):
    ech = ok(api.post(f"{SERVER}/getNewEchCert", json={"sni": "ech.example.net"}))
    config_list = base64.b64decode(ech["echConfigList"])
    entries = parse_key_set(base64.b64decode(ech["echKeySet"], validate=True))
    assert len(entries) == 1
    private_bytes, config_bytes = entries[0]
    assert config_list[2:] == config_bytes
    config = parse_ech_config(Reader(config_bytes))
    private = X25519PrivateKey.from_private_bytes(private_bytes)
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert public == config["public_key"]
    suite = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_128_GCM)
    sealed = suite.encrypt(
        b"inner client hello", X25519PublicKey.from_public_bytes(public), info=b"tls ech"
    )
    assert suite.decrypt(sealed, private, info=b"tls ech") == b"inner client hello"


def test_ech_server_keys_are_the_key_set_as_pem_lines(api):
    ech = ok(api.post(f"{SERVER}/getNewEchCert", data={"sni": "a.example"}))
    lines = ech["echServerKeys"]
    assert lines[0] == "-----BEGIN ECH KEYS-----"
    assert lines[-1] == "-----END ECH KEYS-----"
    assert all(len(line) <= 64 for line in lines[1:-1])
    assert "".join(lines[1:-1]) == ech["echKeySet"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, ["sni is required"]),
        ({"sni": "   "}, ["sni is required"]),
        ({"sni": "192.0.2.1"}, ["DNS host name"]),
        ({"sni": "bad name.example"}, ["DNS host name"]),
        ({"sni": "x" * 300}, ["DNS host name"]),
        ({"sni": "-lead.example"}, ["DNS host name"]),
    ],
)
def test_ech_refuses_what_is_not_a_host_name(api, body, words):
    refused(api.post(f"{SERVER}/getNewEchCert", json=body), *words)


def test_ech_refuses_a_sni_that_is_not_text(api):
    refused(api.post(f"{SERVER}/getNewEchCert", json={"sni": ["a.example"]}), "sni is required")


def test_generators_need_a_signed_in_caller(panel):
    anonymous = panel.client(login=False)
    for path in ("getNewmldsa65", "getNewmlkem768", "getNewVlessEnc"):
        refused(anonymous.get(f"{SERVER}/{path}"), "sign in")
