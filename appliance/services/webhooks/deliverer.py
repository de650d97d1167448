"""The deliverer: a greenlet that sends the outbox's due rows and records what came back.

Each round it leases up to CLAIM_ROWS due rows (`webhook_sql.claim`: no other panel on
the database holds them meanwhile, and a holder that died lets them go when the lease
runs out), posts them (a batch endpoint gets up to BATCH_SIZE events per request, as a
JSON array), and writes each outcome: delivered on a 2xx answer, else due again after a
backoff that doubles up to BACKOFF_MAX_SECONDS, and failed once the event is older than
RETRY_HOURS. Requests run a few at a time in their own greenlets, through the egress
guard, with short timeouts, and read at most ANSWER_LIMIT bytes of the answer: a slow
or hostile receiver holds one request of its own, never the panel's other work.

Between rounds it pauses for PAUSE_PER_CPU_SECOND times the CPU the process spent over
the round, so that a backlog (the 10,000 events of a bulk create) is sent in the gaps of
the panel's other work instead of ahead of it: a request that arrives meanwhile waits
for one stretch of a round at most, never for round after round.

The deliverer wakes when a change is published (`wake`) and polls every POLL_SECONDS
besides, for rows written by other panels or due after a backoff. Of several panels on
one database only the leader delivers (`leading`); a new leader finds the rows the last
one held leased and sends them once their lease ran out.

Signature: `X-Webhook-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">` with
the endpoint's secret, where `<timestamp>` is the `X-Webhook-Timestamp` header (Unix
seconds when sent): a receiver checks both, and refuses an old timestamp as a replay.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import gevent
from gevent.event import Event
from gevent.pool import Pool
from pony.orm import db_session

from appliance import __version__
from appliance.errors import ServiceError
from appliance.runtime.jobs import Pace
from appliance.services.webhooks.endpoints import guard
from appliance.store import webhook_sql

log = logging.getLogger(__name__)

CLAIM_ROWS = 200
BATCH_SIZE = 100
PAUSE_PER_CPU_SECOND = 3
LEASE_SECONDS = 120
POLL_SECONDS = 2
SENDERS = 8
CONNECT_SECONDS, READ_SECONDS, TOTAL_SECONDS = 5, 10, 15
ANSWER_LIMIT = 4096
BACKOFF_FIRST_SECONDS, BACKOFF_MAX_SECONDS = 1, 600
RETRY_HOURS = 24
KEPT_DAYS = 7
# What a client's data carries only for an endpoint that sets withSecrets: what would
# let a receiver connect as the client.
CLIENT_SECRETS = ("id", "password", "auth", "subId", "secret")


def lease_owner(data_dir: str) -> str:
    """The name of a panel's leases: its host and data directory, the same across its
    restarts and another for every other panel on the database (the panel guid is the
    database's, shared by all of them)."""
    place = f"{socket.gethostname()}:{os.path.abspath(data_dir)}"
    return hashlib.sha256(place.encode()).hexdigest()[:16]


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The value of X-Webhook-Signature for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class Deliverer:
    def __init__(
        self,
        store,
        seal,
        owner: str,
        clock: Callable[[], float] = time.time,
        fault: Callable[[Exception], ServiceError | None] = lambda exc: None,
        leading: Callable[[], bool] = lambda: True,
    ):
        self.store = store
        self.leading = leading
        # Opens the sealed secrets (`open`): the panel's node-token seal.
        self.seal = seal
        # Who this panel process is (`lease_owner`): its leases are named after it, so
        # that once restarted it lets go at once of what it held when it died, instead of
        # waiting out the lease.
        self.owner = owner
        self.clock = clock
        self.fault = fault
        self._wake = Event()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        with db_session:
            webhook_sql.release(self.store, self.owner + ":")
        self._greenlet = gevent.spawn(self._run)

    def wake(self) -> None:
        """Something was committed: look for due rows now, not at the next poll."""
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()
            if not self.leading():
                continue
            try:
                while True:
                    started = time.thread_time()
                    if not self.deliver_due():
                        break
                    # The process's CPU over the round (the deliverer's, and that of the
                    # requests served meanwhile): delivery takes at most a quarter of an
                    # idle panel, and less of a busy one.
                    gevent.sleep(PAUSE_PER_CPU_SECOND * (time.thread_time() - started))
            except Exception as exc:
                known = self.fault(exc)
                if known is not None:
                    log.warning("webhook delivery paused: %s", known.msg)
                else:
                    log.exception("webhook delivery failed; it runs again in %ss", POLL_SECONDS)

    def deliver_due(self) -> int:
        """One round: lease due rows, send them, record the outcomes; the rows sent."""
        now = self._now()
        token = f"{self.owner}:{uuid.uuid4().hex}"
        with db_session:
            ids = webhook_sql.due(self.store, now, CLAIM_ROWS)
            if not ids:
                return 0
            webhook_sql.claim(self.store, ids, now, now + LEASE_SECONDS * 1000, token)
        with db_session:
            rows = webhook_sql.leased(self.store, token)
            endpoints = {row[0]: row for row in webhook_sql.endpoints(self.store)}
        requests = []
        for endpoint_id in dict.fromkeys(row[1] for row in rows):
            mine = [row for row in rows if row[1] == endpoint_id]
            endpoint = endpoints[endpoint_id]
            size = BATCH_SIZE if endpoint[8] else 1
            requests += [(endpoint, mine[n : n + size]) for n in range(0, len(mine), size)]
        pool = Pool(SENDERS)
        results = pool.map(lambda job: (job[1], self._send(*job)), requests)
        done = self._now()
        outcomes = [
            _outcome(row, code, error, done, token)
            for batch, (code, error) in results
            for row in batch
        ]
        with db_session:
            webhook_sql.record_outcomes(self.store, outcomes)
        return len(rows)

    def prune(self) -> None:
        """Forget deliveries done more than KEPT_DAYS ago."""
        with db_session:
            webhook_sql.prune(self.store, self._now() - KEPT_DAYS * 86_400_000)

    def _send(self, endpoint: tuple, rows: list[tuple]) -> tuple[int, str]:
        """(answer code, "") when delivered, else (code or 0, the reason)."""
        _, name, url, sealed, _, _, allow_private, with_secrets, batch, _, _ = endpoint
        secret = self.seal.open(sealed)
        if secret == sealed:  # stored sealed, and this panel's key does not open it
            return 0, "its secret is sealed with a key this panel does not have; enter it again"
        pace = Pace()
        payloads = []
        for row in rows:
            pace()
            payloads.append(_payload(row, bool(with_secrets)))
        body = json.dumps(payloads if batch else payloads[0], separators=(",", ":")).encode()
        sent_at = str(int(self.clock()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"appliance-webhooks/{__version__}",
            "X-Webhook-Event": "batch" if batch else rows[0][3],
            "X-Webhook-Id": rows[0][2],
            "X-Webhook-Timestamp": sent_at,
            "X-Webhook-Signature": signature(secret, sent_at, body),
        }
        try:
            with guard(name, url, bool(allow_private)).request(
                url,
                method="POST",
                body=body,
                headers=headers,
                connect_timeout=CONNECT_SECONDS,
                read_timeout=READ_SECONDS,
                total_timeout=TOTAL_SECONDS,
            ) as reply:
                reply.read(ANSWER_LIMIT)
                code = reply.status
        except ServiceError as exc:
            return 0, exc.msg[:255]
        except (OSError, UnicodeError) as exc:
            return 0, f"the endpoint cannot be reached: {type(exc).__name__}"
        if 200 <= code < 300:
            return code, ""
        return code, f"the endpoint answered {code}"

    def _now(self) -> int:
        return int(self.clock() * 1000)


def _payload(row: tuple, with_secrets: bool) -> dict:
    _, _, event_id, event, _, data, created, _ = row
    value = json.loads(data)
    if not with_secrets and event.startswith("client.") and isinstance(value, dict):
        value = {key: item for key, item in value.items() if key not in CLIENT_SECRETS}
    return {"id": event_id, "event": event, "timestamp": created, "data": value}


def _outcome(row: tuple, code: int, error: str, now: int, token: str) -> tuple:
    """The row's new state: (status, attempts, next at, code, error, done at, id, token)."""
    row_id, created, attempts = row[0], row[6], row[7] + 1
    if not error:
        return ("delivered", attempts, 0, code, "", now, row_id, token)
    if now - created >= RETRY_HOURS * 3_600_000:
        return ("failed", attempts, 0, code, error, now, row_id, token)
    delay = min(BACKOFF_FIRST_SECONDS * 2 ** (attempts - 1), BACKOFF_MAX_SECONDS)
    return ("pending", attempts, now + delay * 1000, code, error, 0, row_id, token)
