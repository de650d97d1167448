"""The panel: builds the store, the services, the servers and the jobs, and runs them.

`Panel` is the one object that knows every part. It builds them in the order they need
each other, one named step per area, each part taking what it needs when it is made (no
collaborator is filled in later or left to a silent default), then subscribes every
consumer to the change notice (`follow_changes`, consumers.py). Each route table is
handed only the parts it calls, as declared beside its routes (`ClientRouteNeeds` and
the like), by `routes_of` (routes.py). It also owns what spans services: the ports the panel holds
(which inbounds must not take), settings changes that involve two-factor, and restarting
the process.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import signal
import socket
import ssl
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING

import gevent
from gevent.event import Event

from appliance import __version__
from appliance.app.background import start_jobs
from appliance.app.consumers import follow_changes
from appliance.app.door_tls import ask_for_node_certificates, door_tls, trusted_ca
from appliance.app.routes import routes_of
from appliance.config import ENV, SETTING_OVERRIDES, Options
from appliance.core.process import CoreProcess
from appliance.errors import ServiceError
from appliance.links import YAML_EMITTER
from appliance.runtime.browser_addresses import browser_urls
from appliance.runtime.changes import Change, ChangeNotice
from appliance.runtime.environment import self_command
from appliance.runtime.file_paths import CERTS_DIR, FilePlaces
from appliance.runtime.jobs import LeaderJobs, breathe, every
from appliance.runtime.timings import TimingsByName
from appliance.runtime.workers import (
    ChangeCounter,
    DemandMeter,
    WorkerPool,
    accept_unless,
    idle_seconds,
    worker_count,
)
from appliance.services.accounts.auth import Auth
from appliance.services.accounts.tokens import Tokens
from appliance.services.admin.audit import AuditLog
from appliance.services.admin.backups import Backups
from appliance.services.admin.cluster import Cluster, Instance, instance_guid, local_address
from appliance.services.admin.settings import Settings, allowed_host_names
from appliance.services.admin.settings_rules import (
    parse_host_names,
    parse_percents,
    trusted_networks,
)
from appliance.services.admin.status import STEP_SECONDS, History, StatusSampler
from appliance.services.admin.tgbot import ChatBot
from appliance.services.admin.tgnotices import BotNotices
from appliance.services.admin.update import PanelUpdate
from appliance.services.clients.bulk import ClientBulk
from appliance.services.clients.counters import CounterFeed, CounterJournal
from appliance.services.clients.devices import Devices
from appliance.services.clients.groups import Groups
from appliance.services.clients.ips import ClientIps
from appliance.services.clients.mtproto_traffic import MtprotoAccounting
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.clients.records import Clients
from appliance.services.clients.sub_address import SubscriptionAddress
from appliance.services.clients.sub_templates import SubTemplates
from appliance.services.clients.subscriptions import Subscriptions, drops_inbounds
from appliance.services.clients.traffic import TrafficAccounting
from appliance.services.clients.usage import UsageHistory
from appliance.services.control.metrics import CoreMetrics
from appliance.services.control.mtproto import MtprotoService
from appliance.services.control.probe import OutboundProbe
from appliance.services.control.releases import CoreReleases, installed_binary
from appliance.services.control.routing import CoreRouting
from appliance.services.control.supervisor import CoreService
from appliance.services.inbounds.core_reads import CoreInbounds
from appliance.services.inbounds.hosts import Hosts
from appliance.services.inbounds.records import Inbounds
from appliance.services.nodes.addresses import NodeAddresses
from appliance.services.nodes.deploy import NodeDeploy
from appliance.services.nodes.fleet import Fleet
from appliance.services.nodes.health import NodeHealth
from appliance.services.nodes.link import Identity
from appliance.services.nodes.master_traffic import MasterTraffic
from appliance.services.nodes.operations import NodeOperations
from appliance.services.nodes.parent import ManagingPanel
from appliance.services.nodes.records import Nodes
from appliance.services.nodes.sealing import KEY_FILE, NODE_KEY_ENV, TokenSeal, node_key
from appliance.services.nodes.traffic import NodeTraffic
from appliance.services.nodes.tree import NodeTree
from appliance.services.nodes.trust import MutualTls, SharedCa
from appliance.services.outbounds.subscriptions import OutboundSubs, SubscribedOutbounds
from appliance.services.webhooks.core_watch import CoreWatch
from appliance.services.webhooks.deliverer import Deliverer, lease_owner
from appliance.services.webhooks.devices import NewDevices
from appliance.services.webhooks.endpoints import Webhooks
from appliance.services.webhooks.outbox import Outbox
from appliance.services.webhooks.reminders import Reminders
from appliance.store import Store
from appliance.sub.app import SubscriptionApp
from appliance.web.api import SESSION_KEY, ApiNeeds, build_app
from appliance.web.connections import ConnectionLimits
from appliance.web.http import host_allowed
from appliance.web.hub import Hub
from appliance.web.server import (
    BasePath,
    HostCheck,
    listen,
    make_server,
)
from appliance.web.session_routes import websocket_refusal

if TYPE_CHECKING:
    import bottle
    from gevent.pywsgi import WSGIServer

    from appliance.web.routes import Route

log = logging.getLogger(__name__)

TWO_FACTOR_KEYS = ("twoFactorEnable", "twoFactorToken", "twoFactorCode")
RESTART_EXIT_GRACE = 1
RESTART_AFTER_RESTORE = 2
RESTART_AFTER_UPDATE = 3


class Panel:
    def __init__(self, options: Options):
        self.options = options
        self._build_foundation()
        self._build_clients()
        self._build_nodes()
        self._build_core()
        self._build_inbounds()
        self._build_administration()
        self._build_doors()
        follow_changes(self.notice, self)

    # ---- building, in the order the parts need each other ---------------------------

    def _build_foundation(self) -> None:
        """The store, the change notice, the settings and what only counts or tells."""
        options = self.options
        self.store = Store(options.db)
        self.places = FilePlaces(options.data_dir, options.cert_dirs)
        self.notice = ChangeNotice()
        # The jobs that run once among the panels on this database; who leads them.
        self.leader_jobs = LeaderJobs()
        self.cluster = Cluster(self.store, self.notice, self.leader_jobs)
        self.settings = Settings(self.store, self.places, self.notice)
        self.hub = Hub()
        self.presence = Presence()
        self.counter_journal = CounterJournal()
        self.store.client_writes.watch(self.counter_journal.note)
        self.counter_feed = CounterFeed(self.store, self.counter_journal)
        self.bound: dict[str, tuple[str, int]] = {}
        # The core's process, before anything that asks what the core can run.
        core_dir = self.places.core_dir
        binary = options.core or installed_binary(core_dir)
        self.core_process = CoreProcess(binary, core_dir, self._core_state, pause=breathe)

    def _build_clients(self) -> None:
        store = self.store
        self.outbox = Outbox(store)
        self.clients = Clients(store, self.notice, self.core_process.check_features, self.outbox)
        self.client_query = ClientQuery(store, self.settings, self.presence)
        self.managing_panel = ManagingPanel(self.settings)
        self.client_bulk = ClientBulk(self.clients, self.client_query, self.managing_panel.guid)
        self.master_traffic = MasterTraffic(store, self.managing_panel.guid)
        self.groups = Groups(store)
        self.subscriptions = Subscriptions(store, self.settings)
        self.devices = Devices(store, self.settings, self.notice)
        self.sub_address = SubscriptionAddress(self.settings, self.sub_port)
        self.sub_templates = SubTemplates(
            self.settings,
            self.subscriptions,
            self.options.data_dir,
            core_test=self.core_process.test,
            sub_url=self.sub_address.url,
        )
        here = partial(instance_guid, self.options.data_dir)
        self.accounting = TrafficAccounting(store, self.presence, self.outbox, here)
        self.usage = UsageHistory(store)
        # Built before the core starts: it begins reading at the access log's end.
        self.client_ips = ClientIps(
            store,
            self.settings,
            access_log=self.places.core_log("access"),
            limit_log=os.path.join(self.options.data_dir, "logs", "ip-limit.log"),
        )

    def _build_nodes(self) -> None:
        """The panels this one manages: records, heartbeat, traffic and what runs there."""
        data_dir = self.options.data_dir
        seal = TokenSeal(partial(node_key, data_dir, dict(os.environ)))
        self.nodes = Nodes(self.store, seal, self.notice, self.outbox)
        # Webhook secrets are sealed with the key node tokens are.
        self.webhooks = Webhooks(self.store, seal, self.outbox, self.notice)
        owner = lease_owner(data_dir)
        self.deliverer = Deliverer(
            self.store,
            seal,
            owner,
            fault=self.store.unavailable,
            leading=lambda: self.leader_jobs.leading,
        )
        percents = lambda: parse_percents(self.settings.get("webhookUsagePercents"))  # noqa: E731
        self.reminders = Reminders(self.store, self.outbox, percents)
        self.mtls = MutualTls(data_dir, self.guid, shared=SharedCa.of(self.store, seal))
        # Whether node-token callers need a certificate the trusted CA signed (at start).
        self.node_certificates_needed = False
        self.node_health = NodeHealth(self.nodes, self.node_identity, self.notice, self.outbox)
        self.node_traffic = NodeTraffic(
            self.nodes,
            self.node_health,
            self.node_identity,
            self.presence,
            self.client_query,
            self.counter_journal,
            sweep=self.client_bulk.disable_depleted,
            addresses=NodeAddresses(self.client_ips),
        )
        self.fleet = Fleet(
            self.nodes,
            self.node_health,
            self.node_identity,
            self.node_traffic,
            self.client_query.depleted_sql,
        )
        self.deploy = NodeDeploy(
            self.store, self.nodes, self.node_health, self.node_identity, self.settings
        )
        self.node_operations = NodeOperations(self.nodes, self.node_health, self.node_identity)
        self.node_tree = NodeTree(self.nodes, self.node_health, self.node_identity)

    def _build_core(self) -> None:
        """The core and the MTProto proxies, from the reads they need of inbounds and
        outbound subscriptions; the services that ask them to test a save come after."""
        core_dir = self.places.core_dir
        self.subscribed_outbounds = SubscribedOutbounds(self.store)
        self.core = CoreService(
            store=self.store,
            process=self.core_process,
            workdir=core_dir,
            places=self.places,
            inbounds=CoreInbounds(self.store, self.places, self.reserved_ports),
            core_clients=self.client_query.core_clients,
            client_views=self.clients.core_views,
            settings=self.settings,
            accounting=self.accounting,
            sweep=self.client_bulk.disable_depleted,
            hub=self.hub,
            notice=self.notice,
            client_ips=self.client_ips,
            extra_outbounds=self.subscribed_outbounds.core_outbounds,
        )
        self.outbound_subs = OutboundSubs(self.store, self.notice, check=self.core.check_outbounds)
        self.mtproto = MtprotoService(
            store=self.store,
            settings=self.settings,
            accounting=MtprotoAccounting(self.store, self.presence),
            workdir=os.path.join(self.options.data_dir, "mtproto"),
            sweep=self.client_bulk.disable_depleted,
            on_state=self._mtproto_state,
            client_ips=self.client_ips,
        )
        self.core_releases = CoreReleases(self.settings, core_dir, self.core)
        self.core_probe = OutboundProbe(
            self.core.process, self.settings, os.path.join(self.options.data_dir, "probes")
        )
        self.core_routing = CoreRouting(self.core)
        self.core_metrics = CoreMetrics(self.core)
        self.core_watch = CoreWatch(self.outbox, self.core.info)
        self.new_devices = NewDevices(self.store, self.outbox)

    def _build_inbounds(self) -> None:
        """Inbounds, tested by the core and placed on nodes as they are saved."""
        self.inbounds = Inbounds(
            self.store,
            self.reserved_ports,
            self.client_query.by_inbound,
            places=self.places,
            notice=self.notice,
            held_sockets=self.held_sockets,
            check_config=self.core.check_candidate,
            place_on_node=self.deploy.inbound_saved,
            node_marks=self.deploy.marks,
            node_save_failed=self.deploy.save_failed,
        )
        self.hosts = Hosts(self.store, self.notice)

    def _build_administration(self) -> None:
        """Backups, the chat bot, accounts, the audit log and panel updates."""
        self.backups = Backups(self.store, self.options.data_dir, self.core, self.after_restore)
        self.chat_bot = ChatBot(self.settings, self.backups)
        self.bot_notices = BotNotices(
            self.settings, self.chat_bot, self.client_query.nearing_limits, self.clients.traffic
        )
        self.auth = Auth(
            self.store, self.settings, self.notice, self.bot_notices.sign_in, self.outbox
        )
        self.tokens = Tokens(self.store)
        self.audit = AuditLog(self.store, self.settings)
        self.panel_update = PanelUpdate(
            self.settings, partial(self.restart_later, RESTART_AFTER_UPDATE)
        )

    def _build_doors(self) -> None:
        """What the ports, the status page and the sub-workers keep while serving."""
        self.web_tls = False  # whether the panel port serves TLS in this run
        self.history = History()
        self.started = time.time()
        self.request_timings = TimingsByName()  # panel calls by route group, for /metrics
        self.sampler = StatusSampler(__version__, self.core_info, self.presence.online_count)
        self.base_path = "/"
        self.connection_limits = ConnectionLimits(
            self.options.header_timeout,
            self.options.body_timeout,
            self.options.sub_connections_per_address,
        )
        self._status: tuple[float, dict | None] = (0.0, None)
        self._servers: list = []
        # Subscription workers (up to one per core) and what they share with the panel.
        self.sub_workers: WorkerPool | None = None
        self._changes: ChangeCounter | None = None
        self._sub_sock = None
        self._stopped = Event()
        self._hosts: tuple[tuple[str, ...], frozenset[str] | None] = ((), None)

    # ---- start-up ----------------------------------------------------------------------

    def open(self) -> tuple[str, str] | None:
        """Open and migrate the database; returns first-run credentials, if created now."""
        with self.store.starting():
            return self._open_and_seed()

    def _open_and_seed(self) -> tuple[str, str] | None:
        self.open_store()
        if not self.settings.internal("panelGuid"):
            self.settings.set_internal("panelGuid", str(uuid.uuid4()))
        self.nodes.seal.load()
        sealed, unopened = self.nodes.seal_stored()
        if sealed:
            log.info("%d node API token(s) sealed at rest", sealed)
        if unopened:
            log.warning(
                "the API tokens of node(s) %s are sealed with a key this panel does not have "
                "(another host's %s, or another %s): enter each node's token again, or start "
                "with that key",
                ", ".join(unopened),
                KEY_FILE,
                NODE_KEY_ENV,
            )
        self.auth.restore_blocks()
        self.sub_templates.seed()
        return self.auth.bootstrap()

    def guid(self) -> str:
        """This panel's identity among nodes: the key of the per-guid client maps."""
        return self.settings.internal("panelGuid")

    def node_identity(self) -> Identity:
        """What this panel presents to the nodes it manages."""
        return Identity(self.guid(), self.mtls.client_certificate)

    def open_store(self) -> None:
        """Open, migrate and load settings without creating an admin: offline commands
        must not invent an account whose password nobody ever sees."""
        self.store.open()
        self.settings.load()

    def routes(self) -> list[Route]:
        """Every route of the panel port (see `routes_of`)."""
        return routes_of(self)

    def web_app(self) -> bottle.Bottle:
        """The panel port's app: the routes and the one plugin that wraps them all."""
        needs = ApiNeeds(
            auth=self.auth,
            tokens=self.tokens,
            collect_changes=self.notice.collecting,
            unavailable=self.store.unavailable,
            audit=self.audit,
            trusted_proxies=self.trusted_proxies,
            core_lag=self.core.out_of_step,
            managed_by=self.managing_panel.called_by,
            node_certificate_needed=lambda: self.node_certificates_needed,
            writes_refused=self.cluster.writes_refused,
            request_timings=self.request_timings,
        )
        return build_app(needs, self.routes())

    def serve(self, on_listening: Callable[[list[str]], None] | None = None) -> None:
        """Listen on both ports and run until stopped; never returns on restart.
        `on_listening` gets the URLs a browser can use once both ports are bound."""
        self.base_path = self.settings.get("webBasePath")
        node_ca = self._trusted_ca()
        panel_app = HostCheck(BasePath(self.web_app(), self.base_path), self.allowed_hosts)
        web_host = self.options.listen or self.settings.get("webListen") or "0.0.0.0"
        sub_host = self.settings.get("subListen") or web_host
        web_sock = _listen_or_explain(web_host, self._web_port_wanted(), "the panel")
        try:
            sub_sock = _listen_or_explain(
                sub_host, self._sub_port_wanted(), "the subscription server"
            )
        except ServiceError:
            web_sock.close()
            raise
        self.bound = {"web": web_sock.getsockname()[:2], "sub": sub_sock.getsockname()[:2]}
        # Listed among the panels on this database before anyone can ask for the list.
        self.cluster.start(self._instance(), self.store.unavailable)
        tls = self._tls("web")
        self.web_tls = tls is not None
        if tls is not None and node_ca:
            ask_for_node_certificates(tls, node_ca)
        sub_tls = self._tls("sub")
        limits = self.connection_limits
        self._servers = [
            make_server(
                web_sock, panel_app, limits, tls=tls, upgrade_allowed=self._websocket_allowed
            )
        ]
        workers = worker_count(self.options.sub_workers)
        on_demand = self.options.sub_workers is None and workers > 1
        sub_server = None
        if workers == 1 or on_demand:
            sub_app = SubscriptionApp(self.settings, self.subscriptions, self.devices)
            if on_demand:
                sub_app = DemandMeter(sub_app, self._more_sub_workers)
            sub_server = make_server(
                sub_sock, sub_app, limits, tls=sub_tls, cap_exempt=self.trusted_proxies
            )
            self._servers.append(sub_server)
        if workers > 1:
            self._start_sub_workers(sub_sock, sub_tls is not None, workers, sub_server)
        # Before the first line that says the panel listens: whoever reads it may stop
        # the panel at once (systemd, a script) or put a certificate in its folder.
        gevent.signal_handler(signal.SIGTERM, self._stopped.set)
        gevent.signal_handler(signal.SIGINT, self._stopped.set)
        os.makedirs(self.places.core_dir, exist_ok=True)
        os.makedirs(os.path.join(self.options.data_dir, CERTS_DIR), exist_ok=True)
        os.makedirs(self.places.sockets_dir, exist_ok=True)
        os.makedirs(self.places.www_dir, exist_ok=True)
        for server in self._servers:
            server.start()
        scheme = "https" if tls else "http"
        log.info("panel listening on %s://%s:%d%s", scheme, *self.bound["web"], self.base_path)
        sub_scheme = "https" if sub_tls else "http"
        log.info(
            "subscription server listening on %s://%s:%d/ %s (YAML written by the %s emitter)",
            sub_scheme,
            *self.bound["sub"],
            f"in the panel process and up to {workers} worker processes on demand"
            if on_demand
            else f"in {workers} worker processes"
            if workers > 1
            else "in the panel process",
            YAML_EMITTER,
        )
        log.info("connections: %s", limits.describe())
        if on_listening is not None:
            on_listening(browser_urls(scheme, *self.bound["web"], self.base_path))
        fault = self.store.unavailable
        every(STEP_SECONDS, self.sample_status, "status", fault)
        every(STEP_SECONDS, self.close_ended_sockets, "WebSocket sessions", fault)
        self.core.start()
        self.mtproto.start()
        self.devices.start()
        self.deliverer.start()
        start_jobs(self, fault)
        self.client_query.book.warm()
        self._stopped.wait()
        self.stop()

    def _instance(self) -> Instance:
        """This process among the panels on its database (see `Cluster`)."""
        url, port = self.store.url, self.bound["web"][1]
        toward = None if url.kind == "sqlite" else (url.host, url.port)
        return Instance(
            guid=instance_guid(self.options.data_dir),
            name=self.options.instance_name or socket.gethostname(),
            address=self.options.instance_address or local_address(toward, port),
            version=__version__,
        )

    def node_heartbeat(self) -> None:
        """Every node's health, then a reconcile of each online node out of step."""
        self.node_health.beat_all()
        self.deploy.catch_up()

    def _start_sub_workers(self, sock, tls: bool, count: int, own: WSGIServer | None) -> None:
        """Serve the subscription socket with `count` worker processes (runtime.workers):
        from now on, or, when the panel serves it too (`own`), once that is busy, the
        panel then leaving the socket to them while all run. The panel keeps the socket
        open, so the port stays bound while one restarts."""
        on_demand = own is not None
        self._sub_sock = sock
        self._changes = ChangeCounter.create()
        spec = {
            "db": self.options.db,
            "dataDir": self.options.data_dir,
            "certDirs": list(self.options.cert_dirs),
            "logLevel": self.options.log_level,
            "listenFd": sock.fileno(),
            "counterFd": self._changes.fileno(),
            # Only a pair that loaded here (see _tls); otherwise plain HTTP, as in-process.
            "certFile": self.settings.get("subCertFile") if tls else "",
            "keyFile": self.settings.get("subKeyFile") if tls else "",
            "idleSeconds": idle_seconds() if on_demand else 0,
            "limits": dataclasses.asdict(self.connection_limits),
        }
        self.sub_workers = WorkerPool(
            self_command("sub-worker"),
            spec,
            (sock.fileno(), self._changes.fileno()),
            count,
            describe="subscription worker",
            on_demand=on_demand,
            on_full=accept_unless(own) if on_demand else None,
        )
        self.sub_workers.start()

    def _more_sub_workers(self) -> None:
        if self.sub_workers is not None:
            self.sub_workers.grow()

    def _tls(self, door: str) -> ssl.SSLContext | None:
        """The TLS context of the `web` (panel) or `sub` (subscription) port, or None."""
        return door_tls(self.settings, self.places, door)

    def _trusted_ca(self) -> str:
        """The CA node-token callers must be signed by in this run ("" for none); notes
        whether they must bring a certificate (see `trusted_ca`)."""
        trusted, self.node_certificates_needed = trusted_ca(self.mtls)
        return trusted

    def count_change(self, change: Change) -> None:
        """Tell the subscription workers a change they render arrived (while they run)."""
        if self._changes is not None:
            self._changes.bump(inbounds=drops_inbounds(change.resource))

    def close_sockets_of(self, change: Change) -> None:
        """Sessions ended: close their WebSockets (any of them: ask which still live)."""
        if change.ids is None:
            self.close_ended_sockets()
        else:
            self.hub.close_sessions(set(change.ids))

    def held_sockets(self) -> list:
        """The sockets the core and the MTProto proxies listen on now."""
        return self.core.held_sockets() + self.mtproto.held_sockets()

    def _websocket_allowed(self, environ: dict) -> bool:
        """Upgrade only `/ws` under the base path, only from the panel's own pages and
        only for a signed-in session; the route answers every other upgrade request.

        The session found is handed on to the route, which then subscribes the socket
        without reading the database: a read there could yield (networked databases) after
        the handshake went out, and a message published meanwhile would miss the socket."""
        if environ.get("PATH_INFO") != self.base_path + "ws":
            return False
        if not host_allowed(environ, self.allowed_hosts()):
            return False
        if websocket_refusal(environ, self.trusted_proxies(), self.origin_names()):
            return False
        cookies = SimpleCookie(environ.get("HTTP_COOKIE", ""))
        morsel = cookies.get(self.auth.cookie_name)
        session = None if morsel is None else self.auth.session(morsel.value)
        environ[SESSION_KEY] = session
        return session is not None

    def close_ended_sockets(self) -> None:
        """Close the WebSockets of sessions that ended where `Auth` could not say so at
        once: expiry, `admin reset` run offline, another process on the same database.
        While the database is unavailable nothing can be told, and the next round asks."""
        open_ids = self.hub.session_ids()
        if not open_ids:
            return
        try:
            live = self.auth.live_sessions(open_ids)
        except Exception as exc:
            unavailable = self.store.unavailable(exc)
            if unavailable is None:
                raise
            log.debug("WebSocket sessions not checked: %s", unavailable.msg)
            return
        self.hub.close_sessions(open_ids - live)

    def stop(self) -> None:
        self.cluster.stop()
        self.mtproto.shutdown()
        self.core.shutdown()
        # The workers first: one leaving meanwhile would have the panel accept again.
        if self.sub_workers is not None:
            self.sub_workers.stop()
        for server in self._servers:
            server.stop(timeout=RESTART_EXIT_GRACE)
        self._servers = []
        if self.sub_workers is not None:
            self.sub_workers = None
            self._sub_sock.close()
            self._changes.close()
            self._changes = None
        self.subscriptions.close()
        self.devices.close()
        self.store.close()
        log.info("panel stopped")

    def after_restore(self) -> None:
        """A restored database replaced every record: read the settings again at once,
        then restart, so no service keeps a value it read from the old data."""
        self.settings.load()
        self.store.client_writes.committed(everything=True)
        self.restart_later(RESTART_AFTER_RESTORE)

    def restart_later(self, seconds: float) -> None:
        self.hub.notify("Panel restart", f"The panel restarts in {seconds:g} seconds.", "warning")
        gevent.spawn_later(seconds, self._restart)

    def _restart(self) -> None:
        log.info("restarting the panel process")
        self.stop()
        argv = sys.argv if getattr(sys, "frozen", False) else sys.orig_argv
        os.execv(sys.executable, [sys.executable, *argv[1:]])

    # ---- ports ---------------------------------------------------------------------------

    def _web_port_wanted(self) -> int:
        return self.options.port if self.options.port is not None else self.settings.get("webPort")

    def _sub_port_wanted(self) -> int:
        if self.options.sub_port is not None:
            return self.options.sub_port
        return self.settings.get("subPort")

    def sub_port(self) -> int:
        """The subscription server's port: the bound one once it listens."""
        return self.bound["sub"][1] if "sub" in self.bound else self._sub_port_wanted()

    def overrides(self) -> dict[str, dict]:
        """Settings a flag or environment variable of this run overrides: the flag, the
        variable and the value in effect (the port bound, for a port given as 0)."""
        bound = {"webPort": self.bound.get("web"), "subPort": self.bound.get("sub")}
        found = {}
        for option, flag, setting in SETTING_OVERRIDES:
            value = getattr(self.options, option)
            if value is None:
                continue
            if bound.get(setting):
                value = bound[setting][1]
            found[setting] = {"flag": flag, "env": ENV[option], "value": value}
        return found

    def reserved_ports(self) -> list[tuple[str, int, str]]:
        """Ports inbounds must not take: the panel's and the subscription server's."""
        web = self.bound.get("web", (self.settings.get("webListen"), self._web_port_wanted()))
        sub = self.bound.get("sub", (self.settings.get("subListen"), self._sub_port_wanted()))
        return [
            (_wildcard(web[0]), web[1], "the panel itself"),
            (_wildcard(sub[0]), sub[1], "the subscription server"),
        ]

    def trusted_proxies(self) -> tuple:
        return trusted_networks(self.settings.get("trustedProxies"))

    def allowed_hosts(self) -> frozenset[str] | None:
        """Host names the panel answers to, None for any: those of the settings, plus
        the address it listens on when that is one address (loopback always works)."""
        listen = self.options.listen or self.settings.get("webListen")
        key = (self.settings.get("webAllowedHosts"), self.settings.get("webDomain"), listen)
        if key != self._hosts[0]:
            names = allowed_host_names(key[0], key[1])
            if names is not None and listen not in ("", "0.0.0.0", "::"):
                names |= {_address_text(listen)}
            self._hosts = (key, names)
        return self._hosts[1]

    def origin_names(self) -> frozenset[str]:
        """Names a page of the panel may be served under besides the Host it was reached
        at: the domain and the allowed hosts of the settings."""
        names = set(parse_host_names(self.settings.get("webAllowedHosts"))) - {"*"}
        domain = self.settings.get("webDomain").strip().lower().rstrip(".")
        return frozenset(names | {domain} if domain else names)

    # ---- status ----------------------------------------------------------------------------

    def core_info(self) -> dict:
        return self.core.info()

    def _core_state(self, state: str) -> None:
        """Called from the core's watcher: push the new state to every browser."""
        self.hub.publish({"type": "coreState", "data": state})

    def _mtproto_state(self, state: dict) -> None:
        """Called when an MTProto proxy process changes state: push it to every browser."""
        self.hub.publish({"type": "mtprotoState", "data": state})

    def status(self) -> dict:
        """The last snapshot, with the core's state as it is now (it changes between
        samples, and a browser acting on it must not wait two seconds). While no browser
        watches, the job takes no snapshots: the first request after STEP_SECONDS takes
        one, so a reader never gets one older than that."""
        taken, status = self._status
        if status is None or time.monotonic() - taken >= STEP_SECONDS:
            status = self._snapshot(time.time())
        workers = [] if self.sub_workers is None else self.sub_workers.pids()
        return {
            **status,
            "core": self.core_info(),
            "mtproto": self.mtproto.info(),
            "subWorkers": workers,
            # As they are now: a managing panel's call may have just named itself.
            **self._identity(),
        }

    def sample_status(self) -> None:
        """The status job: a full snapshot pushed to the browsers when one watches, else
        only what the history charts and the CPU alert need."""
        now = time.time()
        if len(self.hub):
            values = self.sampler.metrics(self._snapshot(now))
        else:
            values = self.sampler.history_values(now)
        self.history.record(now, values)
        self.bot_notices.cpu(values["cpu"])

    def _identity(self) -> dict[str, str]:
        return {"guid": self.guid(), "parentGuid": self.managing_panel.guid()}

    def _snapshot(self, now: float) -> dict:
        status = {
            **self.sampler.sample(now),
            "mtproto": self.mtproto.info(),
            # Which panel this is among nodes, and which manages it: pushed too, so a page
            # names "this host" whichever way its status arrived.
            **self._identity(),
        }
        self._status = (time.monotonic(), status)
        self.hub.publish({"type": "status", "data": status})
        return status

    # ---- settings that involve the admin account --------------------------------------

    def two_factor_view(self) -> dict:
        return {"twoFactorEnable": self.auth.two_factor_enabled(), "twoFactorToken": ""}

    def update_settings(self, body: dict, session) -> list[str]:
        """Validate every key first, then apply the two-factor part, then write the rest,
        so a rejected value leaves everything as it was."""
        two_factor = {key: body.pop(key) for key in TWO_FACTOR_KEYS if key in body}
        changes = self.settings.check(body, self.inbounds.port_owner)
        changed = list(changes)
        if "twoFactorEnable" in two_factor and self.auth.update_two_factor(
            session,
            two_factor["twoFactorEnable"],
            two_factor.get("twoFactorToken", ""),
            two_factor.get("twoFactorCode"),
        ):
            changed.append("twoFactorEnable")
        self.settings.write(changes)
        return changed


def _listen_or_explain(host: str, port: int, what: str):
    """A taken port or an unusable address stops the start with a sentence, not a
    traceback; the flags override stored settings, so they are the way out."""
    try:
        return listen(host, port)
    except OSError as exc:
        raise ServiceError(
            f"cannot listen on {host}:{port} for {what}: {exc.strerror or exc}; "
            "choose another address or port with --listen, --port or --sub-port"
        ) from None


def _wildcard(host: str) -> str:
    return "" if host in ("0.0.0.0", "::") else host


def _address_text(host: str) -> str:
    """An IP address as `split_host` gives it (the one spelling Python prints)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()
