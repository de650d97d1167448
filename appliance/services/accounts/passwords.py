"""Password hashing with scrypt.

scrypt comes with Python's standard library (OpenSSL underneath), so it adds no
dependency to the one-file build, and it is memory-hard, which is what makes GPU
guessing of a stolen database expensive. n=2^14, r=8, p=1 costs 16 MiB and about
30-50 ms here: slow for an attacker, well inside a 100 ms login. The parameters are
stored in each hash, so they can be raised later without invalidating old hashes.

A database edited by hand or written by an older tool may hold the admin's password as
plain text or as a bcrypt hash (`$2b$...`, what panels of this kind and `htpasswd -B`
write). Both still sign in, so nobody is locked out; the sign-in replaces them with scrypt
unless they are credentials scanners try first, which stay as they are so that
`must_change_credentials` keeps seeing them until the admin changes them.
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
BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, maxmem=64 << 20)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """Constant-time comparison; a malformed stored hash never matches."""
    if stored.startswith(BCRYPT_PREFIXES):
        return _verify_bcrypt(password, stored)
    if is_plaintext(stored):
        return hmac.compare_digest(password.encode(), stored.encode())
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


def is_plaintext(stored: str) -> bool:
    """A stored value that is no hash at all. Every hash scheme's text starts with its
    name and a `$` (ours) or with a `$` (crypt-style); one of an unknown scheme must not
    sign in with its own text, so only values without either count as plain text."""
    return not stored.startswith(("$", "scrypt$"))


def needs_rehash(stored: str) -> bool:
    """Whether `stored` is kept in a form the panel no longer writes."""
    return is_plaintext(stored) or stored.startswith(BCRYPT_PREFIXES)


@functools.lru_cache(maxsize=16)
def must_change_credentials(username: str, stored: str) -> bool:
    """Whether the stored credentials are among those scanners try first (admin/admin and
    the like). Only a password stored before this panel checked new ones can be; it is
    found by trying the few weak candidates, once per stored value."""
    if not needs_rehash(stored):
        return False
    if is_plaintext(stored):
        return _is_weak(username, stored)
    return any(verify_password(candidate, stored) for candidate in (*WEAK, username))


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
    if _is_weak(username, password):
        raise ValueError("that password is among the first ones scanners try; choose another")


def _is_weak(username: str, password: str) -> bool:
    return len(password) < MIN_LENGTH or password.lower() in WEAK or password == username


def _verify_bcrypt(password: str, stored: str) -> bool:
    import bcrypt  # only a database written elsewhere holds such a hash

    try:
        return bcrypt.checkpw(password.encode(), stored.encode())
    except ValueError:  # a malformed hash, or a password over bcrypt's 72 bytes
        return False


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
