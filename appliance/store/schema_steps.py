"""The schema's history: one function per migration, and `MIGRATIONS`, their list.

Each function returns what its step runs on a dialect: SQL text, or a function of the
open cursor for what SQL cannot say the same way on every backend. `migrations.py`
applies them in order; a released entry is never edited, only followed by a new one.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from appliance.store.ddl import Column, Index, Table, add_column, create_index
from appliance.store.natural_order import natural_order

log = logging.getLogger(__name__)

# What a step runs: SQL text, or, for what SQL cannot say the same way on every backend,
# a function of the open cursor and the dialect's placeholder.
Statement = str | Callable[[Any, str], None]
Step = Callable[[str], list[Statement]]


def _v1_foundation(dialect: str) -> list[str]:
    tables = [
        Table(
            "setting",
            (Column("key", "str", 64), Column("value", "text")),
            (Index(("key",), unique=True),),
        ),
        Table(
            "admin",
            (
                Column("username", "str", 64),
                Column("password_hash", "str", 255),
                Column("totp_secret", "str", 64, default=""),
                Column("totp_enabled", "bool", default=False),
                Column("totp_last_step", "bigint", default=0),
                Column("updated_at", "bigint", default=0),
            ),
            (Index(("username",), unique=True),),
        ),
        Table(
            "session",
            (
                Column("token_hash", "str", 64),
                Column("admin_id", "int", references="admin"),
                Column("csrf_token", "str", 64),
                Column("created_at", "bigint"),
                Column("expires_at", "bigint"),
                Column("remote_addr", "str", 64, default=""),
            ),
            (Index(("token_hash",), unique=True), Index(("expires_at",))),
        ),
        Table(
            "api_token",
            (
                Column("name", "str", 64),
                Column("token_hash", "str", 64),
                Column("enabled", "bool", default=True),
                Column("created_at", "bigint"),
            ),
            (Index(("name",), unique=True), Index(("token_hash",), unique=True)),
        ),
        Table(
            "inbound",
            (
                Column("remark", "str", 255, default=""),
                Column("tag", "str", 64),
                Column("protocol", "str", 16),
                Column("listen", "str", 255, default=""),
                Column("port", "int"),
                Column("enable", "bool", default=True),
                Column("expiry_time", "bigint", default=0),
                Column("total", "bigint", default=0),
                Column("up", "bigint", default=0),
                Column("down", "bigint", default=0),
                Column("settings", "text"),
                Column("stream_settings", "text"),
                Column("sniffing", "text"),
                Column("node_id", "int", null=True),
                Column("created_at", "bigint", default=0),
                Column("updated_at", "bigint", default=0),
            ),
            (Index(("tag",), unique=True), Index(("port",))),
        ),
        Table(
            "fallback",
            (
                Column("master_id", "int", references="inbound"),
                Column("child_id", "int", null=True, references="inbound"),
                Column("name", "str", 255, default=""),
                Column("alpn", "str", 64, default=""),
                Column("path", "str", 255, default=""),
                Column("dest", "str", 255, default=""),
                Column("xver", "int", default=0),
                Column("sort_order", "int", default=0),
            ),
            (Index(("master_id", "sort_order")),),
        ),
    ]
    return [sql for table in tables for sql in table.create(dialect)]


def _v2_clients(dialect: str) -> list[str]:
    tables = [
        Table(
            "client",
            (
                Column("email", "str", 255),
                Column("email_key", "str", 255),
                Column("uuid", "str", 36),
                Column("password", "str", 255),
                Column("auth", "str", 255),
                Column("flow", "str", 32, default=""),
                Column("security", "str", 32, default="auto"),
                Column("reverse_tag", "str", 64, default=""),
                Column("sub_id", "str", 64),
                Column("total_bytes", "bigint", default=0),
                Column("expiry_time", "bigint", default=0),
                Column("limit_ip", "int", default=0),
                Column("reset_days", "int", default=0),
                Column("tg_id", "bigint", default=0),
                Column("comment", "str", 1024, default=""),
                Column("enable", "bool", default=True),
                Column("group_name", "str", 64, default=""),
                Column("ad_tag", "str", 32, default=""),
                Column("method", "str", 64, default=""),
                Column("search_key", "text"),
                Column("created_at", "bigint", default=0),
                Column("updated_at", "bigint", default=0),
            ),
            (
                Index(("email_key",), unique=True),
                Index(("sub_id",)),
                Index(("group_name",)),
                Index(("expiry_time",)),
            ),
        ),
        Table(
            "client_inbound",
            (
                Column("client_id", "int", references="client"),
                Column("inbound_id", "int", references="inbound"),
            ),
            (Index(("client_id", "inbound_id"), unique=True), Index(("inbound_id",))),
        ),
        Table(
            "client_traffic",
            (
                Column("email_key", "str", 255),
                Column("email", "str", 255),
                Column("up", "bigint", default=0),
                Column("down", "bigint", default=0),
                Column("enable", "bool", default=True),
                Column("last_online", "bigint", default=0),
            ),
            (Index(("email_key",), unique=True),),
        ),
        Table(
            "client_ip",
            (
                Column("email_key", "str", 255),
                Column("ip", "str", 64),
                Column("seen_at", "bigint", default=0),
            ),
            (Index(("email_key", "ip"), unique=True),),
        ),
        Table(
            "client_link",
            (
                Column("client_id", "int", references="client"),
                Column("kind", "str", 16),
                Column("value", "text"),
                Column("remark", "str", 255, default=""),
                Column("sort_order", "int", default=0),
            ),
            (Index(("client_id", "sort_order")),),
        ),
        Table(
            "client_group",
            (Column("name", "str", 64), Column("name_key", "str", 64)),
            (Index(("name_key",), unique=True),),
        ),
    ]
    return [sql for table in tables for sql in table.create(dialect)]


def _v3_core_counters(dialect: str) -> list[str]:
    tables = [
        Table(
            "core_counter",
            (Column("name", "str", 255), Column("value", "bigint", default=0)),
            (Index(("name",), unique=True),),
        ),
        Table(
            "outbound_traffic",
            (
                Column("tag", "str", 255),
                Column("up", "bigint", default=0),
                Column("down", "bigint", default=0),
            ),
            (Index(("tag",), unique=True),),
        ),
    ]
    return [sql for table in tables for sql in table.create(dialect)]


def _v4_hosts(dialect: str) -> list[str]:
    table = Table(
        "host",
        (
            Column("inbound_id", "int", references="inbound"),
            Column("remark", "str", 255),
            Column("address", "str", 255, default=""),
            Column("port", "int", default=0),
            Column("security", "str", 16, default="same"),
            Column("sni", "str", 255, default=""),
            Column("tags", "text"),
            Column("enable", "bool", default=True),
            Column("sort_order", "int", default=0),
        ),
        (Index(("inbound_id", "sort_order")),),
    )
    return table.create(dialect)


def _v5_traffic_order(dialect: str) -> list[str]:
    """An index on each client's total traffic, so the paged list sorted by traffic reads
    one page from its top instead of sorting every client. MySQL/MariaDB have no index on
    an expression without a generated column; there the sort stays a scan."""
    if dialect == "mysql":
        return []
    return ["CREATE INDEX ix_client_traffic_used ON client_traffic ((up + down), id)"]


def _v6_core_counters_on_traffic(dialect: str) -> list[str]:
    """The last core counter values of each client move onto its traffic row, so a tick
    writes one row per client that moved instead of three. The rows of users in
    core_counter go: a panel upgrading starts a new core, whose counters start at 0."""
    return [
        *(
            add_column("client_traffic", Column(name, "bigint", default=0), dialect)
            for name in ("core_up", "core_down")
        ),
        "DELETE FROM core_counter WHERE name LIKE 'user>>>%'",
    ]


def _v7_attachments_in_client_order(dialect: str) -> list[str]:
    """Attachments indexed by inbound, then client: the core config reads an inbound's
    clients a batch at a time in client order, each batch a walk of this index from where
    the last one ended. It serves every lookup by inbound the old index served."""
    drop = "DROP INDEX ix_client_inbound_inbound_id"
    return [
        "CREATE INDEX ix_client_inbound_inbound_id_client_id "
        "ON client_inbound (inbound_id, client_id)",
        f"{drop} ON client_inbound" if dialect == "mysql" else drop,
    ]


def _v8_search_index(dialect: str) -> list[str]:
    """The search text with the email key beside it: a search of the paged list (any
    substring, so no index can seek it) scans this narrow index instead of every client
    row, and sorts its matches by email without reading the table. MySQL/MariaDB cannot
    index a whole text column; there the search stays a scan of the table."""
    if dialect == "mysql":
        return []
    return ["CREATE INDEX ix_client_search_key ON client (search_key, email_key)"]


def _v9_login_blocks(dialect: str) -> list[str]:
    """Sign-in blocks outlive a restart: one row per blocked (address, username) pair,
    named by a digest of the pair, with the block's end in Unix seconds."""
    table = Table(
        "login_block",
        (Column("pair_hash", "str", 64), Column("blocked_until", "bigint")),
        (Index(("pair_hash",), unique=True),),
    )
    return table.create(dialect)


def _v10_audit_and_token_scopes(dialect: str) -> list[str]:
    """The audit log of admin actions (newest first by id; pruned by age, hence the
    index on `at`, milliseconds), and API tokens with a scope and an expiry. Tokens an
    older release made were full admin credentials that never expired: the defaults keep
    them so."""
    table = Table(
        "audit_entry",
        (
            Column("at", "bigint"),
            Column("actor", "str", 64, default=""),
            Column("actor_kind", "str", 8, default=""),
            Column("method", "str", 8),
            Column("route", "str", 255),
            Column("path", "str", 1024),
            Column("target", "str", 1024, default=""),
            Column("address", "str", 64, default=""),
            Column("success", "bool", default=False),
            Column("status", "int", default=200),
            Column("message", "str", 1024, default=""),
            Column("fields", "str", 1024, default=""),
        ),
        (Index(("at",)), Index(("actor",)), Index(("route",))),
    )
    return [
        *table.create(dialect),
        add_column("api_token", Column("scope", "str", 16, default="admin"), dialect),
        add_column("api_token", Column("expires_at", "bigint", default=0), dialect),
    ]


def _v11_nodes(dialect: str) -> list[str]:
    """Nodes: the remote panels this one manages, the last counters read from each (so a
    poll repeated, or either panel restarted, counts nothing twice), and, on a node, the
    totals its managing panel pushes down for display and local quota checks, kept apart
    from the counters that panel polls."""
    tables = [
        Table(
            "node",
            (
                Column("name", "str", 64),
                Column("remark", "str", 255, default=""),
                Column("scheme", "str", 8, default="https"),
                Column("address", "str", 255),
                Column("port", "int"),
                Column("base_path", "str", 255, default="/"),
                Column("api_token", "text"),
                Column("enable", "bool", default=True),
                Column("allow_private_address", "bool", default=False),
                Column("tls_verify_mode", "str", 8, default="system"),
                Column("cert_fingerprint", "str", 64, default=""),
                Column("guid", "str", 36, default=""),
                Column("parent_guid", "str", 36, default=""),
                Column("panel_version", "str", 32, default=""),
                Column("core_version", "str", 64, default=""),
                Column("last_heartbeat", "bigint", default=0),
                Column("dirty", "bool", default=False),
                Column("created_at", "bigint", default=0),
                Column("updated_at", "bigint", default=0),
            ),
            (Index(("name",), unique=True),),
        ),
        Table(
            "node_counter",
            (
                Column("node_id", "int"),
                Column("name", "str", 255),
                Column("up", "bigint", default=0),
                Column("down", "bigint", default=0),
            ),
            (Index(("node_id", "name"), unique=True),),
        ),
        Table(
            "master_traffic",
            (
                Column("master_guid", "str", 36),
                Column("email_key", "str", 255),
                Column("up", "bigint", default=0),
                Column("down", "bigint", default=0),
                Column("updated_at", "bigint", default=0),
            ),
            (Index(("master_guid", "email_key"), unique=True), Index(("email_key",))),
        ),
    ]
    return [sql for table in tables for sql in table.create(dialect)]


def _v12_outbound_subscriptions(dialect: str) -> list[str]:
    """Outbound subscriptions: a provider's list of servers fetched from a URL, kept as
    the outbounds the last good refresh made (so a failed refresh changes nothing the
    core runs), with the time and error of the last attempt for the UI."""
    table = Table(
        "outbound_sub",
        (
            Column("remark", "str", 255, default=""),
            Column("url", "text"),
            Column("tag_prefix", "str", 64, default=""),
            Column("update_interval", "int", default=600),
            Column("enabled", "bool", default=True),
            Column("allow_private", "bool", default=False),
            Column("prepend", "bool", default=False),
            Column("sort_order", "int", default=0),
            Column("outbounds", "text"),
            Column("last_refresh", "bigint", default=0),
            Column("last_attempt", "bigint", default=0),
            Column("last_error", "str", 1024, default=""),
            Column("created_at", "bigint", default=0),
        ),
        (Index(("sort_order",)),),
    )
    return table.create(dialect)


def _v13_mtproto(dialect: str) -> list[str]:
    """MTProto: each client's secret key (existing clients get their UUID's 16 bytes, a
    random value already), and the last counters read from each proxy process, per
    inbound and client, with the process instance they came from: a proxy started again
    counts from zero."""
    table = Table(
        "mtproto_counter",
        (
            Column("inbound_id", "int"),
            Column("instance", "str", 32, default=""),
            Column("email_key", "str", 255),
            Column("up", "bigint", default=0),
            Column("down", "bigint", default=0),
        ),
        (Index(("inbound_id", "email_key"), unique=True),),
    )
    return [
        add_column("client", Column("mt_secret", "str", 32, default=""), dialect),
        "UPDATE client SET mt_secret = LOWER(REPLACE(uuid, '-', ''))",
        *table.create(dialect),
    ]


def _v14_usage_history(dialect: str) -> list[str]:
    """Usage history: what each client (by email key) and each inbound moved, in hourly
    buckets (`*_usage`, for 90 days) and daily ones (`*_usage_day`, for a year), each
    starting at `at` (seconds, UTC). One row per bucket and owner, indexed by the bucket
    first: a tick adds to the current hour's rows, all side by side at the index's end
    however long the history, the pruning job finds the oldest hour at its start, and a
    read looks up its owner in each bucket of its range."""
    tables = [
        Table(
            name,
            (
                Column(owner, kind, size),
                Column("at", "bigint"),
                Column("up", "bigint", default=0),
                Column("down", "bigint", default=0),
            ),
            (Index(("at", owner), unique=True),),
        )
        for prefix, owner, kind, size in (
            ("client", "email_key", "str", 255),
            ("inbound", "inbound_id", "int", 0),
        )
        for name in (f"{prefix}_usage", f"{prefix}_usage_day")
    ]
    return [sql for table in tables for sql in table.create(dialect)]


def _v15_unique_mtproto_secrets(dialect: str) -> list[Statement]:
    """MTProto secrets unique, so two clients never share a key: one of each set of
    clients holding one key keeps it (clients that shared a UUID before version 13 got the
    same key from it), the others and any empty key get a fresh random one, then a unique
    index holds it on every backend, also for two requests that save at once."""
    return [
        _rekey_shared_mtproto_secrets,
        create_index("client", Index(("mt_secret",), True), dialect),
    ]


def _v16_natural_email_order(dialect: str) -> list[Statement]:
    """Emails sort in natural order (bulk1, bulk2, bulk10): a stored key (see
    natural_order.py) compared bytewise on every backend, filled for the clients already
    there, and indexed with the id that breaks its ties, so a page in email order walks
    the index. The search index pairs the search text with it instead of the email key,
    so a search's matches still come sorted without reading the table."""
    column = Column("email_order", "str", 255, default="")
    added = add_column("client", column, dialect)
    if dialect == "postgres":
        added = added.replace("VARCHAR(255)", 'VARCHAR(255) COLLATE "C"')
    statements: list[Statement] = [
        added,
        _fill_email_order,
        create_index("client", Index(("email_order", "id")), dialect),
    ]
    if dialect != "mysql":
        statements += [
            "DROP INDEX ix_client_search_key",
            "CREATE INDEX ix_client_search_key ON client (search_key, email_order, id)",
        ]
    return statements


def _v17_client_devices(dialect: str) -> list[str]:
    """Device limits: the devices (client apps' x-hwid) each subscription id was served
    to, one numbered slot each. Both pairs are unique, so a new device is admitted by
    inserting its slot: two devices racing for the last slot cannot both win, on any
    backend, without a lock. Each client gets its own limit (0: the panel's default)."""
    table = Table(
        "client_device",
        (
            Column("sub_id", "str", 64),
            Column("slot", "int"),
            Column("hwid", "str", 128),
            Column("os", "str", 255, default=""),
            Column("os_version", "str", 255, default=""),
            Column("model", "str", 255, default=""),
            Column("user_agent", "str", 255, default=""),
            Column("address", "str", 64, default=""),
            Column("first_seen", "bigint", default=0),
            Column("last_seen", "bigint", default=0),
        ),
        (Index(("sub_id", "hwid"), unique=True), Index(("sub_id", "slot"), unique=True)),
    )
    return [
        add_column("client", Column("device_limit", "int", default=0), dialect),
        *table.create(dialect),
    ]


def _fill_email_order(cur, mark: str) -> None:
    cur.execute("SELECT id, email_key FROM client")
    rows = [(natural_order(key), client_id) for client_id, key in cur.fetchall()]
    if rows:
        cur.executemany(f"UPDATE client SET email_order = {mark} WHERE id = {mark}", rows)


def _rekey_shared_mtproto_secrets(cur, mark: str) -> None:
    """Fresh keys from the operating system's CSPRNG: no SQL function gives random bytes
    on every server version the panel runs on."""
    cur.execute("SELECT id, mt_secret FROM client ORDER BY id")
    rows = cur.fetchall()
    held = {secret for _, secret in rows if secret}
    kept: set[str] = set()
    for client_id, secret in rows:
        if secret and secret not in kept:
            kept.add(secret)
            continue
        fresh = secrets.token_hex(16)
        while fresh in held:
            fresh = secrets.token_hex(16)
        held.add(fresh)
        cur.execute(f"UPDATE client SET mt_secret = {mark} WHERE id = {mark}", (fresh, client_id))


def _v18_client_ip_server(dialect: str) -> list[Statement]:
    """Each address with the server that saw it (empty: this panel; `n<id>`: one of its
    nodes), so a client's limit is judged on the addresses of every server and each
    extra one is refused where it was seen: one row per client, address and server."""
    old = "ix_client_ip_email_key_ip"
    drop = f"DROP INDEX {old} ON client_ip" if dialect == "mysql" else f"DROP INDEX {old}"
    return [
        add_column("client_ip", Column("server", "str", 64, default=""), dialect),
        drop,
        create_index("client_ip", Index(("email_key", "ip", "server"), True), dialect),
    ]


def _v19_cluster_instances(dialect: str) -> list[str]:
    """Several panels on one database: each running instance's row (its own guid from
    its data directory, name, address, version, whether it leads, its last heartbeat),
    and the change log through which MariaDB instances hear of each other's changes
    (PostgreSQL uses LISTEN/NOTIFY and leaves it empty)."""
    instances = Table(
        "panel_instance",
        (
            Column("guid", "str", 64),
            Column("name", "str", 255, default=""),
            Column("address", "str", 255, default=""),
            Column("version", "str", 64, default=""),
            Column("leader", "bool", default=False),
            Column("started_at", "bigint", default=0),
            Column("last_seen", "bigint", default=0),
        ),
        (Index(("guid",), unique=True),),
    )
    changes = Table(
        "change_log",
        (Column("origin", "str", 64), Column("body", "text"), Column("at", "bigint")),
        (Index(("at",)),),
    )
    return [*instances.create(dialect), *changes.create(dialect)]


def _v20_webhooks(dialect: str) -> list[str]:
    """Webhooks: the endpoints events are sent to (the signing secret sealed like node
    tokens), and the outbox: one row per event and endpoint, written in the transaction
    of the change that raised it, with its delivery state beside it. `lease_until` and
    `lease_token` let one deliverer at a time hold a row, whichever panel it runs in; a
    lease that outlives its holder (a crash mid-delivery) lets the row be sent again.
    `webhook_mark` remembers the reminders raised (a client's expiry or quota nearing),
    one row per client and reminder with the expiry or quota it was about, so each is
    raised once and again only for a new expiry or quota."""
    tables = [
        Table(
            "webhook_endpoint",
            (
                Column("name", "str", 64),
                Column("url", "text"),
                Column("secret", "text"),
                Column("events", "text"),
                Column("enabled", "bool", default=True),
                Column("allow_private", "bool", default=False),
                Column("with_secrets", "bool", default=False),
                Column("batch", "bool", default=False),
                Column("created_at", "bigint", default=0),
                Column("updated_at", "bigint", default=0),
            ),
            (Index(("name",), unique=True),),
        ),
        Table(
            "webhook_outbox",
            (
                Column("endpoint_id", "int", references="webhook_endpoint"),
                Column("event_id", "str", 32),
                Column("event", "str", 64),
                Column("subject", "str", 255),
                Column("data", "text"),
                Column("created_at", "bigint", default=0),
                Column("status", "str", 16, default="pending"),
                Column("attempts", "int", default=0),
                Column("next_at", "bigint", default=0),
                Column("lease_until", "bigint", default=0),
                Column("lease_token", "str", 64, default=""),
                Column("last_code", "int", default=0),
                Column("last_error", "str", 255, default=""),
                Column("done_at", "bigint", default=0),
            ),
            (
                Index(("status", "next_at")),
                Index(("endpoint_id", "subject", "status")),
                Index(("endpoint_id", "id")),
                Index(("lease_token",)),
            ),
        ),
        Table(
            "webhook_mark",
            (
                Column("subject", "str", 255),
                Column("event", "str", 64),
                Column("mark", "bigint", default=0),
            ),
            (Index(("subject", "event"), unique=True),),
        ),
    ]
    return [sql for table in tables for sql in table.create(dialect)]


def _v21_trigram_search(dialect: str) -> list[Statement]:
    """PostgreSQL finds a search's substring through a trigram index (pg_trgm's GIN
    operator class answers LIKE '%text%' as written, so the matches are SQLite's) instead
    of scanning every client's search text. pg_trgm ships with PostgreSQL and a database's
    owner may install it; where the panel's role may not, the search stays a scan and the
    log says how to add the index by hand."""
    if dialect != "postgres":
        return []
    return [_trigram_index]


TRIGRAM_INDEX = (
    "CREATE INDEX ix_client_search_trigram ON client USING gin (search_key gin_trgm_ops)"
)


def _trigram_index(cur, mark: str) -> None:
    cur.execute("SAVEPOINT trigram")
    try:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except Exception as exc:
        cur.execute("ROLLBACK TO SAVEPOINT trigram")
        log.warning(
            "searches of clients scan the table: the extension pg_trgm could not be added "
            "(%s); a superuser can run CREATE EXTENSION pg_trgm; and then %s;",
            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
            TRIGRAM_INDEX,
        )
        return
    cur.execute(TRIGRAM_INDEX)


def _v22_traffic_order_on_mariadb(dialect: str) -> list[str]:
    """MariaDB gets the index on each client's total traffic that the others have had
    since migration 5, through a generated column (it indexes no expression): the list
    sorted by traffic orders by that column and reads one page from the index's top. It
    is a decimal, so two counters near the 64-bit maximum still add up (a BIGINT sum
    would refuse the row's write)."""
    if dialect != "mysql":
        return []
    return [
        "ALTER TABLE client_traffic ADD COLUMN used DECIMAL(20, 0) "
        "AS (CAST(up AS DECIMAL(20, 0)) + down) VIRTUAL, "
        "ADD INDEX ix_client_traffic_used (used, id)"
    ]


def _v23_device_refusals(dialect: str) -> list[str]:
    """Webhooks hear of refused devices: each device a subscription refused (beyond its
    limit) is one row, unique per subscription and device, so a refused app polling all
    day is one row and one event. `webhook_mark` gets an index by reminder, so the
    usage reminders of clients back under their quota's first share (a traffic reset)
    are found without reading every reminder. The outbox's index by status and next
    try becomes one by status and id, the order due rows are sent in, so a round walks
    from the first pending row and stops at a claim's worth: by next try, SQLite took
    every pending row and sorted them (10 ms a round at 10,000), and where the
    statistics said otherwise it scanned every delivered row kept before them."""
    table = Table(
        "device_refusal",
        (
            Column("sub_id", "str", 64),
            Column("hwid", "str", 128),
            Column("os", "str", 255, default=""),
            Column("os_version", "str", 255, default=""),
            Column("model", "str", 255, default=""),
            Column("user_agent", "str", 255, default=""),
            Column("address", "str", 64, default=""),
            Column("first_seen", "bigint", default=0),
        ),
        (Index(("sub_id", "hwid"), unique=True),),
    )
    old = "ix_webhook_outbox_status_next_at"
    return [
        *table.create(dialect),
        create_index("webhook_mark", Index(("event",)), dialect),
        f"DROP INDEX {old} ON webhook_outbox" if dialect == "mysql" else f"DROP INDEX {old}",
        create_index("webhook_outbox", Index(("status", "id")), dialect),
    ]


def _v24_login_failures(dialect: str) -> list[str]:
    """Failed sign-ins counted in the database, so the budgets hold across the instances
    sharing it (each kept its own count in memory: three instances gave a guesser three
    budgets). One row a failure per budget it spends, named by the budget's key digest,
    at in milliseconds; read by key within a window, pruned by age."""
    table = Table(
        "login_failure",
        (Column("key_hash", "str", 64), Column("at", "bigint")),
        (Index(("key_hash", "at")), Index(("at",))),
    )
    return table.create(dialect)


def _v25_core_values_per_instance(dialect: str) -> list[str]:
    """The core counter values a tick measures against, kept per instance: every instance
    sharing a networked database runs a core of its own, whose counters are its own. One
    shared value per counter let each instance's ticks overwrite the others', and an
    instance restarting beside them (collecting its orphaned core) measured its core
    against another's. The values already kept belong to the one panel that ran before
    this release (instance '' until it claims them, `traffic_sql.claim_unowned`); a
    client's move off its traffic row into a table keyed by instance and email key."""
    values = Table(
        "client_core_value",
        (
            Column("instance", "str", 64),
            Column("email_key", "str", 255),
            Column("up", "bigint", default=0),
            Column("down", "bigint", default=0),
        ),
        (Index(("instance", "email_key"), unique=True),),
    )
    old = "ix_core_counter_name"
    return [
        add_column("core_counter", Column("instance", "str", 64, default=""), dialect),
        f"DROP INDEX {old} ON core_counter" if dialect == "mysql" else f"DROP INDEX {old}",
        create_index("core_counter", Index(("instance", "name"), unique=True), dialect),
        *values.create(dialect),
        "INSERT INTO client_core_value (instance, email_key, up, down) "
        "SELECT '', email_key, core_up, core_down FROM client_traffic "
        "WHERE core_up <> 0 OR core_down <> 0",
        "ALTER TABLE client_traffic DROP COLUMN core_up",
        "ALTER TABLE client_traffic DROP COLUMN core_down",
    ]


MIGRATIONS: list[tuple[int, str, Step]] = [
    (1, "foundation: settings, admins, sessions, API tokens, inbounds, fallbacks", _v1_foundation),
    (2, "clients: records, attachments, traffic, IPs, external links, groups", _v2_clients),
    (3, "traffic accounting: last core counters, outbound traffic", _v3_core_counters),
    (4, "hosts: per-inbound address and TLS overrides for subscriptions", _v4_hosts),
    (5, "an index to sort clients by traffic", _v5_traffic_order),
    (6, "last core counters of each client on its traffic row", _v6_core_counters_on_traffic),
    (7, "attachments indexed in client order per inbound", _v7_attachments_in_client_order),
    (8, "an index for searching clients", _v8_search_index),
    (9, "sign-in blocks that outlive a restart", _v9_login_blocks),
    (10, "the audit log; API token scopes and expiry", _v10_audit_and_token_scopes),
    (11, "nodes, their last counters, and totals pushed down by a managing panel", _v11_nodes),
    (
        12,
        "outbound subscriptions and the outbounds of their last good refresh",
        _v12_outbound_subscriptions,
    ),
    (13, "MTProto: client secrets, the last counters of the proxy processes", _v13_mtproto),
    (14, "usage history of clients and inbounds in hourly and daily buckets", _v14_usage_history),
    (15, "MTProto secrets unique: shared ones re-keyed", _v15_unique_mtproto_secrets),
    (16, "clients sorted by email in natural order", _v16_natural_email_order),
    (17, "device limits: the devices of subscriptions, a limit per client", _v17_client_devices),
    (18, "client addresses kept with the server that saw them", _v18_client_ip_server),
    (19, "cluster: the instances sharing this database, their change log", _v19_cluster_instances),
    (20, "webhooks: endpoints, the outbox of their deliveries, reminders raised", _v20_webhooks),
    (21, "PostgreSQL: a trigram index for searching clients", _v21_trigram_search),
    (22, "MariaDB: an index to sort clients by traffic", _v22_traffic_order_on_mariadb),
    (
        23,
        "webhooks: the devices refused, reminders by event, due rows in order",
        _v23_device_refusals,
    ),
    (24, "failed sign-ins counted in the database", _v24_login_failures),
    (25, "core counter values kept per instance", _v25_core_values_per_instance),
]
