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

A new password (the admin's, the command line's, a generated one) must be at least
`MIN_LENGTH` characters, the length OWASP's verification standard asks of passwords
(ASVS 2.1.1), and hard to guess as zxcvbn judges it: a score of 3 or more (about 10^8
guesses), and not one of the passwords on its frequency lists. zxcvbn knows tens of
thousands of leaked passwords, names and words, keyboard walks, dates, repeats and
l33t spellings, which a list kept here would not; the username and the panel's own
names count as guessable too. It is imported only when a password is set: its lists
take about 12 MiB that an idle panel has no use for.
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
# What scanners try first: how a password stored before new ones were checked is found.
WEAK = frozenset({"admin", "password", "123456", "12345678", "root", "changeme", "qwerty"})
SCANNED_LENGTH = 8  # a stored plain-text password shorter than this counts as weak too
MIN_LENGTH = 12
MIN_SCORE = 3
# zxcvbn refuses longer input (its matching grows fast with length): a password is judged
# by its first this many characters.
JUDGED_LENGTH = 72
# Words an attacker of this panel tries besides the username.
PANEL_WORDS = ("appliance", "admin", "panel", "xray", "proxy")
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
    """Refuse a password that is short or easy to guess. Raises ValueError with the
    reason, in zxcvbn's words when it is the judge."""
    try:
        password.encode()
    except UnicodeEncodeError:
        raise ValueError("the password is not valid Unicode text (unpaired surrogate)") from None
    if len(password) < MIN_LENGTH:
        raise ValueError(f"the password must be at least {MIN_LENGTH} characters long")
    from zxcvbn import zxcvbn  # only here: see the module's docstring

    judged = password[:JUDGED_LENGTH]
    result = zxcvbn(judged, user_inputs=[username, *PANEL_WORDS], max_length=JUDGED_LENGTH)
    if result["score"] >= MIN_SCORE and not _is_listed(result, len(judged)):
        return
    feedback = result["feedback"]
    advice = " ".join(filter(None, [feedback["warning"], *feedback["suggestions"]]))
    raise ValueError(
        "the password is too easy to guess: "
        + (advice or "it is on a list of common passwords. Choose another one.")
    )


def _is_listed(result: dict, length: int) -> bool:
    """Whether zxcvbn found the whole password in its list of common passwords."""
    return any(
        match["pattern"] == "dictionary"
        and match["dictionary_name"] == "passwords"
        and (match["i"], match["j"]) == (0, length - 1)
        for match in result["sequence"]
    )


def _is_weak(username: str, password: str) -> bool:
    return len(password) < SCANNED_LENGTH or password.lower() in WEAK or password == username


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


def random_password(username: str) -> str:
    """20 random characters (120 bits), drawn again should the rule for new passwords
    ever refuse them."""
    while True:
        password = secrets.token_urlsafe(15)
        try:
            check_new_password(username, password)
        except ValueError:
            continue
        return password


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def digest(secret: str) -> str:
    """How random secrets (API tokens, session ids) are stored: SHA-256 in hex. They carry
    enough entropy that a fast hash is safe, and a lookup by digest stays one index read."""
    return hashlib.sha256(secret.encode()).hexdigest()
