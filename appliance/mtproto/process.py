"""The panel's hold on one MTProto proxy process (appliance.mtproto.proxy).

One `MtprotoProcess` per MTProto inbound: it writes the proxy's config file, starts the
process (this program again, `environment.self_command("mtproto-proxy", FILE)`, with the
environment every child gets, LD_LIBRARY_PATH of a one-file build cleared), hands it its
management token on stdin, learns the management port from its first line on stdout,
relays its log records, and starts it again after an exit with a pause that doubles
from one second to half a minute (back to one second after a minute of running).

The token is random, made once per inbound and kept here: the process reads it only at
start, and a rewrite of the config file (every change of secrets, so a restarted process
starts with the current ones) never needs a new one.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import secrets
import subprocess
import time
from collections import deque
from collections.abc import Callable

import gevent
from gevent.event import Event

from appliance.runtime.environment import child_environment, self_command

log = logging.getLogger(__name__)

RESTART_FIRST_SECONDS = 1.0
RESTART_MAX_SECONDS = 30.0
HEALTHY_SECONDS = 60.0
API_TIMEOUT = 5.0
STOP_GRACE_SECONDS = 3.0


class MtprotoProcess:
    def __init__(self, inbound_id: int, workdir: str, on_state: Callable[[int, str, str], None]):
        self.inbound_id = inbound_id
        self.path = os.path.join(workdir, f"{inbound_id}.json")
        self.on_state = on_state
        self.token = secrets.token_urlsafe(32)
        self.state = "stopped"
        self.error = ""
        self.config: dict = {}
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.started = 0.0
        self._pause = RESTART_FIRST_SECONDS
        self._stopping = False
        self._supervisor: gevent.Greenlet | None = None
        self._ready = Event()
        self._errors: deque[str] = deque(maxlen=5)

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    def start(self, config: dict) -> None:
        self.write(config)
        self._stopping = False
        self._supervisor = gevent.spawn(self._supervise)

    def write(self, config: dict) -> None:
        """The config file a (re)started process reads; the running one is told by API."""
        self.config = config
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        # The secrets are the users' keys: for the panel's user alone.
        descriptor = os.open(self.path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as fh:
            json.dump(config, fh)
        os.replace(self.path + ".tmp", self.path)

    def stop(self) -> None:
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.kill()
            self._supervisor = None
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
        self._set("stopped", "")

    def wait_ready(self, seconds: float) -> bool:
        return self._ready.wait(seconds)

    # ---- the management API ----------------------------------------------------------------

    def put_secrets(self, entries: dict) -> bool:
        """Replace the running process's secrets; False when it could not be told."""
        reply = self._call("PUT", "/secrets", {"secrets": entries})
        return reply is not None

    def stats(self) -> dict | None:
        return self._call("GET", "/stats")

    def _call(self, method: str, path: str, body: dict | None = None) -> dict | None:
        if self.state != "running" or not self.port:
            return None
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=API_TIMEOUT)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        try:
            connection.request(
                method, path, json.dumps(body) if body is not None else None, headers
            )
            reply = connection.getresponse()
            text = reply.read()
        except (OSError, http.client.HTTPException) as exc:
            log.warning("MTProto proxy of inbound %d did not answer: %s", self.inbound_id, exc)
            return None
        finally:
            connection.close()
        if reply.status != 200:
            log.warning(
                "MTProto proxy of inbound %d refused %s %s: %s",
                self.inbound_id,
                method,
                path,
                text[:200].decode(errors="replace"),
            )
            return None
        return json.loads(text)

    # ---- the process -----------------------------------------------------------------------

    def _supervise(self) -> None:
        while not self._stopping:
            self._launch()
            code = self.process.wait()
            self._ready.clear()
            self.port = 0
            if self._stopping:
                return
            lived = time.monotonic() - self.started
            if lived >= HEALTHY_SECONDS:
                self._pause = RESTART_FIRST_SECONDS
            reason = "; ".join(self._errors) or _exit_text(code)
            log.warning(
                "MTProto proxy of inbound %d exited (%s); starting it again in %g s",
                self.inbound_id,
                reason,
                self._pause,
            )
            self._set("error", reason)
            gevent.sleep(self._pause)
            self._pause = min(self._pause * 2, RESTART_MAX_SECONDS)

    def _launch(self) -> None:
        self._errors.clear()
        self._set("starting", self.error)
        self.process = subprocess.Popen(
            self_command("mtproto-proxy", self.path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_environment(),
        )
        self.process.stdin.write(json.dumps({"token": self.token}).encode() + b"\n")
        self.process.stdin.flush()
        self.started = time.monotonic()
        gevent.spawn(self._read_out, self.process)
        gevent.spawn(self._read_errors, self.process)

    def _read_out(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            if "managementPort" in record and process is self.process:
                self.port = int(record["managementPort"])
                self._set("running", "")
                self._ready.set()
            elif "message" in record:
                logging.getLogger(str(record.get("name", __name__))).log(
                    int(record.get("level", logging.INFO)),
                    "[MTProto inbound %d] %s",
                    self.inbound_id,
                    record["message"],
                )

    def _read_errors(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            text = line.decode(errors="replace").strip()
            if text:
                self._errors.append(text.removeprefix("error: "))

    def _set(self, state: str, error: str) -> None:
        if (state, error) != (self.state, self.error):
            self.state, self.error = state, error
            self.on_state(self.inbound_id, state, error)


def _exit_text(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"
