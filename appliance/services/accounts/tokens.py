"""API tokens: bearer credentials for scripts and other panels, each with a scope.

Only the SHA-256 of a token is stored; the plaintext exists once, in the create
response. Tokens are random 256-bit strings, so a plain hash (no salt, no stretching) is
enough and lets a request be authenticated with one indexed lookup. Every request looks
the hash up again, so a token deleted, disabled or past its expiry is refused on the very
next request. The lookup asks for an enabled, unexpired token in one query, so an expired
token is refused exactly like one that never existed.

A scope limits what a token may call (`admin`: everything; `read`: the routes whose
declared effect is `read`, answered with their secrets redacted; `node`: what a managing
panel needs); which routes each scope covers is the route table's to say
(`web/routes.py`), from each route's effect.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from pony.orm import db_session, select

from appliance.domain.parse import parse_id
from appliance.errors import ServiceError
from appliance.services.accounts import passwords

PREFIX = "apl_"
SCOPES = ("admin", "read", "node")
# Expiry is a Unix time in milliseconds, as the rest of the API gives times; 0 is never.
MAX_EXPIRY_MS = 253_402_300_799_999  # the end of year 9999


@dataclass(frozen=True)
class Caller:
    """Who a valid token speaks for."""

    name: str
    scope: str


class Tokens:
    def __init__(self, store, clock=time.time):
        self.store = store
        self.clock = clock

    def list(self) -> list[dict]:
        with db_session:
            rows = select(t for t in self.store.entities.ApiToken).order_by(lambda t: t.id)[:]
            return [_view(t) for t in rows]

    def create(self, name, scope="admin", expires_at=0) -> dict:
        """A new token; `scope` and `expires_at` may be left out (a full admin token that
        never expires, as before scopes existed)."""
        scope = "admin" if scope is None else scope
        expires_at = 0 if expires_at is None else expires_at
        if scope not in SCOPES:
            raise ServiceError(f"scope must be one of {', '.join(SCOPES)} (got {scope!r})")
        if isinstance(expires_at, bool) or not isinstance(expires_at, int):
            raise ServiceError("expiresAt must be a Unix time in milliseconds, or 0 for never")
        now_ms = int(self.clock() * 1000)
        if expires_at != 0 and not now_ms < expires_at <= MAX_EXPIRY_MS:
            raise ServiceError(
                "expiresAt must be a time in the future, in Unix milliseconds, or 0 for never"
            )
        if not isinstance(name, str) or not 1 <= len(name.strip()) <= 64:
            raise ServiceError("name must be 1-64 characters")
        name = name.strip()
        if not name.isprintable():
            raise ServiceError("name may not contain control or invisible characters")
        token = PREFIX + secrets.token_urlsafe(32)
        with db_session:
            if self.store.entities.ApiToken.get(name=name):
                raise ServiceError(f"an API token named '{name}' already exists")
            row = self.store.entities.ApiToken(
                name=name,
                token_hash=passwords.digest(token),
                created_at=int(self.clock()),
                scope=scope,
                expires_at=expires_at,
            )
            row.flush()
            return {**_view(row), "token": token}

    def delete(self, token_id) -> None:
        with db_session:
            self._get(token_id).delete()

    def set_enabled(self, token_id, enabled) -> None:
        if not isinstance(enabled, bool):
            raise ServiceError("enabled must be true or false")
        with db_session:
            self._get(token_id).enabled = enabled

    def authenticate(self, token: str) -> Caller | None:
        """The caller an enabled, unexpired token speaks for; None for any other."""
        if not token.startswith(PREFIX) or len(token) > 128:
            return None
        digest, now_ms = passwords.digest(token), int(self.clock() * 1000)
        with db_session:
            found = select(
                (t.name, t.scope)
                for t in self.store.entities.ApiToken
                if t.token_hash == digest
                and t.enabled
                and (t.expires_at == 0 or t.expires_at > now_ms)
            )[:1]
        return Caller(*found[0]) if found else None

    def _get(self, token_id):
        token_id = parse_id(token_id, "token id")
        row = self.store.entities.ApiToken.get(id=token_id)
        if row is None:
            raise ServiceError(f"no API token with id {token_id}")
        return row


def _view(row) -> dict:
    return {
        "id": row.id,
        "name": row.name,
        "enabled": row.enabled,
        "createdAt": row.created_at,
        "scope": row.scope,
        "expiresAt": row.expires_at,
    }
