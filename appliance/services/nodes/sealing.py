"""Node API tokens sealed at rest, with a key kept outside the database.

A node's token lets whoever holds it drive another machine's inbounds and clients, and
unlike this panel's own tokens it cannot be stored as a hash: it is sent. A copy of the
database (a backup, a dump sent to the chat bot, a disk image of the database server)
should not hand it over. So tokens are always stored as `sealed:v1:<Fernet token>` under
a key derived (SHA-256) from a secret that is never in the database:
`APPLIANCE_NODE_KEY` when it is set (a long random string, such as `openssl rand -base64
32` prints), else the key file `<data dir>/node-token.key`, made at the first start with
32 random bytes and mode 0600. Backups hold the database only, never the data directory's
files, so they carry sealed tokens and not the key. Tokens stored in plaintext (by a
panel from before sealing was the default) are sealed at start.

A sealed token that this run cannot open (sealed on another host, or under another key)
is kept as it is and never guessed at: a call to that node fails with a sentence saying
so before anything is sent, until the panel runs with that key again or the admin
enters the node's token again.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import secrets
from collections.abc import Callable

from appliance.errors import ServiceError

NODE_KEY_ENV = "APPLIANCE_NODE_KEY"
KEY_FILE = "node-token.key"
SEALED_PREFIX = "sealed:v1:"


class TokenSeal:
    """Seals and opens tokens with the secret `secret()` gives, read when the panel starts
    (`load`) or first needed: the offline commands, which never touch a node token, make
    no key file."""

    def __init__(self, secret: Callable[[], str]):
        self._secret = secret
        self._fernet = None

    def seal(self, token: str) -> str:
        """`token` as stored: sealed (a sealed one stays as it is)."""
        if not token or is_sealed(token):
            return token
        return SEALED_PREFIX + self._key().encrypt(token.encode()).decode()

    def open(self, stored: str) -> str:
        """The token `stored` holds; a sealed one this key cannot open stays sealed."""
        if not is_sealed(stored):
            return stored
        from cryptography.fernet import InvalidToken

        try:
            return self._key().decrypt(stored[len(SEALED_PREFIX) :].encode()).decode()
        except (InvalidToken, ValueError):
            return stored

    def load(self) -> None:
        """Read (or make) the key now: what a panel does as it starts."""
        self._key()

    def _key(self):
        if self._fernet is None:
            from cryptography.fernet import Fernet

            digest = hashlib.sha256(self._secret().encode()).digest()
            self._fernet = Fernet(base64.urlsafe_b64encode(digest))
        return self._fernet


def node_key(data_dir: str, environ: dict[str, str]) -> str:
    """The secret tokens are sealed with: `APPLIANCE_NODE_KEY`, else the key file in the
    data directory, made (mode 0600, whole or not at all) when there is none yet."""
    if environ.get(NODE_KEY_ENV):
        return environ[NODE_KEY_ENV]
    path = os.path.join(data_dir, KEY_FILE)
    if not os.path.exists(path):
        os.makedirs(data_dir, exist_ok=True)
        _make_key_file(path)
    with open(path, encoding="ascii", errors="replace") as fh:
        secret = fh.read().strip()
    if not secret:
        raise ServiceError(
            f"{path} is empty: put back the copy that sealed this panel's node tokens, or "
            "remove it (a new key is made, and each node's API token must be entered again)"
        )
    return secret


def _make_key_file(path: str) -> None:
    """A new key file, linked into place only once written: a start killed halfway leaves
    no empty key, and two starts at once keep the first key made."""
    staged = f"{path}.{os.getpid()}.tmp"
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as fh:
            fh.write(base64.b64encode(secrets.token_bytes(32)).decode() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(staged, path)
    finally:
        os.unlink(staged)


def is_sealed(token: str) -> bool:
    return token.startswith(SEALED_PREFIX)


def unopened(label: str) -> str:
    """Why a node whose stored token this run cannot open is not called."""
    return (
        f"{label}: its API token is sealed with a key this panel does not have (another "
        f"host's {KEY_FILE}, or another {NODE_KEY_ENV}), as after restoring a backup on "
        f"another host: enter the node's API token again, or start the panel with the key "
        "that sealed it. Nothing was sent"
    )
