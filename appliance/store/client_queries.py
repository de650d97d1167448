"""The reads over many clients, by name: the paged list's conditions, orders and pages,
the summary's bucket rows, the export's batches, the config build's batches and the
clients of inbounds.

At 100,000 clients nothing here loads rows as entities: filters, sorting, paging and
counts are SQL over `client` joined with `client_traffic`, using the indexes the
migrations create. The services compose these pieces (`Conditions`, `page_source`) and
never see a statement. Every function runs in the caller's db_session.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from appliance.domain.clients import ClientRecord
from appliance.store.client_rows import (
    CLIENT_FROM,
    CLIENT_SELECT,
    CORE_SELECT,
    client_record,
    client_records,
    core_records,
    extra,
)
from appliance.store.client_rules_sql import (
    USED,
    active_sql,
    depleted_sql,
    expiring_sql,
    near_limits_sql,
)

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
SORTS = (*SORT_SQL, "traffic")
ORDERS = {"ascend": "ASC", "descend": "DESC"}
# Sorting by traffic walks an index on the traffic table's `up + down` (migration 5) from
# the top, so it joins from that table: every client has its traffic row from creation.
BY_TRAFFIC = "FROM client_traffic t JOIN client c ON c.email_key = t.email_key"
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
# A substring search cannot seek a B-tree. SQLite scans the narrow search index
# (migration 8) instead of every client row, then fetches only the matches by id.
# PostgreSQL and MariaDB test the condition on the rows themselves: PostgreSQL then
# reads its trigram index (migration 21) for a rare text, and walks the sort order for a
# common one until the page is full; MariaDB, with no index that holds the whole text,
# turned SQLite's subquery into a walk of the sort order with a lookup of every row (300
# ms at 100,000 clients) where one scan and a sort of the matches take a third of that.
IN_SEARCH = "c.id IN (SELECT id FROM client WHERE search_key LIKE ? ESCAPE '!')"
ROW_SEARCH = "c.search_key LIKE ? ESCAPE '!'"
# A device id matches whole and as written (device ids are not folded): the
# subscriptions that device was served. PostgreSQL joins an OR with a subquery only by
# testing every row; an array of the subquery's answer, known before the scan, lets it
# combine the trigram index with the subId index instead.
BY_DEVICE = "c.sub_id IN (SELECT d.sub_id FROM client_device d WHERE d.hwid = ?)"
DEVICE_ARRAY = "c.sub_id = ANY(ARRAY(SELECT d.sub_id FROM client_device d WHERE d.hwid = ?))"
SEARCH = {  # dialect -> (the search alone, the search or a device id)
    "sqlite": (IN_SEARCH, f"({IN_SEARCH} OR {BY_DEVICE})"),
    "postgres": (ROW_SEARCH, f"({ROW_SEARCH} OR {DEVICE_ARRAY})"),
    "mysql": (ROW_SEARCH, f"({ROW_SEARCH} OR {BY_DEVICE})"),
}
# Keys per IN list: well under every backend's limit on parameters.
KEYS_PER_READ = 500


@dataclass
class Conditions:
    """The conditions of a paged list, ANDed, with their parameters in order. `alone`
    names the only condition when there is one whose count the attachments give
    (`protocol` or `inbound`), so the page can count it without scanning clients."""

    where: list[str] = field(default_factory=list)
    params: list = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    # The backend they are asked of: a search is written for it (SEARCH).
    dialect: str = "sqlite"

    def search(self, text: str, hwid: str = "") -> None:
        """Clients whose email, subId or comment (folded as email keys) hold `text`, or
        whose subscription served the device `hwid` when one is given."""
        alone, or_device = SEARCH[self.dialect]
        if hwid:
            self._add("search", or_device, [_contains(text), hwid])
        else:
            self._add("search", alone, [_contains(text)])

    def online(self, keys: list[str]) -> None:
        if not keys:
            self._add("online", "1 = 0", [])
        else:
            self._add("online", f"c.email_key IN ({_marks(keys)})", list(keys))

    def deactive(self) -> None:
        self._add("deactive", "c.enable = ?", [False])

    def depleted(self, now_ms: int) -> None:
        self._add("depleted", *depleted_sql(now_ms))

    def active(self, now_ms: int) -> None:
        self._add("active", *active_sql(now_ms))

    def expiring(self, now_ms: int, horizon_ms: int, margin_bytes: int) -> None:
        self._add("expiring", *expiring_sql(now_ms, horizon_ms, margin_bytes))

    def protocol(self, protocol: str) -> None:
        self._add("protocol", ON_PROTOCOL, [protocol])

    def inbound(self, inbound_id: int) -> None:
        self._add("inbound", ON_INBOUND, [inbound_id])

    def groups(self, labels: list[str]) -> None:
        self._add("group", f"c.group_name IN ({_marks(labels)})", list(labels))

    def _add(self, kind: str, sql: str, params: list) -> None:
        self.kinds.append(kind)
        self.where.append(sql)
        self.params += params

    @property
    def sql(self) -> str:
        """The WHERE clause, or "" for none."""
        return f" WHERE {' AND '.join(self.where)}" if self.where else ""

    @property
    def key(self) -> tuple:
        """What tells these conditions from others, for counts kept between pages."""
        return (self.sql, tuple(self.params))


def page_source(sort: str, direction: str, reads_traffic: bool, dialect: str) -> tuple[str, str]:
    """The FROM clause and the ORDER BY of a page: ties broken by id, so pages never
    overlap; the traffic join only when a condition or the order reads the counters."""
    direction = ORDERS[direction]
    if sort == "traffic":
        # MariaDB's index is on a generated column, and only its name reads the index.
        used = "t.used" if dialect == "mysql" else "(t.up + t.down)"
        return BY_TRAFFIC, f"ORDER BY {used} {direction}, t.id {direction}"
    source = CLIENT_FROM if reads_traffic or sort == "remaining" else "FROM client c"
    return source, f"ORDER BY {SORT_SQL[sort]} {direction}, c.id {direction}"


def attached_count(store, conditions: Conditions) -> int | None:
    """How many clients match a lone protocol or inbound condition, counted from the
    attachments; None for any other conditions."""
    if conditions.kinds == ["protocol"]:
        statement = (
            "SELECT COUNT(DISTINCT ci.client_id) FROM client_inbound ci "
            "JOIN inbound i ON i.id = ci.inbound_id WHERE i.protocol = ?"
        )
    elif conditions.kinds == ["inbound"]:
        statement = "SELECT COUNT(*) FROM client_inbound WHERE inbound_id = ?"
    else:
        return None
    return store.rows(statement, conditions.params)[0][0]


def page_ids(store, conditions: Conditions, source: tuple[str, str], size: int, offset: int):
    """The ids of one page, walking the sort order up to the page's end."""
    origin, order_sql = source
    rows = store.rows(
        f"SELECT c.id {origin}{conditions.sql} {order_sql} LIMIT ? OFFSET ?",
        [*conditions.params, size, offset],
    )
    return [row[0] for row in rows]


def matching_ids(store, conditions: Conditions, source: tuple[str, str]) -> list[int]:
    """The ids of every match, sorted, from one scan."""
    origin, order_sql = source
    if store.dialect == "sqlite":
        # The unary + keeps SQLite from walking the whole email or traffic index,
        # fetching every row to test it (400 ms for a search sorted by traffic): one
        # scan, then a sort of the matches, is far cheaper.
        for key in ("c.email_order", "(t.up + t.down)"):
            order_sql = order_sql.replace(f"ORDER BY {key}", f"ORDER BY +{key}", 1)
    rows = store.rows(f"SELECT c.id {origin}{conditions.sql} {order_sql}", conditions.params)
    return [row[0] for row in rows]


def id_range(low: int, high: int) -> tuple[str, list]:
    """The clients with ids in (low, high]."""
    return "c.id > ? AND c.id <= ?", [low, high]


def ids_in(client_ids: list[int]) -> tuple[str, list]:
    return f"c.id IN ({_marks(client_ids)})", list(client_ids)


def keys_in(keys: list[str]) -> tuple[str, list]:
    return f"c.email_key IN ({_marks(keys)})", list(keys)


def expiry_between(start_ms: int, end_ms: int) -> tuple[str, list]:
    """The clients whose expiry lies in (start, end]."""
    return "c.expiry_time > ? AND c.expiry_time <= ?", [start_ms, end_ms]


def near_limits(condition: tuple[str, list], horizon_ms: int, margin_bytes: int):
    """`condition`, of the clients near a limit only (`near_limits_sql`)."""
    near, params = near_limits_sql(horizon_ms, margin_bytes)
    return f"{condition[0]} AND {near}", [*condition[1], *params]


def bucket_rows(
    store,
    condition: tuple[str, list],
    now_ms: int,
    horizon_ms: int,
    margin_bytes: int,
    members_only: bool,
) -> list[tuple]:
    """Clients matching `condition` as (id, email key, email, enable, depleted 0/1,
    expiring 0/1), judged at `now_ms`; with `members_only`, only those in some bucket."""
    depleted, depleted_params = depleted_sql(now_ms)
    expiring, expiring_params = expiring_sql(now_ms, horizon_ms, margin_bytes)
    where, params = condition[0], list(condition[1])
    if members_only:
        where = f"({where}) AND (c.enable = ? OR {depleted} OR {expiring})"
        params += [False, *depleted_params, *expiring_params]
    return store.rows(
        f"SELECT c.id, c.email_key, c.email, c.enable, "
        f"CASE WHEN {depleted} THEN 1 ELSE 0 END, CASE WHEN {expiring} THEN 1 ELSE 0 END "
        f"{CLIENT_FROM} WHERE {where}",
        [*depleted_params, *expiring_params, *params],
    )


def expiring_rows(store, now_ms: int, horizon_ms: int, margin_bytes: int) -> list[tuple]:
    """The expiring clients as (email, email key, total, used, expiry)."""
    expiring, params = expiring_sql(now_ms, horizon_ms, margin_bytes)
    return store.rows(
        f"SELECT c.email, c.email_key, c.total_bytes, {USED}, c.expiry_time {CLIENT_FROM} "
        f"WHERE {expiring}",
        params,
    )


def client_count(store) -> int:
    return store.rows("SELECT COUNT(*) FROM client")[0][0]


def top_client_id(store) -> int:
    """The highest client id (0 for none)."""
    return store.rows("SELECT MAX(id) FROM client")[0][0] or 0


def attachments(store, client_ids: list[int] | None = None) -> dict[int, list[int]]:
    """client id -> sorted inbound ids, for the given clients or for all."""
    if client_ids is None:
        rows = store.rows(
            "SELECT client_id, inbound_id FROM client_inbound ORDER BY client_id, inbound_id"
        )
    elif not client_ids:
        return {}
    else:
        rows = store.rows(
            "SELECT client_id, inbound_id FROM client_inbound "
            f"WHERE client_id IN ({_marks(client_ids)}) ORDER BY client_id, inbound_id",
            client_ids,
        )
    result: dict[int, list[int]] = {}
    for client_id, inbound_id in rows:
        result.setdefault(client_id, []).append(inbound_id)
    return result


def clients_after(store, after: int, limit: int) -> list[ClientRecord]:
    """Up to `limit` clients with ids above `after`, in id order."""
    return client_records(
        store.rows(
            f"SELECT {CLIENT_SELECT} {CLIENT_FROM} WHERE c.id > ? ORDER BY c.id LIMIT ?",
            [after, limit],
        )
    )


def clients_of_ids(store, client_ids: list[int]) -> list[ClientRecord]:
    """The clients of some ids, in id order."""
    return client_records(
        store.rows(
            f"SELECT {CLIENT_SELECT} {CLIENT_FROM} WHERE c.id IN ({_marks(client_ids)}) "
            "ORDER BY c.id",
            client_ids,
        )
    )


def clients_of_keys(store, keys: list[str]) -> list[ClientRecord]:
    """The clients of some email keys; keys of no client are left out."""
    return client_records(
        store.rows(
            f"SELECT {CLIENT_SELECT} {CLIENT_FROM} WHERE c.email_key IN ({_marks(keys)})", keys
        )
    )


def inbound_clients_after(store, inbound_id: int, after: int, limit: int) -> list[ClientRecord]:
    """Up to `limit` clients of one inbound with ids above `after`, in id order: a walk
    of the attachment index (migration 7). For the config build: only the fields it
    reads are filled (`CORE_SELECT`), the others keep their defaults."""
    return core_records(
        store.rows(
            f"SELECT {CORE_SELECT} FROM client_inbound ci "
            "JOIN client c ON c.id = ci.client_id "
            "LEFT JOIN client_traffic t ON t.email_key = c.email_key "
            "WHERE ci.inbound_id = ? AND ci.client_id > ? "
            "ORDER BY ci.client_id LIMIT ?",
            [inbound_id, after, limit],
        )
    )


def emails_of(store, keys: Iterable[str]) -> list[tuple[str, str]]:
    """(email key, email) of the clients of `keys`; keys of no client are left out."""
    keys = sorted(keys)
    found: list[tuple[str, str]] = []
    for start in range(0, len(keys), KEYS_PER_READ):
        chunk = keys[start : start + KEYS_PER_READ]
        found += store.rows(
            f"SELECT email_key, email FROM client WHERE email_key IN ({_marks(chunk)})", chunk
        )
    return found


def reverse_tags(store) -> list[str]:
    """Reverse tags clients carry, each once, in order."""
    rows = store.rows(
        "SELECT DISTINCT reverse_tag FROM client WHERE reverse_tag <> '' ORDER BY reverse_tag"
    )
    return [row[0] for row in rows]


def ips_by_email(store) -> list[tuple[str, str, int]]:
    """(email, ip, seen at) of every IP this panel's own core saw, by client, the latest
    first."""
    return store.rows(
        "SELECT c.email, i.ip, i.seen_at FROM client_ip i "
        "JOIN client c ON c.email_key = i.email_key WHERE i.server = '' "
        "ORDER BY c.email_key, i.seen_at DESC"
    )


def last_online(store) -> list[tuple[str, int]]:
    """(email, ms of the last traffic seen) of the clients ever seen."""
    return store.rows(
        "SELECT c.email, t.last_online FROM client_traffic t "
        "JOIN client c ON c.email_key = t.email_key WHERE t.last_online > 0"
    )


def by_inbound(store, inbound_ids: list[int]) -> dict[int, list[tuple[ClientRecord, int]]]:
    """inbound id -> (client, last online ms or None) of its clients, in client order."""
    rows = store.rows(
        f"SELECT {CLIENT_SELECT}, ci.inbound_id, t.last_online "
        "FROM client_inbound ci JOIN client c ON c.id = ci.client_id "
        "LEFT JOIN client_traffic t ON t.email_key = c.email_key "
        f"WHERE ci.inbound_id IN ({_marks(inbound_ids)}) ORDER BY ci.inbound_id, c.id",
        inbound_ids,
    )
    result: dict[int, list[tuple[ClientRecord, int]]] = {}
    for row in rows:
        inbound_id, last = extra(row)
        result.setdefault(inbound_id, []).append((client_record(row), last))
    return result


def slim_by_inbound(store, inbound_ids: list[int]) -> dict[int, list[tuple[str, bool, str]]]:
    """inbound id -> (email, enable, comment) of its clients, in client order: a tenth of
    the work of `by_inbound` at 100,000."""
    rows = store.rows(
        "SELECT ci.inbound_id, c.email, c.enable, c.comment "
        "FROM client_inbound ci JOIN client c ON c.id = ci.client_id "
        f"WHERE ci.inbound_id IN ({_marks(inbound_ids)}) ORDER BY ci.inbound_id, c.id",
        inbound_ids,
    )
    result: dict[int, list[tuple[str, bool, str]]] = {}
    for row in rows:
        result.setdefault(row[0], []).append(row[1:])
    return result


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))


def _contains(text: str) -> str:
    """A LIKE pattern (with ESCAPE '!') matching `text` literally anywhere."""
    return "%" + text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"
