"""`appliance setting show | set` against a stopped panel's database.

`set` is the way back in for an owner locked out by a port, path, address or
certificate: it must apply the settings API's own checks, write nothing when any value is
bad, and leave a panel that starts with the new values.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import (
    certs_dir,
    clean_env,
    create_inbound,
    free_port,
    ok,
    setting_rows,
    write_self_signed,
)
from panels import start_panel


def appliance(server, *args: str) -> subprocess.CompletedProcess:
    store = ["--data-dir", server.data_dir]
    if server.db_url:
        store += ["--db", server.db_url]
    return subprocess.run(
        [sys.executable, "-m", "appliance", *args, *store],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )


def shown(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    pairs = (line.split(": ", 1) for line in result.stdout.splitlines())
    return {key: json.loads(value) for key, value in pairs}


# The inbound's port, from this test process's block: outside the ephemeral range, where
# an outgoing connection could hold it while the panel checks that it is free.
INBOUND_PORT = free_port()


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A panel that created its database, has one inbound, and stopped."""
    server = start_panel(tmp_path_factory.mktemp("setting"))
    create_inbound(
        server.client(), {"protocol": "socks", "port": INBOUND_PORT, "settings": {"auth": "noauth"}}
    )
    server.stop()
    yield server
    server.stop()


def test_show_prints_every_setting_with_secrets_redacted(stopped):
    changed = appliance(stopped, "setting", "set", "--listen", "127.0.0.1")
    assert changed.returncode == 0, changed.stderr
    values = shown(appliance(stopped, "setting", "show"))
    assert values["webPort"] == 2053
    assert values["webBasePath"] == "/"
    assert values["webListen"] == "127.0.0.1"
    assert values["subPath"] == "/sub/"
    assert "sessionSecret" not in values and "panelGuid" not in values


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "70000"], "webPort must be from 1 to 65535 (got 70000)"),
        (["--port", "abc"], 'webPort must be an integer (got "abc")'),
        (["--port", str(INBOUND_PORT)], f"webPort {INBOUND_PORT} is already used by"),
        (["--port", "10882"], "webPort and subPort are both 10882"),
        (["--base-path", "/a b/"], "webBasePath may hold only letters"),
        (["--listen", "not-an-address"], "webListen must be empty (all addresses) or an IP"),
        (["--cert-file", "/nonexistent/cert.pem", "--key-file", "/nonexistent/key.pem"], "web"),
        (["--port", "8443", "--listen", "nope"], "webListen must be empty"),
    ],
    ids=["range", "integer", "inbound", "sub-port", "path", "listen", "cert", "one-bad"],
)
def test_a_bad_value_is_refused_and_nothing_is_written(stopped, flags, message):
    before = setting_rows(stopped)
    result = appliance(stopped, "setting", "set", *flags)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ")
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert setting_rows(stopped) == before


def test_set_without_a_value_says_what_to_give(stopped):
    result = appliance(stopped, "setting", "set")
    assert result.returncode == 1
    assert "nothing to change; give at least one of --port, --base-path" in result.stderr


def test_a_certificate_pair_is_checked_and_stored(stopped):
    cert, key = write_self_signed(certs_dir(stopped), "panel.example")
    result = appliance(stopped, "setting", "set", "--cert-file", cert, "--key-file", key)
    assert result.returncode == 0, result.stderr
    rows = setting_rows(stopped)
    assert json.loads(rows["webCertFile"]) == cert
    assert json.loads(rows["webKeyFile"]) == key
    cleared = appliance(stopped, "setting", "set", "--cert-file", "", "--key-file", "")
    assert cleared.returncode == 0, cleared.stderr
    assert "webCertFile" not in setting_rows(stopped)


def test_a_pair_outside_the_certificate_folders_needs_the_host_owners_cert_dir(stopped, tmp_path):
    """The CLI checks as the API does; only a folder named on the host's command line
    (or in the environment) widens where certificate files may be."""
    cert, key = write_self_signed(tmp_path, "outside.example")
    before = setting_rows(stopped)
    result = appliance(stopped, "setting", "set", "--cert-file", cert, "--key-file", key)
    assert result.returncode == 1
    assert f"webCertFile '{cert}' is outside the directories allowed for it" in result.stderr
    assert "Traceback" not in result.stderr
    assert setting_rows(stopped) == before
    flags = ["--cert-dir", str(tmp_path), "--cert-file", cert, "--key-file", key]
    widened = appliance(stopped, "setting", "set", *flags)
    assert widened.returncode == 0, widened.stderr
    assert json.loads(setting_rows(stopped)["webCertFile"]) == cert
    cleared = appliance(stopped, "setting", "set", "--cert-file", "", "--key-file", "")
    assert cleared.returncode == 0, cleared.stderr


def test_new_port_and_path_apply_at_the_next_start(tmp_path):
    server = start_panel(tmp_path)
    server.stop()
    result = appliance(server, "setting", "set", "--base-path", "hidden/door", "--port", "2999")
    assert result.returncode == 0, result.stderr
    assert 'webBasePath: "/hidden/door/"' in result.stdout
    assert "webPort: 2999" in result.stdout
    assert "next restart" in result.stdout
    server.start()  # the test's --port 0 still overrides the stored port
    try:
        assert server.url.endswith("/hidden/door")
        ok(server.client().get("/panel/api/inbounds/list"))
    finally:
        server.stop()
    assert shown(appliance(server, "setting", "show"))["webPort"] == 2999


def test_the_same_value_again_changes_nothing(stopped):
    first = appliance(stopped, "setting", "set", "--port", "2054")
    assert first.returncode == 0, first.stderr
    again = appliance(stopped, "setting", "set", "--port", "2054")
    assert again.returncode == 0
    assert "nothing changed" in again.stdout


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        (["setting", "--help"], ["show", "set"]),
        (["setting", "show", "--help"], ["--data-dir", "--db"]),
        (
            ["setting", "set", "--help"],
            [
                "--port",
                "--base-path",
                "--listen",
                "--cert-file",
                "--key-file",
                "--cert-dir",
                "--db",
            ],
        ),
    ],
)
def test_every_subcommand_has_help(command, flags):
    result = subprocess.run(
        [sys.executable, "-m", "appliance", *command],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert result.returncode == 0
    for flag in flags:
        assert flag in result.stdout
