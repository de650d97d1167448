"""Clients: one record per user, attached to any number of inbounds.

A client row drives the client entry of every inbound it is attached to (settings.clients
is derived on read and on config build, never stored twice). Traffic lives in its own row
keyed by the email's comparison key, so `del ?keepTraffic=1` can keep the counters and a
client re-created under the same email continues from them.

Reads over many clients (lists, pages, summaries, exports) are in `client_query`; bulk
operations in `client_bulk`; groups in `groups`. This module holds the single-client
operations and the rules they share.

A single-client write publishes `Change("clients", emails)` on the change notice once its
transaction has committed (the old and the new email of a rename; none for what the core
does not carry, such as external links), so the core takes that client alone instead of
comparing every client it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from pony.orm import TransactionIntegrityError, db_session, select

from appliance.core.capabilities import VISION
from appliance.domain import client_rules, inbound_rules
from appliance.domain.client_rules import email_key
from appliance.domain.clients import api_view, core_view
from appliance.domain.parse import parse_id
from appliance.errors import ServiceError
from appliance.runtime.changes import Change, ChangeNotice
from appliance.services.clients.ips import node_of
from appliance.services.inbounds.client_fit import refit
from appliance.services.inbounds.views import record_of
from appliance.services.webhooks.outbox import Outbox
from appliance.store import client_ip_sql, client_queries
from appliance.store.batches import chunks
from appliance.store.client_rows import entity_record
from appliance.store.natural_order import natural_order

LINK_KINDS = ("link", "subscription")
SHARE_SCHEMES = (
    "vless://",
    "vmess://",
    "trojan://",
    "ss://",
    "hysteria://",
    "hysteria2://",
    "hy2://",
    "tuic://",
    "wireguard://",
    "socks://",
)
MAX_LINKS = 50


class Clients:
    def __init__(
        self,
        store,
        notice: ChangeNotice,
        check_core: Callable[[Iterable[str]], None],
        outbox: Outbox,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.notice = notice
        # Webhook events, written in the transaction of the change they report.
        self.outbox = outbox
        # features -> None, raising ServiceError when the running core lacks one of them
        # (see CoreProcess.check_features).
        self.check_core = check_core
        self.clock = clock

    def tell(self, event: str, rows: Iterable) -> None:
        """Raise a webhook `event` for client rows, inside the caller's db_session; the
        views are built only when an endpoint wants the event."""
        rows = list(rows)
        if rows and self.outbox.wanted_by_any(event):
            self.outbox.raise_clients(event, [self.view(row) for row in rows])

    def announce(self, emails: Iterable[str] | None) -> None:
        """After a commit: the clients of `emails` (None: any of them) changed."""
        self.notice.publish(Change("clients", emails))

    def check_flow(self, flow: str, inbounds: list[dict]) -> None:
        """Refuse a client whose flow (XTLS Vision) an inbound of this host would carry
        while the running core cannot run it: the core would serve the client without it,
        and its links would not work."""
        if flow and any(
            inbound["nodeId"] is None and inbound_rules.tls_flow_capable(inbound)
            for inbound in inbounds
        ):
            self.check_core({VISION})

    # ---- single-client reads -----------------------------------------------------------

    def get(self, email) -> dict:
        with db_session:
            row = self.row(email)
            return {
                "client": self.view(row),
                "inboundIds": sorted(a.inbound.id for a in row.attachments),
                "externalLinks": [
                    {"kind": link.kind, "value": link.value, "remark": link.remark}
                    for link in row.links.order_by(lambda x: (x.sort_order, x.id))
                ],
            }

    def traffic(self, email) -> dict:
        with db_session:
            row = self.row(email)
            traffic = self.traffic_row(row)
            return {
                "email": row.email,
                "up": traffic.up,
                "down": traffic.down,
                "total": row.total_bytes,
                "expiryTime": row.expiry_time,
                "enable": traffic.enable and row.enable,
                "lastOnline": traffic.last_online,
                "inboundIds": sorted(a.inbound.id for a in row.attachments),
            }

    def ips(self, email) -> list[str]:
        """A client's addresses as `ip (timestamp)`, the latest first, each once at its
        latest sighting on any server."""
        latest: dict[str, int] = {}
        for entry in self.ips_seen_by(email):
            latest.setdefault(entry["ip"], entry["timestamp"])
        return [f"{ip} ({seen})" for ip, seen in latest.items()]

    def ips_seen_by(self, email) -> list[dict]:
        """Every sighting of a client's addresses as `{ip, timestamp, nodeId}` (null: this
        panel's core), the latest first."""
        with db_session:
            row = self.row(email)
            entries = client_ip_sql.client_log(self.store, row.email_key)
        return [
            {"ip": ip, "timestamp": seen, "nodeId": node_of(server)} for ip, seen, server in entries
        ]

    def core_views(self, emails: list[str]) -> dict[str, tuple[dict, set[int]]]:
        """email -> (its view as the config builder reads it, the ids of its inbounds) for
        each of `emails` that names a client, spelled as stored."""
        keys = sorted({email_key(email) for email in emails})
        found: dict[str, tuple[dict, set[int]]] = {}
        with db_session:
            for part in chunks(keys):
                clients = client_queries.clients_of_keys(self.store, list(part))
                attached = client_queries.attachments(self.store, [c.row_id for c in clients])
                for client in clients:
                    view = core_view(client)
                    found[view["email"]] = (view, set(attached.get(client.row_id, ())))
        return found

    # ---- single-client writes ------------------------------------------------------------

    def add(self, body: Any) -> dict:
        """`{client, inboundIds}` with at least one inbound."""
        client, inbound_ids = _client_and_ids(body, require_inbounds=True)
        with db_session:
            inbounds = self.inbound_rows(inbound_ids)
            records = [record_of(i) for i in inbounds]
            record = client_rules.normalize_client(client, records)
            self.check_flow(record["flow"], records)
            row = self.create(record, inbounds)
            view = self.view(row)
            self.outbox.raise_clients("client.created", [view])
        self.announce([view["email"]])
        return view

    def create(self, record: dict, inbounds: list) -> Any:
        """Insert a normalised record and attach it; the caller holds the db_session."""
        key = email_key(record["email"])
        if self.store.entities.Client.get(email_key=key) is not None:
            raise ServiceError(f"email '{record['email']}' is already in use")
        self._check_secret_free(record["secret"], None)
        now = self.now_ms()
        row = self.store.entities.Client(
            email_key=key, created_at=now, updated_at=now, **columns_of(record)
        )
        # Before any other query: Pony flushes the new row ahead of the next SELECT, and
        # a concurrent insert of the same email or secret must fail here, as a sentence.
        self._flush_unique(record)
        for inbound in inbounds:
            self.store.entities.ClientInbound(client=row, inbound=inbound)
        traffic = self.store.entities.ClientTraffic.get(email_key=key)
        if traffic is None:
            self.store.entities.ClientTraffic(email_key=key, email=record["email"])
        else:
            traffic.email = record["email"]
        return row

    def _flush_unique(self, record: dict) -> None:
        """Write now, so that a concurrent request that took the same email or MTProto
        secret between our check and our write (possible on the networked databases, whose
        drivers yield) gets the same sentence as a sequential one, not a failed commit."""
        try:
            self.store.db.flush()
        except TransactionIntegrityError as exc:
            if "mt_secret" in str(exc):
                raise ServiceError(secret_taken(record["secret"], "")) from None
            raise ServiceError(f"email '{record['email']}' is already in use") from None

    def _check_secret_free(self, secret: str, own_id: int | None) -> None:
        """No other client holds `secret`: an MTProto proxy tells its users apart by their
        keys alone, so a shared key would be one user counted as another."""
        holder = select(c for c in self.store.entities.Client if c.mt_secret == secret).first()
        if holder is not None and holder.id != own_id:
            raise ServiceError(secret_taken(secret, holder.email))

    def update(self, email, payload: Any) -> dict:
        """Replace the whole record (not a patch); attachments stay as they are."""
        if isinstance(payload, dict) and isinstance(payload.get("client"), dict):
            payload = payload["client"]
        with db_session:
            row = self.row(email)
            before, was_enabled = row.email, row.enable
            inbounds = [a.inbound for a in row.attachments]
            records = [record_of(i) for i in inbounds]
            record = client_rules.normalize_client(payload, records)
            self.check_flow(record["flow"], records)
            self._check_secret_free(record["secret"], row.id)
            new_key = email_key(record["email"])
            if new_key != row.email_key:
                self._rename(row, record["email"], new_key)
            row.set(updated_at=self.now_ms(), **columns_of(record))
            traffic = self.store.entities.ClientTraffic.get(email_key=new_key)
            if traffic is not None:
                traffic.email = record["email"]
            self._flush_unique(record)
            view = self.view(row)
            self.outbox.raise_clients("client.modified", [view])
            if row.enable != was_enabled:
                self.outbox.raise_clients(enable_event(row.enable), [view])
        self.announce([before, view["email"]])
        return view

    def delete(self, email, keep_traffic: bool) -> None:
        with db_session:
            row = self.row(email)
            gone = row.email
            self.tell("client.deleted", [row])
            self.delete_row(row, keep_traffic)
        self.announce([gone])

    def delete_row(self, row, keep_traffic: bool) -> None:
        key = row.email_key
        row.delete()
        if not keep_traffic:
            self.forget(key)

    def forget(self, key: str) -> None:
        """Drop what is kept per email besides the client row: traffic and IP log."""
        self.store.client_writes.note(keys=(key,))
        select(t for t in self.store.entities.ClientTraffic if t.email_key == key).delete(bulk=True)
        select(i for i in self.store.entities.ClientIp if i.email_key == key).delete(bulk=True)

    def attach(self, email, body: Any) -> list[int]:
        inbound_ids = inbound_ids_of(body)
        with db_session:
            row = self.row(email)
            inbounds = self.inbound_rows(inbound_ids)
            attached = {a.inbound.id for a in row.attachments}
            new = [i for i in inbounds if i.id not in attached]
            self.refit(row, [a.inbound for a in row.attachments] + new)
            for inbound in new:
                self.store.entities.ClientInbound(client=row, inbound=inbound)
            row.updated_at = self.now_ms()
            changed = row.email
            self.tell("client.modified", [row])
        self.announce([changed])
        return sorted(attached | {i.id for i in new})

    def detach(self, email, body: Any) -> list[int]:
        inbound_ids = set(inbound_ids_of(body))
        with db_session:
            row = self.row(email)
            for attachment in list(row.attachments):
                if attachment.inbound.id in inbound_ids:
                    attachment.delete()
            row.updated_at = self.now_ms()
            changed, left = row.email, sorted(a.inbound.id for a in row.attachments)
            self.tell("client.modified", [row])
        self.announce([changed])
        return left

    def set_external_links(self, email, body: Any) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("externalLinks"), list):
            raise ServiceError("externalLinks must be an array of {kind, value, remark}")
        links = [_external_link(item, n) for n, item in enumerate(body["externalLinks"])]
        if len(links) > MAX_LINKS:
            raise ServiceError(f"at most {MAX_LINKS} external links per client")
        with db_session:
            row = self.row(email)
            row.links.clear()
            for n, link in enumerate(links):
                self.store.entities.ClientLink(client=row, sort_order=n, **link)
        self.announce([])

    def reset_traffic(self, email) -> None:
        """Zero the counters and re-enable a client the sweep disabled."""
        with db_session:
            row = self.row(email)
            traffic = self.traffic_row(row)
            traffic.up = traffic.down = 0
            traffic.enable = True
            row.enable = True
            row.updated_at = self.now_ms()
            changed = row.email
            self.tell("client.traffic_reset", [row])
        self.announce([changed])

    def update_traffic(self, email, body: Any) -> None:
        if not isinstance(body, dict):
            raise ServiceError("send {upload, download} as a JSON object")
        values = {}
        for field in ("upload", "download"):
            value = body.get(field, 0)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise ServiceError(f"{field} must be a non-negative integer of bytes")
            values[field] = value
        with db_session:
            row = self.row(email)
            traffic = self.traffic_row(row)
            traffic.up, traffic.down = values["upload"], values["download"]
            changed = row.email
        self.announce([changed])

    def clear_ips(self, email) -> None:
        with db_session:
            key = self.row(email).email_key
            select(i for i in self.store.entities.ClientIp if i.email_key == key).delete(bulk=True)
        self.announce([])

    # ---- shared helpers --------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def row(self, email):
        if not isinstance(email, str) or not email:
            raise ServiceError("email is required")
        key = email_key(email)
        # A key longer than any stored one names no client; the column would refuse it.
        row = (
            None
            if len(key) > client_rules.EMAIL_MAX
            else self.store.entities.Client.get(email_key=key)
        )
        if row is None:
            raise ServiceError(f"no client with email '{email}'")
        return row

    def traffic_row(self, row):
        traffic = self.store.entities.ClientTraffic.get(email_key=row.email_key)
        if traffic is None:
            traffic = self.store.entities.ClientTraffic(email_key=row.email_key, email=row.email)
        return traffic

    def inbound_rows(self, inbound_ids: list[int]) -> list:
        rows = []
        for inbound_id in inbound_ids:
            inbound = self.store.entities.Inbound.get(id=inbound_id)
            if inbound is None:
                raise ServiceError(f"no inbound with id {inbound_id}")
            if inbound.protocol not in inbound_rules.CLIENT_PROTOCOLS:
                raise ServiceError(
                    f"inbound {inbound_id} is {inbound.protocol}, which takes no clients; "
                    f"clients go on {', '.join(sorted(inbound_rules.CLIENT_PROTOCOLS))} inbounds"
                )
            rows.append(inbound)
        return rows

    def refit(self, row, inbounds: list) -> None:
        self.check_flow(row.flow, [record_of(i) for i in inbounds])
        refit(row, inbounds)

    def _rename(self, row, email: str, new_key: str) -> None:
        if self.store.entities.Client.get(email_key=new_key) is not None:
            raise ServiceError(f"email '{email}' is already in use")
        old = self.store.entities.ClientTraffic.get(email_key=row.email_key)
        kept = self.store.entities.ClientTraffic.get(email_key=new_key)
        if old is not None and kept is not None:
            kept.up, kept.down = kept.up + old.up, kept.down + old.down
            old.delete()
        elif old is not None:
            old.email_key = new_key
        for entry in select(
            i for i in self.store.entities.ClientIp if i.email_key == row.email_key
        )[:]:
            # The new email may still have an IP log (kept by `del ?keepTraffic=1`): one
            # row per address, with the later sighting.
            other = self.store.entities.ClientIp.get(
                email_key=new_key, ip=entry.ip, server=entry.server
            )
            if other is None:
                entry.email_key = new_key
            else:
                other.seen_at = max(other.seen_at, entry.seen_at)
                entry.delete()
        row.email_key = new_key

    def view(self, row) -> dict:
        traffic = self.store.entities.ClientTraffic.get(email_key=row.email_key)
        return api_view(entity_record(row, traffic), sorted(a.inbound.id for a in row.attachments))


def enable_event(enabled: bool) -> str:
    """The webhook event of a client switched on or off."""
    return "client.enabled" if enabled else "client.disabled"


def secret_taken(secret: str, holder: str) -> str:
    """The refusal of an MTProto secret another client holds (`holder`, when known)."""
    whose = f"client '{holder}'" if holder else "a client saved at the same moment"
    return (
        f"secret {secret} is already the MTProto key of {whose}; every client needs a key "
        "of its own, or a proxy cannot tell them apart: omit secret to have one generated"
    )


def columns_of(record: dict) -> dict:
    return {
        "email": record["email"],
        "email_order": natural_order(email_key(record["email"])),
        "uuid": record["id"],
        "password": record["password"],
        "auth": record["auth"],
        "flow": record["flow"],
        "security": record["security"],
        "reverse_tag": record["reverse"]["tag"] if record["reverse"] else "",
        "sub_id": record["subId"],
        "total_bytes": record["totalGB"],
        "expiry_time": record["expiryTime"],
        "limit_ip": record["limitIp"],
        "reset_days": record["reset"],
        "device_limit": record["deviceLimit"],
        "tg_id": record["tgId"],
        "comment": record["comment"],
        "enable": record["enable"],
        "group_name": record["group"],
        "ad_tag": record["adTag"],
        "mt_secret": record["secret"],
        "method": record["method"],
        "search_key": search_key(record["email"], record["subId"], record["comment"]),
    }


def search_key(email: str, sub_id: str, comment: str) -> str:
    """What the paged list's search matches: the three searchable fields folded like email
    keys, so one LIKE over one plain column does it on every backend, without per-row
    function calls."""
    return "\n".join(email_key(text) for text in (email, sub_id, comment))


def inbound_ids_of(body: Any) -> list[int]:
    if not isinstance(body, dict) or not isinstance(body.get("inboundIds"), list):
        raise ServiceError("inboundIds must be an array of inbound ids")
    return list(dict.fromkeys(parse_id(i, "inboundIds[]") for i in body["inboundIds"]))


def _client_and_ids(body: Any, require_inbounds: bool) -> tuple[dict, list[int]]:
    if not isinstance(body, dict) or not isinstance(body.get("client"), dict):
        raise ServiceError("send {client: {...}, inboundIds: [...]}")
    raw_ids = body.get("inboundIds", [])
    if raw_ids is None:
        raw_ids = []
    ids = inbound_ids_of({"inboundIds": raw_ids})
    if require_inbounds and not ids:
        raise ServiceError("inboundIds must name at least one inbound")
    return body["client"], ids


def _external_link(item: Any, n: int) -> dict:
    where = f"externalLinks[{n}]"
    if not isinstance(item, dict):
        raise ServiceError(f"{where} must be an object {{kind, value, remark}}")
    kind, value, remark = item.get("kind"), item.get("value"), item.get("remark", "")
    if kind not in LINK_KINDS:
        raise ServiceError(f"{where}.kind must be 'link' or 'subscription' (got {kind!r})")
    if not isinstance(value, str) or not value.strip() or len(value) > 8192:
        raise ServiceError(f"{where}.value must be a non-empty string")
    value = value.strip()
    if kind == "link" and not _is_share_link(value):
        raise ServiceError(
            f"{where}.value must be a share link (vless://, vmess://, trojan://, ss://, ...)"
        )
    if kind == "subscription" and not _is_http_url(value):
        raise ServiceError(f"{where}.value must be an http(s) URL for kind 'subscription'")
    if remark is None:
        remark = ""
    if not isinstance(remark, str) or len(remark) > 255:
        raise ServiceError(f"{where}.remark must be a string of at most 255 characters")
    return {"kind": kind, "value": value, "remark": remark}


def _is_share_link(value: str) -> bool:
    """A known scheme followed by something, all of it printable and unbroken."""
    scheme = next((s for s in SHARE_SCHEMES if value.lower().startswith(s)), None)
    return scheme is not None and len(value) > len(scheme) and _unbroken(value)


def _is_http_url(value: str) -> bool:
    if not _unbroken(value):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:
        return False


def _unbroken(value: str) -> bool:
    """No spaces or control characters, which no URL carries unescaped."""
    return not any(c.isspace() or not c.isprintable() for c in value)
