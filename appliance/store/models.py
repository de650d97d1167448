"""Pony entities mapped onto the tables the migrations create.

Entities are defined per `Database` object (see `define_entities`) rather than at module
level, so one process can open more than one store: `migrate-db` reads one and writes
another, and tests open a fresh database each. Pony never creates or alters tables here
(`create_tables=False`); `check_tables=True` makes a drift between these classes and the
migrations fail at start instead of at the first query.

JSON documents (inbound settings and the like) are text columns; the services
serialise them, so every backend returns the same bytes in the same key order.
"""

from __future__ import annotations

from dataclasses import dataclass

from pony.orm import Database, Optional, Required, Set, composite_key

from appliance.store.client_writes import ClientWrites

# The length Pony checks for the TEXT (LONGTEXT on MariaDB) columns. Given none, Pony
# checks its own VARCHAR default instead, which on MySQL is 255 characters: an inbound's
# settings, a link or the core template longer than that would fail there alone.
TEXT = 1 << 30


@dataclass(frozen=True)
class Entities:
    """The entity classes of one `Database`, each by its name (`store.entities.Client`).

    Pony makes the classes when `define_entities` runs, once per database, so they cannot
    be imported from a module; this class names every one of them in one place, where a
    reader (and an editor) finds each from its use."""

    Setting: type
    Admin: type
    Session: type
    ApiToken: type
    Inbound: type
    Fallback: type
    Client: type
    ClientInbound: type
    ClientTraffic: type
    ClientIp: type
    ClientDevice: type
    ClientLink: type
    ClientGroup: type
    CoreCounter: type
    OutboundTraffic: type
    Host: type
    LoginBlock: type
    AuditEntry: type
    Node: type
    NodeCounter: type
    MasterTraffic: type
    OutboundSub: type
    MtprotoCounter: type
    ClientUsage: type
    ClientUsageDay: type
    InboundUsage: type
    InboundUsageDay: type


def define_entities(db: Database, writes: ClientWrites | None = None) -> Entities:
    """The entities of `db`; writes of clients and their traffic are noted in `writes`."""
    writes = writes if writes is not None else ClientWrites()

    class Setting(db.Entity):
        _table_ = "setting"
        key = Required(str, 64, unique=True)
        value = Optional(str, TEXT, autostrip=False)

    class Admin(db.Entity):
        _table_ = "admin"
        username = Required(str, 64, unique=True, autostrip=False)
        password_hash = Required(str, 255)
        totp_secret = Optional(str, 64)
        totp_enabled = Required(bool, default=False)
        totp_last_step = Required(int, size=64, default=0)
        updated_at = Required(int, size=64, default=0)
        sessions = Set("Session")

    class Session(db.Entity):
        _table_ = "session"
        token_hash = Required(str, 64, unique=True)
        admin = Required(Admin, column="admin_id")
        csrf_token = Required(str, 64)
        created_at = Required(int, size=64)
        expires_at = Required(int, size=64, index="ix_session_expires_at")
        remote_addr = Optional(str, 64)

    class ApiToken(db.Entity):
        _table_ = "api_token"
        name = Required(str, 64, unique=True, autostrip=False)
        token_hash = Required(str, 64, unique=True)
        enabled = Required(bool, default=True)
        created_at = Required(int, size=64)
        scope = Required(str, 16, default="admin")
        expires_at = Required(int, size=64, default=0)  # Unix ms; 0: never

    class Inbound(db.Entity):
        _table_ = "inbound"
        remark = Optional(str, 255, autostrip=False)
        tag = Required(str, 64, unique=True)
        protocol = Required(str, 16)
        listen = Optional(str, 255)
        port = Required(int, index="ix_inbound_port")
        enable = Required(bool, default=True)
        expiry_time = Required(int, size=64, default=0)
        total = Required(int, size=64, default=0)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        settings = Required(str, TEXT, autostrip=False)
        stream_settings = Required(str, TEXT, autostrip=False)
        sniffing = Required(str, TEXT, autostrip=False)
        node_id = Optional(int, nullable=True)
        created_at = Required(int, size=64, default=0)
        updated_at = Required(int, size=64, default=0)
        fallbacks = Set("Fallback", reverse="master")
        fallback_children = Set("Fallback", reverse="child", cascade_delete=True)
        attachments = Set("ClientInbound", cascade_delete=True)
        hosts = Set("Host", cascade_delete=True)

    class Fallback(db.Entity):
        _table_ = "fallback"
        master = Required(Inbound, column="master_id", reverse="fallbacks")
        child = Optional(Inbound, column="child_id", reverse="fallback_children")
        name = Optional(str, 255)
        alpn = Optional(str, 64)
        path = Optional(str, 255)
        dest = Optional(str, 255)
        xver = Required(int, default=0)
        sort_order = Required(int, default=0)

    class Client(db.Entity):
        _table_ = "client"
        email = Required(str, 255, autostrip=False)
        email_key = Required(str, 255, unique=True, autostrip=False)
        email_order = Optional(str, 255, autostrip=False)
        uuid = Required(str, 36)
        password = Required(str, 255, autostrip=False)
        auth = Required(str, 255, autostrip=False)
        flow = Optional(str, 32)
        security = Optional(str, 32)
        reverse_tag = Optional(str, 64)
        sub_id = Required(str, 64, index="ix_client_sub_id")
        total_bytes = Required(int, size=64, default=0)
        expiry_time = Required(int, size=64, default=0, index="ix_client_expiry_time")
        limit_ip = Required(int, default=0)
        reset_days = Required(int, default=0)
        device_limit = Required(int, default=0)
        tg_id = Required(int, size=64, default=0)
        comment = Optional(str, 1024, autostrip=False)
        enable = Required(bool, default=True)
        group_name = Optional(str, 64, index="ix_client_group_name")
        ad_tag = Optional(str, 32)
        mt_secret = Optional(str, 32)
        method = Optional(str, 64)
        search_key = Optional(str, TEXT, autostrip=False)
        created_at = Required(int, size=64, default=0)
        updated_at = Required(int, size=64, default=0)
        attachments = Set("ClientInbound", cascade_delete=True)
        links = Set("ClientLink", cascade_delete=True)

        def after_insert(self):
            writes.note(ids=(self.id,), recount=True)

        def after_update(self):
            writes.note(ids=(self.id,))

        def before_delete(self):
            writes.note(ids=(self.id,), recount=True)

    class ClientInbound(db.Entity):
        _table_ = "client_inbound"
        client = Required(Client, column="client_id")
        inbound = Required(Inbound, column="inbound_id")
        composite_key(client, inbound)

    class ClientTraffic(db.Entity):
        _table_ = "client_traffic"
        email_key = Required(str, 255, unique=True, autostrip=False)
        email = Required(str, 255, autostrip=False)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        enable = Required(bool, default=True)
        last_online = Required(int, size=64, default=0)

        def after_insert(self):
            writes.note(keys=(self.email_key,))

        def after_update(self):
            writes.note(keys=(self.email_key,))

        def before_delete(self):
            writes.note(keys=(self.email_key,))

    class ClientIp(db.Entity):
        _table_ = "client_ip"
        email_key = Required(str, 255, autostrip=False)
        ip = Required(str, 64)
        seen_at = Required(int, size=64, default=0)
        server = Optional(str, 64, default="", autostrip=False)
        composite_key(email_key, ip, server)

    class ClientDevice(db.Entity):
        _table_ = "client_device"
        sub_id = Required(str, 64, autostrip=False)
        slot = Required(int)
        hwid = Required(str, 128, autostrip=False)
        os = Optional(str, 255, autostrip=False)
        os_version = Optional(str, 255, autostrip=False)
        model = Optional(str, 255, autostrip=False)
        user_agent = Optional(str, 255, autostrip=False)
        address = Optional(str, 64)
        first_seen = Required(int, size=64, default=0)
        last_seen = Required(int, size=64, default=0)
        composite_key(sub_id, hwid)
        composite_key(sub_id, slot)

    class ClientLink(db.Entity):
        _table_ = "client_link"
        client = Required(Client, column="client_id")
        kind = Required(str, 16)
        value = Required(str, TEXT, autostrip=False)
        remark = Optional(str, 255, autostrip=False)
        sort_order = Required(int, default=0)

    class ClientGroup(db.Entity):
        _table_ = "client_group"
        name = Required(str, 64, autostrip=False)
        name_key = Required(str, 64, unique=True, autostrip=False)

    class CoreCounter(db.Entity):
        _table_ = "core_counter"
        instance = Optional(str, 64, default="", autostrip=False)
        name = Required(str, 255, autostrip=False)
        value = Required(int, size=64, default=0)
        composite_key(instance, name)

    class OutboundTraffic(db.Entity):
        _table_ = "outbound_traffic"
        tag = Required(str, 255, unique=True, autostrip=False)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)

    class Host(db.Entity):
        _table_ = "host"
        inbound = Required(Inbound, column="inbound_id")
        remark = Required(str, 255, autostrip=False)
        address = Optional(str, 255)
        port = Required(int, default=0)
        security = Required(str, 16, default="same")
        sni = Optional(str, 255)
        tags = Required(str, TEXT, autostrip=False)
        enable = Required(bool, default=True)
        sort_order = Required(int, default=0)

    class LoginBlock(db.Entity):
        _table_ = "login_block"
        pair_hash = Required(str, 64, unique=True)
        blocked_until = Required(int, size=64)

    class AuditEntry(db.Entity):
        _table_ = "audit_entry"
        at = Required(int, size=64, index="ix_audit_entry_at")
        actor = Optional(str, 64, autostrip=False, index="ix_audit_entry_actor")
        actor_kind = Optional(str, 8)
        method = Required(str, 8)
        route = Required(str, 255, autostrip=False, index="ix_audit_entry_route")
        path = Required(str, 1024, autostrip=False)
        target = Optional(str, 1024, autostrip=False)
        address = Optional(str, 64)
        success = Required(bool, default=False)
        status = Required(int, default=200)
        message = Optional(str, 1024, autostrip=False)
        fields = Optional(str, 1024)

    class Node(db.Entity):
        _table_ = "node"
        name = Required(str, 64, unique=True, autostrip=False)
        remark = Optional(str, 255, autostrip=False)
        scheme = Required(str, 8, default="https")
        address = Required(str, 255)
        port = Required(int)
        base_path = Required(str, 255, default="/")
        api_token = Required(str, TEXT, autostrip=False)
        enable = Required(bool, default=True)
        allow_private_address = Required(bool, default=False)
        tls_verify_mode = Required(str, 8, default="system")
        cert_fingerprint = Optional(str, 64)
        # What the heartbeat and the deployments write while an admin may be editing
        # the record: the last write wins, never an optimistic-check error.
        guid = Optional(str, 36, optimistic=False)
        parent_guid = Optional(str, 36, optimistic=False)
        panel_version = Optional(str, 32, optimistic=False)
        core_version = Optional(str, 64, optimistic=False)
        last_heartbeat = Required(int, size=64, default=0, optimistic=False)
        dirty = Required(bool, default=False, optimistic=False)
        created_at = Required(int, size=64, default=0)
        updated_at = Required(int, size=64, default=0)

    class NodeCounter(db.Entity):
        _table_ = "node_counter"
        node_id = Required(int)
        name = Required(str, 255, autostrip=False)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        composite_key(node_id, name)

    class MasterTraffic(db.Entity):
        _table_ = "master_traffic"
        master_guid = Required(str, 36)
        email_key = Required(str, 255, autostrip=False, index="ix_master_traffic_email_key")
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        updated_at = Required(int, size=64, default=0)
        composite_key(master_guid, email_key)

    class OutboundSub(db.Entity):
        _table_ = "outbound_sub"
        remark = Optional(str, 255, autostrip=False)
        url = Required(str, TEXT, autostrip=False)
        tag_prefix = Optional(str, 64, autostrip=False)
        update_interval = Required(int, default=600)
        enabled = Required(bool, default=True)
        allow_private = Required(bool, default=False)
        prepend = Required(bool, default=False)
        sort_order = Required(int, default=0, index="ix_outbound_sub_sort_order")
        outbounds = Required(str, TEXT, autostrip=False)
        last_refresh = Required(int, size=64, default=0)
        last_attempt = Required(int, size=64, default=0)
        last_error = Optional(str, 1024, autostrip=False)
        created_at = Required(int, size=64, default=0)

    class MtprotoCounter(db.Entity):
        _table_ = "mtproto_counter"
        inbound_id = Required(int)
        instance = Optional(str, 32)
        email_key = Required(str, 255, autostrip=False)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        composite_key(inbound_id, email_key)

    class ClientUsage(db.Entity):
        _table_ = "client_usage"
        email_key = Required(str, 255, autostrip=False)
        at = Required(int, size=64)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        composite_key(at, email_key)

    class ClientUsageDay(db.Entity):
        _table_ = "client_usage_day"
        email_key = Required(str, 255, autostrip=False)
        at = Required(int, size=64)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        composite_key(at, email_key)

    class InboundUsage(db.Entity):
        _table_ = "inbound_usage"
        inbound_id = Required(int)
        at = Required(int, size=64)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        composite_key(at, inbound_id)

    class InboundUsageDay(db.Entity):
        _table_ = "inbound_usage_day"
        inbound_id = Required(int)
        at = Required(int, size=64)
        up = Required(int, size=64, default=0)
        down = Required(int, size=64, default=0)
        composite_key(at, inbound_id)

    return Entities(
        Setting=Setting,
        Admin=Admin,
        Session=Session,
        ApiToken=ApiToken,
        Inbound=Inbound,
        Fallback=Fallback,
        Client=Client,
        ClientInbound=ClientInbound,
        ClientTraffic=ClientTraffic,
        ClientIp=ClientIp,
        ClientDevice=ClientDevice,
        ClientLink=ClientLink,
        ClientGroup=ClientGroup,
        CoreCounter=CoreCounter,
        OutboundTraffic=OutboundTraffic,
        Host=Host,
        LoginBlock=LoginBlock,
        AuditEntry=AuditEntry,
        Node=Node,
        NodeCounter=NodeCounter,
        MasterTraffic=MasterTraffic,
        OutboundSub=OutboundSub,
        MtprotoCounter=MtprotoCounter,
        ClientUsage=ClientUsage,
        ClientUsageDay=ClientUsageDay,
        InboundUsage=InboundUsage,
        InboundUsageDay=InboundUsageDay,
    )
