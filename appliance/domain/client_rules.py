"""Validation and normalisation of a client payload, before any database work.

A client is one record attached to any number of inbounds, so its secrets must suit every
protocol it may meet: the UUID (VLESS, VMess), the password (Trojan, Shadowsocks) and the
auth string (Hysteria) are all generated when omitted, and a Shadowsocks 2022 password is
checked against the key length of each attached 2022 inbound (replaced by a generated key
when it does not fit, as the spec asks). One key cannot have two lengths, so a client may
not sit on 2022 inbounds of different key lengths at once. Legacy Shadowsocks ciphers get
the inbound's method copied onto the client. The MTProto secret is a key of its own (16
bytes in hex), so re-keying a Telegram proxy user leaves their other links alone. It is
the only thing that tells one proxy user from another, so it must be random: a key with
few different bytes (all zeros, one byte repeated) or two equal halves is one somebody
chose and others can guess, and is refused; generated keys always pass. That no two
clients hold one key is the store's unique index.

Emails are the key in client paths and in the core's traffic counters
(`user>>>EMAIL>>>traffic>>>uplink`), so they may not contain `>>>`, `/`, control
characters or surrounding spaces, nor be a dot segment. Uniqueness ignores case and
Unicode compatibility forms: the key is `NFKC(email).casefold()`, computed here in Python
so SQLite, PostgreSQL and MariaDB enforce exactly the same rule through a unique index
on it. The normalisation can lengthen text (one ligature becomes many letters), so the
key's length is checked too: it has to fit the same 255-character column.
"""

from __future__ import annotations

import re
import secrets
import string
import unicodedata
import uuid
from typing import Any

from appliance.domain.parse import load_json
from appliance.domain.protocols import (
    INT64_MAX,
    b64_length,
    describe,
    is_ss2022,
    new_ss2022_key,
    ss2022_key_length,
    to_bool,
    to_int,
)
from appliance.errors import ServiceError

FLOWS = ("", "xtls-rprx-vision", "xtls-rprx-vision-udp443")
VMESS_SECURITY = ("auto", "aes-128-gcm", "chacha20-poly1305", "none", "zero")
SUB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
AD_TAG = re.compile(r"[0-9a-fA-F]{32}")
MTPROTO_SECRET = re.compile(r"[0-9a-fA-F]{32}")
# 16 random bytes have about 15.5 different values; fewer than 8 happens about twice in
# a billion keys, and then to a key generated here never (it is drawn again).
SECRET_MIN_DISTINCT = 8
GROUP_MAX = 64
COMMENT_MAX = 1024
EMAIL_MAX = 255
DAY_MS = 86_400_000


def email_key(email: str) -> str:
    """The form two emails are compared in: same key, same client."""
    return unicodedata.normalize("NFKC", email).casefold()


def check_email(value: Any, field: str = "email") -> str:
    if not isinstance(value, str) or not value:
        raise ServiceError(f"{field} is required (a non-empty string)")
    if value != value.strip():
        raise ServiceError(f"{field} may not start or end with spaces (got {describe(value)})")
    if len(value) > EMAIL_MAX or len(email_key(value)) > EMAIL_MAX:
        raise ServiceError(
            f"{field} may be at most {EMAIL_MAX} characters (counted after Unicode "
            "normalisation, which expands some characters into several)"
        )
    if ">>>" in value or "/" in value or any(unicodedata.category(c)[0] == "C" for c in value):
        raise ServiceError(
            f"{field} may not contain '/', '>>>' or control characters (got {describe(value)})"
        )
    if value in (".", ".."):
        # Browsers and HTTP libraries resolve these as path segments, so no client path
        # (get/<email>, del/<email> ...) could ever reach such a client.
        raise ServiceError(f"{field} may not be '.' or '..'")
    return value


def check_group(value: Any, field: str = "group") -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ServiceError(f"{field} must be a string of at most {GROUP_MAX} characters")
    name = value.strip()
    # Groups are compared by the same key as emails, which has to fit its column too.
    if len(name) > GROUP_MAX or len(email_key(name)) > GROUP_MAX:
        raise ServiceError(
            f"{field} must be a string of at most {GROUP_MAX} characters (counted after "
            "Unicode normalisation, which expands some characters into several)"
        )
    return name


def check_ad_tag(value: Any) -> str:
    """The MTProto advertising tag: empty, or exactly 32 hexadecimal characters."""
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or not AD_TAG.fullmatch(value):
        raise ServiceError(
            f"adTag must be exactly 32 hexadecimal characters (got {describe(value)})"
        )
    return value.lower()


def check_mtproto_secret(value: Any) -> str:
    """The MTProto secret key: 32 hexadecimal characters (16 bytes) that look random,
    generated when omitted; a new value re-keys the client on every MTProto inbound."""
    if value in (None, ""):
        return new_mtproto_secret()
    if not isinstance(value, str) or not MTPROTO_SECRET.fullmatch(value):
        raise ServiceError(
            f"secret must be 32 hexadecimal characters, the MTProto key (got {describe(value)})"
        )
    key = bytes.fromhex(value)
    if not _looks_random(key):
        raise ServiceError(
            f"secret {value.lower()} is not a random key: {len(set(key))} of its 16 bytes "
            f"differ{' and its two halves are equal' if key[:8] == key[8:] else ''}, while an "
            f"MTProto key needs at least {SECRET_MIN_DISTINCT} different bytes and two "
            "different halves; omit secret to have a random one generated"
        )
    return value.lower()


def new_mtproto_secret() -> str:
    """A random MTProto key that passes `check_mtproto_secret`."""
    while True:
        key = secrets.token_bytes(16)
        if _looks_random(key):
            return key.hex()


def _looks_random(key: bytes) -> bool:
    return len(set(key)) >= SECRET_MIN_DISTINCT and key[:8] != key[8:]


def normalize_client(payload: Any, inbounds: list[dict]) -> dict:
    """A complete client record from `payload`, fit for every inbound in `inbounds`
    (normalised inbound records with `id`, `protocol` and `settings`)."""
    if not isinstance(payload, dict):
        raise ServiceError("client must be a JSON object")
    client = {
        "email": check_email(payload.get("email")),
        "id": _uuid(payload.get("id")),
        "password": _secret(payload.get("password"), "password"),
        "auth": _secret(payload.get("auth"), "auth"),
        "flow": _choice(payload.get("flow"), "flow", FLOWS, ""),
        "security": _choice(payload.get("security"), "security", VMESS_SECURITY, "auto"),
        "reverse": _reverse(payload.get("reverse")),
        "subId": _sub_id(payload.get("subId")),
        "totalGB": _int(payload.get("totalGB"), "totalGB", 0, INT64_MAX),
        "expiryTime": _int(payload.get("expiryTime"), "expiryTime", -INT64_MAX, INT64_MAX),
        "limitIp": _int(payload.get("limitIp"), "limitIp", 0, 100_000),
        "reset": _int(payload.get("reset"), "reset", 0, 36_500),
        "deviceLimit": _int(payload.get("deviceLimit"), "deviceLimit", -1, 100_000),
        "tgId": _int(payload.get("tgId"), "tgId", 0, INT64_MAX),
        "comment": _text(payload.get("comment"), "comment", COMMENT_MAX),
        "enable": True if payload.get("enable") is None else to_bool(payload["enable"], "enable"),
        "group": check_group(payload.get("group")),
        "adTag": check_ad_tag(payload.get("adTag")),
        "secret": check_mtproto_secret(payload.get("secret")),
        "method": "",
    }
    fit_inbounds(client, inbounds)
    return client


# Xray's Shadowsocks 2022 server takes several users only on the AES ciphers; a config
# giving clients to this one fails the core's own test.
SINGLE_USER_METHODS = frozenset({"2022-blake3-chacha20-poly1305"})


def fit_inbounds(client: dict, inbounds: list[dict]) -> None:
    """Adjust secrets to the inbounds the client is attached to (in place): a password
    that is no key of the 2022 cipher's length is replaced, a legacy cipher is copied."""
    key_lengths: dict[int, tuple[int, str]] = {}
    for inbound in inbounds:
        if inbound["protocol"] != "shadowsocks":
            continue
        method = inbound["settings"].get("method", "")
        if method in SINGLE_USER_METHODS:
            raise ServiceError(
                f"inbound {inbound['id']} uses {method}, which the core serves to one user "
                "only (the inbound's own key) and refuses with clients; switch it to "
                "2022-blake3-aes-128-gcm or 2022-blake3-aes-256-gcm to give it clients"
            )
        if is_ss2022(method):
            key_lengths.setdefault(ss2022_key_length(method), (inbound["id"], method))
        elif legacy_method(method):
            client["method"] = method
    if len(key_lengths) > 1:
        shown = " and ".join(
            f"inbound {inbound_id} ({method}, {length}-byte keys)"
            for length, (inbound_id, method) in sorted(key_lengths.items())
        )
        raise ServiceError(
            f"one client key cannot fit both {shown}; attach the client to Shadowsocks 2022 "
            "inbounds of one key length only"
        )
    for length, (_, method) in key_lengths.items():
        if b64_length(client["password"]) != length:
            client["password"] = new_ss2022_key(method)


def legacy_method(method: Any) -> str:
    """The cipher a client entry carries on a Shadowsocks inbound using `method`: the
    inbound's own for the legacy AEAD ciphers; "" for 2022 ciphers (the key says it all)
    and for none/plain."""
    if not isinstance(method, str) or is_ss2022(method) or method in ("", "none", "plain"):
        return ""
    return method


def _uuid(value: Any) -> str:
    if value in (None, ""):
        return str(uuid.uuid4())
    try:
        return str(uuid.UUID(value)) if isinstance(value, str) else _bad_uuid(value)
    except ValueError:
        return _bad_uuid(value)


def _bad_uuid(value: Any) -> str:
    raise ServiceError(
        f"id must be a UUID like 1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed (got {describe(value)})"
    )


def _secret(value: Any, field: str) -> str:
    if value in (None, ""):
        return random_text(string.ascii_letters + string.digits, 16)
    if not isinstance(value, str) or len(value) > 255 or value != value.strip():
        raise ServiceError(
            f"{field} must be a string of at most 255 characters without surrounding spaces"
        )
    return value


def random_text(alphabet: str, length: int) -> str:
    """`length` characters drawn uniformly and independently from `alphabet` (at most 256
    of them) with the operating system's CSPRNG, as `secrets.choice` draws one: a byte
    above the largest multiple of the alphabet's size is dropped, so that no character
    is favoured. One read of random bytes rather than a system call per character: the
    secrets of a bulk creation of 10,000 clients took 0.4 s of the hub's time that way."""
    size = len(alphabet)
    limit = 256 - 256 % size
    chars: list[str] = []
    while len(chars) < length:
        chars += [alphabet[byte % size] for byte in secrets.token_bytes(2 * length) if byte < limit]
    return "".join(chars[:length])


def _choice(value: Any, field: str, choices: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if value not in choices:
        shown = ", ".join(c or '""' for c in choices)
        raise ServiceError(f"{field} must be one of {shown} (got {describe(value)})")
    return value


def _reverse(value: Any) -> dict | None:
    """`{tag}` as an object or its JSON text; an empty tag means no reverse."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        value = load_json(value, "reverse")
    if not isinstance(value, dict) or not isinstance(value.get("tag", ""), str):
        raise ServiceError(
            f'reverse must be an object like {{"tag": "r1"}} (got {describe(value)})'
        )
    tag = value.get("tag", "").strip()
    if not tag:
        return None
    if len(tag) > 64:
        raise ServiceError("reverse.tag may be at most 64 characters")
    return {"tag": tag}


def _sub_id(value: Any) -> str:
    if value in (None, ""):
        return random_text(string.ascii_lowercase + string.digits, 16)
    if not isinstance(value, str) or not SUB_ID.fullmatch(value):
        raise ServiceError(f"subId must be 1-64 letters, digits, - or _ (got {describe(value)})")
    return value


def _int(value: Any, field: str, lo: int, hi: int) -> int:
    if value in (None, ""):
        return 0
    return to_int(value, field, lo, hi)


def _text(value: Any, field: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise ServiceError(f"{field} must be a string of at most {limit} characters")
    return value
