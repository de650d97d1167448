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

Rendering state lives in the `Subscriptions` object, never in module globals, so any
process that serves subscriptions keeps its own and follows the same invalidation.

The reads run on plain DB-API connections kept for them (`ReadConnections`) rather than
in a Pony `db_session`: on SQLite the session's bookkeeping costs more than the indexed
query itself, and these reads need nothing of Pony. The panel API's link lists (by email,
by inbound) read through Pony as usual.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pony.orm import db_session

from appliance.core.config import client_in_core
from appliance.domain.client_rules import email_key
from appliance.domain.client_views import CLIENT_COLUMNS, client_view
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
from appliance.services.clients.usage import month_usage
from appliance.services.inbounds.views import INBOUND_SELECT, inbound_record, with_node_addresses
from appliance.store import DatabaseUnavailable

log = logging.getLogger(__name__)

# Bodies are a few KB each: 64 MiB holds every format of some 10,000 subscriptions.
MAX_CACHED_BYTES = 64 << 20
MAX_SUB_ID = 64
# An inbound's links are exported a page at a time: an inbound may carry 100,000 clients.
EXPORT_PAGE_DEFAULT = 500
EXPORT_PAGE_MAX = 1000
CLIENT_SELECT = ", ".join(f"c.{name}" for name in CLIENT_COLUMNS)
WIDTH = len(CLIENT_COLUMNS)
# Enough for the subscription server's reads to overlap; on a networked database each is a
# server connection, so they stay few.
READ_CONNECTIONS = 8
# Everything a subscription needs of its clients, one row per attachment (one row with a
# NULL inbound id for a client on none).
LOOKUP_SQL = (
    f"SELECT c.id, {CLIENT_SELECT}, t.up, t.down, t.enable, ci.inbound_id FROM client c "
    "LEFT JOIN client_traffic t ON t.email_key = c.email_key "
    "LEFT JOIN client_inbound ci ON ci.client_id = c.id "
    "WHERE c.sub_id = ? ORDER BY c.id, ci.inbound_id"
)
# Positions in a LOOKUP_SQL row.
EMAIL = 1 + CLIENT_COLUMNS.index("email")
ENABLE = 1 + CLIENT_COLUMNS.index("enable")
TOTAL = 1 + CLIENT_COLUMNS.index("total_bytes")
EXPIRY = 1 + CLIENT_COLUMNS.index("expiry_time")
UP, DOWN, TRAFFIC_ENABLE, INBOUND_ID = range(WIDTH + 1, WIDTH + 5)
CLIENTS_SQL = (
    f"SELECT c.id, {CLIENT_SELECT}, t.up, t.down, t.enable FROM client c "
    "LEFT JOIN client_traffic t ON t.email_key = c.email_key WHERE "
)
HOST_SELECT = "id, inbound_id, remark, address, port, security, sni, tags, enable, sort_order"


@dataclass(frozen=True)
class Usage:
    """What the active clients of one subscription have used and may use, summed."""

    upload: int
    download: int
    total: int  # bytes; 0 = unlimited (when any client is unlimited)
    expire: int  # unix seconds; 0 = unlimited (when any client has no date yet)


@dataclass(frozen=True)
class Lookup:
    """The active clients of a subscription id, as of this request, with the rows they
    were read from (a tuple of LOOKUP_SQL rows per client, in client id order), from
    which a body is rendered when none is cached."""

    sub_id: str
    client_ids: tuple[int, ...]
    title: str  # a display name when no subTitle is set: a lone client's email, or the subId
    usage: Usage
    rows: tuple[tuple[tuple, ...], ...]
    generation: int  # of the caches when the rows were read


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
        if drops_inbounds(resource):
            self.inbounds.clear()

    # ---- the hot path -------------------------------------------------------------------

    def lookup(self, sub_id: str) -> Lookup | None:
        """The active clients with this subscription id; None when there is none."""
        if not sub_id or len(sub_id) > MAX_SUB_ID:
            return None
        generation = self._generation
        now_ms = int(self.clock() * 1000)
        by_client: dict[int, list[tuple]] = {}
        for row in self.reads.rows(LOOKUP_SQL, [sub_id]):
            by_client.setdefault(row[0], []).append(row)
        active = [rows for rows in by_client.values() if _active(rows[0], now_ms)]
        if not active:
            return None
        firsts = [rows[0] for rows in active]
        return Lookup(
            sub_id,
            tuple(row[0] for row in firsts),
            firsts[0][EMAIL] if len(firsts) == 1 else sub_id,
            _usage(firsts),
            tuple(tuple(rows) for rows in active),
            generation,
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
        keys = sorted({email_key(rows[0][EMAIL]) for rows in lookup.rows})
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
            clients = self._clients("c.email_key = ?", [email_key(email)])
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
            found = self.store.rows(
                f"SELECT {INBOUND_SELECT} FROM inbound WHERE id = ?", [inbound_id]
            )
            if not found:
                raise ServiceError(f"no inbound with id {inbound_id}")
            inbound = with_node_addresses([inbound_record(found[0])], self.store.rows)[0]
            (total,) = self.store.rows(
                "SELECT COUNT(*) FROM client_inbound WHERE inbound_id = ?", [inbound_id]
            )[0]
            page_ids = [
                row[0]
                for row in self.store.rows(
                    "SELECT client_id FROM client_inbound WHERE inbound_id = ? "
                    "ORDER BY client_id LIMIT ? OFFSET ?",
                    [inbound_id, size, (page - 1) * size],
                )
            ]
            marks = ", ".join("?" * len(page_ids))
            clients = self._clients(f"c.id IN ({marks})", page_ids) if page_ids else {}
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

    def _render(self, kind: str, lookup: Lookup, address: str) -> Rendered:
        """The body of `kind` from the clients of `lookup` and the prepared inbounds they
        are on, by inbound, then client; NOT_FOUND when none is on an enabled inbound."""
        clients = [(_view(rows[0]), _inbound_ids(rows)) for rows in lookup.rows]
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
            links = [
                link
                for inbound_id, inbound, client in pairs
                for link in _rendered(prepared_links, inbound_id, inbound, client, ctx)
            ]
            return Rendered(True, _base64("\n".join(links)))
        if kind == "json":
            configs = [
                config
                for inbound_id, inbound, client in pairs
                for config in _rendered(prepared_json_configs, inbound_id, inbound, client, ctx)
            ]
            body = json.dumps(configs, ensure_ascii=False, separators=(",", ":"))
            return Rendered(True, body.encode())
        if kind == "singbox":
            outbounds = [
                outbound
                for inbound_id, inbound, client in pairs
                for outbound in _rendered(
                    prepared_singbox_outbounds, inbound_id, inbound, client, ctx
                )
            ]
            # Compact, like the JSON format: an indent would cost the pure-Python encoder.
            profile = singbox_profile(outbounds)
            body = json.dumps(profile, ensure_ascii=False, separators=(",", ":"))
            return Rendered(True, body.encode())
        proxies = [
            proxy
            for inbound_id, inbound, client in pairs
            for proxy in _rendered(prepared_clash_proxies, inbound_id, inbound, client, ctx)
        ]
        document = clash_document(proxies, self.settings.get("subRoutingRules"))
        return Rendered(True, document.encode())

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

    def _clients(self, condition: str, params: list) -> dict[int, dict]:
        """client row id -> API view, for the clients matching `condition`. Runs in the
        caller's db_session."""
        return {
            row[0]: _view(row)
            for row in self.store.rows(CLIENTS_SQL + condition + " ORDER BY c.id", params)
        }

    def _pairs(self, by_row: dict[int, dict]) -> list[tuple[dict, dict, list]]:
        """(inbound, client, enabled hosts) for every attachment of the clients in
        `by_row`, by inbound, then client. Runs in the caller's db_session."""
        marks = ", ".join("?" * len(by_row))
        rows = self.store.rows(
            f"SELECT ci.client_id, {_prefixed(INBOUND_SELECT, 'i')} FROM client_inbound ci "
            "JOIN inbound i ON i.id = ci.inbound_id "
            f"WHERE ci.client_id IN ({marks}) ORDER BY i.id, ci.client_id",
            list(by_row),
        )
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
        statement, params = hosts_query(inbound_ids)
        return hosts_by_inbound(self.store.rows(statement, params))


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
        marks = ", ".join("?" * len(inbound_ids))
        rows = self.reads.rows(
            f"SELECT {INBOUND_SELECT} FROM inbound WHERE enable = ? AND id IN ({marks})",
            [True, *inbound_ids],
        )
        if not rows:
            return {}
        hosts = hosts_by_inbound(self.reads.rows(*hosts_query([row[0] for row in rows])))
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


def hosts_query(inbound_ids: list[int]) -> tuple[str, list]:
    """The statement and parameters reading the enabled hosts of some inbounds."""
    marks = ", ".join("?" * len(inbound_ids))
    return (
        f"SELECT {HOST_SELECT} FROM host WHERE enable = ? AND inbound_id IN ({marks}) "
        "ORDER BY inbound_id, sort_order, id",
        [True, *inbound_ids],
    )


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


class ReadConnections:
    """A few plain DB-API connections (`Store.raw_connect`) for single reads outside
    Pony, each in autocommit mode so a read never holds a transaction open. At most
    READ_CONNECTIONS are in use at once; a caller beyond that waits for one.

    A networked server that restarted leaves every idle connection broken: a read that
    fails drops them all and is tried once more on a new connection, so the first
    request after the restart is served rather than failed."""

    def __init__(self, store, size: int = READ_CONNECTIONS):
        self.store = store
        self._idle: list = []
        self._slots = threading.BoundedSemaphore(size)  # cooperative once gevent patched it

    def rows(self, statement: str, params: list) -> list[tuple]:
        if self.store.dialect != "sqlite":
            statement = statement.replace("?", "%s")
        with self._slots:
            try:
                return self._read(statement, params)
            except Exception:
                log.warning("a subscription read failed; reconnecting", exc_info=True)
                self.close()
                return self._read(statement, params)

    def _read(self, statement: str, params: list) -> list[tuple]:
        connection = self._idle.pop() if self._idle else self._connect()
        try:
            cursor = connection.cursor()
            cursor.execute(statement, params)
            rows = list(cursor.fetchall())
            cursor.close()
        except Exception:
            connection.close()
            raise
        self._idle.append(connection)
        return rows

    def _connect(self):
        connection = self.store.raw_connect()
        if self.store.dialect == "postgres":
            connection.autocommit = True
        elif self.store.dialect == "mysql":
            connection.autocommit(True)
        return connection

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


def _view(row: tuple) -> dict:
    """A client's API view from a row of CLIENTS_SQL or LOOKUP_SQL."""
    up, down, traffic_enable = row[UP : TRAFFIC_ENABLE + 1]
    return client_view(
        row[1 : WIDTH + 1],
        [],
        (up or 0, down or 0, True if traffic_enable is None else traffic_enable),
    )


def _inbound_ids(rows: list[tuple]) -> tuple[int, ...]:
    """The inbounds of one client from its LOOKUP_SQL rows (NULL: attached to none)."""
    return tuple(row[INBOUND_ID] for row in rows if row[INBOUND_ID] is not None)


def _active(row: tuple, now_ms: int) -> bool:
    """Whether a client of a LOOKUP_SQL row is served: enabled, not cut off by the sweep,
    quota left, not expired. An expiry that starts on first use (negative) has not passed."""
    enable, total, expiry = row[ENABLE], row[TOTAL], row[EXPIRY]
    up, down, traffic_enable = row[UP], row[DOWN], row[TRAFFIC_ENABLE]
    if not enable or traffic_enable == 0:  # no traffic row (None) counts as enabled
        return False
    if total > 0 and (up or 0) + (down or 0) >= total:
        return False
    return not 0 < expiry <= now_ms


def _usage(rows: list[tuple]) -> Usage:
    """Counters are summed; a limit is unlimited (0) as soon as one client's is. The
    expiry is the latest date, since the subscription serves something until then; an
    expiry that starts on first use has no date yet and counts as none."""
    totals = [row[TOTAL] for row in rows]
    expiries = [row[EXPIRY] for row in rows]
    return Usage(
        upload=sum(row[UP] or 0 for row in rows),
        download=sum(row[DOWN] or 0 for row in rows),
        total=0 if 0 in totals else sum(totals),
        expire=0 if any(e <= 0 for e in expiries) else max(expiries) // 1000,
    )


def _prefixed(columns: str, alias: str) -> str:
    return ", ".join(f"{alias}.{column.strip()}" for column in columns.split(","))


def _base64(text: str) -> bytes:
    return base64.b64encode(text.encode())
