"""Webhook endpoints: where events go, checked when saved, and what was sent to each.

An endpoint's URL is judged by the egress guard when it is saved (and again at every
delivery, since a name may resolve elsewhere later): loopback, private and other internal
addresses only with `allowPrivate`, the cloud metadata address never. Its signing secret
is sealed at rest with the key node tokens are sealed with, and no answer carries it:
views say `hasSecret`, and an update that leaves `secret` empty keeps the stored one.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pony.orm import db_session

from appliance.domain.parse import parse_id
from appliance.errors import ServiceError
from appliance.runtime.changes import Change, ChangeNotice
from appliance.runtime.egress import Egress, host_key, url_port
from appliance.services.webhooks.events import checked_events
from appliance.services.webhooks.outbox import Outbox
from appliance.store import webhook_sql

NAME_MAX = 64
URL_MAX = 2048
SECRET_MIN, SECRET_MAX = 16, 256
DELIVERIES_SHOWN = 50
FLAGS = {
    "enabled": ("enabled", True),
    "allowPrivate": ("allow_private", False),
    "withSecrets": ("with_secrets", False),
    "batch": ("batch", False),
}
OPT_IN = "an endpoint on such an address is sent to only when it sets allowPrivate"


def guard(name: str, url: str, allow_private: bool) -> Egress:
    """The egress guard of an endpoint's deliveries."""
    parts = urlsplit(url)
    return Egress(
        f"webhook '{name}'",
        (host_key(parts.hostname or ""), url_port(parts) or 0),
        allow_private,
        opt_in=OPT_IN,
    )


class Webhooks:
    def __init__(
        self,
        store,
        seal,
        outbox: Outbox,
        notice: ChangeNotice,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        # Seals secrets at rest (`seal`, `open`): the panel's node-token seal.
        self.seal = seal
        self.outbox = outbox
        self.notice = notice
        self.clock = clock

    # ---- reads -------------------------------------------------------------------------

    def list(self) -> list[dict]:
        with db_session:
            counts = webhook_sql.counts(self.store)
            return [view(row, counts) for row in webhook_sql.endpoints(self.store)]

    def deliveries(self, endpoint_id: Any) -> list[dict]:
        """The latest deliveries of an endpoint, newest first."""
        with db_session:
            row = self._row(endpoint_id)
            return [
                delivery_view(entry)
                for entry in webhook_sql.deliveries(self.store, row[0], DELIVERIES_SHOWN)
            ]

    # ---- writes ------------------------------------------------------------------------

    def add(self, body: Any) -> dict:
        values = self._checked(body, None)
        now = self._now()
        with db_session:
            self._check_name_free(values["name"], None)
            endpoint_id = webhook_sql.insert_endpoint(
                self.store, {**values, "created_at": now, "updated_at": now}
            )
            created = view(webhook_sql.endpoint(self.store, endpoint_id), {})
        self.notice.publish(Change("webhooks", [endpoint_id]))
        return created

    def update(self, endpoint_id: Any, body: Any) -> dict:
        """Replace an endpoint's fields; an empty or absent secret keeps the stored one."""
        with db_session:
            row = self._row(endpoint_id)
            values = self._checked(body, row)
            self._check_name_free(values["name"], row[0])
            webhook_sql.update_endpoint(self.store, row[0], {**values, "updated_at": self._now()})
            updated = view(webhook_sql.endpoint(self.store, row[0]), webhook_sql.counts(self.store))
        self.notice.publish(Change("webhooks", [row[0]]))
        return updated

    def delete(self, endpoint_id: Any) -> str:
        with db_session:
            row = self._row(endpoint_id)
            webhook_sql.delete_endpoint(self.store, row[0])
        self.notice.publish(Change("webhooks", [row[0]]))
        return f"webhook '{row[1]}' deleted with its deliveries"

    def test(self, endpoint_id: Any) -> dict:
        """Queue an `endpoint.test` event for one endpoint; its outcome shows in its
        deliveries."""
        with db_session:
            row = self._row(endpoint_id)
            event_id = self.outbox.raise_for(
                row[0],
                "endpoint.test",
                f"endpoint:{row[0]}",
                {"endpoint": row[1], "message": "a test delivery asked for from the panel"},
            )
        self.notice.publish(Change("webhooks", [row[0]]))
        return {"id": event_id}

    # ---- checks ------------------------------------------------------------------------

    def _checked(self, body: Any, row: tuple | None) -> dict:
        if not isinstance(body, dict):
            raise ServiceError("send {name, url, secret, events, enabled, allowPrivate}")
        name = body.get("name")
        if not isinstance(name, str) or not name.strip() or len(name.strip()) > NAME_MAX:
            raise ServiceError(f"name must be a string of 1 to {NAME_MAX} characters")
        flags = {column: _flag(body, key, default) for key, (column, default) in FLAGS.items()}
        url = _checked_url(body.get("url"))
        check_destination(name.strip(), url, flags["allow_private"])
        values = {
            "name": name.strip(),
            "url": url,
            "events": json.dumps(checked_events(body.get("events"))),
            **flags,
        }
        secret = body.get("secret")
        if row is not None and secret in (None, ""):
            return values
        if not isinstance(secret, str) or not SECRET_MIN <= len(secret) <= SECRET_MAX:
            raise ServiceError(
                f"secret must be a string of {SECRET_MIN} to {SECRET_MAX} characters: the "
                "receiver checks each request's signature with it"
            )
        values["secret"] = self.seal.seal(secret)
        return values

    def _check_name_free(self, name: str, own_id: int | None) -> None:
        holder = webhook_sql.endpoint_named(self.store, name)
        if holder is not None and holder != own_id:
            raise ServiceError(f"a webhook named '{name}' already exists")

    def _row(self, endpoint_id: Any) -> tuple:
        endpoint_id = parse_id(endpoint_id, "webhook id")
        row = webhook_sql.endpoint(self.store, endpoint_id)
        if row is None:
            raise ServiceError(f"no webhook with id {endpoint_id}")
        return row

    def _now(self) -> int:
        return int(self.clock() * 1000)


def check_destination(name: str, url: str, allow_private: bool) -> None:
    """Refuse a URL the guard would not send to, as a sentence."""
    parts = urlsplit(url)
    try:
        guard(name, url, allow_private).addresses(parts.hostname or "", url_port(parts) or 0)
    except (socket.gaierror, UnicodeError):
        raise ServiceError(f"url: the host {parts.hostname} does not resolve") from None


def _checked_url(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > URL_MAX:
        raise ServiceError(f"url must be an http(s) URL of at most {URL_MAX} characters")
    url = value.strip()
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ServiceError("url must not hold spaces or control characters")
    try:
        parts = urlsplit(url)
        port = url_port(parts)
    except ValueError:
        port, parts = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServiceError("url must be an http(s) URL with a host")
    if port is None:
        raise ServiceError("url: the port must be from 1 to 65535")
    return url


def _flag(body: dict, key: str, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ServiceError(f"{key} must be true or false")
    return value


def view(row: tuple, counts: dict) -> dict:
    (endpoint_id, name, url, secret, events, enabled, allow_private, with_secrets, batch,
     created, updated) = row  # fmt: skip
    return {
        "id": endpoint_id,
        "name": name,
        "url": url,
        "hasSecret": bool(secret),
        "events": json.loads(events or "[]"),
        "enabled": bool(enabled),
        "allowPrivate": bool(allow_private),
        "withSecrets": bool(with_secrets),
        "batch": bool(batch),
        "createdAt": created,
        "updatedAt": updated,
        "pending": counts.get((endpoint_id, "pending"), 0),
        "delivered": counts.get((endpoint_id, "delivered"), 0),
        "failed": counts.get((endpoint_id, "failed"), 0),
    }


def delivery_view(row: tuple) -> dict:
    (row_id, event_id, event, subject, status, attempts, code, error, created, next_at,
     done) = row  # fmt: skip
    return {
        "id": event_id,
        "row": row_id,
        "event": event,
        "subject": subject,
        "status": status,
        "attempts": attempts,
        "code": code,
        "error": error,
        "createdAt": created,
        "nextAt": next_at if status == "pending" else 0,
        "doneAt": done,
    }
