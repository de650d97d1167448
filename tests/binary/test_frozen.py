"""The one-file binary (build.spec) as a VPS runs it: the same commands as the package, a
first start on an empty data directory, an inbound and a client added over HTTP, the
client's subscription, a core started with a clean environment, `migrate-db` to
PostgreSQL and a restart on it, and databases written by an earlier schema version.

Every panel here is the binary itself, started on ephemeral loopback ports like the
package in conftest.py; nothing is imported from the package except to write the old
databases the binary must open.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest
import requests
from frozen_build import ROOT, frozen_binary
from helpers import clean_env, create_database, drop_database, free_port, ok
from panels import PanelServer

from appliance import __version__
from appliance.services.accounts.passwords import hash_password
from appliance.store.migrations import LATEST, migrate

pytestmark = pytest.mark.frozen

CLIENTS = "/panel/api/clients"
V2RAY = shutil.which("v2ray")
# Every command line a user can type; each answers --help the same frozen and not.
COMMANDS = (
    (),
    ("run",),
    ("admin",),
    ("admin", "show"),
    ("admin", "reset"),
    ("admin", "disable-2fa"),
    ("version",),
    ("setting",),
    ("setting", "show"),
    ("setting", "set"),
    ("migrate-db",),
)
EXIT_TIMEOUT = 30
LOOPBACK_ARGS = ("--listen", "127.0.0.1", "--port", "0", "--sub-port", "0")


@dataclass
class FrozenPanel(PanelServer):
    """`PanelServer` with the binary in place of `python -m appliance`."""

    binary: str = ""

    def start(self) -> FrozenPanel:
        self.expect_credentials = not self.username
        self.launch([self.binary, "run", "--data-dir", self.data_dir, *self.args])
        return self


def frozen_panel(binary: str, data_dir: Path, *args: str, **env: str) -> FrozenPanel:
    server = FrozenPanel(
        str(data_dir),
        [*LOOPBACK_ARGS, *args],
        clean_env(**env),
        binary=binary,
    )
    return server.start()


@functools.cache
def binary_commands(binary: str) -> str:
    return subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def binary(tmp_path_factory) -> str:
    return frozen_binary(tmp_path_factory.mktemp("frozen-build"))


@pytest.fixture(scope="module")
def libs_marker(tmp_path_factory) -> str:
    """An LD_LIBRARY_PATH the user set, which the core must get back unchanged."""
    return str(tmp_path_factory.mktemp("user-libs"))


@pytest.fixture(scope="module")
def first_panel(binary, tmp_path_factory, libs_marker):
    """The binary's first start on an empty data directory, with the real core if any."""
    server = frozen_panel(
        binary,
        tmp_path_factory.mktemp("frozen") / "data",
        APPLIANCE_CORE=V2RAY or "/nonexistent/core",
        LD_LIBRARY_PATH=libs_marker,
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def subscriber(first_panel) -> dict:
    """An inbound and a client on it, added over HTTP; returns the client as stored."""
    api = first_panel.client()
    inbound = ok(
        api.post(
            "/panel/api/inbounds/add",
            {
                "protocol": "vless",
                "remark": "frozen",
                "port": free_port(),
                "settings": {"decryption": "none"},
                "streamSettings": {"network": "tcp", "security": "none"},
            },
        )
    )
    client = {"email": f"{uuid.uuid4().hex[:10]}@frozen", "subId": uuid.uuid4().hex[:16]}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound["id"]]}))
    return ok(api.get(f"{CLIENTS}/get/{quote(client['email'])}"))["client"]


# ---- the commands ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=lambda words: " ".join(words) or "appliance")
def test_every_command_answers_help_like_the_package(binary, command):
    if command and command[0] not in binary_commands(binary):
        pytest.skip(f"`appliance {command[0]}` does not exist in the package yet")
    frozen = subprocess.run(
        [binary, *command, "--help"], capture_output=True, text=True, timeout=30
    )
    package = subprocess.run(
        [sys.executable, "-m", "appliance", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert frozen.returncode == 0, frozen.stderr
    assert frozen.stdout.startswith(f"usage: appliance {' '.join(command)}".rstrip())
    assert frozen.stdout == package.stdout


def test_version_is_the_package_version(binary):
    result = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    assert result.stdout.strip() == __version__


def test_offline_commands_refuse_a_missing_database(binary, tmp_path):
    result = subprocess.run(
        [binary, "admin", "show", "--data-dir", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=30,
        env=clean_env(),
    )
    assert result.returncode == 1
    assert "no panel database at" in result.stderr


# ---- a first start --------------------------------------------------------------------------


def test_first_start_prints_credentials_that_sign_in(first_panel):
    assert first_panel.username and first_panel.password
    api = first_panel.client(login=False)
    assert api.sign_in(first_panel.username, "not-the-password")["success"] is False
    assert api.sign_in(first_panel.username, first_panel.password)["success"] is True
    wanted = "running" if V2RAY else "not installed"
    deadline = time.time() + 10
    while ok(api.get("/panel/api/server/status"))["core"]["state"] != wanted:
        assert time.time() < deadline, f"the core never reached the state {wanted!r}"
        time.sleep(0.2)


def test_inbound_and_client_added_over_http(first_panel, subscriber):
    api = first_panel.client()
    inbounds = ok(api.get("/panel/api/inbounds/list"))
    assert [inbound["remark"] for inbound in inbounds] == ["frozen"]
    emails = [client["email"] for client in inbounds[0]["settings"]["clients"]]
    assert emails == [subscriber["email"]]


def test_subscription_served_from_the_sub_port(first_panel, subscriber):
    reply = requests.get(f"{first_panel.sub_url}/sub/{subscriber['subId']}", timeout=10)
    assert reply.status_code == 200, reply.text
    links = base64.b64decode(reply.content).decode().split("\n")
    assert len(links) == 1
    assert links[0].startswith(f"vless://{subscriber['id']}@")


def test_browser_ui_is_served_from_inside_the_binary(first_panel):
    """build.spec bundles appliance/assets/: every file the page links must be the checkout's."""
    page = requests.get(first_panel.url + "/", timeout=10)
    if page.status_code == 404:
        pytest.skip("the panel serves no UI page yet")
    assert page.status_code == 200
    linked = re.findall(r'(?:href|src)="assets/([^"?#]+)', page.text)
    assert linked, page.text[:500]
    for path in linked:
        served = requests.get(f"{first_panel.url}/assets/{path}", timeout=10)
        assert served.status_code == 200, path
        assert served.content == (ROOT / "appliance" / "assets" / path).read_bytes(), path


@pytest.mark.skipif(V2RAY is None, reason="no core here: apt-get install v2ray")
def test_core_runs_with_the_users_environment(first_panel, libs_marker):
    """The bootloader points LD_LIBRARY_PATH at its unpack folder and marks the
    environment with _PYI_ variables; the core gets neither."""
    panel = psutil.Process(first_panel.process.pid)
    frozen_env, core_env = {}, None
    deadline = time.time() + 10
    while core_env is None and time.time() < deadline:
        # The core restarts when inbounds change: a process found may be gone a moment later.
        with contextlib.suppress(psutil.NoSuchProcess):
            for process in panel.children(recursive=True):
                if process.name() == "v2ray":
                    core_env = process.environ()
                else:
                    frozen_env = process.environ()
        time.sleep(0.1)
    assert core_env is not None, "the frozen panel started no core"
    assert frozen_env["LD_LIBRARY_PATH"] != libs_marker  # the bootloader changed it
    assert core_env.get("LD_LIBRARY_PATH") == libs_marker
    assert [name for name in core_env if name.startswith("_PYI")] == []


def test_restart_from_the_panel_comes_back(first_panel, subscriber):
    """A frozen panel restarts by executing its own binary again: it must come back on
    the same data, signed-in state aside."""
    mark = len(first_panel.lines)
    ok(first_panel.client().post("/panel/api/setting/restartPanel"))
    deadline = time.time() + EXIT_TIMEOUT
    while not any("panel stopped" in line for line in first_panel.lines[mark:]):
        assert time.time() < deadline, first_panel.output()
        time.sleep(0.1)
    first_panel.wait_listening(mark)
    api = first_panel.client()
    found = ok(api.get(f"{CLIENTS}/get/{quote(subscriber['email'])}"))["client"]
    assert found["id"] == subscriber["id"]


def test_migrate_db_to_postgresql_keeps_the_client(binary, first_panel, subscriber):
    if "migrate-db" not in binary_commands(binary):
        pytest.skip("`appliance migrate-db` does not exist in the package yet")
    try:
        url = create_database("postgres")
    except Exception as exc:
        pytest.skip(f"no PostgreSQL at 127.0.0.1:5432 ({exc})")
    first_panel.stop()
    moved = None
    try:
        result = subprocess.run(
            [binary, "migrate-db", "--data-dir", first_panel.data_dir, "--to", url],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        moved = FrozenPanel(
            first_panel.data_dir,
            [*LOOPBACK_ARGS, "--db", url],
            clean_env(),
            username=first_panel.username,
            password=first_panel.password,
            binary=binary,
        ).start()
        api = moved.client()
        found = ok(api.get(f"{CLIENTS}/get/{quote(subscriber['email'])}"))["client"]
        assert found["id"] == subscriber["id"]
        assert found["subId"] == subscriber["subId"]
    finally:
        if moved is not None:
            moved.stop()
        drop_database(url)


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_first_start_on_a_networked_database(binary, tmp_path, kind):
    """Pony loads each database provider by name at run time: both must be inside."""
    try:
        url = create_database(kind)
    except Exception as exc:
        pytest.skip(f"no {kind} server on 127.0.0.1 ({exc})")
    server = None
    try:
        server = frozen_panel(binary, tmp_path / "data", "--db", url)
        api = server.client()
        assert ok(api.get("/panel/api/inbounds/list")) == []
        assert not (tmp_path / "data" / "appliance.db").exists()
    finally:
        if server is not None:
            server.stop()
        drop_database(url)


def test_stopped_binary_leaves_no_unpacked_files(binary, tmp_path):
    server = frozen_panel(binary, tmp_path / "data")
    try:
        pythons = psutil.Process(server.process.pid).children()
        unpacked = pythons[0].environ()["_PYI_APPLICATION_HOME_DIR"]
        assert os.path.isdir(unpacked)
    finally:
        server.stop()
    assert server.process.returncode == 0
    assert not os.path.exists(unpacked)


def test_subscription_workers_are_the_binary_in_its_unpacked_folder(binary, tmp_path):
    """A worker is the binary started again with `sub-worker`: it runs from the folder the
    panel unpacked (no second copy in TMPDIR), keeps the binary's own environment, and
    is gone, with that folder, once the panel stopped."""
    unpack_root = tmp_path / "unpack"
    unpack_root.mkdir()
    server = frozen_panel(
        binary, tmp_path / "data", APPLIANCE_SUB_WORKERS="2", TMPDIR=str(unpack_root)
    )
    try:
        python = psutil.Process(server.process.pid).children()[0]
        unpacked = python.environ()["_PYI_APPLICATION_HOME_DIR"]
        pids = ok(server.client().get("/panel/api/server/status"))["subWorkers"]
        workers = [psutil.Process(pid) for pid in pids]
        assert len(workers) == 2
        for worker in workers:
            assert worker.ppid() == python.pid
            assert worker.cmdline()[1:] == ["sub-worker"]
            assert worker.environ()["_PYI_APPLICATION_HOME_DIR"] == unpacked
        assert [path.name for path in unpack_root.iterdir()] == [os.path.basename(unpacked)]
        reply = requests.get(f"{server.sub_url}/sub/nothing-here", timeout=10)
        assert reply.status_code == 404
    finally:
        server.stop()
    assert server.process.returncode == 0
    assert not any(worker.is_running() for worker in workers)
    assert list(unpack_root.iterdir()) == []


# ---- databases of earlier versions ---------------------------------------------------------


def old_database(data_dir: Path, version: int) -> Path:
    """A data directory whose database an earlier release left at schema `version`."""
    data_dir.mkdir()
    path = data_dir / "appliance.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn, "sqlite", target=version)
    finally:
        conn.close()
    return path


def schema_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]


def test_database_of_an_earlier_version_opens_and_migrates(binary, tmp_path):
    data_dir = tmp_path / "old"
    path = old_database(data_dir, 1)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO admin (username, password_hash, totp_secret, totp_enabled, "
            "totp_last_step, updated_at) VALUES (?, ?, '', 0, 0, 0)",
            ("old-admin", hash_password("kept-from-before-1")),
        )
    server = FrozenPanel(
        str(data_dir),
        list(LOOPBACK_ARGS),
        clean_env(),
        username="old-admin",
        password="kept-from-before-1",
        binary=binary,
    ).start()
    try:
        assert server.client(login=False).sign_in("old-admin", "kept-from-before-1")["success"]
        assert schema_version(path) == LATEST
        assert "A new admin account" not in server.output()
    finally:
        server.stop()
    assert not list(data_dir.glob("appliance.db.before-*"))


def test_failed_migration_leaves_the_database_as_it_was(binary, tmp_path):
    """The last migration fails after the ones before it succeeded; the file must come
    back at the old version, byte for byte in content, and the process must say why."""
    data_dir = tmp_path / "old"
    path = old_database(data_dir, 1)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TRIGGER refuse_latest BEFORE INSERT ON schema_version "
            f"WHEN NEW.version = {LATEST} BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
        )
    before = list(sqlite3.connect(path).iterdump())
    result = subprocess.run(
        [binary, "run", "--data-dir", str(data_dir), *LOOPBACK_ARGS],
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
        env=clean_env(),
    )
    assert result.returncode != 0
    assert "disk says no" in result.stderr
    assert "restored to version 1 unchanged" in result.stderr
    assert list(sqlite3.connect(path).iterdump()) == before
    assert schema_version(path) == 1
    assert not list(data_dir.glob("appliance.db.before-*"))
