"""Post-quantum, VLESS-encryption and ECH key generators behind `server/getNewmldsa65`,
`getNewmlkem768`, `getNewVlessEnc` and `getNewEchCert`.

Why this module exists: the inbound form fills these fields from the panel, and Xray must
accept the values as they are. They are made in process with `cryptography` (X25519,
ML-KEM-768 and ML-DSA-65 per FIPS 203/204), not by running the core, which may not be
installed yet. Each encoding below is the one the named Xray command prints
(XTLS/Xray-core, `main/commands/all/`):

- `xray mldsa65` (mldsa65.go): a 32-byte seed and the 1,952-byte public ("verify") key,
  both base64url without padding. REALITY takes the seed as its private key
  (`mldsa65Seed`) and the public key on the client (`mldsa65Verify`), so `privateKey` and
  `seed` carry the same seed; FIPS 204 derives the key pair from it deterministically.
- `xray mlkem768` (mlkem768.go): the 64-byte seed d||z of FIPS 203 (`serverKey`, what the
  server keeps) and the 1,184-byte encapsulation key (`clientKey`), base64url unpadded.
- `xray vlessenc` (vlessenc.go): per authentication method one pair of strings,
  `mlkem768x25519plus.native.600s.<server key>` for the inbound's `decryption` and
  `mlkem768x25519plus.native.0rtt.<client key>` for the client's `encryption`: "native"
  is the plain look on the wire, "600s" lets the server resume sessions for 600 seconds
  (0-RTT), "0rtt" lets the client use them. The X25519 method uses the `xray x25519` pair
  (private key on the server, public key, which Xray calls the password, on the client);
  the ML-KEM-768 method uses the `xray mlkem768` seed and encapsulation key.
- `xray tls ech` (tls/ech.go, via the goech library): an ECHConfigList as in the TLS
  Encrypted Client Hello draft (version 0xfe0d) holding one ECHConfig with an HPKE
  (RFC 9180) X25519 key, KEM DHKEM(X25519, HKDF-SHA256) = 0x0020, cipher suite
  HKDF-SHA256 (0x0001) with AES-128-GCM (0x0001), and the SNI as public_name; and the
  server's key set, the concatenation per config of `uint16 len | private key |
  uint16 len | ECHConfig`, which Xray's `tlsSettings.echServerKeys` takes as standard
  base64. `echServerKeys` is the same key set as the lines of the "ECH KEYS" PEM block
  `xray tls ech --json` prints.
"""

from __future__ import annotations

import base64
import os
import re
import struct

from appliance.errors import ServiceError
from appliance.services.tools.keys import new_x25519, raw_url_b64

VLESS_METHOD = "mlkem768x25519plus"
VLESS_SERVER_MODE = "native.600s"
VLESS_CLIENT_MODE = "native.0rtt"
ECH_VERSION = 0xFE0D
HPKE_KEM_X25519_SHA256 = 0x0020
HPKE_KDF_HKDF_SHA256 = 0x0001
HPKE_AEAD_AES_128_GCM = 0x0001
PEM_LINE = 64
DNS_NAME = re.compile(r"^(?=.{1,253}$)(?:(?!-)[a-z0-9-]{1,63}(?<!-)\.)*(?!-)[a-z0-9-]{1,63}(?<!-)$")


def new_mldsa65() -> dict[str, str]:
    """Return `{"privateKey", "publicKey", "seed"}` for a fresh ML-DSA-65 key."""
    from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA65PrivateKey

    key = MLDSA65PrivateKey.generate()
    seed = raw_url_b64(key.private_bytes_raw())
    return {
        "privateKey": seed,
        "publicKey": raw_url_b64(key.public_key().public_bytes_raw()),
        "seed": seed,
    }


def new_mlkem768() -> dict[str, str]:
    """Return `{"clientKey", "serverKey"}` for a fresh ML-KEM-768 key."""
    server, client = _mlkem768_pair()
    return {"clientKey": client, "serverKey": server}


def new_vless_encryption() -> dict[str, list[dict]]:
    """Return `{"auths": [...]}`: one X25519 and one ML-KEM-768 decryption/encryption pair."""
    x25519 = new_x25519()
    mlkem_server, mlkem_client = _mlkem768_pair()
    methods = [
        ("X25519, not Post-Quantum", x25519["privateKey"], x25519["publicKey"]),
        ("ML-KEM-768, Post-Quantum", mlkem_server, mlkem_client),
    ]
    return {
        "auths": [
            {
                "id": number,
                "label": label,
                "decryption": f"{VLESS_METHOD}.{VLESS_SERVER_MODE}.{server_key}",
                "encryption": f"{VLESS_METHOD}.{VLESS_CLIENT_MODE}.{client_key}",
            }
            for number, (label, server_key, client_key) in enumerate(methods, start=1)
        ]
    }


def new_ech(sni: object) -> dict:
    """Return `{"echKeySet", "echServerKeys", "echConfigList"}` for `sni` as public name."""
    public_name = _public_name(sni)
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

    key = X25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    config = _ech_config(os.urandom(1)[0], public, public_name)
    key_set = _u16_prefixed(private) + _u16_prefixed(config)
    key_set_b64 = base64.b64encode(key_set).decode("ascii")
    pem = [
        "-----BEGIN ECH KEYS-----",
        *(key_set_b64[i : i + PEM_LINE] for i in range(0, len(key_set_b64), PEM_LINE)),
        "-----END ECH KEYS-----",
    ]
    return {
        "echKeySet": key_set_b64,
        "echServerKeys": pem,
        "echConfigList": base64.b64encode(_u16_prefixed(config)).decode("ascii"),
    }


def _mlkem768_pair() -> tuple[str, str]:
    """(seed, encapsulation key) of a fresh ML-KEM-768 key, base64url unpadded."""
    from cryptography.hazmat.primitives.asymmetric.mlkem import MLKEM768PrivateKey

    key = MLKEM768PrivateKey.generate()
    return raw_url_b64(key.private_bytes_raw()), raw_url_b64(key.public_key().public_bytes_raw())


def _ech_config(config_id: int, public_key: bytes, public_name: bytes) -> bytes:
    """One ECHConfig: version, then the length-prefixed ECHConfigContents."""
    contents = (
        struct.pack("!BH", config_id, HPKE_KEM_X25519_SHA256)
        + _u16_prefixed(public_key)
        + _u16_prefixed(struct.pack("!HH", HPKE_KDF_HKDF_SHA256, HPKE_AEAD_AES_128_GCM))
        + struct.pack("!BB", 0, len(public_name))  # maximum_name_length 0: pad as usual
        + public_name
        + _u16_prefixed(b"")  # no extensions
    )
    return struct.pack("!H", ECH_VERSION) + _u16_prefixed(contents)


def _u16_prefixed(data: bytes) -> bytes:
    return struct.pack("!H", len(data)) + data


def _public_name(sni: object) -> bytes:
    """The SNI as ECH's public_name: a DNS host name (the draft rules out IP addresses)."""
    if not isinstance(sni, str) or not sni.strip():
        raise ServiceError("sni is required: the host name clients show in the clear, like a.com")
    name = sni.strip().rstrip(".").lower()
    if not DNS_NAME.match(name) or name.replace(".", "").isdigit():
        raise ServiceError(
            f"sni must be a DNS host name such as cdn.example.com (got {sni[:100]!r})"
        )
    return name.encode("ascii")
