"""WireGuard keys and the core's WireGuard outbound, for the tunnel and VPN providers.

Why this module exists: both providers hand out WireGuard peers; the panel makes the key
pair locally (the private key never leaves the panel, only the public key is registered)
and turns the stored account into the outbound Xray documents for its WireGuard client:
`secretKey`, `address` (the interface addresses with their prefix lengths), `peers`
(publicKey, endpoint, allowedIPs) and, for WARP, the 3 `reserved` bytes of its client id.
"""

from __future__ import annotations

import base64
import binascii

from appliance.errors import ServiceError

ALL_TRAFFIC = ["0.0.0.0/0", "::/0"]


def new_key_pair() -> dict[str, str]:
    """A fresh X25519 pair in WireGuard's encoding (standard base64 with padding)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

    private = X25519PrivateKey.generate()
    raw = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"privateKey": _b64(raw), "publicKey": _b64(public)}


def public_key_of(private_key: str) -> str:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = X25519PrivateKey.from_private_bytes(key_bytes(private_key, "privateKey"))
    return _b64(private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def key_bytes(text: object, name: str) -> bytes:
    """The 32 bytes of a WireGuard key in base64; ServiceError naming `name` otherwise."""
    try:
        raw = base64.b64decode(str(text).strip(), validate=True) if isinstance(text, str) else b""
    except binascii.Error:
        raw = b""
    if len(raw) != 32:
        raise ServiceError(f"{name} must be a WireGuard key: 32 bytes in base64 (44 characters)")
    return raw


def wireguard_outbound(
    tag: str,
    private_key: str,
    addresses: list[str],
    peer_key: str,
    endpoint: str,
    *,
    reserved: list[int] | None = None,
    mtu: int = 1280,
) -> dict:
    settings: dict = {
        "secretKey": private_key,
        "address": addresses,
        "peers": [{"publicKey": peer_key, "endpoint": endpoint, "allowedIPs": ALL_TRAFFIC}],
        "mtu": mtu,
    }
    if reserved:
        settings["reserved"] = reserved
    return {"tag": tag, "protocol": "wireguard", "settings": settings}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
