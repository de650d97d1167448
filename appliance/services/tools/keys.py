"""Key generators behind `server/getNewUUID` and `server/getNewX25519Cert`.

Why this module exists: the inbound form fills client ids and REALITY key pairs from
these endpoints, and the core must accept the result as is. Generating them here, in
process, avoids shelling out to the core binary (which may not be installed yet).

The X25519 pair follows what `xray x25519` prints: 32 random bytes clamped as in
RFC 7748 (clear the low three bits, clear the top bit, set the second-highest bit), the
public key is the base-point multiplication of that scalar, and both are encoded as
URL-safe base64 without padding (Go's `base64.RawURLEncoding`), 43 characters each.
"""

from __future__ import annotations

import base64
import os
import uuid


def new_uuid() -> str:
    """Return a random UUID version 4 in its canonical lowercase 36-character form."""
    return str(uuid.uuid4())


def new_x25519() -> dict[str, str]:
    """Return `{"privateKey", "publicKey"}` for a fresh X25519 pair in Xray's encoding."""
    scalar = bytearray(os.urandom(32))
    scalar[0] &= 248
    scalar[31] &= 127
    scalar[31] |= 64
    # Imported here: `cryptography` costs 8 MB of an idle panel's memory, and keys are
    # made only when someone asks for one.
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private_key = X25519PrivateKey.from_private_bytes(bytes(scalar))
    public = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"privateKey": raw_url_b64(bytes(scalar)), "publicKey": raw_url_b64(public)}


def raw_url_b64(data: bytes) -> str:
    """URL-safe base64 without `=` padding, the encoding Xray uses for REALITY keys."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
