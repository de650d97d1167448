"""Hosts: per-inbound overrides of the address, port and TLS a subscription advertises.

An inbound listens on one address, but clients often reach it another way: through a
CDN domain, a second IP, a relay on another port. Each enabled host of an inbound renders
one link (or proxy) in subscriptions, in the host's `sortOrder`; empty fields inherit from
the inbound and the subscription's address. The inbound a host belongs to is fixed at
creation and its position changes only through `reorder`, so an edit form that sends the
whole record back can never move a host by accident.

Tags are free labels for the admin (filtering, grouping); they are stored as a JSON array
in one text column, since hosts are few (tens, not thousands) and read whole.

Every committed write publishes `Change("hosts", ids)` on the change notice: the
subscriptions render hosts, so their caches follow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from pony.orm import db_session, select

from appliance.domain.parse import parse_id, parse_port, parse_text
from appliance.errors import ServiceError
from appliance.runtime.changes import Change, ChangeNotice

SECURITIES = ("same", "none", "tls", "reality")
MAX_TEXT = 255
MAX_TAGS = 16
MAX_TAG = 32
# A hostname, an IPv4 address or an IPv6 address (bare or in brackets): what can stand
# after "@" in a share link without breaking it.
ADDRESS_SHAPE = re.compile(
    r"^(?:\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*|[A-Za-z0-9._*-]+)$"
)
SNI_SHAPE = re.compile(r"^[A-Za-z0-9._*-]+$")


class Hosts:
    def __init__(self, store, notice: ChangeNotice):
        self.store = store
        self.notice = notice

    # ---- reads -----------------------------------------------------------------------

    def list(self) -> list[dict]:
        """Every host, by inbound, then position."""
        with db_session:
            rows = select(h for h in self.store.entities.Host).order_by(
                lambda h: (h.inbound.id, h.sort_order, h.id)
            )[:]
            return [host_view(row) for row in rows]

    def get(self, host_id) -> dict:
        with db_session:
            return host_view(self._row(host_id))

    def by_inbound(self, inbound_id) -> list[dict]:
        with db_session:
            inbound = self._inbound(inbound_id)
            rows = select(h for h in self.store.entities.Host if h.inbound == inbound).order_by(
                lambda h: (h.sort_order, h.id)
            )[:]
            return [host_view(row) for row in rows]

    def tags(self) -> list[str]:
        with db_session:
            stored = select(h.tags for h in self.store.entities.Host)[:]
        return sorted({tag for text in stored for tag in json.loads(text)})

    # ---- writes ----------------------------------------------------------------------

    def add(self, payload: Any) -> dict:
        payload = _object(payload)
        if "inboundId" not in payload:
            raise ServiceError("inboundId is required: the inbound this host belongs to")
        fields = normalize_host(payload)
        with db_session:
            inbound = self._inbound(payload["inboundId"])
            last = select(
                h.sort_order for h in self.store.entities.Host if h.inbound == inbound
            ).max()
            row = self.store.entities.Host(
                inbound=inbound,
                sort_order=0 if last is None else last + 1,
                enable=_enable(payload.get("enable", True)),
                **fields,
            )
            row.flush()
            view = host_view(row)
        self._announce([view["id"]])
        return view

    def update(self, host_id, payload: Any) -> dict:
        """Replace the editable fields; `inboundId` and `sortOrder` in the payload are
        ignored (see the module docstring), `enable` is kept when not sent."""
        payload = _object(payload)
        fields = normalize_host(payload)
        with db_session:
            row = self._row(host_id)
            if "enable" in payload:
                fields["enable"] = _enable(payload["enable"])
            row.set(**fields)
            view = host_view(row)
        self._announce([view["id"]])
        return view

    def delete(self, host_id) -> None:
        with db_session:
            row = self._row(host_id)
            gone = row.id
            row.delete()
        self._announce([gone])

    def set_enable(self, host_id, enable: Any) -> None:
        enable = _enable(enable)
        with db_session:
            row = self._row(host_id)
            row.enable = enable
            changed = row.id
        self._announce([changed])

    def reorder(self, body: Any) -> None:
        """`ids` lists every host of one inbound in the wanted order; position i gets
        sortOrder i. A partial list or hosts of several inbounds would leave positions
        ambiguous, so both are refused."""
        ids = _ids(body)
        if not ids:
            raise ServiceError("ids must list the hosts of one inbound in the wanted order")
        if len(set(ids)) != len(ids):
            raise ServiceError("ids lists a host more than once")
        with db_session:
            rows = [self._row(host_id) for host_id in ids]
            inbound = rows[0].inbound
            others = sorted({row.inbound.id for row in rows} - {inbound.id})
            if others:
                raise ServiceError(
                    f"ids must all belong to one inbound: host {ids[0]} belongs to inbound "
                    f"{inbound.id}, others to inbound {', '.join(map(str, others))}"
                )
            siblings = select(h.id for h in self.store.entities.Host if h.inbound == inbound)[:]
            missing = sorted(set(siblings) - set(ids))
            if missing:
                raise ServiceError(
                    f"ids must list every host of inbound {inbound.id}; missing: "
                    f"{', '.join(map(str, missing))}"
                )
            for position, row in enumerate(rows):
                row.sort_order = position
        self._announce(ids)

    def bulk_set_enable(self, body: Any) -> dict:
        ids = _ids(body)
        enable = _enable(body.get("enable"))
        return self._each(ids, lambda row: setattr(row, "enable", enable), "affected")

    def bulk_delete(self, body: Any) -> dict:
        return self._each(_ids(body), lambda row: row.delete(), "deleted")

    # ---- helpers ---------------------------------------------------------------------

    def _each(self, ids: list[int], action, counted: str) -> dict:
        """Apply `action` to every known host in one transaction; unknown ids are skipped
        with the reason, the rest still happen."""
        done, skipped = [], []
        with db_session:
            for host_id in dict.fromkeys(ids):
                row = self.store.entities.Host.get(id=host_id)
                if row is None:
                    skipped.append({"id": host_id, "reason": f"no host with id {host_id}"})
                    continue
                action(row)
                done.append(host_id)
        self._announce(done)
        return {counted: len(done), "skipped": skipped}

    def _announce(self, host_ids: Iterable[int]) -> None:
        """After a commit: the hosts of `host_ids` changed."""
        self.notice.publish(Change("hosts", host_ids))

    def _row(self, host_id):
        host_id = parse_id(host_id, "host id")
        row = self.store.entities.Host.get(id=host_id)
        if row is None:
            raise ServiceError(f"no host with id {host_id}")
        return row

    def _inbound(self, inbound_id):
        inbound_id = parse_id(inbound_id, "inboundId")
        row = self.store.entities.Inbound.get(id=inbound_id)
        if row is None:
            raise ServiceError(f"inboundId {inbound_id}: no inbound with that id")
        return row


def host_view(row) -> dict:
    """The spec's Host record."""
    return {
        "id": row.id,
        "inboundId": row.inbound.id,
        "remark": row.remark,
        "address": row.address,
        "port": row.port,
        "security": row.security,
        "sni": row.sni,
        "tags": json.loads(row.tags),
        "enable": row.enable,
        "sortOrder": row.sort_order,
    }


def normalize_host(payload: dict) -> dict:
    """The editable columns of a host from a payload, each checked; raises ServiceError
    naming the first field that is wrong."""
    remark = payload.get("remark")
    if not isinstance(remark, str) or not remark.strip():
        raise ServiceError("remark is required: a name for this host")
    if len(remark) > MAX_TEXT:
        raise ServiceError(f"remark must be at most {MAX_TEXT} characters")
    address = parse_text(payload.get("address"), "address", MAX_TEXT)
    if address and not ADDRESS_SHAPE.match(address):
        raise ServiceError(
            f"address must be a domain name or an IP address, or empty to inherit "
            f"(got {json.dumps(address)})"
        )
    if address.startswith("["):
        address = address[1:-1]  # one form for IPv6: the renderers add brackets where needed
    sni = parse_text(payload.get("sni"), "sni", MAX_TEXT)
    if sni and not SNI_SHAPE.match(sni):
        raise ServiceError(
            f"sni must be a domain name, or empty to inherit (got {json.dumps(sni)})"
        )
    security = payload.get("security")
    if security in (None, ""):
        security = "same"
    if security not in SECURITIES:
        raise ServiceError(
            f"security must be one of {', '.join(SECURITIES)} (got {json.dumps(security)})"
        )
    return {
        "remark": remark.strip(),
        "address": address,
        "port": parse_port(payload.get("port"), "inherit"),
        "security": security,
        "sni": sni,
        "tags": json.dumps(_tags(payload.get("tags")), ensure_ascii=False),
    }


def _tags(value: Any) -> list[str]:
    if value in (None, ""):
        return []
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise ServiceError("tags must be an array of strings")
    tags = list(dict.fromkeys(tag.strip() for tag in value if tag.strip()))
    if len(tags) > MAX_TAGS:
        raise ServiceError(f"a host takes at most {MAX_TAGS} tags (got {len(tags)})")
    for tag in tags:
        if len(tag) > MAX_TAG:
            raise ServiceError(f"tag '{tag[:40]}' is longer than {MAX_TAG} characters")
    return tags


def _enable(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ServiceError(f"enable must be true or false (got {json.dumps(value)})")
    return value


def _ids(body: Any) -> list[int]:
    if not isinstance(body, dict) or not isinstance(body.get("ids"), list):
        raise ServiceError("ids must be an array of host ids")
    return [parse_id(host_id, "each of ids") for host_id in body["ids"]]


def _object(payload: Any) -> dict:
    if not isinstance(payload, dict):
        raise ServiceError("the host must be a JSON object")
    return payload
