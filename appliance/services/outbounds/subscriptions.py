"""Outbound subscriptions: a provider's servers, fetched from a URL, as core outbounds.

Why this module exists: users chain their server's exits through other proxies and their
providers hand out a URL of share links (or a Clash profile) that changes now and then.
A subscription record names that URL; each refresh fetches it through the egress guard
(the record's `allowPrivate` is its opt-in for an internal address), reads the body with
`links.outbound_feed`, and keeps the outbounds made, tags stable from one refresh to the
next. The outbounds of enabled subscriptions join the template's in the core config
(`core_outbounds`): those marked `prepend` before the template's own, the others after,
each group in priority order (`move`), read by `SubscribedOutbounds`, which the core is
built with (a save here asks the core to test its outbounds, so the core comes first). A
refresh that changed the outbounds publishes `Change("outbounds")` once, so the core
restarts at most once for it; one that failed keeps the last good outbounds and records
the reason, which the list shows.

A save (create, or update of an enabled record) fetches first: a URL the guard refuses
or that gives no server is refused and nothing is stored.

The servers a body names are screened as its URL is: the core would connect to them on
the panel's behalf, so a share link pointing at loopback, a private network or the cloud
metadata address (a literal in any spelling, or a name resolving to one) must not become
an outbound. Such servers are left out unless the record sets `allowPrivate` (the
metadata address always), and the record's `lastError` says how many and why.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pony.orm import db_session, select

from appliance.domain.parse import parse_id
from appliance.errors import ServiceError
from appliance.links.import_links import LinkError
from appliance.links.outbound_feed import (
    core_outbound,
    link_outbound,
    read_feed,
    tagged_outbounds,
)
from appliance.links.plan import LinkPlan
from appliance.runtime.changes import Change, ChangeNotice
from appliance.runtime.egress import (
    METADATA_REASON,
    DestinationRefused,
    Egress,
    FetchFailed,
    Resolver,
    host_key,
    screened,
    system_resolve,
    url_port,
)

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 600
MIN_INTERVAL = 10
MAX_INTERVAL = 30 * 86400
MAX_BODY = 8 << 20
MAX_URL = 2048
MAX_LINK = 8192
MAX_REMARK = 255
TAG_PREFIX = re.compile(r"[A-Za-z0-9._@-]{0,64}")
DESTINATION = "outbound subscription url"
OPT_IN = "a subscription is fetched from such an address only when it sets allowPrivate"
SERVERS_OPT_IN = (
    "a subscription's servers may be at internal addresses only when it sets allowPrivate"
)
FIELDS = ("remark", "url", "tagPrefix", "updateInterval", "enabled", "allowPrivate", "prepend")


class SubscribedOutbounds:
    """The outbounds of enabled subscriptions as the core gets them, read once and kept
    until an `outbounds` change."""

    def __init__(self, store):
        self.store = store
        # (first, last): the outbounds the core gets, kept until a write changes them.
        self._merged: tuple[list[dict], list[dict]] | None = None

    def core_outbounds(self) -> tuple[list[dict], list[dict]]:
        """The outbounds of enabled subscriptions: (before the template's, after them)."""
        if self._merged is None:
            with db_session:
                self._merged = merged_outbounds(self.store)
        return self._merged

    def forget(self, change: Change) -> None:
        """The subscriptions changed: read them again when next asked."""
        self._merged = None


def merged_outbounds(store, replaced: dict[int, list[dict]] | None = None) -> tuple[list, list]:
    """(first, last) from the rows as the open db_session sees them; `replaced` maps a
    subscription id to outbounds standing in for its stored ones."""
    first: list[dict] = []
    last: list[dict] = []
    rows = select(s for s in store.entities.OutboundSub if s.enabled)
    for row in rows.order_by(lambda s: (s.sort_order, s.id)):
        stored = (replaced or {}).get(row.id)
        if stored is None:
            stored = json.loads(row.outbounds)
        (first if row.prepend else last).extend(core_outbound(o) for o in stored)
    return first, last


class OutboundSubs:
    def __init__(
        self,
        store,
        notice: ChangeNotice,
        *,
        check: Callable[[tuple[list[dict], list[dict]]], None],
        clock: Callable[[], float] = time.time,
        resolve: Resolver = system_resolve,
    ):
        self.store = store
        self.notice = notice
        # Raises ServiceError with the core's words when it refuses a config with these
        # outbounds (first, last) from outside the template.
        self.check = check
        self.clock = clock
        self.resolve = resolve

    # ---- reads -------------------------------------------------------------------------

    def list(self) -> list[dict]:
        """Every subscription, newest first."""
        with db_session:
            rows = select(s for s in self.store.entities.OutboundSub).order_by(lambda s: -s.id)
            return [_view(row) for row in rows]

    def _checked(self, replaced: dict[int, list[dict]] | None = None) -> None:
        """Refuse, with the core's words, outbounds the installed core does not run."""
        try:
            self.check(merged_outbounds(self.store, replaced))
        except ServiceError as exc:
            raise ServiceError(f"the core refuses these outbounds: {exc.msg}") from None

    # ---- writes ------------------------------------------------------------------------

    def create(self, form: Any) -> dict:
        record = parse_form(form, None)
        made, note = self._read(record["url"], record["allowPrivate"])
        with db_session:
            self._check_prefix(record["tagPrefix"], None)
            top = select(s.sort_order for s in self.store.entities.OutboundSub).max() or 0
            now = int(self.clock())
            row = self.store.entities.OutboundSub(
                **_columns(record), sort_order=top + 1, outbounds="[]", created_at=now
            )
            row.flush()
            if not row.tag_prefix:
                row.tag_prefix = f"sub{row.id}-"
                self._check_prefix(row.tag_prefix, row.id)
            row.outbounds = json.dumps(tagged_outbounds(made, row.tag_prefix, []))
            row.last_refresh = row.last_attempt = now
            row.last_error = note[:1024]
            row.flush()
            self._checked()
            view = _view(row)
        self._changed()
        return view

    def update(self, sub_id: Any, form: Any) -> dict:
        sub_id = parse_id(sub_id, "outbound subscription id")
        with db_session:
            stored = _record(self._row(sub_id))
        record = parse_form(form, stored)
        if not record["tagPrefix"]:
            record["tagPrefix"] = f"sub{sub_id}-"
        made, note = (
            self._read(record["url"], record["allowPrivate"]) if record["enabled"] else (None, "")
        )
        if made is None:
            # Not fetched while off, but an address the guard refuses is refused now; a
            # name that does not resolve today may tomorrow.
            with contextlib.suppress(OSError):
                self._guard(record["url"], record["allowPrivate"]).addresses(
                    *_host_port(record["url"])
                )
        with db_session:
            self._check_prefix(record["tagPrefix"], sub_id)
            row = self._row(sub_id)
            previous = json.loads(row.outbounds) if row.tag_prefix == record["tagPrefix"] else []
            row.set(**_columns(record))
            if made is not None:
                row.outbounds = json.dumps(tagged_outbounds(made, row.tag_prefix, previous))
                row.last_refresh = row.last_attempt = int(self.clock())
                row.last_error = note[:1024]
                row.flush()
                self._checked()
            view = _view(row)
        self._changed()
        return view

    def delete(self, sub_id: Any) -> None:
        sub_id = parse_id(sub_id, "outbound subscription id")
        with db_session:
            self._row(sub_id).delete()
        self._changed()

    def move(self, sub_id: Any, direction: Any) -> None:
        """`up` raises the subscription's priority by one place, anything else lowers it."""
        sub_id = parse_id(sub_id, "outbound subscription id")
        with db_session:
            self._row(sub_id)
            rows = list(
                select(s for s in self.store.entities.OutboundSub).order_by(
                    lambda s: (s.sort_order, s.id)
                )
            )
            for place, row in enumerate(rows):
                row.sort_order = place + 1
            index = next(i for i, row in enumerate(rows) if row.id == sub_id)
            other = index - 1 if direction == "up" else index + 1
            if 0 <= other < len(rows):
                rows[index].sort_order, rows[other].sort_order = (
                    rows[other].sort_order,
                    rows[index].sort_order,
                )
        self._changed()

    def parse(self, form: Any) -> list[dict]:
        """The outbounds `url` would give, tagged with the given `tagPrefix`; stores nothing."""
        if not isinstance(form, dict):
            raise ServiceError("the request body must be an object with url")
        url = _url(form.get("url"))
        allow = _flag(form.get("allowPrivate", False) or False, "allowPrivate")
        prefix = _prefix(form.get("tagPrefix"))
        made = tagged_outbounds(self._read(url, allow)[0], prefix, [])
        return [core_outbound(outbound) for outbound in made]

    def from_link(self, form: Any) -> dict:
        """The outbound one share link describes (form `link`), for the template's outbound
        form to fill in; reads nothing from the network and stores nothing."""
        link = form.get("link") if isinstance(form, dict) else None
        if not isinstance(link, str) or not link.strip():
            raise ServiceError("paste a share link (vless://, vmess://, trojan://, ss://, ...)")
        if len(link) > MAX_LINK:
            raise ServiceError(f"a share link is at most {MAX_LINK} characters long")
        try:
            return link_outbound(link)
        except LinkError as exc:
            raise ServiceError(f"the share link cannot be read: {exc}") from exc
        except ValueError as exc:
            raise ServiceError("the share link cannot be read: it is malformed") from exc

    def refresh(self, sub_id: Any) -> list[dict]:
        """Fetch one subscription now; its outbounds (the last good ones are kept and the
        reason recorded when the fetch fails, which is then the reply)."""
        sub_id = parse_id(sub_id, "outbound subscription id")
        with db_session:
            row = self._row(sub_id)
            url, allow = row.url, row.allow_private
        try:
            made, note = self._read(url, allow)
            with db_session:
                row = self._row(sub_id)
                previous = json.loads(row.outbounds)
                outbounds = tagged_outbounds(made, row.tag_prefix, previous)
                differs = outbounds != previous
                if differs and row.enabled:
                    self._checked({sub_id: outbounds})
                if differs:
                    row.outbounds = json.dumps(outbounds)
                changed = differs and row.enabled
                row.last_refresh = row.last_attempt = int(self.clock())
                row.last_error = note[:1024]
        except ServiceError as exc:
            with db_session:
                row = self._row(sub_id)
                row.last_attempt = int(self.clock())
                row.last_error = exc.msg[:1024]
            raise
        if changed:
            self._changed()
        return [core_outbound(outbound) for outbound in outbounds]

    def refresh_due(self) -> None:
        """The background job: refresh every enabled subscription whose interval passed
        since its last attempt."""
        now = int(self.clock())
        with db_session:
            due = [
                s.id
                for s in select(s for s in self.store.entities.OutboundSub if s.enabled)
                if now - s.last_attempt >= s.update_interval
            ]
        for sub_id in due:
            try:
                self.refresh(sub_id)
            except ServiceError as exc:
                log.warning("outbound subscription %d was not refreshed: %s", sub_id, exc.msg)

    # ---- pieces ------------------------------------------------------------------------

    def _changed(self) -> None:
        self.notice.publish(Change("outbounds"))

    def _row(self, sub_id: int):
        row = self.store.entities.OutboundSub.get(id=sub_id)
        if row is None:
            raise ServiceError(f"outbound subscription {sub_id} does not exist")
        return row

    def _check_prefix(self, prefix: str, own_id: int | None) -> None:
        for other in select(s for s in self.store.entities.OutboundSub if s.tag_prefix == prefix):
            if other.id != own_id:
                raise ServiceError(
                    f"tagPrefix '{prefix}' is used by outbound subscription {other.id}; "
                    "each subscription needs its own, so their tags never meet"
                )

    def _guard(self, url: str, allow_private: bool) -> Egress:
        host, port = _host_port(url)
        return Egress(
            DESTINATION, (host_key(host), port), allow_private, self.resolve, opt_in=OPT_IN
        )

    def _read(self, url: str, allow_private: bool) -> tuple[list[LinkPlan], str]:
        """The plans of the body at `url` whose servers pass the screen, and the sentence
        about those left out (or ""); ServiceError saying why there are none."""
        try:
            with self._guard(url, allow_private).request(
                url,
                headers={"User-Agent": "appliance", "Accept": "*/*"},
                connect_timeout=10,
                read_timeout=20,
                total_timeout=60,
            ) as reply:
                if reply.status != 200:
                    raise FetchFailed(f"the server answered HTTP {reply.status}")
                body = reply.read(MAX_BODY)
        except DestinationRefused:
            raise
        except FetchFailed as exc:
            raise ServiceError(f"the subscription could not be fetched: {exc.msg}") from None
        feed = read_feed(body)
        plans, note = screen_servers(feed.plans, allow_private, self.resolve)
        if not plans and note:
            raise ServiceError(f"the subscription holds no server the core can use: {note}")
        if not plans:
            why = f" ({'; '.join(feed.reasons)})" if feed.reasons else ""
            raise ServiceError(
                "the subscription holds no server the core can use: "
                f"{feed.skipped} entries could not be read{why}"
            )
        return plans, note


def screen_servers(
    plans: list[LinkPlan], allow_private: bool, resolve: Resolver = system_resolve
) -> tuple[list[LinkPlan], str]:
    """The plans whose server the egress guard lets the core reach (internal ones too with
    `allow_private`, the metadata address never), and one sentence on those left out,
    naming the first, or "" when none was."""
    verdicts: dict[str, Any] = {}
    kept, left = [], []
    for plan in plans:
        if plan.address not in verdicts:
            verdicts[plan.address] = screened(plan.address, resolve, allow_private)
        (left if verdicts[plan.address] else kept).append(plan)
    if not left:
        return kept, ""
    first = left[0].address
    address, reason = verdicts[first]
    shown = first if host_key(first) == str(address) else f"{first} (resolves to {address})"
    rule = (
        "the panel never lets the core connect to it"
        if reason.startswith(METADATA_REASON)
        else SERVERS_OPT_IN
    )
    count = f"{len(left)} servers were" if len(left) > 1 else "1 server was"
    return kept, f"{count} left out: the first, {shown}, is {reason}; {rule}"


def parse_form(form: Any, stored: dict | None) -> dict:
    """The fields of a save; absent ones keep their stored value (or default)."""
    if not isinstance(form, dict):
        raise ServiceError("the request body must be an object of subscription fields")
    base = stored or {
        "remark": "",
        "tagPrefix": "",
        "updateInterval": DEFAULT_INTERVAL,
        "enabled": True,
        "allowPrivate": False,
        "prepend": False,
    }
    # A form's empty field means "as before" for the number and the switches.
    given = {
        key: form[key]
        for key in FIELDS
        if form.get(key) is not None and (form[key] != "" or key in ("remark", "tagPrefix"))
    }
    record = {**base, **given}
    if "url" not in given and stored is None:
        raise ServiceError("url is required: the http(s) address of the subscription")
    remark = record["remark"]
    if not isinstance(remark, str) or len(remark) > MAX_REMARK:
        raise ServiceError(f"remark must be text of at most {MAX_REMARK} characters")
    return {
        "remark": remark,
        "url": _url(record["url"]),
        "tagPrefix": _prefix(record["tagPrefix"]),
        "updateInterval": _interval(record["updateInterval"]),
        "enabled": _flag(record["enabled"], "enabled"),
        "allowPrivate": _flag(record["allowPrivate"], "allowPrivate"),
        "prepend": _flag(record["prepend"], "prepend"),
    }


FLAG_WORDS = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}


def _flag(value: Any, name: str) -> bool:
    """A switch: JSON true/false, or a form's true/false, 1/0, on/off."""
    if isinstance(value, bool):
        return value
    word = FLAG_WORDS.get(value.strip().lower()) if isinstance(value, str) else None
    if word is None:
        raise ServiceError(f"{name} must be true or false")
    return word


def _url(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ServiceError("url is required: the http(s) address of the subscription")
    url = value.strip()
    parts = urlsplit(url)
    if len(url) > MAX_URL or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServiceError(
            f"url must be an http(s) address of at most {MAX_URL} characters, "
            "like https://provider.example/sub/token"
        )
    if url_port(parts) is None:
        raise ServiceError("the port in url must be from 1 to 65535")
    return url


def _prefix(value: Any) -> str:
    text = "" if value is None else value
    if not isinstance(text, str) or not TAG_PREFIX.fullmatch(text):
        raise ServiceError(
            "tagPrefix must be at most 64 letters, digits and . _ @ - (empty: sub<id>-)"
        )
    return text


def _interval(value: Any) -> int:
    text = str(value).strip() if isinstance(value, str | int) else ""
    if (
        isinstance(value, bool)
        or not text.isdigit()
        or not (MIN_INTERVAL <= int(text) <= MAX_INTERVAL)
    ):
        raise ServiceError(
            f"updateInterval must be a whole number of seconds from {MIN_INTERVAL} "
            f"to {MAX_INTERVAL}"
        )
    return int(text)


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", url_port(parts) or 0


_COLUMNS = {
    "remark": "remark",
    "url": "url",
    "tagPrefix": "tag_prefix",
    "updateInterval": "update_interval",
    "enabled": "enabled",
    "allowPrivate": "allow_private",
    "prepend": "prepend",
}


def _columns(record: dict) -> dict:
    return {column: record[key] for key, column in _COLUMNS.items()}


def _record(row) -> dict:
    return {key: getattr(row, column) for key, column in _COLUMNS.items()}


def _view(row) -> dict:
    outbounds = json.loads(row.outbounds)
    return {
        "id": row.id,
        **_record(row),
        "priority": row.sort_order,
        "tags": [outbound["tag"] for outbound in outbounds],
        "outbounds": [core_outbound(outbound) for outbound in outbounds],
        "outboundCount": len(outbounds),
        "lastRefresh": row.last_refresh,
        "lastAttempt": row.last_attempt,
        "lastError": row.last_error,
        "createdAt": row.created_at,
    }
