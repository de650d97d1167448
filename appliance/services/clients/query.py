"""Reads over many clients, in SQL: the paged list, its summary, full lists, export, and
the client parts of inbound records.

At 100,000 clients nothing here loads rows as entities or filters in Python: filters,
sorting, paging and counts are SQL over `client` joined with `client_traffic`, using the
indexes the migrations create. The summary (which lists every depleted, expiring and
disabled email) is kept up to date by `ClientSummary` (summary.py) rather than
recomputed, and a page leaves it out for a caller that already has its version.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pony.orm import db_session

from appliance.domain import inbound_rules
from appliance.domain.client_rules import email_key
from appliance.domain.clients import ClientRecord, api_view, core_view
from appliance.domain.parse import parse_id, parse_int
from appliance.errors import ServiceError
from appliance.runtime.jobs import Pace, breathe
from appliance.services.clients.groups import labels_of
from appliance.services.clients.summary import ClientSummary, Summary
from appliance.store import client_queries, device_sql
from appliance.store.client_queries import ORDERS, SORTS, Conditions
from appliance.store.client_rules_sql import depleted_sql, expiring_sql

FILTERS = ("online", "active", "deactive", "depleted", "expiring")
PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX = 25, 200
VERSION_MAX = 64  # characters of a summaryVersion a caller may send back
# Counts of conditions kept between pages, dropped when the summary changes; at most this
# many (each filtered page judged at its own moment is a key of its own).
COUNTS_KEPT = 256
# Clients read (and, for an export, encoded) per turn of the hub: 250 are a few
# milliseconds each way, as long as any other request waits behind an export.
EXPORT_BATCH = 250
# Clients of one inbound read per query by the config build: a few milliseconds each.
CORE_BATCH = 500
# A page is read by walking the sort order and testing each row, stopping at the page's
# end, when matches are dense enough that the walk meets them soon: when the rows up to
# the page's end are under a WALK_FACTOR-th of the matches. Rarer matches (a search
# for a name) are cheaper to find in one scan and sort.
WALK_FACTOR = 4
TRAFFIC_FILTERS = ("active", "depleted", "expiring")


class ClientQuery:
    def __init__(self, store, settings, presence, clock=time.time):
        self.store = store
        self.settings = settings
        self.presence = presence
        self.clock = clock
        self._counts: dict[tuple, int] = {}
        self._counts_version = ""
        self.book = ClientSummary(store, settings, presence, clock)

    def invalidate(self) -> None:
        """After a committed change to clients, their traffic, their inbounds or the
        settings, in the greenlet that made it: the summary follows the clients its writes
        touched, and counts kept between pages are dropped."""
        self._counts = {}
        self.store.client_writes.commit()
        self.book.wake()

    # ---- conditions ------------------------------------------------------------------

    def now_ms(self) -> int:
        """This moment on the query's clock, in ms: what its conditions are judged at."""
        return self._moment(None)

    def _moment(self, now: int | None) -> int:
        return int(self.clock() * 1000) if now is None else now

    def _limits(self, now: int) -> tuple[int, int]:
        """The expiring horizon (ms) at `now` and the quota margin (bytes) of the
        settings: within those a client is "expiring"."""
        horizon = now + self.settings.get("expireDiff") * 86_400_000
        return horizon, self.settings.get("trafficDiff") * 1024**3

    def depleted_sql(self, now: int | None = None) -> tuple[str, list]:
        """The condition "quota used up or expiry passed" at `now` (ms) or at this
        moment, for the reads of other services over clients (`client_rules_sql`)."""
        return depleted_sql(self._moment(now))

    def expiring_sql(self, now: int | None = None) -> tuple[str, list]:
        """Enabled, not yet depleted, and within expireDiff days or trafficDiff GB of it."""
        now = self._moment(now)
        return expiring_sql(now, *self._limits(now))

    def add_filter(self, conditions: Conditions, name: str) -> None:
        """The status filter `name` (one of FILTERS), judged at this moment."""
        if name == "online":
            conditions.online(sorted(self.presence.online()))
        elif name == "deactive":
            conditions.deactive()
        elif name == "depleted":
            conditions.depleted(self._moment(None))
        elif name == "active":
            conditions.active(self._moment(None))
        else:
            now = self._moment(None)
            conditions.expiring(now, *self._limits(now))

    # ---- paged list ----------------------------------------------------------------------

    def paged(self, query: dict) -> dict:
        """A page with its summary (and the summary's version)."""
        result, summary = self._paged(query)
        return {**result, "summary": summary.as_dict()}

    def paged_json(self, query: dict) -> str:
        """`paged` as JSON text. The summary lists every depleted, expiring and disabled
        email, over a megabyte at 100,000 clients: its text is made once per version,
        and left out when the caller sends the version it has (`summaryVersion`)."""
        known = query.get("summaryVersion") or ""
        if not isinstance(known, str) or len(known) > VERSION_MAX:
            raise ServiceError(
                f"summaryVersion must be the summaryVersion of an earlier page "
                f"(at most {VERSION_MAX} characters)"
            )
        result, summary = self._paged(query)
        head = json.dumps(result, ensure_ascii=False)
        if known == summary.version:
            return head
        return f'{head[:-1]}, "summary": {summary.text()}}}'

    def _paged(self, query: dict) -> tuple[dict, Summary]:
        page = parse_int(query.get("page"), "page", 1, 10**9, 1)
        size = parse_int(query.get("pageSize"), "pageSize", 1, PAGE_SIZE_MAX, PAGE_SIZE_DEFAULT)
        with db_session:  # a group's labels are read from the database
            conditions = self._conditions(query)
        sort = query.get("sort") or "email"
        if sort not in SORTS:
            raise ServiceError(f"sort must be one of {', '.join(SORTS)} (got '{sort}')")
        order = query.get("order") or "ascend"
        if order not in ORDERS:
            raise ServiceError(f"order must be ascend or descend (got '{order}')")
        summary = self.summary()
        if summary.version != self._counts_version or len(self._counts) >= COUNTS_KEPT:
            self._counts, self._counts_version = {}, summary.version
        with db_session:
            filtered = self._known_count(query, conditions, summary)
            source = client_queries.page_source(
                sort, order, query.get("filter") in TRAFFIC_FILTERS, self.store.dialect
            )
            offset = (page - 1) * size
            if filtered is None or (conditions.where and (offset + size) * WALK_FACTOR > filtered):
                matches = client_queries.matching_ids(self.store, conditions, source)
                filtered, page_ids = len(matches), matches[offset : offset + size]
                self._counts[conditions.key] = filtered
            else:
                page_ids = client_queries.page_ids(self.store, conditions, source, size, offset)
            items = self._slim_rows(page_ids)
        result = {
            "items": items,
            "total": summary.total,
            "filtered": filtered,
            "page": page,
            "pageSize": size,
            "summaryVersion": summary.version,
        }
        return result, summary

    def _known_count(self, query: dict, conditions: Conditions, summary: Summary) -> int | None:
        """How many clients match, when that is known without a scan of the clients: no
        condition, one status bucket alone (the summary's lists), one protocol or one
        inbound alone (counted from its attachments), or conditions counted earlier
        since the summary last changed."""
        if not conditions.where:
            return summary.total
        bucket = query.get("filter") or ""
        if len(conditions.where) == 1 and bucket:
            return summary.active if bucket == "active" else summary.count(bucket)
        key = conditions.key
        if key not in self._counts:
            counted = client_queries.attached_count(self.store, conditions)
            if counted is not None:
                self._counts[key] = counted
        return self._counts.get(key)

    def _slim_rows(self, client_ids: list[int]) -> list[dict]:
        """The slim rows of a page, in the order of `client_ids`."""
        if not client_ids:
            return []
        by_id = {c.row_id: c for c in client_queries.clients_of_ids(self.store, client_ids)}
        attachments = client_queries.attachments(self.store, client_ids)
        devices = device_sql.device_counts(
            self.store.rows, sorted({client.sub_id for client in by_id.values()})
        )
        return [
            {
                **slim_view(by_id[client_id], attachments.get(client_id, [])),
                "devices": devices.get(by_id[client_id].sub_id, 0),
            }
            for client_id in client_ids
            if client_id in by_id
        ]

    def _conditions(self, query: dict) -> Conditions:
        conditions = Conditions(dialect=self.store.dialect)
        search = query.get("search") or ""
        if not isinstance(search, str) or len(search) > 255:
            raise ServiceError("search must be a string of at most 255 characters")
        if search.strip():
            conditions.search(email_key(" ".join(search.split())), search.strip()[:128])
        name = query.get("filter") or ""
        if name:
            if name not in FILTERS:
                raise ServiceError(f"filter must be one of {', '.join(FILTERS)} (got '{name}')")
            self.add_filter(conditions, name)
        protocol = query.get("protocol") or ""
        if protocol:
            if protocol not in inbound_rules.CLIENT_PROTOCOLS:
                raise ServiceError(
                    f"protocol must be one of {', '.join(sorted(inbound_rules.CLIENT_PROTOCOLS))}"
                    f" (got '{protocol}')"
                )
            conditions.protocol(protocol)
        inbound = query.get("inboundId") or ""
        if inbound:
            conditions.inbound(parse_id(inbound, "inboundId"))
        group = query.get("group") or ""
        if group:
            if not isinstance(group, str) or len(group) > 255:
                raise ServiceError("group must be a string of at most 255 characters")
            conditions.groups(labels_of(self.store, group.strip()) or [group.strip()])
        return conditions

    def summary(self) -> Summary:
        """Counts and the emails in each bucket, over every client, as of now."""
        return self.book.current()

    @db_session
    def nearing_limits(self) -> list[dict]:
        """The expiring clients (`expiring_sql`), each with what it nears: `quota`
        (trafficDiff GB or less left) and `expiry` (expireDiff days or less away)."""
        now = self._moment(None)
        horizon, margin = self._limits(now)
        rows = client_queries.expiring_rows(self.store, now, horizon, margin)
        return [
            {
                "email": email,
                "key": key,
                "total": total,
                "used": used,
                "expiryTime": expiry,
                "quota": total > 0 and total - used <= margin,
                "expiry": 0 < expiry <= horizon,
            }
            for email, key, total, used, expiry in rows
        ]

    # ---- whole lists -----------------------------------------------------------------------

    def attachments(self, client_ids: list[int] | None = None) -> dict[int, list[int]]:
        """client id -> sorted inbound ids, for the given clients or for all."""
        return client_queries.attachments(self.store, client_ids)

    @db_session
    def list_all(self) -> list[dict]:
        return [view for batch in self._batches() for view in batch]

    def export_json(self) -> Iterator[str]:
        """Every client as `{client, inboundIds}` (the shape import and bulkCreate take),
        as pieces of one JSON array, a piece per batch. Read and encoded a batch at a
        time: at 100,000 clients the whole list as dicts would cost the panel hundreds
        of megabytes."""
        separator = "["
        for batch in self._batches():
            items = []
            for view in batch:
                inbound_ids = view.pop("inboundIds")
                items.append({"client": view, "inboundIds": inbound_ids})
            breathe()  # reading a batch and encoding it are each a few milliseconds
            yield separator + json.dumps(items, ensure_ascii=False)[1:-1]
            separator = ", "
        yield "[]" if separator == "[" else "]"

    def _batches(self) -> Iterator[list[dict]]:
        """Every client's API view, in id order, `EXPORT_BATCH` at a time, each batch in
        a database session of its own."""
        last = 0
        while True:
            if last:
                # 100,000 clients are a second or more of reading and encoding: a turn
                # for every other request between batches, not one long wait for all.
                breathe()
            with db_session:
                clients = client_queries.clients_after(self.store, last, EXPORT_BATCH)
                if not clients:
                    return
                attachments = self.attachments([client.row_id for client in clients])
            last = clients[-1].row_id
            yield [api_view(client, attachments.get(client.row_id, [])) for client in clients]

    @db_session
    def online_emails(self) -> list[str]:
        """Emails online here or on any node, each once."""
        return self.emails_of(self.presence.online())

    @db_session
    def emails_of(self, keys) -> list[str]:
        """The emails of the clients of `keys`, sorted; keys of no client are left out."""
        return sorted(email for _, email in client_queries.emails_of(self.store, keys))

    @db_session
    def reverse_tags(self) -> list[str]:
        """Reverse tags clients carry, for routing rules in the core template."""
        return client_queries.reverse_tags(self.store)

    @db_session
    def ips_by_email(self) -> dict[str, list[dict]]:
        result: dict[str, list[dict]] = {}
        for email, ip, seen in client_queries.ips_by_email(self.store):
            result.setdefault(email, []).append({"ip": ip, "timestamp": seen})
        return result

    @db_session
    def last_online(self) -> dict[str, int]:
        """email -> unix seconds of the last traffic seen."""
        return {email: last // 1000 for email, last in client_queries.last_online(self.store)}

    def core_clients(self, inbound_id: int) -> CoreClients:
        """The client views of one inbound as the config builder reads them, read anew
        each time they are iterated (see `CoreClients`)."""
        return CoreClients(self, inbound_id)

    def core_batches(self, inbound_id: int) -> Iterator[dict]:
        """The views behind `CoreClients`, with only the fields the builder reads: read
        CORE_BATCH at a time in client order, each batch a walk of the attachment index
        (migration 7) from the last client of the one before."""
        # A build at 100,000 clients is a second of CPU on the hub: every request would
        # wait for all of it. The builder's work on each view happens between two of
        # these yields, so the pace kept here gives the others a turn inside it too.
        pace = Pace()
        after = 0
        while True:
            with db_session:
                clients = client_queries.inbound_clients_after(
                    self.store, inbound_id, after, CORE_BATCH
                )
            for client in clients:
                pace()
                yield core_view(client)
            if len(clients) < CORE_BATCH:
                return
            after = clients[-1].row_id
            pace()

    def by_inbound(self, inbound_ids: list[int], slim: bool = False) -> dict[int, list[tuple]]:
        """inbound id -> (client record, last online) pairs of its clients, or with `slim`
        just (email, enable, comment): a tenth of the work at 100k."""
        if not inbound_ids:
            return {}
        if slim:
            return client_queries.slim_by_inbound(self.store, inbound_ids)
        return client_queries.by_inbound(self.store, inbound_ids)


@dataclass(frozen=True)
class CoreClients:
    """The clients of one inbound for the core config, as an iterable that reads them a
    batch at a time whenever it is iterated. The config is rebuilt on every change; at
    100,000 clients, holding every view at once took some 150 MB for a moment, and the
    heap kept much of it long after."""

    query: ClientQuery
    inbound_id: int

    def __iter__(self) -> Iterator[dict]:
        return self.query.core_batches(self.inbound_id)


def slim_view(client: ClientRecord, inbound_ids: list[int]) -> dict:
    """What a row of the paged list shows of a client."""
    return {
        "email": client.email,
        "subId": client.sub_id,
        "enable": bool(client.enable),
        "totalGB": client.total_bytes,
        "expiryTime": client.expiry_time,
        "limitIp": client.limit_ip,
        "reset": client.reset_days,
        "deviceLimit": client.device_limit,
        "group": client.group_name,
        "inboundIds": inbound_ids,
        "traffic": {
            "up": client.up,
            "down": client.down,
            "enable": bool(client.traffic_enable),
        },
        "createdAt": client.created_at,
        "updatedAt": client.updated_at,
    }
