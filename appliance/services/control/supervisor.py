"""The core as the panel runs it: config from the database, one process, live changes,
traffic ticks and the invalid-client sweep.

Every change the API commits marks the core dirty; a greenlet coalesces what arrives
within a short window into one sync. A sync builds the wanted config and compares it
with the running one: client entries of VLESS/VMess/Trojan inbounds go live through the
core's HandlerService, anything else costs one restart, and a config the core refuses
never replaces the running one (the error is pushed to the browsers and kept as the
core's `errorMsg` in the server status; a core that refused its config at start is
started by the first change that makes it acceptable). So a bulk call touching
thousands of clients restarts the core at most once, and most client edits restart
nothing.

A call that changed a few clients and names them (`mark_dirty(emails)`) costs those
clients alone: their entries are rendered from their rows, compared with what is kept of
the running config (a fingerprint per inbound and email), changed live, and the kept
fingerprints updated in place. config.json is not rewritten then: the core reads it only
when it starts, so the live changes are collected and the file written once the changes
pause (`WRITE_QUIET`, at the latest `WRITE_LATEST` after the first), at panel shutdown,
when the running config is asked for, and before the process supervisor starts a core
that exited: a core restarted after a crash runs every change stored until that moment.

A save of an inbound or of the template is tested first (`check_candidate`): the config
built from what the save's open transaction holds goes through the core's own test, and a
refusal rolls the save back with the core's words. Should the core still refuse what is
stored (a core upgraded under the panel, a database restored from another core's panel),
the core is out of step: `info()` says so (`inStep`, the reason in `errorMsg`, the
inbounds it does not run as stored in `staleInbounds`), the panel log has it at WARNING,
and every change until it is fixed is answered as stored but not running.

A core's test is no proof that it runs a config (V2Ray 4.34 ignores REALITY): saves are
also read against the detected core's capabilities (`core.capabilities`). A stored inbound
the core cannot run is left out and out of step, its id in the internal setting
`coreUnfitInbounds`, where the subscription servers read which links to leave out.

The process survives nothing the panel does not survive: a state file records the core
that runs (pid, API port, counter generation), also after the supervisor restarted a
crashed one, so after a crash of the panel the counters of the orphaned core are
collected before it is replaced, and no byte is lost. A pid in that file is trusted only
while it still runs this data directory's config.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterable

import gevent
from gevent.event import Event
from gevent.lock import RLock
from pony.orm import db_session

from appliance.core import capabilities
from appliance.core.api import CoreApi, CoreApiError
from appliance.core.config import (
    build_config,
    client_in_core,
    clients_shape_inbound,
    entry_renderer,
)
from appliance.core.extra_outbounds import with_outbounds
from appliance.core.live import (
    LIVE_PROTOCOLS,
    Running,
    UserOp,
    fingerprint,
    live_changes,
    running,
    skeleton_of,
    stale_tags,
    took,
    with_ops,
)
from appliance.core.orphan import core_of, forget_state, save_state, saved_state, terminate
from appliance.core.process import NOT_INSTALLED, CoreMissing
from appliance.core.template import default_template
from appliance.domain.client_rules import normalize_client
from appliance.domain.protocols import CLIENT_PROTOCOLS
from appliance.errors import ServiceError
from appliance.runtime.changes import Change, ChangeNotice
from appliance.runtime.file_paths import FilePlaces, drop_misplaced_inbound, drop_misplaced_paths
from appliance.runtime.jobs import Pace, breathe
from appliance.runtime.memory import return_freed_memory
from appliance.runtime.ports import free_loopback_port
from appliance.services.admin.settings import core_template
from appliance.services.control.logs import log_path
from appliance.services.inbounds.listeners import (
    RECHECK_SECONDS,
    LeftOut,
    Socket,
    core_sockets,
    template_port_problem,
)
from appliance.store import inbound_rows, traffic_sql

log = logging.getLogger(__name__)

DEBOUNCE_SECONDS = 0.2
STAND_IN_EMAIL = "core-test@appliance.invalid"  # the client a config test gives a bare inbound
# Emails one sync takes client by client; more, and comparing every client is cheaper.
CLIENTS_AT_ONCE = 500
WRITE_QUIET = 5.0  # seconds without a live change before config.json is rewritten
WRITE_LATEST = 60.0  # seconds after the first unwritten live change, however busy
UNFIT = "coreUnfitInbounds"  # the internal setting listing the inbounds `_fit` leaves out


class CoreService:
    def __init__(
        self,
        *,
        store,
        process,
        workdir,
        places: FilePlaces,
        inbounds,
        core_clients,
        client_views,
        settings,
        accounting,
        sweep,
        hub,
        notice: ChangeNotice,
        client_ips=None,
        extra_outbounds=None,
    ):
        self.store = store
        self.core_clients = core_clients
        # emails -> {email: (core view, inbound ids)}: the clients a targeted sync takes.
        self.client_views = client_views
        self.process = process
        self.workdir = workdir
        self.places = places
        self.inbounds = inbounds
        self.settings = settings
        self.accounting = accounting
        # The invalid-client sweep after each tick (ClientBulk.disable_depleted): it
        # publishes whom it disabled, and the change notice brings them back here.
        self.sweep = sweep
        self.hub = hub
        self.notice = notice
        # Collects client IPs each tick (services.client_ips): from Xray's online API, else
        # from the access log; None: off.
        self.client_ips = client_ips
        self.access_log = places.core_log("access")
        # () -> (first, last): outbounds from outside the template (subscriptions,
        # providers) that the config gets around the template's own.
        self.extra_outbounds = extra_outbounds or (lambda: ([], []))
        # What was already said in the log about misplaced paths, so a sync a second
        # does not repeat it.
        self._reported: set[str] = set()
        self.api: CoreApi | None = None
        self.api_port = 0
        self.running: Running | None = None  # what the core runs, when it runs
        self.error = ""  # why the core does not run what is stored; "" while it does
        # Ids of the inbounds the core does not run as stored, while it is out of step.
        self.stale: list[int] = []
        self.unfit: dict[int, str] = {}  # inbound id -> why the core lacks what it asks (_fit)
        # The config the core refused at start, so none runs: the next config that
        # differs from it is tried (a core the user stopped stays stopped).
        self._refused: Running | None = None
        # Inbounds the core runs without because another program holds their port.
        self.left_out = LeftOut()
        self._generation_base = secrets.randbits(40)
        self._dirty = Event()
        self._compare_all = False  # a change not named client by client is waiting
        self._emails: set[str] = set()  # clients changed since the last sync
        # The user operations the core took since config.json was last written.
        self._unwritten: list[UserOp] = []
        self._last_unwritten = 0.0
        self._writer: gevent.Greenlet | None = None
        self._respawned = False
        # One change of the running config at a time: syncs, file writes, the restart
        # of a crashed core.
        self._config_lock = RLock()
        self._flavor = "xray"
        self._prefix = "xray"
        # The supervisor restarts a crashed core on its own, under a new pid and with its
        # counters at zero; the state file must name that process, or a crash of the panel
        # would leave it running beside the next panel's core. So the service hears every
        # state change first and passes it on to whoever listened before.
        self._state_listener = process.on_state
        process.on_state = self._core_state
        process.before_respawn = self._before_respawn

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Collect what an orphaned core of a crashed panel counted, then start ours."""
        self._collect_orphan()
        try:
            self._flavor, version, self._prefix = self.process.detect()
        except ServiceError as exc:
            self.process.unavailable(exc.msg)
            return
        log.info("core %s %s", self._flavor, version)
        self.api_port = free_loopback_port()
        config = self.build()
        try:
            self._launch(config)
        except ServiceError as exc:
            self._refused = running(config)
            self._out_of_step(exc.msg, self._refused)
            log.error("the core did not start: %s", exc.msg)
        gevent.spawn(self._sync_loop)

    def stop(self) -> None:
        if self.process.state != "running":
            raise ServiceError("the core is not running")
        self.tick()
        self.process.stop()
        self.running = None
        forget_state(self.workdir)
        self.hub.notify(
            "Core stopped", "Every proxy is offline until the core starts.", "warning", "core"
        )

    def restart(self) -> None:
        if self.process.state == "not installed":
            raise ServiceError(f"no core to restart: {self.process.error}")
        self.tick()
        self._launch()
        self.hub.notify(
            "Core restarted", "The core runs the current configuration.", "info", "core"
        )

    def use_binary(self, path: str) -> None:
        """Run the core from `path` from now on (a newly installed core), starting it
        even if none ran; a file that is not a core, or a core refusing the config,
        raises and keeps the previous binary."""
        previous = self.process.binary
        self.process.binary, self.process.info = path, None
        try:
            self._flavor, _version, self._prefix = self.process.detect()
            if not self.api_port:
                self.api_port = free_loopback_port()
                gevent.spawn(self._sync_loop)
            self.tick()
            self._launch()
        except ServiceError:
            self.process.binary, self.process.info = previous, None
            raise

    def shutdown(self) -> None:
        """At panel exit: count the last bytes, then stop the core with the panel and
        leave config.json holding what it ran."""
        if self.process.state == "running":
            self.tick()
            self.process.stop()
            forget_state(self.workdir)
        try:
            with self._config_lock:
                self._write_config()
        except Exception:
            log.exception("config.json could not be brought up to date at shutdown")

    def _launch(self, config: dict | None = None, target: Running | None = None) -> None:
        """(Re)start the core on `config`, or on one built now; `target` is
        `running(config)` when the caller has it already."""
        try:
            config = config or self.build()
            self.process.restart(config)
            self._unwritten = []
            self.running = target or running(config)
        finally:
            return_freed_memory()
        self._in_step()
        self._refused = None
        self._connect()
        self._save_state()

    def _connect(self) -> None:
        if self.api is not None:
            self.api.close()
        self.api = CoreApi(f"127.0.0.1:{self.api_port}", self._prefix)

    def _core_state(self, state: str) -> None:
        """Record a core that (re)started, forget one that died; then pass `state` on."""
        if state == "running":
            self._save_state()
            if self._respawned:
                # Changes stored while the core was down were left for it: take them now.
                self._respawned = False
                self.mark_dirty()
        elif state == "error":
            forget_state(self.workdir)
            if self.left_out.core_failed(self.process.error):
                self.mark_dirty()
        self._state_listener(state)

    def _out_of_step(self, reason: str, wanted: Running) -> None:
        """The core refused the config built from what is stored (`wanted`): note why and
        which inbounds it does not run as stored, and say so in the panel log."""
        self.error = reason
        tags = set(stale_tags(self.running, wanted))
        with db_session:
            rows = inbound_rows.ids_and_tags(self.store)
        self.stale = [inbound_id for inbound_id, tag in rows if tag in tags]
        log.warning("the core is out of step with the stored config: %s", reason)

    def _in_step(self) -> None:
        self.error = ""
        self.stale = []

    def out_of_step(self) -> str:
        """Why the core does not run what is stored; "" while it does."""
        return self.error

    def generation(self) -> int:
        """Changes with every start of the core process, which zeroes its counters."""
        return (self._generation_base << 16) + self.process.restarts

    # ---- config --------------------------------------------------------------------------

    def build(self, template: dict | None = None) -> dict:
        """The config for the stored template (or `template`) and inbounds."""
        return self._config(self._fit(self.inbounds.for_core(self.core_clients)), template)

    def _fit(self, views: list[dict], record: bool = True) -> list[dict]:
        """The views the detected core can run; the rest is left out and (`record`: not a
        save's test) kept in `unfit`, for the subscription servers, and logged once."""
        views, unfit = capabilities.runnable(views, self.process.info)
        ids = ",".join(map(str, sorted(unfit)))
        if record and (unfit != self.unfit or ids != self.settings.internal(UNFIT)):
            for reason in unfit.values():
                if reason not in self.unfit.values():
                    log.warning("the core is out of step: %s", reason)
            self.unfit = unfit
            self.settings.set_internal(UNFIT, ids)
            self.notice.publish(Change("settings", [UNFIT]))
        return views

    def check_features(self, features: Iterable[str]) -> None:
        """Raise `ServiceError` naming the core and the feature when the detected core
        does not run all of `features`; without a core, nothing is refused."""
        self.process.check_features(features)

    def check_outbounds(self, extra: tuple[list[dict], list[dict]]) -> None:
        """Raise `ServiceError` with the core's words when the installed core refuses the
        config whose outbounds from outside the template are `extra` (first, last)."""
        self.check_features(capabilities.config_features({"outbounds": extra[0] + extra[1]}))
        views = self.inbounds.for_core
        self._test(lambda: self._config(self._fit(views(self.core_clients), False), extra=extra))

    def _config(
        self,
        views: list[dict],
        template: dict | None = None,
        extra: tuple[list[dict], list[dict]] | None = None,
    ) -> dict:
        """A file path in the template or the inbound views that is out of its place
        (runtime.file_paths), stored before the rules or by an import, is left out and
        reported in the panel's log: the core never writes or reads there, and the panel
        still starts."""
        template = core_template(self.settings) if template is None else template
        template = with_outbounds(template, *(self.extra_outbounds() if extra is None else extra))
        problems = drop_misplaced_paths(template, self.places)
        runnable = []
        for view in views:
            usable, found = drop_misplaced_inbound(view, self.places)
            problems += found
            if usable:
                runnable.append(view)
            else:
                problems.append(f"inbound {view['tag']}, which cannot run without it")
        for problem in problems:
            if problem not in self._reported:
                self._reported.add(problem)
                log.error("left out of the core config: %s", problem)
        now_ms = int(time.time() * 1000)
        return build_config(
            template,
            self.left_out.admitted(runnable, now_ms),
            self.api_port,
            flavor=self._flavor,
            now_ms=now_ms,
            access_log=self.access_log,
        )

    def template(self) -> dict:
        return core_template(self.settings)

    def default_template(self) -> dict:
        """The built-in template, what `template()` gives while none is stored."""
        return default_template()

    def save_template(self, text, test_url) -> None:
        """Store a new template after the core itself accepted the config built from it."""
        if not isinstance(text, str) or not text.strip():
            raise ServiceError("coreSetting must be the core config template as JSON text")
        changes = {"coreTemplate": text}
        if test_url not in (None, ""):
            changes["outboundTestUrl"] = test_url
        checked = self.settings.check(changes)
        if "coreTemplate" in checked:
            problem = template_port_problem(json.loads(text), self.inbounds.reserved_ports())
            if problem:
                raise ServiceError(problem)
            self.check_features(capabilities.config_features(json.loads(text)))
        self._test(lambda: self.build(json.loads(text)))
        self.settings.write(checked)
        self.mark_dirty()

    def check_candidate(self, inbound_id: int) -> None:
        """Raise `ServiceError` with the core's words when the installed core refuses the
        config built from the database as the caller's open transaction sees it. An inbound
        save calls it before it commits, so a save the core cannot run changes nothing.
        The saved inbound (`inbound_id`) is tested as it runs once a client is attached:
        V2Ray leaves a Shadowsocks inbound out of its config until it has a client, and
        then the first client save would be the one the core refuses."""

        def build() -> dict:
            views = self.inbounds.for_core(self.core_clients)
            for view in views:
                if view["id"] == inbound_id:
                    if view.get("nodeId") is None:
                        flows = (row.get("flow") for row in view["clientRows"])
                        self.check_features(capabilities.inbound_features(view, flows))
                    _give_stand_in_client(view)
            return self._config(self._fit(views, False))

        self._test(build)

    def _test(self, build) -> None:
        """Test the config `build()` makes with the installed core; without a core there is
        nothing to test against, and nothing is refused."""
        if not self.api_port or self.process.state == NOT_INSTALLED:
            return
        try:
            self.process.test(build())
        except CoreMissing:
            return
        finally:
            return_freed_memory()

    def outbound_traffic(self) -> list[dict]:
        with db_session:
            rows = traffic_sql.outbound_totals(self.store)
        return [{"tag": tag, "up": up, "down": down, "total": up + down} for tag, up, down in rows]

    def reset_outbound_traffic(self, tag: str) -> None:
        with db_session:
            if tag:
                traffic_sql.zero_outbound_traffic(self.store, tag)
            else:
                traffic_sql.zero_all_outbound_traffic(self.store)

    def running_config(self) -> dict:
        """The config the core runs, as its config.json holds it (live changes included);
        the config it would run when it does not."""
        if self.running is not None:
            with self._config_lock:
                self._write_config()
            try:
                with open(self.process.config_path) as file:
                    return json.load(file)
            except (OSError, ValueError) as exc:
                log.warning("cannot read the running core's config: %s", exc)
        return self.build()

    def output(self, count: int) -> list[str]:
        """The last `count` lines the core printed: its latest result, the log view."""
        return self.process.output(count)

    def info(self) -> dict:
        return {
            "state": self.process.state,
            "errorMsg": self.error
            or self.process.error
            or "; ".join(self.unfit.values())
            or self.left_out.message(),
            "version": self.process.version,
            "failedInbounds": self.left_out.view(),
            "inStep": not self.error and not self.unfit,
            "staleInbounds": sorted({*self.stale, *self.unfit}),
        }

    def held_sockets(self) -> list[Socket]:
        """(listen, port, transports) of the inbounds the running core listens on."""
        if self.process.state != "running" or self.running is None:
            return []
        return core_sockets(self.running.skeleton)

    # ---- keeping the running core in step -------------------------------------------------

    def mark_dirty(self, emails: Iterable[str] | None = None) -> None:
        """Bring the core in step soon: with the clients of `emails` alone, or (None)
        with everything stored."""
        if emails is None:
            self._compare_all = True
        else:
            self._emails.update(emails)
        self._dirty.set()

    def _sync_loop(self) -> None:
        while True:
            recheck = RECHECK_SECONDS if self.left_out.inbounds else None
            if not self._dirty.wait(recheck) and not self.left_out.any_free():
                continue
            gevent.sleep(DEBOUNCE_SECONDS)
            self._dirty.clear()
            compare_all, emails = self._compare_all, self._emails
            self._compare_all, self._emails = False, set()
            # While an inbound is left out for its port, every sync looks whether the
            # port came free, which only the whole comparison does.
            whole = compare_all or len(emails) > CLIENTS_AT_ONCE or bool(self.left_out.inbounds)
            try:
                with self._config_lock:
                    if whole:
                        self.sync()
                    elif emails:
                        self.sync_clients(emails)
            except Exception:
                log.exception("keeping the core in step failed; the next change retries")
            finally:
                if whole:
                    # After a build of every client, not after each edit: at 100,000
                    # clients a trim of the heap takes the hub for milliseconds.
                    return_freed_memory()

    def sync_clients(self, emails: set[str]) -> None:
        """Bring the running core in step with the clients of `emails` (as stored, spelled
        as the core names them): their entries alone are compared and changed live.
        Anything a live change cannot do (a Shadowsocks user, a core out of step or not
        running) goes the way of `sync`."""
        if (
            self.process.state != "running"
            or self.running is None
            or self.api is None
            or self._refused is not None
            or self.error
        ):
            self.sync()
            return
        operations = self._client_operations(emails)
        if operations is None or not self._apply_live(operations):
            self.sync()
            return
        if operations:
            took(self.running, operations)
            self._unwritten += operations
            self._write_later()

    def _client_operations(self, emails: set[str]) -> list[UserOp] | None:
        """The user operations that give the running core the stored entries of these
        clients; None when it takes more than live changes: the stored config differs
        from the running one besides client lists (built without clients to tell, which
        costs the inbounds, not the clients), or an entry changes where the core cannot
        change users live."""
        views = self._fit(self.inbounds.for_core(self.core_clients))
        if self._bare_skeleton(views) != self.running.skeleton:
            return None
        by_tag = {view["tag"]: view for view in views}
        clients = self.client_views(sorted(emails))
        now_ms = int(time.time() * 1000)
        removals: list[UserOp] = []
        additions: list[UserOp] = []
        for inbound, prints in zip(
            self.running.skeleton.get("inbounds", []), self.running.entries, strict=True
        ):
            tag = inbound.get("tag")
            view = by_tag.get(tag)
            if view is None or view["protocol"] not in CLIENT_PROTOCOLS:
                continue
            render = entry_renderer(view)
            for email in emails:
                client, inbound_ids = clients.get(email, (None, ()))
                entry = None
                if view["id"] in inbound_ids and client_in_core(client, now_ms):
                    entry = render(client)
                before = prints.get(email)
                if before == (None if entry is None else fingerprint(entry)):
                    continue
                if view["protocol"] not in LIVE_PROTOCOLS:
                    return None
                if before is not None:
                    removals.append(UserOp("remove", tag, view["protocol"], email))
                if entry is not None:
                    additions.append(UserOp("add", tag, view["protocol"], email, entry))
        return removals + additions

    def _bare_skeleton(self, views: list[dict]) -> dict:
        """The skeleton of the config for `views`, built without the clients wherever
        they are no more than a client list."""
        bare = [
            view if clients_shape_inbound(view, self._flavor) else {**view, "clientRows": ()}
            for view in views
        ]
        return skeleton_of(self._config(bare))

    # ---- config.json -------------------------------------------------------------------------

    def _write_later(self) -> None:
        """Write config.json once live changes pause, at the latest WRITE_LATEST after
        the first one it lacks."""
        self._last_unwritten = time.monotonic()
        if self._writer is None:
            self._writer = gevent.spawn(self._write_when_quiet, self._last_unwritten)

    def _write_when_quiet(self, first: float) -> None:
        while (
            wait := min(self._last_unwritten + WRITE_QUIET, first + WRITE_LATEST) - time.monotonic()
        ) > 0:
            gevent.sleep(wait)
        self._writer = None
        try:
            with self._config_lock:
                self._write_config()
        except Exception:
            log.exception("config.json could not be rewritten; the next change retries")
        finally:
            return_freed_memory()

    def _write_config(self, respawn: bool = False) -> None:
        """Make config.json hold the live changes the core took (called with the config
        lock held). Written as built from what is stored when that differs from what runs
        in client entries only (it may then also hold changes stored a moment ago and not
        yet taken live, which the sync under way takes); else (a change that needs a
        restart is waiting) the file is read back and the live changes written into it.
        `respawn`: the supervisor is about to start the core on the file, so it is built
        anew even when no live change is missing, and is what runs from then on."""
        if self.running is None or not (respawn or self._unwritten):
            return
        wanted = self.build()
        if skeleton_of(wanted) == self.running.skeleton:
            self.process.record(wanted)
            if respawn:
                self.running = running(wanted, pause=breathe)
        elif self._unwritten:
            with open(self.process.config_path) as file:
                written = json.load(file)
            self.process.record(with_ops(written, self._unwritten))
        self._unwritten = []

    def _before_respawn(self) -> None:
        """The process supervisor is about to start a core that exited on config.json:
        make it hold every change stored until now."""
        try:
            with self._config_lock:
                self._write_config(respawn=True)
        except Exception:
            log.exception("config.json could not be brought up to date before the restart")
        finally:
            self._respawned = True
            return_freed_memory()

    def sync(self) -> None:
        """Bring the running core to the wanted config: live when possible, else once
        restarted; a refused config leaves the running core as it is. A core that refused
        its config at start starts once a change makes the config acceptable; the core
        tests only configs that differ from the one it refused (at 100,000 clients the
        test is a second of the core's CPU). A core that exited because another program
        holds the port of one of its inbounds restarts at once without that inbound."""
        failure = self.left_out.take_failure()
        if failure is not None and self._leave_out(failure):
            return
        if self._refused is not None:
            wanted = self.build()
            attempt = running(wanted, pause=breathe)
            if attempt == self._refused:
                return
            try:
                self._launch(wanted, attempt)
            except ServiceError as exc:
                self._refused = attempt
                self._out_of_step(exc.msg, attempt)
            return
        if self.process.state != "running" or self.running is None:
            return
        wanted = self.build()
        target = running(wanted, pause=breathe)
        operations = live_changes(self.running, wanted, target, pause=breathe)
        if operations == []:
            self._in_step()
            return
        if operations is not None and self._apply_live(operations):
            # A core that crashes later restarts from config.json: it must hold the
            # users added and removed live, or they would come back as they were.
            self.process.record(wanted)
            self._unwritten = []
            self.running = target
            self._in_step()
            return
        self.tick()
        try:
            self.process.restart(wanted)
        except ServiceError as exc:
            self._out_of_step(exc.msg, target)
            self.hub.notify("Core config refused", exc.msg, "error", "core")
            return
        self._unwritten = []
        self.running = target
        self._in_step()
        self._connect()
        self._save_state()

    def _leave_out(self, failure) -> bool:
        """Restart the core without the inbound whose listener it could not open; False
        when no inbound it runs matches (the core's own restarts go on as they would)."""
        views = self._fit(self.inbounds.for_core(self.core_clients))
        absent = self.left_out.leave_out(failure, views, int(time.time() * 1000))
        if absent is None:
            return False
        self.hub.notify("Inbound left out of the core", absent.reason, "error")
        config = self._config(views)
        try:
            self._launch(config)
        except ServiceError as exc:
            self._out_of_step(exc.msg, running(config))
        return True

    def _apply_live(self, operations) -> bool:
        # A call whose socket is ready yields nothing to the hub, and the core answers
        # fast: the 10,000 calls of a bulk create held everyone else 100-250 ms at a time.
        pace = Pace()
        try:
            for op in operations:
                pace()
                if op.action == "remove":
                    self.api.remove_user(op.inbound_tag, op.email)
                else:
                    self.api.add_user(op.inbound_tag, op.protocol, op.entry)
        except CoreApiError as exc:
            log.info("a live change failed (%s); restarting the core instead", exc)
            return False
        return True

    # ---- traffic ---------------------------------------------------------------------------

    def tick(self) -> None:
        """Count what moved, then disable clients that ran out (removed from the core by
        the sync that follows)."""
        if self.process.state != "running" or self.api is None:
            return
        generation = self.generation()
        try:
            counters = self.api.query_stats()
        except CoreApiError as exc:
            log.warning("could not read the core's counters: %s", exc)
            return
        if generation != self.generation():
            # The core restarted while its counters were read: they may be the old
            # process's, which under the new generation would all be added again.
            return
        moved = self.accounting.tick(counters, generation)
        if moved:
            self.hub.publish({"type": "traffic", "clients": len(moved.clients)})
        self.sweep()
        if self.client_ips is not None:
            skeleton = self.running.skeleton if self.running is not None else None
            # Xray lists who is online from where; other cores leave the access log.
            online = self.api if self._flavor == "xray" else None
            self.client_ips.collect(log_path(skeleton, "access"), online, self.generation())

    # ---- surviving a crashed panel ---------------------------------------------------------

    def _save_state(self) -> None:
        save_state(self.workdir, self.process.pid, self.api_port, self.generation(), self._prefix)

    def _collect_orphan(self) -> None:
        state = saved_state(self.workdir)
        if state is None:
            return
        pid, port, generation, prefix = state
        orphan = core_of(pid, self.process.config_path)
        if orphan is not None:
            api = CoreApi(f"127.0.0.1:{port}", prefix)
            try:
                self.accounting.tick(api.query_stats(), generation)
                log.info("counted the last traffic of the core left running by a crash")
            except CoreApiError as exc:
                log.warning("the core left running could not be read: %s", exc)
            finally:
                api.close()
            terminate(orphan)
        forget_state(self.workdir)


def _give_stand_in_client(view: dict) -> None:
    """Attach a generated client to an inbound view that takes clients and has none, as
    the config builder reads client views."""
    if view["protocol"] not in CLIENT_PROTOCOLS or next(iter(view["clientRows"]), None):
        return
    client = normalize_client({"email": STAND_IN_EMAIL}, [view])
    client["traffic"] = {"up": 0, "down": 0, "enable": True}
    view["clientRows"] = [client]
