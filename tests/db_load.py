"""Requests back to back from several workers through a database outage, each answer
recorded with when it began and ended: what the outage tests of one panel and of several
instances on one database judge."""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass

import requests

CLIENTS = "/panel/api/clients"
# No answer may take longer than this, during the outage or after it.
LOAD_TIMEOUT = 10


class Load:
    """Workers that each send requests back to back over their own signed-in session
    (add a client, a page of clients, the inbound list, in turn) until stopped, recording
    when each request started and ended and what came back. Worker n talks to the n-th of
    `servers`, round the list."""

    def __init__(self, servers: list, inbound_id: int, workers: int):
        self.inbound_id = inbound_id
        self.sessions = [servers[n % len(servers)].client() for n in range(workers)]
        self.stopping = threading.Event()
        self.answers: list[Answer] = []
        self.threads = [
            threading.Thread(target=self._work, args=(n,), daemon=True) for n in range(workers)
        ]

    def start(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def through_outage(
        self, relay, phase: float, outage: float, grace: float, wait: float
    ) -> tuple[float, float]:
        """`phase` seconds of load, the relay cut for `outage` seconds, `phase` more, then
        until every worker has had an answer to a request begun `grace` seconds after the
        relay came back (at most `wait` seconds). Returns when it was cut and resumed."""
        time.sleep(phase)
        cut_at = time.monotonic()
        relay.cut()
        time.sleep(outage)
        resumed_at = time.monotonic()
        relay.resume()
        time.sleep(phase)
        self.each_answered_after(resumed_at + grace, wait)
        return cut_at, resumed_at

    def each_answered_after(self, moment: float, timeout: float) -> None:
        """Until every worker has had an answer to a request begun after `moment`, or
        `timeout` seconds: a request begun in the outage may be answered late, and a
        worker's first request after it with it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if {a.worker for a in list(self.answers) if a.started > moment} == set(
                range(len(self.threads))
            ):
                return
            time.sleep(0.1)

    def stop(self) -> list[Answer]:
        self.stopping.set()
        for thread in self.threads:
            thread.join(LOAD_TIMEOUT * 2)
        return self.answers

    def _work(self, worker: int) -> None:
        api = self.sessions[worker]
        for n in itertools.count():
            if self.stopping.is_set():
                return
            email = f"load{worker}-{n}@outage" if n % 3 == 0 else ""
            started = time.monotonic()
            try:
                if email:
                    reply = api.http.post(
                        f"{api.url}{CLIENTS}/add",
                        json={"client": {"email": email}, "inboundIds": [self.inbound_id]},
                        timeout=LOAD_TIMEOUT,
                    )
                elif n % 3 == 1:
                    reply = api.http.get(
                        f"{api.url}{CLIENTS}/list/paged?pageSize=10", timeout=LOAD_TIMEOUT
                    )
                else:
                    reply = api.http.get(f"{api.url}/panel/api/inbounds/list", timeout=LOAD_TIMEOUT)
                status, body = reply.status_code, reply.text
            except requests.RequestException as exc:
                status, body = 0, repr(exc)
            self.answers.append(Answer(worker, email, started, time.monotonic(), status, body))


@dataclass(frozen=True)
class Answer:
    worker: int
    email: str  # the client an add request created, "" for reads
    started: float
    ended: float
    status: int  # 0: no HTTP answer within LOAD_TIMEOUT
    body: str

    @property
    def succeeded(self) -> bool:
        return self.status == 200 and json.loads(self.body)["success"] is True

    @property
    def unavailable(self) -> bool:
        if self.status != 503:
            return False
        reply = json.loads(self.body)
        return (
            reply["success"] is False
            and reply["obj"] is None
            and reply["msg"].startswith("the database is unavailable: ")
        )
