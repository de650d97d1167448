"""The bench's toolbox: start the real panel, sign in, generate datasets, measure.

The panel runs as a child process (`python -m appliance run`) on ephemeral ports, exactly
as a user starts it, and is driven over real HTTP with keep-alive connections from
`http.client`: `requests` would add a millisecond of its own to every figure.

Datasets are written straight into a migrated SQLite file before the panel starts, using
the product's own migrations and payload normalisation, so a 100,000-row dataset takes
seconds rather than 100,000 API calls; each dataset is then checked once through the API
(after the measurements, so the check never warms or skews them).

A scenario is a function registered with `@scenario(name, dataset=...)`; it receives a
`Context` holding the panel started on that dataset and returns a dict of figures.
Latency figures are medians over runs of each run's median and p99; see `latency()`.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlsplit

from appliance.config import DB_FILE
from appliance.domain.inbound_rules import normalize_inbound
from appliance.runtime.changes import ChangeNotice
from appliance.services.tools.keys import new_x25519
from appliance.store.migrations import migrate

BENCH_DIR = Path(__file__).resolve().parent
START_TIMEOUT = 60
STOP_TIMEOUT = 10


class BenchError(Exception):
    """Something the bench cannot measure through: a crash, a failed request."""


# ---- child processes ---------------------------------------------------------------------


class Child:
    """A server process whose merged stdout/stderr is read line by line until it says
    where it listens (`READY` must have `port` and `base` groups)."""

    READY: re.Pattern = re.compile(r"listening on http://[^:/]+:(?P<port>\d+)(?P<base>/\S*)")

    def __init__(self, name: str, argv: list[str], env: dict | None = None):
        self.name = name
        self.argv = argv
        self.env = env
        self.process: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.url = ""

    def launch(self) -> Child:
        """Start the process without waiting for it; `wait_ready()` waits."""
        self.process = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        return self

    def _pump(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_ready(self, timeout: float = START_TIMEOUT) -> Child:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := self.READY.search(line):
                    base = match.group("base").rstrip("/")
                    self.url = f"http://127.0.0.1:{match.group('port')}{base}"
                    self.ready(self.lines)
                    return self
            if self.process.poll() is not None:
                raise BenchError(f"{self.name} exited:\n" + "\n".join(self.lines))
            time.sleep(0.05)
        raise BenchError(f"{self.name} did not start:\n" + "\n".join(self.lines))

    def ready(self, lines: list[str]) -> None:
        """Read what else the start-up output says; nothing by default."""

    def start(self) -> Child:
        return self.launch().wait_ready()

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mb(self, field: str = "VmRSS") -> float:
        """Resident set size (VmRSS) in MiB; `field="VmHWM"` gives its peak so far."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
        raise BenchError(f"{self.name}: no {field} in /proc/{self.pid}/status")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


CREDENTIALS_WAIT = 10  # seconds after the listening line


# A core binary that is not there: the panel then runs and serves without one.
NO_CORE = "/nonexistent/core"


def children(pid: int) -> list[int]:
    """The processes `pid` started that still run (a panel's subscription workers)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(child) for child in fh.read().split()]
    except OSError:
        return []


def tree_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by process `pid` and the children it runs
    (a panel and its workers): on a loaded machine the CPU a request costs is steadier
    than the requests a second it allows."""
    ticks = 0
    for process in (pid, *children(pid)):
        try:
            with open(f"/proc/{process}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:  # a worker that left meanwhile
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class Panel(Child):
    """The real panel on 127.0.0.1 with both ports ephemeral, on a data directory the
    bench prepared (or on the networked database `db`, a --db URL); the first-run
    credentials come from its output."""

    READY = re.compile(r"panel listening on http://[^:/]+:(?P<port>\d+)(?P<base>/\S*)")

    def __init__(self, data_dir: Path, dataset: str, db: str = ""):
        env = {key: value for key, value in os.environ.items() if not key.startswith("APPLIANCE_")}
        if dataset in DATASETS and DATASETS[dataset].without_core:
            env["APPLIANCE_CORE"] = NO_CORE
        argv = [sys.executable, "-m", "appliance", "run", "--data-dir", str(data_dir)]
        argv += ["--listen", "127.0.0.1", "--port", "0", "--sub-port", "0"]
        if db:
            argv += ["--db", db]
        super().__init__(f"panel ({dataset})", argv, env)
        self.dataset = dataset
        self.username = ""
        self.password = ""

    def ready(self, lines: list[str]) -> None:
        # The credentials follow the listening line; with several panels starting at once
        # they may not have arrived yet when that line is seen.
        deadline = time.monotonic() + CREDENTIALS_WAIT
        while True:
            for line in list(lines):
                if "username:" in line and not self.username:
                    self.username = line.split("username:", 1)[1].strip()
                if "password:" in line and not self.password:
                    self.password = line.split("password:", 1)[1].strip()
            if self.username and self.password:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name} printed no first-run credentials")
            time.sleep(0.05)

    def client(self, sign_in: bool = True) -> Client:
        client = Client(self.url)
        if sign_in:
            client.sign_in(self.username, self.password)
        return client


class HelloServer(Child):
    """bench/hello_server.py: the same server stack with one trivial route."""

    def __init__(self):
        super().__init__("hello server", [sys.executable, str(BENCH_DIR / "hello_server.py")])


# ---- HTTP ----------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


# What a kept connection the server closed while it was idle raises on its next use.
IDLE_CLOSED = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class Client:
    """One keep-alive connection, with the session cookie and X-CSRF-Token a browser
    page would send. `keep_cookies=False` never sends cookies (a browser signing in
    afresh)."""

    def __init__(self, url: str, keep_cookies: bool = True):
        parts = urlsplit(url)
        self.base = parts.path.rstrip("/")
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        self.keep_cookies = keep_cookies
        self.cookies: dict[str, str] = {}
        self.headers: dict[str, str] = {}

    def request(self, method: str, path: str, payload: object = None) -> Reply:
        headers = dict(self.headers)
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        try:
            response = self._send(method, self.base + path, body, headers)
        except IDLE_CLOSED:
            # The panel closes a keep-alive connection idle for 15 s (a long wrk run in
            # between); the request never reached it, and a browser sends it again on a
            # new connection, as here.
            self.connection.close()
            response = self._send(method, self.base + path, body, headers)
        data = response.read()
        if self.keep_cookies:
            for header in response.msg.get_all("Set-Cookie") or []:
                for name, morsel in SimpleCookie(header).items():
                    self.cookies[name] = morsel.value
        return Reply(response.status, data)

    def _send(self, method: str, url: str, body, headers: dict) -> http.client.HTTPResponse:
        self.connection.request(method, url, body=body, headers=headers)
        return self.connection.getresponse()

    def call(self, method: str, path: str, payload: object = None) -> object:
        """The envelope's obj; BenchError unless HTTP 200 with success true."""
        return expect_success(self.request(method, path, payload), f"{method} {path}")["obj"]

    def sign_in(self, username: str, password: str) -> None:
        self.call("POST", "/login", {"username": username, "password": password})
        self.headers["X-CSRF-Token"] = self.call("GET", "/csrf-token")

    def cookie_header(self) -> dict[str, str]:
        """The session as headers, for load generators that make their own connections."""
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}

    def close(self) -> None:
        self.connection.close()


def expect_success(reply: Reply, what: str = "request") -> dict:
    try:
        envelope = reply.json()
    except ValueError:
        envelope = None
    if reply.status != 200 or not isinstance(envelope, dict) or envelope.get("success") is not True:
        raise BenchError(f"{what}: HTTP {reply.status} {reply.body[:300]!r}")
    return envelope


# ---- measuring -----------------------------------------------------------------------------


def sample(
    request: Callable[[], Reply],
    count: int,
    warmup: int = 0,
    before: Callable[[], object] | None = None,
) -> list[float]:
    """Seconds per call of `request`, `count` times in a row; each reply must be a
    success envelope (checked outside the timed part). `before`, when given, runs before
    each measured call, untimed (e.g. a change that drops a server-side cache)."""
    for _ in range(warmup):
        expect_success(request())
    times = []
    for _ in range(count):
        if before is not None:
            before()
        start = time.perf_counter()
        reply = request()
        times.append(time.perf_counter() - start)
        expect_success(reply)
    return times


def latency(
    request: Callable[[], Reply],
    runs: int,
    count: int,
    warmup: int = 3,
    before: Callable[[], object] | None = None,
) -> dict:
    """`runs` runs of `count` sequential requests on one connection: the median over runs
    of each run's median and p99, in milliseconds. The first run starts with `warmup`
    unmeasured requests; `before` runs untimed before each measured one (see `sample`)."""
    per_run = [sample(request, count, warmup if run == 0 else 0, before) for run in range(runs)]
    return {
        "median_ms": _ms(statistics.median(statistics.median(times) for times in per_run)),
        "p99_ms": _ms(statistics.median(percentile(times, 99) for times in per_run)),
        "runs": runs,
        "requests_per_run": count,
    }


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def throughput(
    url: str,
    runs: int,
    headers: dict[str, str] | None = None,
    connections: int = 32,
    seconds: float = 2.0,
    requests: int = 4000,
) -> dict:
    """GET `url` over `connections` concurrent keep-alive connections: requests per
    second, median over runs. Uses wrk (for `seconds` per run) when installed, else
    Python threads (`requests` per run), which saturate sooner; the `tool` figure says
    which, so only compare figures measured with the same tool."""
    headers = headers or {}
    if shutil.which("wrk"):
        rates = [_wrk(url, headers, connections, seconds) for _ in range(runs)]
        tool = "wrk"
    else:
        rates = [_threads(url, headers, connections, requests) for _ in range(runs)]
        tool = "python-threads"
    return {"rps": round(statistics.median(rates)), "connections": connections, "tool": tool}


def _wrk(url: str, headers: dict[str, str], connections: int, seconds: float) -> float:
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    output = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in output or "Socket errors" in output:
        raise BenchError(f"wrk saw failed requests on {url}:\n{output}")
    match = re.search(r"Requests/sec:\s*([\d.]+)", output)
    if not match:
        raise BenchError(f"wrk printed no Requests/sec:\n{output}")
    return float(match.group(1))


def _threads(url: str, headers: dict[str, str], connections: int, total: int) -> float:
    parts = urlsplit(url)
    per_connection = max(1, total // connections)
    start_line = threading.Barrier(connections + 1)
    failures: list[int] = []

    def worker() -> None:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        connection.connect()
        start_line.wait()
        for _ in range(per_connection):
            connection.request("GET", parts.path, headers=headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                failures.append(response.status)
        connection.close()

    workers = [threading.Thread(target=worker) for _ in range(connections)]
    for thread in workers:
        thread.start()
    start_line.wait()
    start = time.perf_counter()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise BenchError(f"{len(failures)} requests to {url} failed (HTTP {failures[0]})")
    return per_connection * connections / elapsed


def with_target(figure: dict, key: str, limit: float, unit: str) -> dict:
    """Note the issue's target next to `figure[key]` and whether it is met; never fails."""
    figure["target"] = f"{key} < {limit:g} {unit}"
    figure["met"] = figure[key] < limit
    return figure


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


# ---- datasets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """Rows a panel starts with. `seed` writes them into a freshly migrated SQLite
    database (None: the panel creates its own database, like a new install); `check`
    reads them back once through a signed-in client and says what it saw."""

    name: str
    description: str
    seed: Callable[[sqlite3.Connection], None] | None = None
    check: Callable[[Client], str] | None = None
    # Whether the panel runs it without a core: the stand-in core on PATH (V2Ray 4.34)
    # lacks REALITY, and a panel on it leaves such inbounds, and their clients'
    # subscriptions, out; without a core nothing is left out, as on the production core.
    without_core: bool = False


DATASETS: dict[str, Dataset] = {}


def register_dataset(dataset: Dataset) -> Dataset:
    DATASETS[dataset.name] = dataset
    return dataset


def build_database(dataset: Dataset, path: Path) -> None:
    """Migrate a new SQLite file with the product's migrations and seed it in one
    transaction. The file is left in rollback-journal mode, so it is one file to copy;
    the panel switches it to WAL when it opens it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn, "sqlite")
        conn.execute("BEGIN")
        dataset.seed(conn)
        conn.execute("COMMIT")
    finally:
        conn.close()


def opened_dataset(name: str, workdir: Path):
    """The dataset `name` built into `workdir` and opened in process: its store and its
    loaded settings, for the benches that drive the services without a panel process."""
    from appliance.runtime.file_paths import FilePlaces
    from appliance.services.admin.settings import Settings
    from appliance.store import Store

    path = workdir / DB_FILE
    build_database(DATASETS[name], path)
    store = Store(str(path))
    store.open()
    settings = Settings(store, FilePlaces(str(workdir)), ChangeNotice())
    settings.load()
    return store, settings


def insert_inbound(conn: sqlite3.Connection, inbound_id: int, payload: dict, now: int) -> dict:
    """Store an inbound API payload as the panel would (normalised by the product's own
    rules); returns the record with its id."""
    record = normalize_inbound(payload)
    conn.execute(
        "INSERT INTO inbound (id, remark, tag, protocol, listen, port, enable, expiry_time, "
        "total, settings, stream_settings, sniffing, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (inbound_id, *inbound_columns(record, now)),
    )
    return {"id": inbound_id, **record}


def reality_stream() -> dict:
    """REALITY over TCP with a new key pair: the stream of generated VLESS inbounds."""
    return {
        "network": "tcp",
        "security": "reality",
        "realitySettings": {
            "target": "www.example.com:443",
            "serverNames": ["www.example.com"],
            "privateKey": new_x25519()["privateKey"],
            "shortIds": ["", "6ba85179e30d4fc2"],
        },
    }


def insert_clients(
    conn: sqlite3.Connection,
    columns: list[str],
    clients: list[tuple],
    attachments: list[tuple[int, int]],
    traffic: list[tuple],
) -> None:
    """Write generated clients as the panel stores them: `clients` rows are (id, email
    key, the `columns` of `clients.columns_of`, created, updated), `attachments` (client
    id, inbound id), `traffic` (email key, email, up, down, enable, last online). Then
    ANALYZE, so the planner knows the tables' sizes as a long-running panel's would."""
    names = ", ".join(["id", "email_key", *columns, "created_at", "updated_at"])
    marks = ", ".join("?" * (len(columns) + 4))
    conn.executemany(f"INSERT INTO client ({names}) VALUES ({marks})", clients)
    conn.executemany(
        "INSERT INTO client_inbound (client_id, inbound_id) VALUES (?, ?)", attachments
    )
    conn.executemany(
        "INSERT INTO client_traffic (email_key, email, up, down, enable, last_online) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        traffic,
    )
    conn.execute("ANALYZE")


INBOUND_FIRST_PORT = 20000
INBOUND_PROTOCOLS = (
    ("vless", {"decryption": "none"}),
    ("vmess", {}),
    ("trojan", {}),
    ("shadowsocks", {"method": "aes-256-gcm", "password": "bench-password"}),
)
INBOUND_STREAMS = (
    {"network": "tcp"},
    {"network": "ws", "wsSettings": {"path": "/ws", "headers": {"Host": "bench.example.com"}}},
    {"network": "grpc", "grpcSettings": {"serviceName": "bench"}},
)
INBOUND_SNIFFING = {"enabled": True, "destOverride": ["http", "tls", "quic"]}


def inbound_payload(index: int) -> dict:
    """The API payload of generated inbound `index`: protocols and transports rotate,
    ports count up from INBOUND_FIRST_PORT, so no two collide."""
    protocol, settings = INBOUND_PROTOCOLS[index % len(INBOUND_PROTOCOLS)]
    return {
        "remark": f"bench inbound {index}",
        "protocol": protocol,
        "port": INBOUND_FIRST_PORT + index,
        "settings": settings,
        "streamSettings": INBOUND_STREAMS[index % len(INBOUND_STREAMS)],
        "sniffing": INBOUND_SNIFFING,
    }


def seed_inbounds(conn: sqlite3.Connection, count: int) -> None:
    """`count` inbounds as the panel stores them: each payload goes through the product's
    `normalize_inbound`, and the tag is the one the panel would derive (inbound-PORT)."""
    now = int(time.time() * 1000)
    rows = []
    for index in range(count):
        record = normalize_inbound(inbound_payload(index))
        rows.append(inbound_columns(record, now))
    conn.executemany(
        "INSERT INTO inbound (remark, tag, protocol, listen, port, enable, expiry_time, total, "
        "settings, stream_settings, sniffing, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def inbound_columns(record: dict, now: int) -> tuple:
    """A normalised inbound as the values of an `inbound` row, from remark to updated_at
    (the column order of the INSERTs that seed datasets)."""
    return (
        record["remark"],
        f"inbound-{record['port']}",
        record["protocol"],
        record["listen"],
        record["port"],
        record["enable"],
        record["expiryTime"],
        record["total"],
        compact_json(record["settings"]),
        compact_json(record["streamSettings"]),
        compact_json(record["sniffing"]),
        now,
        now,
    )


def check_inbounds(client: Client, count: int) -> str:
    """Every generated inbound is listed through the API with its port and protocol."""
    listed = client.call("GET", "/panel/api/inbounds/list")
    seen = {(item["port"], item["protocol"], item["remark"]) for item in listed}
    wanted = {
        (payload["port"], payload["protocol"], payload["remark"])
        for payload in map(inbound_payload, range(count))
    }
    if len(listed) != count or seen != wanted:
        raise BenchError(
            f"the API lists {len(listed)} inbounds, {len(wanted - seen)} generated ones missing"
        )
    return f"{count} inbounds listed through the API"


def compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


register_dataset(Dataset("empty", "a new install: no inbounds"))
register_dataset(
    Dataset(
        "inbounds_1k",
        "1,000 inbounds (VLESS/VMess/Trojan/Shadowsocks over TCP/WS/gRPC), no clients",
        seed=lambda conn: seed_inbounds(conn, 1000),
        check=lambda client: check_inbounds(client, 1000),
    )
)


# ---- scenarios -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Context], dict]
    dataset: str | None
    description: str
    mutates: bool = False


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, dataset: str | None = "empty", mutates: bool = False) -> Callable:
    """Register a scenario. The runner starts a panel on `dataset` and passes it in
    `Context.panel`; with `dataset=None` the scenario starts what it needs itself.
    `mutates=True`: the scenario changes the rows, so the runner checks the dataset
    before the measurements instead of after (a scenario with `dataset=None` that
    mutates calls `ctx.bench.check(panel)` itself before changing anything)."""

    def register(run: Callable[[Context], dict]) -> Callable[[Context], dict]:
        description = (run.__doc__ or "").strip().split("\n\n")[0]
        SCENARIOS[name] = Scenario(name, run, dataset, " ".join(description.split()), mutates)
        return run

    return register


@dataclass
class Bench:
    """What outlives one scenario: the work directory, the built dataset files, which
    datasets were checked, and the hello-world ceiling the ratios divide by."""

    workdir: Path
    runs: int
    baseline: dict = field(default_factory=dict)
    checked: dict[str, str] = field(default_factory=dict)
    _databases: dict[str, Path] = field(default_factory=dict)
    _panels_made: int = 0

    def data_dir(self, dataset: str) -> Path:
        """A new data directory holding a copy of the dataset's database."""
        spec = DATASETS[dataset]
        self._panels_made += 1
        data_dir = self.workdir / "panels" / f"{self._panels_made}-{dataset}"
        data_dir.mkdir(parents=True)
        if spec.seed is not None:
            if dataset not in self._databases:
                built = self.workdir / "datasets" / dataset / DB_FILE
                started = time.perf_counter()
                build_database(spec, built)
                log(f"built dataset {dataset} in {time.perf_counter() - started:.2f} s")
                self._databases[dataset] = built
            shutil.copyfile(self._databases[dataset], data_dir / DB_FILE)
        return data_dir

    def check(self, panel: Panel) -> None:
        """Check the panel's dataset through the API, once per dataset."""
        spec = DATASETS[panel.dataset]
        if spec.check is None or panel.dataset in self.checked:
            return
        client = panel.client()
        try:
            self.checked[panel.dataset] = spec.check(client)
        finally:
            client.close()


@dataclass
class Context:
    """What a scenario works with: its panel (None for `dataset=None`), the run count,
    and ways to start more servers, which the runner stops afterwards."""

    bench: Bench
    panel: Panel | None = None
    children: list[Child] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return self.bench.runs

    def start_panels(self, datasets: list[str]) -> list[Panel]:
        """Start one panel per entry, all at once, and wait until every one listens."""
        panels = [Panel(self.bench.data_dir(dataset), dataset) for dataset in datasets]
        for panel in panels:
            self.children.append(panel.launch())
        for panel in panels:
            panel.wait_ready()
        return panels

    def start(self, child: Child) -> Child:
        self.children.append(child)
        return child.start()

    def stop(self) -> None:
        for child in self.children:
            child.stop()
        self.children.clear()


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries only the JSON figures."""
    print(message, file=sys.stderr, flush=True)
