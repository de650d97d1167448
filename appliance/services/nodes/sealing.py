"""Node API tokens sealed at rest with a key from the environment (`APPLIANCE_NODE_KEY`).

A node's token lets whoever holds it drive another machine's inbounds and clients, and
unlike this panel's own tokens it cannot be stored as a hash: it is sent. A copy of the
database (a backup, a dump sent to the chat bot, a disk image) should not hand it over.
With `APPLIANCE_NODE_KEY` set (a long random string, such as `openssl rand -base64 32`
prints), tokens are stored as `sealed:v1:<Fernet token>` under a key derived from it
(SHA-256), opened when read and sealed when written, and those stored before the key
was set are sealed at start. The API is unchanged: it never shows a token either way.

Without the key, tokens are stored as typed. A sealed token that this run cannot open
(the key unset or another one) is kept as it is and never guessed at: a call to that
node fails with a sentence saying so before anything is sent, until the panel runs with
that key again or the admin enters the node's token again.
"""

from __future__ import annotations

import base64
import hashlib

NODE_KEY_ENV = "APPLIANCE_NODE_KEY"
SEALED_PREFIX = "sealed:v1:"


class TokenSeal:
    def __init__(self, secret: str = ""):
        self._fernet = None
        if secret:
            from cryptography.fernet import Fernet

            self._fernet = Fernet(
                base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest())
            )

    @property
    def active(self) -> bool:
        return self._fernet is not None

    def seal(self, token: str) -> str:
        """`token` as stored: sealed when a key is set (a sealed one stays as it is)."""
        if self._fernet is None or not token or is_sealed(token):
            return token
        return SEALED_PREFIX + self._fernet.encrypt(token.encode()).decode()

    def open(self, stored: str) -> str:
        """The token `stored` holds; a sealed one this key cannot open stays sealed."""
        if self._fernet is None or not is_sealed(stored):
            return stored
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.decrypt(stored[len(SEALED_PREFIX) :].encode()).decode()
        except (InvalidToken, ValueError):
            return stored


def is_sealed(token: str) -> bool:
    return token.startswith(SEALED_PREFIX)
