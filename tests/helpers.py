"""Helpers that several test modules need in the same form: the success and failure
envelope checks, adding an inbound through the API, requests fired at once from many
sessions, reading and writing the panel's database (its SQLite file, or the
PostgreSQL/MariaDB database of a `--db` run), fresh databases on the local PostgreSQL and
MariaDB servers, a clean environment and a free port for a server, the stream settings
most inbound samples use, a self-signed certificate written to files, the `appliance`
command run to its end, the panel's WebSocket, and where the suite's own files are.

They were once copied into each module that used them; one copy means a fix or a stricter
check reaches every test at once. Helpers particular to one module stay in that module.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import itertools
import json
import os
import random
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import websocket
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

INBOUNDS = "/panel/api/inbounds"

REALITY_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")
WG_PEER_KEY = base64.b64encode(bytes(range(32, 64))).decode()
TLS = {
    "network": "tcp",
    "security": "tls",
    "tlsSettings": {
        "certificates": [{"certificateFile": "/etc/ssl/a.crt", "keyFile": "/etc/ssl/a.key"}]
    },
}
REALITY = {
    "network": "tcp",
    "security": "reality",
    "realitySettings": {
        "target": "example.com:443",
        "serverNames": ["example.com"],
        "privateKey": REALITY_KEY,
        "shortIds": ["", "0123abcd"],
    },
}

# The folder of the test suite and the project's root, for files the tests read.
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
GOLDEN = TESTS / "golden"


# ---- processes ---------------------------------------------------------------------------


def clean_env(**extra: str) -> dict:
    """This process's environment without any APPLIANCE_ variable, plus `extra`: a command
    sees only the settings its test gives it."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    # No core unless a test names one: a panel left behind must not leave a core too.
    environment["APPLIANCE_CORE"] = "/nonexistent/core"
    environment.update(extra)
    return environment


# Ports for servers a test starts itself, below the kernel's ephemeral range (32768 and
# up), a block of PORT_BLOCK per test process: a port the kernel handed out and released
# could go to another test process, or to an outgoing connection, before the server bound
# it; a port from this process's own block cannot. Test runs that go side by side (the
# SQLite, PostgreSQL and MariaDB passes) name their first block in
# APPLIANCE_TEST_PORT_BLOCK.
# Fixed ports a test saves on an inbound of a panel without a core (checked for being
# free, never held) are taken from 32000-32767, above every block.
PORT_BASE, PORT_BLOCK, PORT_BLOCKS = 20000, 1500, 8
_next_port = itertools.count(random.randrange(PORT_BLOCK))


class _SourceAddress(requests.adapters.HTTPAdapter):
    def __init__(self, address: str):
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, source_address=(self.address, 0), **kwargs)


def leaving_from(http: requests.Session, address: str) -> requests.Session:
    """`http` with its connections bound to the source `address`: any of 127/8 reaches a
    panel on loopback, so one test can be many clients, as one host with many addresses
    can."""
    adapter = _SourceAddress(address)
    http.mount("http://", adapter)
    http.mount("https://", adapter)
    return http


def free_port() -> int:
    """A loopback port nothing is bound to, from this test process's own block."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    block = int(os.environ.get("APPLIANCE_TEST_PORT_BLOCK", "0")) + worker
    base = PORT_BASE + block % PORT_BLOCKS * PORT_BLOCK
    for _ in range(PORT_BLOCK):
        port = base + next(_next_port) % PORT_BLOCK
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in 127.0.0.1:{base}-{base + PORT_BLOCK - 1}")


# ---- envelopes ----------------------------------------------------------------------------


def ok(reply: dict) -> object:
    """The `obj` of a success envelope."""
    assert reply["success"] is True, reply
    return reply["obj"]


def refused(reply: dict, *words: str) -> None:
    """A failure envelope whose message names every word given."""
    assert reply["success"] is False, reply
    assert reply["obj"] is None
    for word in words:
        assert word in reply["msg"], (word, reply["msg"])


def create_inbound(api, payload: dict) -> dict:
    """Adds an inbound through the API; the add must succeed. Returns the inbound as stored."""
    return ok(api.post(f"{INBOUNDS}/add", payload))


def post_at_once(api, path: str, bodies: list[dict]) -> list[tuple[int, dict]]:
    """Posts each of `bodies` to `path` from a session of its own, signed in as `api` is,
    all released together by a barrier: races that one session's sequential requests never
    hit (two "exists?" checks passing before either insert). Returns (status, JSON body)
    per reply, in the order the replies came."""
    sessions = []
    for _ in bodies:
        session = requests.Session()
        session.cookies.update(api.http.cookies)
        session.headers.update(api.http.headers)
        sessions.append(session)
    barrier = threading.Barrier(len(sessions))
    replies: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def post(session: requests.Session, body: dict) -> None:
        barrier.wait()
        reply = session.post(api.url + path, json=body, timeout=60)
        with lock:
            replies.append((reply.status_code, reply.json()))

    threads = [
        threading.Thread(target=post, args=(session, body))
        for session, body in zip(sessions, bodies, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies


def create_plain_vless(api, port: int) -> int:
    """Adds a VLESS inbound on `port` over plain TCP, the least a client needs to attach
    to, for tests about storage rather than protocols; returns its id."""
    return create_inbound(
        api,
        {
            "protocol": "vless",
            "port": port,
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )["id"]


# ---- the panel's database --------------------------------------------------------------
# A panel runs on its SQLite file unless the suite runs with --db=postgres|mysql; then each
# panel gets a database of its own on the local server (`server.db_url`), and the helpers
# below read and write that one instead.

NETWORKED = {"postgres": ("127.0.0.1", 5432), "mysql": ("127.0.0.1", 3306)}


def db_path(server) -> str:
    return os.path.join(server.data_dir, "appliance.db")


def db_rows(server, statement: str, params: tuple = ()) -> list[tuple]:
    """Runs one statement (SQLite's words, `?` placeholders) on the panel's database,
    commits it, and returns its rows."""
    url = getattr(server, "db_url", "")
    if url:
        return networked_rows(url, statement, params)
    db = sqlite3.connect(db_path(server))
    try:
        with db:
            return db.execute(statement, params).fetchall()
    finally:
        db.close()


def database_bytes(server) -> bytes:
    """Everything the panel stored, as bytes: what a secret must never be in. The SQLite
    file and its write-ahead log, or every row of every table of a networked database."""
    url = getattr(server, "db_url", "")
    if url:
        schema = "current_schema()" if _kind(url) == "postgres" else "DATABASE()"
        tables = networked_rows(
            url, f"SELECT table_name FROM information_schema.tables WHERE table_schema = {schema}"
        )
        return repr([networked_rows(url, f"SELECT * FROM {name}") for (name,) in tables]).encode()
    path = db_path(server)
    return b"".join(
        Path(name).read_bytes() for name in (path, path + "-wal") if os.path.exists(name)
    )


def setting_rows(server) -> dict[str, str]:
    """The `setting` table as the panel stored it."""
    return dict(db_rows(server, "SELECT key, value FROM setting"))


@contextlib.contextmanager
def locked_externally(path: str) -> Iterator[None]:
    """Another program holding the write lock of the SQLite file at `path`, the way a
    `sqlite3` shell left in `BEGIN EXCLUSIVE` does, until the block ends."""
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


@contextlib.contextmanager
def write_protected(path: str) -> Iterator[None]:
    """`path` refuses to be written, by root too (whom permission bits do not stop), until
    the block ends: the immutable flag. Skips the test where it cannot be set."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    made = subprocess.run(["chattr", "+i", path], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this file system or user cannot set the immutable flag: {made.stderr}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", path], check=True)


def create_database(kind: str) -> str:
    """A new, empty database on the local `kind` server; returns its URL."""
    name = f"appliance_test_{uuid.uuid4().hex[:12]}"
    with _server_admin(kind) as cur:
        cur.execute(f"CREATE DATABASE {name}")
    scheme = "postgresql://postgres" if kind == "postgres" else "mysql://root"
    return f"{scheme}@127.0.0.1:{NETWORKED[kind][1]}/{name}"


def drop_database(url: str) -> None:
    """Drops a database `create_database` made, closing whatever still uses it."""
    kind, name = _kind(url), url.rsplit("/", 1)[1]
    with _server_admin(kind) as cur:
        if kind == "postgres":
            _end_postgres_connections(cur, name)
        cur.execute(f"DROP DATABASE IF EXISTS {name}")


def server_reachable(kind: str) -> bool:
    """Whether the local `kind` server accepts TCP connections."""
    try:
        with socket.create_connection(NETWORKED[kind], timeout=2):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def fresh_database(kind: str) -> Iterator[str]:
    """The URL of a new, empty database on the local `kind` server, dropped afterwards.
    The test skips, naming the address, when no such server runs: the tests of the
    networked backends each need one of their own, and a machine may lack one."""
    if not server_reachable(kind):
        host, port = NETWORKED[kind]
        pytest.skip(f"no {kind} server on {host}:{port}")
    url = create_database(kind)
    try:
        yield url
    finally:
        drop_database(url)


def end_server_connections(url: str) -> int:
    """The server ends every connection to the database at `url` (`pg_terminate_backend`,
    `KILL`), the way an administrator or a restart would; returns how many it ended."""
    kind, name = _kind(url), url.rsplit("/", 1)[1]
    with _server_admin(kind) as cur:
        if kind == "postgres":
            return _end_postgres_connections(cur, name)
        cur.execute(
            "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
            (name,),
        )
        ids = [row[0] for row in cur.fetchall()]
        for thread_id in ids:
            cur.execute(f"KILL {int(thread_id)}")
        return len(ids)


def networked_connection(url: str):
    """A DB-API connection to a database `create_database` made."""
    kind, name = _kind(url), url.rsplit("/", 1)[1]
    host, port = NETWORKED[kind]
    if kind == "postgres":
        import psycopg2

        return psycopg2.connect(host=host, port=port, user="postgres", dbname=name)
    import pymysql

    return pymysql.connect(host=host, port=port, user="root", password="", database=name)


def networked_rows(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    """`db_rows` on a networked database. Tests write SQLite's SQL; the few words that
    differ are translated here: `?` placeholders, 0/1 for booleans on PostgreSQL, and
    the column named `key`, which MySQL reserves."""
    kind = _kind(url)
    statement = statement.replace("%", "%%").replace("?", "%s")
    if kind == "postgres":
        statement = re.sub(
            r"\b(enabled?) = ([01])\b",
            lambda m: f"{m[1]} = {'TRUE' if m[2] == '1' else 'FALSE'}",
            statement,
        )
    else:
        statement = re.sub(r"\bkey\b", "`key`", statement)
    conn = networked_connection(url)
    try:
        cur = conn.cursor()
        cur.execute(statement, params)
        rows = [tuple(row) for row in cur.fetchall()] if cur.description else []
        conn.commit()
        return rows
    finally:
        conn.close()


def _kind(url: str) -> str:
    return "postgres" if url.startswith("postgres") else "mysql"


@contextlib.contextmanager
def _server_admin(kind: str):
    """An autocommit cursor on the server's administrative database."""
    host, port = NETWORKED[kind]
    if kind == "postgres":
        import psycopg2

        conn = psycopg2.connect(host=host, port=port, user="postgres", dbname="postgres")
        conn.autocommit = True
    else:
        import pymysql

        conn = pymysql.connect(host=host, port=port, user="root", password="", autocommit=True)
    try:
        yield conn.cursor()
    finally:
        conn.close()


def _end_postgres_connections(cur, name: str) -> int:
    cur.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid()",
        (name,),
    )
    return len(cur.fetchall())


# ---- certificates -------------------------------------------------------------------------


def self_signed_certificate(
    common_name: str, *alt_names: x509.GeneralName, ca: bool = False
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A fresh P-256 key and a certificate it signed for itself, valid from yesterday for
    30 days; `alt_names`, when given, go into a subjectAltName extension; `ca` makes it a
    certificate authority."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
    )
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    if ca:
        constraints = x509.BasicConstraints(ca=True, path_length=None)
        builder = builder.add_extension(constraints, critical=True)
    return key, builder.sign(key, hashes.SHA256())


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> str:
    """Writes `key` as unencrypted PKCS#8 PEM; returns the path."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(path)


def write_certificate(path: Path, certificate: x509.Certificate) -> str:
    """Writes `certificate` as PEM; returns the path."""
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return str(path)


def certs_dir(server) -> Path:
    """The certificate folder of a panel's data directory: certificate files the panel
    is given must be in a folder like this one."""
    path = Path(server.data_dir) / "certs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sockets_dir(server) -> str:
    """The folder of a panel's data directory that the unix sockets inbounds listen on or
    hand connections to must be in."""
    return os.path.join(server.data_dir, "sockets")


def write_self_signed(
    directory: Path, common_name: str, *alt_names: x509.GeneralName
) -> tuple[str, str]:
    """A self-signed certificate and its key written into `directory` as cert.pem and
    key.pem; returns the certificate's path and the key's path."""
    key, certificate = self_signed_certificate(common_name, *alt_names)
    return (
        write_certificate(directory / "cert.pem", certificate),
        write_key(directory / "key.pem", key),
    )


def run_appliance(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m appliance ARGS` run to its end, in a clean environment plus `env`."""
    return subprocess.run(
        [sys.executable, "-m", "appliance", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(**(env or {})),
    )


# ---- the WebSocket ------------------------------------------------------------------------

# Seconds a test waits for a push.
PUSH_WAIT = 10


def ws_url(panel) -> str:
    return panel.url.replace("http", "ws", 1) + "/ws"


def cookie_header(client) -> str:
    return "; ".join(f"{name}={value}" for name, value in client.http.cookies.items())


def connect(panel, client, timeout: float = PUSH_WAIT, **options) -> websocket.WebSocket:
    return websocket.create_connection(
        ws_url(panel), timeout=timeout, cookie=cookie_header(client), **options
    )


def next_message(ws, wanted: str, deadline: float, **match) -> dict:
    """The next message of type `wanted` (whose fields equal `match`) before `deadline`."""
    while time.time() < deadline:
        ws.settimeout(max(deadline - time.time(), 0.1))
        message = json.loads(ws.recv())
        if message.get("type") == wanted and all(message.get(k) == v for k, v in match.items()):
            return message
    raise AssertionError(f"no {wanted} message {match} before the deadline")


def panel_origin(panel) -> str:
    """The origin of the panel's pages, as a browser showing them sends it."""
    scheme, _, rest = panel.url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


# ---- services built without a core or nodes -------------------------------------------


def runs_every_feature(features) -> None:
    """The core check of a service test without a core: nothing is refused."""


def _config_passes(inbound_id: int) -> None:
    """No core to test a save's config: every one passes."""


def _on_no_node(before, after) -> None:
    """No node to place an inbound on."""


def _no_node_marks(node_ids) -> dict:
    return {}


def without_core_or_nodes() -> dict:
    """What a service test hands `Inbounds` for the parts it runs without: no core tests
    a save or holds a socket, and no inbound is placed on a node."""
    return {
        "held_sockets": list,
        "check_config": _config_passes,
        "place_on_node": _on_no_node,
        "node_marks": _no_node_marks,
        "node_save_failed": _on_no_node,
    }
