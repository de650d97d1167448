"""Subscriptions: what one subscription id serves, read in one query and rendered once.

Client apps poll their subscription all day, and each app asks every few hours, so most
requests find no rendered body: the path without one is the path that must be cheap.
Each request makes a single indexed read (`client.sub_id`, joined with the traffic row
and the client's attachments) that yields everything that belongs to its clients: which
are active (enabled, quota left, not expired), their usage for the
`Subscription-Userinfo` header (always fresh, never cached), their secrets and the
inbounds they are on.

What a body needs of an inbound and its hosts changes rarely and is the same for every
client on it, so it is kept apart (`InboundCatalog`): each enabled inbound, with its
enabled hosts, is read on the first request that needs it and turned into a
`PreparedInbound` (settings parsed, targets and security resolved, the REALITY public key
derived) that serves every client on it until the inbound or a host changes. A request
for a body not rendered yet therefore costs its one query, the renderers' own work for
its clients, and nothing else.

Bodies (links, JSON configs, the Mihomo document, the sing-box profile) are cached under
(format, subId, address, the ids of the active clients): one URL serves every format, so
the format is part of the key. The ids are in the key so that a client the
traffic tick depletes, or whose expiry passes, changes the key by itself: no tick has to
drop anything. Every change of clients, inbounds, hosts or settings empties the body
cache (`invalidate`, called from `Panel.changed`); a change of inbounds or hosts (or one
of unknown kind) also empties the catalog. A body or an inbound read before such a change
is not stored, since it may hold the data from before it.

An admin's template for the sing-box, Mihomo or Xray JSON format (sub_templates) is
rendered in place of the built-in document from the same proxies, compiled once and
kept in `templates` until the settings change; a template that fails for one
subscription gets it the built-in format, so no app is left without a configuration.

Rendering state lives in the `Subscriptions` object, never in module globals, so any
process that serves subscriptions keeps its own and follows the same invalidation.

The reads run on plain DB-API connections kept for them (`ReadConnections`, in
store/subscription_reads.py with the statements) rather than in a Pony `db_session`: on
SQLite the session's bookkeeping costs more than the indexed query itself, and these
reads need nothing of Pony. The panel API's link lists (by email, by inbound) read
through Pony as usual.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pony.orm import db_session

from appliance.core.config import client_in_core
from appliance.domain.client_rules import email_key
from appliance.domain.clients import ClientRecord, api_view, served
from appliance.domain.parse import parse_id, parse_int
from appliance.errors import ServiceError
from appliance.links import (
    LinkContext,
    PreparedInbound,
    clash_document,
    client_links,
    prepare_inbound,
    prepared_clash_proxies,
    prepared_json_configs,
    prepared_links,
    prepared_singbox_outbounds,
    singbox_profile,
)
from appliance.links.templates import clash_values, singbox_values, xray_values
from appliance.services.clients.sub_templates import TEMPLATE_OF, TemplateCache, client_values
from appliance.services.clients.usage import month_usage
from appliance.services.inbounds.views import inbound_record, with_node_addresses
from appliance.store import DatabaseUnavailable, client_queries, inbound_rows, subscription_reads
from appliance.store.subscription_reads import ReadConnections

log = logging.getLogger(__name__)

# Bodies are a few KB each: 64 MiB holds every format of some 10,000 subscriptions.
MAX_CACHED_BYTES = 64 << 20
MAX_SUB_ID = 64
# An inbound's links are exported a page at a time: an inbound may carry 100,000 clients.
EXPORT_PAGE_DEFAULT = 500
EXPORT_PAGE_MAX = 1000


@dataclass(frozen=True)
class Usage:
    """What the active clients of one subscription have used and may use, summed."""

    upload: int
    download: int
    total: int  # bytes; 0 = unlimited (when any client is unlimited)
    expire: int  # unix seconds; 0 = unlimited (when any client has no date yet)


@dataclass(frozen=True)
class Lookup:
    """The active clients of a subscription id, as of this request, each with the ids of
    the inbounds it is on (in client id order), from which a body is rendered when none
    is cached."""

    sub_id: str
    client_ids: tuple[int, ...]
    title: str  # a display name when no subTitle is set: a lone client's email, or the subId
    usage: Usage
    clients: tuple[tuple[ClientRecord, tuple[int, ...]], ...]
    generation: int  # of the caches when the clients were read
    device_slot: int | None = None  # the requesting device's, None when it holds none


@dataclass(frozen=True)
class Rendered:
    """A rendered body; `found` is false when no active client sits on an enabled
    inbound (the server answers 404)."""

    found: bool
    body: bytes = b""

    @property
    def links(self) -> list[str]:
        """The share links of a base64 body (for the HTML page and the panel API)."""
        text = base64.b64decode(self.body).decode()
        return text.split("\n") if text else []

    @property
    def size(self) -> int:
        """Roughly the memory it holds, for the cache's budget."""
        return 100 + len(self.body)


NOT_FOUND = Rendered(False)
# `_render`'s "the stored template of the format".
KEEP = object()


def drops_inbounds(resource: str) -> bool:
    """Whether a change of `resource` reaches what is kept of inbounds: every change does
    but one of clients or settings, which no inbound or host depends on ("" is any)."""
    return resource not in ("clients", "settings")


class Subscriptions:
    def __init__(self, store, settings, clock: Callable[[], float] = time.time):
        self.store = store
        self.settings = settings
        self.clock = clock
        self.reads = ReadConnections(store)
        self.inbounds = InboundCatalog(self.reads)
        self.templates = TemplateCache(settings)
        self._cache: dict[tuple, Rendered] = {}
        self._cached_bytes = 0
        self._generation = 0

    def invalidate(self, resource: str = "") -> None:
        """Drop every rendered body; call after any change to clients, inbounds, hosts
        or settings, naming the `resource` changed. What is kept of inbounds goes too
        when the change reaches it (`drops_inbounds`)."""
        self._generation += 1
        self._cache = {}
        self._cached_bytes = 0
        if resource in ("settings", ""):
            self.templates.clear()
        if drops_inbounds(resource):
            self.inbounds.clear()

    # ---- the hot path -------------------------------------------------------------------

    def lookup(self, sub_id: str, hwid: str = "") -> Lookup | None:
        """The active clients with this subscription id, and the slot device `hwid` holds
        on it; None when there is none."""
        if not sub_id or len(sub_id) > MAX_SUB_ID:
            return None
        generation = self._generation
        now_ms = int(self.clock() * 1000)
        found, slot = subscription_reads.subscription_clients(self.reads.rows, sub_id, hwid)
        active = [(client, inbound_ids) for client, inbound_ids in found if served(client, now_ms)]
        if not active:
            return None
        clients = [client for client, _ in active]
        return Lookup(
            sub_id,
            tuple(client.row_id for client in clients),
            clients[0].email if len(clients) == 1 else sub_id,
            _usage(clients),
            tuple(active),
            generation,
            slot,
        )

    def close(self) -> None:
        self.reads.close()

    def unavailable(self, exc: BaseException) -> DatabaseUnavailable | None:
        """`exc` as "the database is unavailable for now" (the subscription server answers
        503 and client apps ask again later); None for any other failure."""
        return self.store.unavailable(exc)

    def month(self, lookup: Lookup) -> dict:
        """This month's usage, day by day, of the subscription's own clients (its page and
        `?format=info`)."""
        keys = sorted({email_key(client.email) for client, _ in lookup.clients})
        return month_usage(self.reads.rows, keys, int(self.clock()))

    def render(self, kind: str, lookup: Lookup, address: str) -> Rendered:
        """The body of format `kind` (links, json, yaml, singbox) for `lookup`, whose links point
        at `address` unless a host says otherwise; cached, see the module docstring."""
        key = (kind, lookup.sub_id, address, lookup.client_ids)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        rendered = self._render(kind, lookup, address)
        if lookup.generation == self._generation:
            self._store(key, rendered)
        return rendered

    def _store(self, key: tuple, rendered: Rendered) -> None:
        """Keep `rendered`, dropping the oldest bodies (dicts keep insertion order)
        while the cache holds more than MAX_CACHED_BYTES."""
        replaced = self._cache.pop(key, None)  # two requests may render the same body
        if replaced is not None:
            self._cached_bytes -= replaced.size
        self._cache[key] = rendered
        self._cached_bytes += rendered.size
        while self._cached_bytes > MAX_CACHED_BYTES and len(self._cache) > 1:
            oldest = next(iter(self._cache))
            self._cached_bytes -= self._cache.pop(oldest).size

    # ---- the panel API ------------------------------------------------------------------

    def sub_links(self, sub_id: str, address: str) -> list[str]:
        """The share links a subscription id serves; [] when it serves nothing."""
        lookup = self.lookup(sub_id) if isinstance(sub_id, str) else None
        if lookup is None:
            return []
        return self.render("links", lookup, address).links

    def email_links(self, email: str, address: str) -> list[str]:
        """The share links of one client on every inbound it is attached to, whatever
        the client's or the inbound's state: what an admin hands out; [] for an unknown
        email."""
        if not isinstance(email, str) or not email:
            return []
        with db_session:
            clients = _views(subscription_reads.clients_of_key(self.store, email_key(email)))
            pairs = self._pairs(clients) if clients else []
        ctx = self._context(address)
        return [
            link
            for inbound, client, hosts in pairs
            for link in self._links(inbound, client, hosts, ctx)
        ]

    def inbound_links(self, inbound_id, query: dict, address: str) -> dict:
        """One page (`page`, `pageSize` of `query`) of the clients attached to an inbound,
        in the order they were created, each with its share links on that inbound only:
        `{items: [{email, subId, links}], total, page, pageSize}`."""
        inbound_id = parse_id(inbound_id, "inbound id")
        page = parse_int(query.get("page"), "page", 1, 10**9, 1)
        size = parse_int(query.get("pageSize"), "pageSize", 1, EXPORT_PAGE_MAX, EXPORT_PAGE_DEFAULT)
        with db_session:
            found = inbound_rows.inbound_row(self.store, inbound_id)
            if found is None:
                raise ServiceError(f"no inbound with id {inbound_id}")
            inbound = with_node_addresses([inbound_record(found)], self.store.rows)[0]
            total = subscription_reads.attached_count(self.store, inbound_id)
            page_ids = subscription_reads.attached_page(
                self.store, inbound_id, size, (page - 1) * size
            )
            clients = (
                _views(client_queries.clients_of_ids(self.store, page_ids)) if page_ids else {}
            )
            hosts = self._hosts([inbound_id]).get(inbound_id, [])
        ctx = self._context(address)
        return {
            "items": [
                {
                    "email": client["email"],
                    "subId": client["subId"],
                    "links": self._links(inbound, client, hosts, ctx),
                }
                for client in clients.values()
            ],
            "total": total,
            "page": page,
            "pageSize": size,
        }

    # ---- rendering ----------------------------------------------------------------------

    def _render(
        self, kind: str, lookup: Lookup, address: str, template=KEEP, strict: bool = False
    ) -> Rendered:
        """The body of `kind` from the clients of `lookup` and the prepared inbounds they
        are on, by inbound, then client; NOT_FOUND when none is on an enabled inbound.
        `template`: the compiled template to render it by (None: the built-in format);
        by default the stored one of its format. A template that fails for this
        subscription gets the built-in format, or with `strict` raises ServiceError."""
        clients = [(api_view(client, []), inbound_ids) for client, inbound_ids in lookup.clients]
        wanted = sorted({inbound_id for _, ids in clients for inbound_id in ids} - self._unfit())
        prepared = self.inbounds.enabled(wanted)
        pairs = [
            (inbound_id, prepared[inbound_id], client)
            for inbound_id in wanted
            if inbound_id in prepared
            for client, ids in clients
            if inbound_id in ids
        ]
        if not pairs:
            return NOT_FOUND
        ctx = self._context(address)
        if kind == "links":
            return Rendered(True, _base64("\n".join(_all(prepared_links, pairs, ctx))))
        if template is KEEP:
            template = self.templates.get(TEMPLATE_OF[kind])
        if template is not None:
            body = self._templated(kind, template, lookup, pairs, ctx, strict)
            if body is not None:
                return Rendered(True, body.encode())
        if kind == "json":
            configs = _all(prepared_json_configs, pairs, ctx)
            body = json.dumps(configs, ensure_ascii=False, separators=(",", ":"))
            return Rendered(True, body.encode())
        if kind == "singbox":
            # Compact, like the JSON format: an indent would cost the pure-Python encoder.
            profile = singbox_profile(_all(prepared_singbox_outbounds, pairs, ctx))
            body = json.dumps(profile, ensure_ascii=False, separators=(",", ":"))
            return Rendered(True, body.encode())
        proxies = _all(prepared_clash_proxies, pairs, ctx)
        document = clash_document(proxies, self.settings.get("subRoutingRules"))
        return Rendered(True, document.encode())

    def _templated(
        self, kind: str, template, lookup: Lookup, pairs, ctx, strict: bool
    ) -> str | None:
        """The body by `template`; None (the built-in format is served) when it fails
        for this subscription, which is logged: the app keeps getting a configuration."""
        values = self.common_values(lookup, template.uses, pairs, ctx)
        if kind == "json":
            values.update(xray_values(_all(prepared_json_configs, pairs, ctx)))
        elif kind == "singbox":
            values.update(singbox_values(_all(prepared_singbox_outbounds, pairs, ctx)))
        else:
            proxies = _all(prepared_clash_proxies, pairs, ctx)
            values.update(clash_values(proxies, self.settings.get("subRoutingRules")))
        try:
            return template.render(values)
        except ServiceError as exc:
            if strict:
                raise
            log.warning("subscription %s: %s; served the built-in format", lookup.sub_id, exc.msg)
            return None

    def common_values(self, lookup: Lookup, uses: frozenset[str], pairs=None, ctx=None) -> dict:
        """What every template is given: the subscription's title and usage, its clients'
        public fields, and (only when the template reads them) its share links."""
        usage = lookup.usage
        clients = client_values(client for client, _ in lookup.clients)
        values = {
            "subscription": {
                "title": self.settings.get("subTitle") or lookup.title,
                "upload": usage.upload,
                "download": usage.download,
                "total": usage.total,
                "expire": usage.expire,
            },
            "client": clients[0],
            "clients": clients,
        }
        if "links" in uses and pairs is not None:
            values["links"] = _all(prepared_links, pairs, ctx)
        return values

    def page_template(self):
        """The admin's compiled page template, None for the built-in page."""
        return self.templates.get("page")

    def preview_lookup(self, email: str) -> Lookup:
        """The subscription of client `email` as a request would find it now."""
        with db_session:
            found = subscription_reads.clients_of_key(self.store, email_key(email))
        if not found:
            raise ServiceError(f"no client with email '{email}'")
        lookup = self.lookup(found[0].sub_id)
        if lookup is None:
            raise ServiceError(
                f"the subscription of '{email}' serves nothing now: its clients are "
                "disabled, out of quota or expired"
            )
        return lookup

    def preview(self, kind: str, lookup: Lookup, address: str, template) -> str:
        """The body of template format `kind` ("links": the share links, one a line) for
        `lookup` by `template` (None: the built-in format), rendered now, not cached; a
        template that fails raises ServiceError."""
        sub_kind = {"clash": "yaml"}.get(kind, kind)
        rendered = self._render(sub_kind, lookup, address, template, strict=True)
        if not rendered.found:
            raise ServiceError(f"the subscription {lookup.sub_id} is on no enabled inbound")
        if kind == "links":
            return "\n".join(rendered.links)
        return rendered.body.decode()

    def _unfit(self) -> frozenset[int]:
        """The inbounds the running core cannot run as stored (a feature it lacks, see
        CoreService._fit): their links would advertise what the core does not serve."""
        ids = self.settings.internal("coreUnfitInbounds").split(",")
        return frozenset(int(i) for i in ids if i.isdigit())

    def _links(self, inbound: dict, client: dict, hosts: list[dict], ctx) -> list[str]:
        if inbound["id"] in self._unfit():
            return []
        # An MTProto secret exists only while its client is served: the proxy holds no
        # other, so a link would not work (every other protocol's links are handed out
        # whatever the state, to be kept for when the client is enabled again).
        if inbound["protocol"] == "mtproto" and not client_in_core(
            client, int(self.clock() * 1000)
        ):
            return []
        return self._guarded(client_links, inbound, client, hosts, ctx)

    def _guarded(self, renderer, inbound: dict, client: dict, hosts: list[dict], ctx) -> list:
        """One inbound that cannot be rendered (a stored shape the renderer does not
        expect) costs its own entries, not the whole subscription."""
        try:
            return renderer(inbound, client, hosts, ctx)
        except Exception:
            log.exception(
                "cannot render %s of client %s on inbound %s",
                renderer.__name__,
                client["email"],
                inbound["id"],
            )
            return []

    def _context(self, address: str) -> LinkContext:
        return LinkContext(address=address, remark_model=self.settings.get("remarkModel"))

    def _pairs(self, by_row: dict[int, dict]) -> list[tuple[dict, dict, list]]:
        """(inbound, client, enabled hosts) for every attachment of the clients in
        `by_row`, by inbound, then client. Runs in the caller's db_session."""
        rows = subscription_reads.attached_inbound_rows(self.store, list(by_row))
        if not rows:
            return []
        inbounds: dict[int, dict] = {}
        for row in rows:
            if row[1] not in inbounds:
                inbounds[row[1]] = inbound_record(row[1:])
        with_node_addresses(list(inbounds.values()), self.store.rows)
        hosts = self._hosts(list(inbounds))
        return [(inbounds[row[1]], by_row[row[0]], hosts.get(row[1], [])) for row in rows]

    def _hosts(self, inbound_ids: list[int]) -> dict[int, list[dict]]:
        """Enabled hosts by inbound; runs in the caller's db_session."""
        return hosts_by_inbound(subscription_reads.enabled_host_rows(self.store.rows, inbound_ids))


class InboundCatalog:
    """The enabled inbounds subscriptions are rendered from, each prepared once with its
    enabled hosts (`PreparedInbound`; None for a protocol without links, or an inbound
    whose stored shape the renderers cannot read), read when first needed and kept until
    `clear`. Inbounds that are disabled or gone are remembered as such too, so a request
    reads the inbound table only for inbounds nobody asked for since the last change."""

    def __init__(self, reads: ReadConnections):
        self.reads = reads
        self._prepared: dict[int, PreparedInbound | None] = {}
        self._disabled: set[int] = set()
        self._generation = 0

    def clear(self) -> None:
        self._generation += 1
        self._prepared = {}
        self._disabled = set()

    def enabled(self, inbound_ids: list[int]) -> dict[int, PreparedInbound | None]:
        """The enabled ones of `inbound_ids`, prepared. What is read here is kept only
        when no `clear` came while it was read (a networked database's read yields), so
        a change can never be undone by a read that began before it."""
        prepared = self._prepared
        missing = [i for i in inbound_ids if i not in prepared and i not in self._disabled]
        if missing:
            generation = self._generation
            loaded = self._load(missing)
            if generation == self._generation:
                self._prepared.update(loaded)
                self._disabled.update(i for i in missing if i not in loaded)
            prepared = {**prepared, **loaded}
        return {i: prepared[i] for i in inbound_ids if i in prepared}

    def _load(self, inbound_ids: list[int]) -> dict[int, PreparedInbound | None]:
        rows = subscription_reads.enabled_inbound_rows(self.reads.rows, inbound_ids)
        if not rows:
            return {}
        hosts = hosts_by_inbound(
            subscription_reads.enabled_host_rows(self.reads.rows, [row[0] for row in rows])
        )
        records = with_node_addresses([inbound_record(row) for row in rows], self.reads.rows)
        return {r["id"]: _prepared(r, hosts.get(r["id"], [])) for r in records}


def _prepared(record: dict, hosts: list[dict]) -> PreparedInbound | None:
    """One inbound that cannot be prepared (a stored shape the renderers do not expect)
    costs its own links, not every subscription it is in."""
    try:
        return prepare_inbound(record, hosts)
    except Exception:
        log.exception("cannot render the links of inbound %s", record["id"])
        return None


def _all(renderer, pairs, ctx: LinkContext) -> list:
    """What `renderer` gives for every (inbound id, prepared inbound, client) of `pairs`."""
    return [
        entry
        for inbound_id, inbound, client in pairs
        for entry in _rendered(renderer, inbound_id, inbound, client, ctx)
    ]


def _rendered(renderer, inbound_id: int, prepared, client: dict, ctx: LinkContext) -> list:
    """One client that cannot be rendered on an inbound costs its own entries there."""
    try:
        return renderer(prepared, client, ctx)
    except Exception:
        log.exception(
            "cannot render %s of client %s on inbound %s",
            renderer.__name__,
            client["email"],
            inbound_id,
        )
        return []


def hosts_by_inbound(rows: list[tuple]) -> dict[int, list[dict]]:
    """Host records by inbound id, in order, from rows of `hosts_query`."""
    hosts: dict[int, list[dict]] = {}
    for host_id, inbound_id, remark, address, port, security, sni, tags, enable, order in rows:
        hosts.setdefault(inbound_id, []).append(
            {
                "id": host_id,
                "inboundId": inbound_id,
                "remark": remark,
                "address": address,
                "port": port,
                "security": security,
                "sni": sni,
                "tags": json.loads(tags),
                "enable": bool(enable),
                "sortOrder": order,
            }
        )
    return hosts


def _views(clients: list[ClientRecord]) -> dict[int, dict]:
    """client row id -> API view (without inboundIds)."""
    return {client.row_id: api_view(client, []) for client in clients}


def _usage(clients: list[ClientRecord]) -> Usage:
    """Counters are summed; a limit is unlimited (0) as soon as one client's is. The
    expiry is the latest date, since the subscription serves something until then; an
    expiry that starts on first use has no date yet and counts as none."""
    totals = [client.total_bytes for client in clients]
    expiries = [client.expiry_time for client in clients]
    return Usage(
        upload=sum(client.up for client in clients),
        download=sum(client.down for client in clients),
        total=0 if 0 in totals else sum(totals),
        expire=0 if any(e <= 0 for e in expiries) else max(expiries) // 1000,
    )


def _base64(text: str) -> bytes:
    return base64.b64encode(text.encode())
