"""MTProto inbounds as the panel runs them: one proxy process each, kept in step.

Every enabled MTProto inbound of this host gets a proxy process, which the driver
(appliance.mtproto.driver) starts and keeps; this service decides what it runs. That is
read from the database at each sync: the listener (address, port,
fake-TLS domain, data-centre addresses from the `mtprotoDataCenters` setting) and the
secrets of its active clients, each the client's own 16-byte key (`secret`: generated
when omitted, re-keyed by a new value, stored on the client row, so the clients page
and the links show what the proxy accepts) with the client's advertising tag, or else
the inbound's. A client that is disabled, expired or out of quota has no secret there.

The data centres pass the egress guard here too, not only when the setting is saved: a
value stored before the guard covered it (an old database, a restored backup) that points
at loopback, a private network or the metadata address starts no proxy, and the status
of each MTProto inbound says why. The proxy checks each address again when it connects
(a name may resolve elsewhere later), allowing internal ones only when the admin listed
mtprotoDataCenters in allowPrivateDestinations.

A change of secrets or tags alone reaches the running process without a restart (the
driver's part); a change of the listener restarts that one process, after its last
counters are read. Changes are coalesced: `mark_dirty` wakes one sync shortly after.

Each traffic tick reads every process's `GET /stats` into the same exactly-once
accounting as the core's (services.clients.mtproto_traffic), records the addresses of
open connections and runs the invalid-client sweep, whose change syncs again: a client
that ran out or expired loses its secret within one tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import gevent
from gevent.event import Event
from pony.orm import db_session

from appliance.core.config import client_in_core
from appliance.domain.client_rules import email_key
from appliance.domain.parse import load_json
from appliance.errors import ServiceError
from appliance.mtproto.driver import ProxyDriver
from appliance.runtime.egress import ALLOW_SETTING, allowed
from appliance.services.admin.settings_rules import DATA_CENTRES, check_data_centres
from appliance.store import mtproto_sql

log = logging.getLogger(__name__)

SYNC_DELAY = 0.2
RETRY_SECONDS = 5.0


class MtprotoService:
    def __init__(
        self,
        store,
        settings,
        accounting,
        workdir: str,
        sweep: Callable[[], None],
        on_state: Callable[[dict], None],
        client_ips=None,
        clock=time.time,
    ):
        self.store = store
        self.settings = settings
        self.accounting = accounting
        self.sweep = sweep
        self.on_state = on_state
        self.client_ips = client_ips
        self.clock = clock
        self.driver = ProxyDriver(workdir, on_state)
        self.tags: dict[int, str] = {}
        # inbound id -> (port, why no proxy runs) while the data centres are refused.
        self.refused: dict[int, tuple[int, str]] = {}
        self._dirty = Event()
        self._loop: gevent.Greenlet | None = None

    def start(self) -> None:
        self._loop = gevent.spawn(self._sync_loop)
        self.mark_dirty()

    def mark_dirty(self) -> None:
        self._dirty.set()

    def _sync_loop(self) -> None:
        while True:
            self._dirty.wait()
            gevent.sleep(SYNC_DELAY)
            self._dirty.clear()
            try:
                self.sync()
            except Exception as exc:
                unavailable = self.store.unavailable(exc)
                if unavailable is None:
                    log.exception("MTProto sync failed; trying again in %g s", RETRY_SECONDS)
                    gevent.spawn_later(RETRY_SECONDS, self.mark_dirty)
                else:
                    log.warning("MTProto sync waits for the database: %s", unavailable.msg)
                    self.mark_dirty()
                    gevent.sleep(1)

    # ---- what should run -------------------------------------------------------------------

    def wanted(self) -> dict[int, tuple[str, dict, dict]]:
        """inbound id -> (tag, listener config, secrets) of every MTProto inbound that
        should run here now."""
        now_ms = int(self.clock() * 1000)
        centres = [part.strip() for part in self.settings.get(DATA_CENTRES).split(",") if part]
        internal = DATA_CENTRES in allowed(self.settings)
        found = {}
        with db_session:
            rows = mtproto_sql.listeners(self.store)
            for inbound_id, tag, listen, port, settings_text in rows:
                settings = load_json(settings_text, "settings")
                domain = settings.get("domain", "")
                listener = {
                    "listen": listen or "0.0.0.0",
                    "port": port,
                    "domain": domain,
                    "front": f"{domain}:443" if domain else "",
                    "dataCenters": centres,
                    "dataCentersInternal": internal,
                }
                inbound_tag = settings.get("adTag", "")
                entries = {}
                for row in mtproto_sql.secret_rows(self.store, inbound_id):
                    secret, email, ad_tag, enable, total, expiry, up, down, t_enable = row
                    view = {
                        "enable": bool(enable),
                        "totalGB": total,
                        "expiryTime": expiry,
                        "traffic": {
                            "up": up or 0,
                            "down": down or 0,
                            "enable": t_enable is None or bool(t_enable),
                        },
                    }
                    if client_in_core(view, now_ms):
                        entries[email] = {
                            "secret": secret,
                            "adTag": ad_tag or inbound_tag,
                        }
                found[inbound_id] = (tag, listener, entries)
        return found

    def centres_refused(self) -> str:
        """Why the data centres may not be used (the guard's sentence), or empty."""
        try:
            check_data_centres(self.settings.get(DATA_CENTRES), self.settings.get(ALLOW_SETTING))
        except ServiceError as exc:
            return f"not started: {exc.msg}"
        return ""

    def sync(self) -> None:
        wanted = self.wanted()
        refused = self.centres_refused() if wanted else ""
        if refused:
            self._refuse(wanted, refused)
            return
        self.refused.clear()
        for inbound_id in [i for i in self.driver.inbound_ids() if i not in wanted]:
            self._collect(inbound_id)
            self.driver.stop(inbound_id)
        for inbound_id, (tag, listener, entries) in wanted.items():
            self.tags[inbound_id] = tag
            if self.driver.runs_another_listener(inbound_id, listener):
                self._collect(inbound_id)
                self.driver.stop(inbound_id)
            self.driver.run(inbound_id, listener, entries)

    def _refuse(self, wanted: dict, reason: str) -> None:
        """Run no proxy: stop those that run, and report each inbound's reason once."""
        for inbound_id in self.driver.inbound_ids():
            self._collect(inbound_id)
            self.driver.stop(inbound_id)
        before = self.refused
        self.refused = {i: (listener["port"], reason) for i, (_, listener, _) in wanted.items()}
        for inbound_id in self.refused:
            if before.get(inbound_id) != self.refused[inbound_id]:
                log.warning("MTProto inbound %d: %s", inbound_id, reason)
                self.on_state({"inboundId": inbound_id, "state": "error", "errorMsg": reason})

    # ---- traffic ---------------------------------------------------------------------------

    def tick(self) -> None:
        """Count what moved, then disable clients that ran out or expired (the core's
        tick does too, but only while a core runs): their secrets go in the sync that
        the change starts."""
        inbound_ids = self.driver.inbound_ids()
        if not inbound_ids:
            return
        for inbound_id in inbound_ids:
            self._collect(inbound_id)
        self.sweep()

    def _collect(self, inbound_id: int) -> None:
        stats = self.driver.stats(inbound_id)
        if not stats:
            return
        self.accounting.tick(inbound_id, self.tags.get(inbound_id, ""), stats)
        if self.client_ips is not None:
            now = self.clock()
            sightings = {
                email_key(name): dict.fromkeys(user.get("ips") or [], int(now))
                for name, user in (stats.get("users") or {}).items()
                if user.get("ips")
            }
            over = self.client_ips.record(sightings, now) if sightings else []
            if over:
                self.client_ips.write_limit_lines(over, now)

    # ---- status ----------------------------------------------------------------------------

    def info(self) -> list[dict]:
        running = self.driver.info()
        refused = [
            {
                "inboundId": i,
                "port": port,
                "state": "error",
                "errorMsg": why,
                "pid": 0,
                "secrets": 0,
            }
            for i, (port, why) in self.refused.items()
        ]
        return sorted(running + refused, key=lambda entry: entry["inboundId"])

    def held_sockets(self) -> list[tuple[str, int, frozenset]]:
        """(listen, port, transports) the running proxies hold: theirs, not a stranger's."""
        return self.driver.held_sockets()

    def shutdown(self) -> None:
        if self._loop is not None:
            self._loop.kill()
        for inbound_id in self.driver.inbound_ids():
            try:
                self._collect(inbound_id)
            except Exception as exc:
                log.warning("MTProto inbound %d: last counters not read: %s", inbound_id, exc)
            self.driver.stop(inbound_id)
