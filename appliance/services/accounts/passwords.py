"""Password hashing with scrypt.

scrypt comes with Python's standard library (OpenSSL underneath), so it adds no
dependency to the one-file build, and it is memory-hard, which is what makes GPU
guessing of a stolen database expensive. n=2^14, r=8, p=1 costs 16 MiB and about
30-50 ms here: slow for an attacker, well inside a 100 ms login. The parameters are
stored in each hash, so they can be raised later without invalidating old hashes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
import secrets
import string

N, R, P = 1 << 14, 8, 1
WEAK = frozenset({"admin", "password", "123456", "12345678", "root", "changeme", "qwerty"})
MIN_LENGTH = 8


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, maxmem=64 << 20)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """Constant-time comparison; a malformed stored hash never matches."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=64 << 20,
            dklen=len(expected),
        )
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


@functools.cache
def dummy_hash() -> str:
    """Verifying against this when the username is unknown keeps both paths equally slow,
    so response time does not tell which usernames exist."""
    return hash_password(secrets.token_hex(8))


def check_new_password(username: str, password: str) -> None:
    """Refuse passwords a scanner tries first. Raises ValueError with the reason."""
    try:
        password.encode()
    except UnicodeEncodeError:
        raise ValueError("the password is not valid Unicode text (unpaired surrogate)") from None
    if len(password) < MIN_LENGTH:
        raise ValueError(f"the password must be at least {MIN_LENGTH} characters long")
    if password.lower() in WEAK or password == username:
        raise ValueError("that password is among the first ones scanners try; choose another")


def random_username() -> str:
    return "admin-" + "".join(
        secrets.choice(string.ascii_lowercase + string.digits) for _ in range(6)
    )


def random_password() -> str:
    return secrets.token_urlsafe(15)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def digest(secret: str) -> str:
    """How random secrets (API tokens, session ids) are stored: SHA-256 in hex. They carry
    enough entropy that a fast hash is safe, and a lookup by digest stays one index read."""
    return hashlib.sha256(secret.encode()).hexdigest()
