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
from appliance.domain.client_views import CLIENT_COLUMNS, client_view, traffic_flag, traffic_of
from appliance.domain.parse import parse_id, parse_int
from appliance.errors import ServiceError
from appliance.runtime.jobs import Pace, breathe
from appliance.services.clients.groups import labels_of
from appliance.services.clients.records import CORE_SELECT, core_view
from appliance.services.clients.summary import ClientSummary, Summary

FILTERS = ("online", "active", "deactive", "depleted", "expiring")
SORTS = ("enable", "email", "inboundIds", "traffic", "remaining", "expiryTime")
ORDERS = {"ascend": "ASC", "descend": "DESC"}
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
FROM = "FROM client c LEFT JOIN client_traffic t ON t.email_key = c.email_key"
USED = "(COALESCE(t.up, 0) + COALESCE(t.down, 0))"
QUOTA_USED = f"(c.total_bytes > 0 AND {USED} >= c.total_bytes)"
# Ordering keys that put "unlimited" after every limited value when ascending. An expiry
# that starts on first use (stored as minus its duration) has no date yet: it sorts after
# every dated expiry and before unlimited, shorter durations first. Unattached clients
# sort after attached ones on every backend (NULLs would not).
UNLIMITED = 2**62
NOT_STARTED = 2**61
SORT_SQL = {
    "enable": "c.enable",
    "email": "c.email_order",
    "inboundIds": "COALESCE((SELECT MIN(ci.inbound_id) FROM client_inbound ci "
    f"WHERE ci.client_id = c.id), {UNLIMITED})",
    "remaining": f"CASE WHEN c.total_bytes = 0 THEN {UNLIMITED} ELSE c.total_bytes - {USED} END",
    "expiryTime": f"CASE WHEN c.expiry_time = 0 THEN {UNLIMITED} "
    f"WHEN c.expiry_time < 0 THEN {NOT_STARTED} - c.expiry_time ELSE c.expiry_time END",
}
# Sorting by traffic walks an index on the traffic table's `up + down` (migration 5) from
# the top, so it joins from that table: every client has its traffic row from creation.
BY_TRAFFIC = "FROM client_traffic t JOIN client c ON c.email_key = t.email_key"
TRAFFIC_FILTERS = ("active", "depleted", "expiring")
# EXISTS rather than IN: a page in email order then walks the email index and stops at
# the page's end instead of sorting every match.
ON_PROTOCOL = (
    "EXISTS (SELECT 1 FROM client_inbound ci JOIN inbound i ON i.id = ci.inbound_id "
    "WHERE ci.client_id = c.id AND i.protocol = ?)"
)
# The clients of one inbound: a seek on the (inbound_id, client_id) index per client.
ON_INBOUND = (
    "EXISTS (SELECT 1 FROM client_inbound ci WHERE ci.client_id = c.id AND ci.inbound_id = ?)"
)
# A substring search cannot seek an index, but it can scan the narrow search index
# (migration 8) instead of every client row, then fetch only the matches by id.
SEARCH = "c.id IN (SELECT id FROM client WHERE search_key LIKE ? ESCAPE '!')"
SELECT_COLUMNS = ", ".join(f"c.{name}" for name in CLIENT_COLUMNS)


class ClientQuery:
    def __init__(self, store, settings, presence, clock=time.time):
        self.store = store
        self.settings = settings
        self.presence = presence
        self.clock = clock
        self._counts: dict[tuple, int] = {}
        self._counts_version = ""
        self.book = ClientSummary(
            store, settings, presence, self._bucket_rows, self._near_limits, clock
        )

    def invalidate(self) -> None:
        """After a committed change to clients, their traffic, their inbounds or the
        settings, in the greenlet that made it: the summary follows the clients its writes
        touched, and counts kept between pages are dropped."""
        self._counts = {}
        self.store.client_writes.commit()
        self.book.wake()

    # ---- conditions ------------------------------------------------------------------

    def depleted_sql(self, now: int | None = None) -> tuple[str, list]:
        """Quota used up or expiry passed (an expiry that starts on first use has not),
        at `now` (ms) or at this moment."""
        expired, params = self.expired_sql(now)
        return f"({QUOTA_USED} OR {expired})", params

    def expired_sql(self, now: int | None = None) -> tuple[str, list]:
        return "(c.expiry_time > 0 AND c.expiry_time <= ?)", [self._moment(now)]

    def expiring_sql(self, now: int | None = None) -> tuple[str, list]:
        """Enabled, not yet depleted, and within expireDiff days or trafficDiff GB of it."""
        now = self._moment(now)
        depleted, params = self.depleted_sql(now)
        horizon = now + self.settings.get("expireDiff") * 86_400_000
        margin = self.settings.get("trafficDiff") * 1024**3
        return (
            f"(c.enable = ? AND NOT {depleted} AND ("
            "(c.expiry_time > 0 AND c.expiry_time <= ?) "
            f"OR (c.total_bytes > 0 AND c.total_bytes - {USED} <= ?)))",
            [True, *params, horizon, margin],
        )

    def _moment(self, now: int | None) -> int:
        return int(self.clock() * 1000) if now is None else now

    def filter_sql(self, name: str) -> tuple[str, list]:
        if name == "online":
            keys = sorted(self.presence.online())
            if not keys:
                return "1 = 0", []
            return f"c.email_key IN ({', '.join('?' * len(keys))})", keys
        if name == "deactive":
            return "c.enable = ?", [False]
        depleted, params = self.depleted_sql()
        if name == "depleted":
            return depleted, params
        if name == "active":
            return f"(c.enable = ? AND NOT {depleted})", [True, *params]
        return self.expiring_sql()

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
            where, params = self._conditions(query)
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
            filtered = self._known_count(query, where, params, summary)
            source, order_sql = _source_and_order(
                sort, ORDERS[order], query.get("filter") in TRAFFIC_FILTERS
            )
            where_sql = f" WHERE {' AND '.join(where)}" if where else ""
            offset = (page - 1) * size
            if filtered is None or (where and (offset + size) * WALK_FACTOR > filtered):
                filtered, page_ids = self._count_and_page(
                    where_sql, params, source, order_sql, offset, size
                )
                self._counts[(where_sql, tuple(params))] = filtered
            else:
                page_ids = [
                    row[0]
                    for row in self.store.rows(
                        f"SELECT c.id {source}{where_sql} {order_sql} LIMIT ? OFFSET ?",
                        [*params, size, offset],
                    )
                ]
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

    def _known_count(self, query: dict, where: list, params: list, summary: Summary) -> int | None:
        """How many clients match, when that is known without a scan of the clients: no
        condition, one status bucket alone (the summary's lists), one protocol or one
        inbound alone (counted from its attachments), or conditions counted earlier
        since the summary last changed."""
        if not where:
            return summary.total
        bucket = query.get("filter") or ""
        if len(where) == 1 and bucket:
            return summary.active if bucket == "active" else summary.count(bucket)
        key = (f" WHERE {' AND '.join(where)}", tuple(params))
        if where == [ON_PROTOCOL] and key not in self._counts:
            self._counts[key] = self.store.rows(
                "SELECT COUNT(DISTINCT ci.client_id) FROM client_inbound ci "
                "JOIN inbound i ON i.id = ci.inbound_id WHERE i.protocol = ?",
                params,
            )[0][0]
        if where == [ON_INBOUND] and key not in self._counts:
            self._counts[key] = self.store.rows(
                "SELECT COUNT(*) FROM client_inbound WHERE inbound_id = ?", params
            )[0][0]
        return self._counts.get(key)

    def _count_and_page(self, where_sql, params, source, order_sql, offset, size):
        """The count of matches and the ids of one page of them, from one scan: the ids of
        every match, sorted. Cheaper than a count and a walk when the conditions select
        few rows, and its count is kept for the next pages."""
        if self.store.dialect == "sqlite":
            # The unary + keeps SQLite from walking the whole email or traffic index,
            # fetching every row to test it (400 ms for a search sorted by traffic): one
            # scan, then a sort of the matches, is far cheaper.
            for key in ("c.email_order", "(t.up + t.down)"):
                order_sql = order_sql.replace(f"ORDER BY {key}", f"ORDER BY +{key}", 1)
        ids = [
            row[0]
            for row in self.store.rows(f"SELECT c.id {source}{where_sql} {order_sql}", params)
        ]
        return len(ids), ids[offset : offset + size]

    def _slim_rows(self, client_ids: list[int]) -> list[dict]:
        """The slim rows of a page, in the order of `client_ids`."""
        if not client_ids:
            return []
        marks = ", ".join("?" * len(client_ids))
        rows = self.store.rows(
            "SELECT c.id, c.email, c.sub_id, c.enable, c.total_bytes, c.expiry_time, "
            "c.limit_ip, c.reset_days, c.group_name, c.created_at, c.updated_at, t.up, t.down, "
            f"t.enable {FROM} WHERE c.id IN ({marks})",
            client_ids,
        )
        by_id = {row[0]: row for row in rows}
        attachments = self.attachments(client_ids)
        items = []
        for client_id in filter(by_id.__contains__, client_ids):
            (_, email, sub_id, enable, total, expiry, limit_ip, reset, group, created,
             updated, up, down, t_enable) = by_id[client_id]  # fmt: skip
            items.append(
                {
                    "email": email,
                    "subId": sub_id,
                    "enable": bool(enable),
                    "totalGB": total,
                    "expiryTime": expiry,
                    "limitIp": limit_ip,
                    "reset": reset,
                    "group": group,
                    "inboundIds": attachments.get(client_id, []),
                    "traffic": {"up": up or 0, "down": down or 0, "enable": traffic_flag(t_enable)},
                    "createdAt": created,
                    "updatedAt": updated,
                }
            )
        return items

    def _conditions(self, query: dict) -> tuple[list[str], list]:
        where: list[str] = []
        params: list = []
        search = query.get("search") or ""
        if not isinstance(search, str) or len(search) > 255:
            raise ServiceError("search must be a string of at most 255 characters")
        if search.strip():
            where.append(SEARCH)
            params.append(_contains(email_key(" ".join(search.split()))))
        name = query.get("filter") or ""
        if name:
            if name not in FILTERS:
                raise ServiceError(f"filter must be one of {', '.join(FILTERS)} (got '{name}')")
            sql, values = self.filter_sql(name)
            where.append(sql)
            params += values
        protocol = query.get("protocol") or ""
        if protocol:
            if protocol not in inbound_rules.CLIENT_PROTOCOLS:
                raise ServiceError(
                    f"protocol must be one of {', '.join(sorted(inbound_rules.CLIENT_PROTOCOLS))}"
                    f" (got '{protocol}')"
                )
            where.append(ON_PROTOCOL)
            params.append(protocol)
        inbound = query.get("inboundId") or ""
        if inbound:
            where.append(ON_INBOUND)
            params.append(parse_id(inbound, "inboundId"))
        group = query.get("group") or ""
        if group:
            if not isinstance(group, str) or len(group) > 255:
                raise ServiceError("group must be a string of at most 255 characters")
            labels = labels_of(self.store, group.strip()) or [group.strip()]
            where.append(f"c.group_name IN ({', '.join('?' * len(labels))})")
            params += labels
        return where, params

    def summary(self) -> Summary:
        """Counts and the emails in each bucket, over every client, as of now."""
        return self.book.current()

    def _near_limits(self, now: int) -> tuple[str, list]:
        """Clients within trafficDiff GB of their quota (or past it) or with an expiry
        within expireDiff days (or past): those whose bucket more traffic can change."""
        horizon = now + self.settings.get("expireDiff") * 86_400_000
        margin = self.settings.get("trafficDiff") * 1024**3
        return (
            f"((c.total_bytes > 0 AND c.total_bytes - {USED} <= ?) "
            "OR (c.expiry_time > 0 AND c.expiry_time <= ?))",
            [margin, horizon],
        )

    def _bucket_rows(self, where: str, params: list, now: int, members_only: bool) -> list:
        """Clients matching `where` as (id, email key, email, enable, depleted, expiring),
        the buckets judged at `now`; with `members_only`, only those in some bucket. The
        caller holds the db_session."""
        depleted, depleted_params = self.depleted_sql(now)
        expiring, expiring_params = self.expiring_sql(now)
        condition, condition_params = where, list(params)
        if members_only:
            condition = f"({where}) AND (c.enable = ? OR {depleted} OR {expiring})"
            condition_params += [False, *depleted_params, *expiring_params]
        return self.store.rows(
            f"SELECT c.id, c.email_key, c.email, c.enable, "
            f"CASE WHEN {depleted} THEN 1 ELSE 0 END, CASE WHEN {expiring} THEN 1 ELSE 0 END "
            f"{FROM} WHERE {condition}",
            [*depleted_params, *expiring_params, *condition_params],
        )

    @db_session
    def nearing_limits(self) -> list[dict]:
        """The expiring clients (`expiring_sql`), each with what it nears: `quota`
        (trafficDiff GB or less left) and `expiry` (expireDiff days or less away)."""
        expiring, params = self.expiring_sql()
        horizon = int(self.clock() * 1000) + self.settings.get("expireDiff") * 86_400_000
        margin = self.settings.get("trafficDiff") * 1024**3
        rows = self.store.rows(
            f"SELECT c.email, c.email_key, c.total_bytes, {USED}, c.expiry_time {FROM} "
            f"WHERE {expiring}",
            params,
        )
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
        if client_ids is None:
            rows = self.store.rows(
                "SELECT client_id, inbound_id FROM client_inbound ORDER BY client_id, inbound_id"
            )
        elif not client_ids:
            return {}
        else:
            marks = ", ".join("?" * len(client_ids))
            rows = self.store.rows(
                "SELECT client_id, inbound_id FROM client_inbound "
                f"WHERE client_id IN ({marks}) ORDER BY client_id, inbound_id",
                client_ids,
            )
        result: dict[int, list[int]] = {}
        for client_id, inbound_id in rows:
            result.setdefault(client_id, []).append(inbound_id)
        return result

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
                rows = self.store.rows(
                    f"SELECT c.id, {SELECT_COLUMNS}, t.up, t.down, t.enable {FROM} "
                    "WHERE c.id > ? ORDER BY c.id LIMIT ?",
                    [last, EXPORT_BATCH],
                )
                if not rows:
                    return
                attachments = self.attachments([row[0] for row in rows])
            last = rows[-1][0]
            yield [
                client_view(
                    row[1 : WIDTH + 1], attachments.get(row[0], []), traffic_of(row[WIDTH + 1 :])
                )
                for row in rows
            ]

    @db_session
    def online_emails(self) -> list[str]:
        """Emails online here or on any node, each once."""
        return self.emails_of(self.presence.online())

    @db_session
    def emails_of(self, keys) -> list[str]:
        """The emails of the clients of `keys`, sorted; keys of no client are left out."""
        keys = sorted(keys)
        emails: list[str] = []
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            emails += [
                row[0]
                for row in self.store.rows(
                    f"SELECT email FROM client WHERE email_key IN ({', '.join('?' * len(chunk))})",
                    chunk,
                )
            ]
        return sorted(emails)

    @db_session
    def reverse_tags(self) -> list[str]:
        """Reverse tags clients carry, for routing rules in the core template."""
        return [
            row[0]
            for row in self.store.rows(
                "SELECT DISTINCT reverse_tag FROM client WHERE reverse_tag <> '' "
                "ORDER BY reverse_tag"
            )
        ]

    @db_session
    def ips_by_email(self) -> dict[str, list[dict]]:
        result: dict[str, list[dict]] = {}
        for email, ip, seen in self.store.rows(
            "SELECT c.email, i.ip, i.seen_at FROM client_ip i "
            "JOIN client c ON c.email_key = i.email_key ORDER BY c.email_key, i.seen_at DESC"
        ):
            result.setdefault(email, []).append({"ip": ip, "timestamp": seen})
        return result

    @db_session
    def last_online(self) -> dict[str, int]:
        """email -> unix seconds of the last traffic seen."""
        return {
            email: last // 1000
            for email, last in self.store.rows(
                "SELECT c.email, t.last_online FROM client_traffic t "
                "JOIN client c ON c.email_key = t.email_key WHERE t.last_online > 0"
            )
        }

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
                rows = self.store.rows(
                    f"SELECT c.id, {CORE_SELECT} FROM client_inbound ci "
                    "JOIN client c ON c.id = ci.client_id "
                    "LEFT JOIN client_traffic t ON t.email_key = c.email_key "
                    "WHERE ci.inbound_id = ? AND ci.client_id > ? "
                    "ORDER BY ci.client_id LIMIT ?",
                    [inbound_id, after, CORE_BATCH],
                )
            for row in rows:
                pace()
                yield core_view(row[1:])
            if len(rows) < CORE_BATCH:
                return
            after = rows[-1][0]
            pace()

    def by_inbound(self, inbound_ids: list[int], slim: bool = False) -> dict[int, list[tuple]]:
        """inbound id -> (client columns..., up, down, traffic enable, last_online) tuples,
        or with `slim` just (email, enable, comment): a tenth of the work at 100k."""
        if not inbound_ids:
            return {}
        marks = ", ".join("?" * len(inbound_ids))
        if slim:
            columns, joins = "c.email, c.enable, c.comment", ""
        else:
            columns = f"{SELECT_COLUMNS}, t.up, t.down, t.enable, t.last_online"
            joins = "LEFT JOIN client_traffic t ON t.email_key = c.email_key "
        rows = self.store.rows(
            f"SELECT ci.inbound_id, {columns} "
            f"FROM client_inbound ci JOIN client c ON c.id = ci.client_id {joins}"
            f"WHERE ci.inbound_id IN ({marks}) ORDER BY ci.inbound_id, c.id",
            inbound_ids,
        )
        result: dict[int, list[tuple]] = {}
        for row in rows:
            result.setdefault(row[0], []).append(row[1:])
        return result


WIDTH = len(CLIENT_COLUMNS)


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


def _source_and_order(sort: str, direction: str, filter_reads_traffic: bool) -> tuple[str, str]:
    """The FROM clause and the ORDER BY of a page: ties broken by id, so pages never
    overlap; the traffic join only when a condition or the order reads the counters."""
    if sort == "traffic":
        return BY_TRAFFIC, f"ORDER BY (t.up + t.down) {direction}, t.id {direction}"
    source = FROM if filter_reads_traffic or sort == "remaining" else "FROM client c"
    return source, f"ORDER BY {SORT_SQL[sort]} {direction}, c.id {direction}"


def _contains(text: str) -> str:
    """A LIKE pattern (with ESCAPE '!') matching `text` literally anywhere."""
    return "%" + text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"
