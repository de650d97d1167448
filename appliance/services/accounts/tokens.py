"""API tokens: full-admin bearer credentials for scripts and other panels.

Only the SHA-256 of a token is stored; the plaintext exists once, in the create
response. Tokens are random 256-bit strings, so a plain hash (no salt, no stretching) is
enough and lets a request be authenticated with one indexed lookup. Every request looks
the hash up again, so a token deleted or disabled is refused on the very next request.
"""

from __future__ import annotations

import secrets
import time

from pony.orm import db_session, select

from appliance.domain.parse import parse_id
from appliance.errors import ServiceError
from appliance.services.accounts import passwords

PREFIX = "apl_"


class Tokens:
    def __init__(self, store, clock=time.time):
        self.store = store
        self.clock = clock

    def list(self) -> list[dict]:
        with db_session:
            rows = select(t for t in self.store.ApiToken).order_by(lambda t: t.id)[:]
            return [_view(t) for t in rows]

    def create(self, name) -> dict:
        if not isinstance(name, str) or not 1 <= len(name.strip()) <= 64:
            raise ServiceError("name must be 1-64 characters")
        name = name.strip()
        if not name.isprintable():
            raise ServiceError("name may not contain control or invisible characters")
        token = PREFIX + secrets.token_urlsafe(32)
        with db_session:
            if self.store.ApiToken.get(name=name):
                raise ServiceError(f"an API token named '{name}' already exists")
            row = self.store.ApiToken(
                name=name, token_hash=passwords.digest(token), created_at=int(self.clock())
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

    def authenticate(self, token: str) -> bool:
        if not token.startswith(PREFIX) or len(token) > 128:
            return False
        with db_session:
            return select(
                t
                for t in self.store.ApiToken
                if t.token_hash == passwords.digest(token) and t.enabled
            ).exists()

    def _get(self, token_id):
        token_id = parse_id(token_id, "token id")
        row = self.store.ApiToken.get(id=token_id)
        if row is None:
            raise ServiceError(f"no API token with id {token_id}")
        return row


def _view(row) -> dict:
    return {"id": row.id, "name": row.name, "enabled": row.enabled, "createdAt": row.created_at}
