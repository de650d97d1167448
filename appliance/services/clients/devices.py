"""Device limits: which client-app devices a subscription is served to, and how many.

Client apps (Happ, v2RayTun, FlClashX, Koala Clash ...) send a stable device id,
`x-hwid`, with every subscription request, and the device's OS, OS version and model
(`x-device-os`, `x-ver-os`, `x-device-model`). With `hwidEnable` on, a subscription is
served to as many devices as its limit: the first ones to ask are remembered and served
from then on, a new one beyond the limit gets no configuration. A known device is always
served, so lowering a limit refuses only devices not seen yet; removing a device (the
API, the subscription page) frees its place.

The limit of a subscription id is its clients' `deviceLimit`: 0 takes the
`hwidDefaultLimit` setting (0 there: no limit), -1 is no limit, N > 0 is N devices.
Several clients on one id: no limit if any has none, else the largest.

Header values come from anywhere and are bounded here: an `x-hwid` over 128 characters
or with control characters counts as none sent; the other values are cut to 255
characters, and one with control characters is not stored. A request without a device
id is served and not counted unless `hwidRequired` is on.

Whether the requesting device is known comes with the subscription's own read (the
lookup of its clients carries the slot the device holds), so a known device costs no
query of its own, and a device removed anywhere is refused from the next request on, in
every process. A device refused is noted once, for the webhook client.device_refused.
Admission inserts a new device at the lowest free slot
(appliance.store.device_sql): the database's unique keys make it exactly once, whichever
process admits. That a known device was seen again is kept in memory and written every
FLUSH_SECONDS in one batch, not once per request: client apps poll all day.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

import gevent
from pony.orm import db_session

from appliance.domain.client_rules import EMAIL_MAX, email_key
from appliance.errors import ServiceError
from appliance.runtime.changes import Change
from appliance.store import device_sql
from appliance.store.device_sql import DeviceWrites

log = logging.getLogger(__name__)

HWID_MAX = 128
VALUE_MAX = 255
ADDRESS_MAX = 64
FLUSH_SECONDS = 5
# Slots tried for one new device: each refused insert means another device took a slot.
ATTEMPTS = 50
# The request headers read, by their names in a WSGI environ.
HEADERS = {
    "hwid": "HTTP_X_HWID",
    "os": "HTTP_X_DEVICE_OS",
    "os_version": "HTTP_X_VER_OS",
    "model": "HTTP_X_DEVICE_MODEL",
    "user_agent": "HTTP_USER_AGENT",
}


def effective_limit(limits: Iterable[int], default: int) -> int:
    """The device limit of a subscription whose clients have `limits` (deviceLimit
    values); 0 for no limit."""
    each = [default if limit == 0 else limit for limit in limits]
    if not each or any(limit <= 0 for limit in each):
        return 0
    return max(each)


def device_headers(environ: Mapping) -> dict[str, str]:
    """The device's header values from a WSGI environ, checked and bounded: "" for a
    value not sent or not usable."""
    values = {name: _text(environ.get(key, "")) for name, key in HEADERS.items()}
    hwid = values["hwid"]
    values["hwid"] = hwid if _clean(hwid) and len(hwid) <= HWID_MAX else ""
    for name in ("os", "os_version", "model", "user_agent"):
        value = values[name][:VALUE_MAX]
        values[name] = value if _clean(value) else ""
    return values


class Devices:
    """`notice`, when given, hears of devices removed through the API (the panel's; a
    subscription worker has nobody to tell)."""

    def __init__(self, store, settings, notice=None, clock: Callable[[], float] = time.time):
        self.store = store
        self.settings = settings
        self.notice = notice
        self.clock = clock
        self.writes = DeviceWrites(store)
        self._pending: dict[tuple[str, str], tuple[int, str]] = {}
        self._flusher = None

    def start(self) -> None:
        """Write the sightings behind, every FLUSH_SECONDS, until `close`."""
        if self._flusher is None:
            self._flusher = gevent.spawn(self._flush_forever)

    def admit(
        self,
        sub_id: str,
        headers: Mapping[str, str],
        address: str,
        limit: int,
        held: int | None,
    ) -> bool:
        """Whether the device of `headers` (see `device_headers`) is served the
        subscription with device limit `limit` (0: none): a known device is (`held`, the
        slot the subscription's lookup found it holding), a new one while a slot is free
        (and is remembered), a request without a device id unless hwidRequired is on."""
        hwid = headers.get("hwid", "")
        if not hwid:
            return not self.settings.get("hwidRequired")
        now = int(self.clock() * 1000)
        address = address[:ADDRESS_MAX]
        if held is not None:
            self._pending[(sub_id, hwid)] = (now, address)
            return True
        rows = self.writes.rows
        device = (
            hwid,
            headers.get("os", ""),
            headers.get("os_version", ""),
            headers.get("model", ""),
            headers.get("user_agent", ""),
            address,
            now,
            now,
        )
        for _ in range(ATTEMPTS):
            taken = device_sql.taken_slots(rows, sub_id)
            slot = _lowest_free(taken)
            if limit and (len(taken) >= limit or slot > limit):
                # full, unless a request of this device admitted it since the lookup
                if device_sql.device_slot(rows, sub_id, hwid) is not None:
                    return True
                break
            if self.writes.insert(sub_id, slot, device) or (
                # the same device, admitted by a request at the same moment
                device_sql.device_slot(rows, sub_id, hwid) is not None
            ):
                return True
        self._refused(sub_id, device[:-1])
        return False

    def _refused(self, sub_id: str, device: tuple) -> None:
        """Note the refusal, once per device: the database's unique key refuses a repeat."""
        try:
            self.writes.refuse(sub_id, device)
        except Exception as exc:
            log.warning("a refused device was not noted: %s", exc)

    def of_email(self, email) -> list[dict]:
        """The devices of a client's subscription id, in the order they first asked."""
        with db_session:
            sub_id = self._sub_id(email)
        return self.of_sub_id(sub_id)

    def of_sub_id(self, sub_id: str) -> list[dict]:
        """The devices of a subscription id (its page), in the order they first asked."""
        with db_session:
            rows = device_sql.devices_of(self.store.rows, [sub_id])
        return [device_view(row[1:]) for row in rows]

    def remove(self, email, body: object) -> None:
        """Forget one device of a client's subscription: its place is free again."""
        hwid = body.get("hwid") if isinstance(body, dict) else None
        if not isinstance(hwid, str) or not hwid or len(hwid) > HWID_MAX:
            raise ServiceError(f"hwid must be a device id of 1 to {HWID_MAX} characters")
        with db_session:
            sub_id = self._sub_id(email)
            if not device_sql.delete_device(self.store, sub_id, hwid):
                raise ServiceError(f"client '{email}' has no device '{hwid}'")
        self._changed(sub_id)

    def remove_of_sub_id(self, sub_id: str, hwid: str) -> bool:
        """The subscription page's remove button: the subscription id is the credential."""
        if not hwid or len(hwid) > HWID_MAX:
            return False
        with db_session:
            removed = device_sql.delete_device(self.store, sub_id, hwid) > 0
        if removed:
            self._changed(sub_id)
        return removed

    def clear(self, email) -> int:
        """Forget every device of a client's subscription."""
        with db_session:
            sub_id = self._sub_id(email)
            removed = device_sql.delete_devices(self.store, sub_id)
        self._changed(sub_id)
        return removed

    def counts(self, sub_ids: list[str]) -> dict[str, int]:
        """sub id -> its devices, in the caller's db_session."""
        return device_sql.device_counts(self.store.rows, sub_ids)

    def _sub_id(self, email) -> str:
        if not isinstance(email, str) or not email:
            raise ServiceError("email is required")
        key = email_key(email)
        row = None if len(key) > EMAIL_MAX else self.store.entities.Client.get(email_key=key)
        if row is None:
            raise ServiceError(f"no client with email '{email}'")
        return row.sub_id

    def _changed(self, sub_id: str) -> None:
        if self.notice is None:
            return
        with db_session:
            emails = [c.email for c in self.store.entities.Client.select(sub_id=sub_id)]
        self.notice.publish(Change("clients", emails))

    def flush(self) -> None:
        """Write the sightings noted since the last flush, in one batch."""
        pending, self._pending = self._pending, {}
        sightings = [
            (seen, address, sub_id, hwid) for (sub_id, hwid), (seen, address) in pending.items()
        ]
        try:
            self.writes.seen(sightings)
        except Exception as exc:
            log.warning("the devices' last sightings were not written: %s", exc)

    def close(self) -> None:
        if self._flusher is not None:
            self._flusher.kill()
            self._flusher = None
        self.flush()
        self.writes.close()

    def _flush_forever(self) -> None:
        while True:
            gevent.sleep(FLUSH_SECONDS)
            self.flush()


def device_view(row: tuple) -> dict:
    """A device (DEVICE_COLUMNS' values) as the API answers it; times in Unix ms."""
    hwid, os_name, os_version, model, user_agent, address, first_seen, last_seen = row
    return {
        "hwid": hwid,
        "os": os_name,
        "osVersion": os_version,
        "model": model,
        "userAgent": user_agent,
        "address": address,
        "firstSeen": first_seen,
        "lastSeen": last_seen,
    }


def _lowest_free(taken: list[int]) -> int:
    slot = 1
    for held in taken:
        if held == slot:
            slot += 1
        elif held > slot:
            break
    return slot


def _text(raw: object) -> str:
    """A WSGI header value (latin-1 of its bytes) as the UTF-8 text it was sent as."""
    if not isinstance(raw, str):
        return ""
    if raw.isascii():  # what apps send: no decoding to do
        return raw.strip()
    try:
        return raw.encode("latin-1").decode("utf-8").strip()
    except UnicodeError:
        return raw.strip()


def _clean(value: str) -> bool:
    return value.isprintable()
