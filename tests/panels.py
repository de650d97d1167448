"""The harness that runs the real panel: a child process on ephemeral ports, driven over HTTP.

`start_panel()` launches `python -m appliance run` with a fresh data directory and
`--port 0 --sub-port 0`, then reads the process output for the first-run credentials and
the ports it bound. `--db=postgres|mysql` runs every panel on a fresh database of its own
on the local server instead of a SQLite file (dropped at the end). `ApiClient` is a
signed-in `requests` session that sends the CSRF header, the way a browser page does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest
import requests
from helpers import NETWORKED, create_database, drop_database

LISTEN_RE = re.compile(r"panel listening on (https?)://[^:]+:(\d+)(/\S*)")
SUB_RE = re.compile(r"subscription server listening on https?://[^:]+:(\d+)/")
# How long a panel may take to say it listens: a first start on a networked database
# runs every migration, which with the three passes side by side took over 30 s.
START_TIMEOUT = 90
NO_CORE = "/nonexistent/core"
BACKENDS = ("sqlite", *sorted(NETWORKED))
# The backend the panels of this run use, from --db; databases made for them so far.
backend = {"kind": "sqlite"}
created_databases: list[str] = []


def skip_unless_sqlite(why: str) -> None:
    """For a test about the SQLite file itself: on a networked run it says why it skips."""
    if backend["kind"] != "sqlite":
        pytest.skip(f"{why}; this run uses --db={backend['kind']}")


@dataclass
class PanelServer:
    data_dir: str
    args: list[str]
    env: dict
    process: subprocess.Popen | None = None
    lines: list[str] = field(default_factory=list)
    url: str = ""
    sub_url: str = ""
    username: str = ""
    expect_credentials: bool = False
    password: str = ""
    db_url: str = ""  # the networked database of a --db run; "" for the SQLite file

    def start(self) -> PanelServer:
        # A new data directory means a first run: its credentials follow the listen lines.
        self.expect_credentials = not self.username and not (
            "--db" in self.args or os.path.exists(os.path.join(self.data_dir, "appliance.db"))
        )
        self.launch(
            [sys.executable, "-m", "appliance", "run", "--data-dir", self.data_dir, *self.args]
        )
        return self

    def launch(self, command: list[str]) -> None:
        """Runs `command`, collects its output in the background and waits until it listens.
        Panels started another way (the one-file binary, a bare `run`) share it."""
        mark = len(self.lines)
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        threading.Thread(target=self._pump, args=(self.process,), daemon=True).start()
        self.wait_listening(mark)

    def _pump(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_listening(self, mark: int, timeout: float = START_TIMEOUT) -> None:
        """Wait until the output after line `mark` shows both ports bound."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            panel = sub = None
            for line in self.lines[mark:]:
                if match := LISTEN_RE.search(line):
                    panel = match
                if match := SUB_RE.search(line):
                    sub = match
            self._read_credentials(self.lines[mark:])
            if panel and sub and (self.password or not self.expect_credentials):
                scheme, port, base = panel.groups()
                self.url = f"{scheme}://127.0.0.1:{port}{base.rstrip('/')}"
                self.sub_url = f"http://127.0.0.1:{sub.group(1)}"
                return
            if self.process.poll() is not None and not any(
                LISTEN_RE.search(line) for line in self.lines[mark:]
            ):
                raise RuntimeError("panel exited:\n" + "\n".join(self.lines[mark:]))
            time.sleep(0.05)
        raise RuntimeError("panel did not start:\n" + "\n".join(self.lines[mark:]))

    def _read_credentials(self, lines: list[str]) -> None:
        for line in lines:
            if "username:" in line and not self.username:
                self.username = line.split("username:", 1)[1].strip()
            if "password:" in line and not self.password:
                self.password = line.split("password:", 1)[1].strip()

    def output(self) -> str:
        return "\n".join(self.lines)

    def client(self, login: bool = True) -> ApiClient:
        client = ApiClient(self.url)
        if login:
            if not self.password:
                self.await_credentials()
            client.sign_in(self.username, self.password)
        return client

    def await_credentials(self, timeout: float = START_TIMEOUT) -> None:
        """Wait for the first-run credentials a panel prints after its listen lines. A
        panel given an empty database by `--db` prints them too, and the test cannot know
        beforehand that it will; it waits here, when it first signs in."""
        deadline = time.time() + timeout
        while not self.password and time.time() < deadline:
            self._read_credentials(self.lines)
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def rss(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0


class ApiClient:
    """A browser-like session: cookie plus X-CSRF-Token on unsafe requests."""

    def __init__(self, url: str):
        self.url = url
        self.http = requests.Session()

    def sign_in(self, username: str, password: str, code: str | None = None) -> dict:
        payload = {"username": username, "password": password}
        if code is not None:
            payload["twoFactorCode"] = code
        reply = self.http.post(self.url + "/login", json=payload, timeout=10).json()
        if reply["success"]:
            token = self.http.get(self.url + "/csrf-token", timeout=10).json()["obj"]
            self.http.headers["X-CSRF-Token"] = token
        return reply

    def get(self, path: str, **kwargs) -> dict:
        return self.raw("GET", path, **kwargs).json()

    def post(self, path: str, json=None, **kwargs) -> dict:
        return self.raw("POST", path, json=json, **kwargs).json()

    def raw(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return self.http.request(method, self.url + path, **kwargs)


def start_panel(tmp_path, *args: str, env: dict | None = None) -> PanelServer:
    data_dir = str(tmp_path / f"data-{time.monotonic_ns()}")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    # API tests run without a core (a path that does not exist: "not installed"); the
    # core tests name the real binary.
    environment["APPLIANCE_CORE"] = NO_CORE
    environment.update(env or {})
    db_url = ""
    if backend["kind"] != "sqlite" and "--db" not in args and "APPLIANCE_DB" not in environment:
        db_url = create_database(backend["kind"])
        created_databases.append(db_url)
        environment["APPLIANCE_DB"] = db_url
    server = PanelServer(
        data_dir,
        ["--listen", "127.0.0.1", "--port", "0", "--sub-port", "0", *args],
        environment,
        db_url=db_url,
    )
    return server.start()


def stop_and_drop(server: PanelServer) -> None:
    """Stop a panel and drop its networked database, if it has one."""
    server.stop()
    if server.db_url in created_databases:
        created_databases.remove(server.db_url)
        drop_database(server.db_url)
