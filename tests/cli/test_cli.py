"""The admin account from the command line: first-run credentials, and the offline
`appliance admin show | reset | disable-2fa` commands run against a panel's data
directory, checked by signing in to the panel afterwards."""

from __future__ import annotations

import os
import re
import socket
import subprocess

import psutil
import pyotp
import pytest
import requests
from helpers import db_path, db_rows, run_appliance, setting_rows
from panels import ApiClient, start_panel

from appliance import __version__
from appliance.services.accounts import passwords


def admin(server, *args: str) -> subprocess.CompletedProcess:
    return run_appliance("admin", *args, "--data-dir", server.data_dir)


def printed_credentials(output: str) -> tuple[str, str]:
    values = {}
    for line in output.splitlines():
        for name in ("username", "password"):
            if line.strip().startswith(f"{name}:"):
                values[name] = line.split(":", 1)[1].strip()
    return values["username"], values["password"]


def restart(server) -> None:
    """Start the stopped panel again on the same data directory."""
    server.stop()
    server.start()


def client_for(server, username: str, password: str) -> tuple[ApiClient, dict]:
    client = ApiClient(server.url)
    return client, client.sign_in(username, password)


@pytest.fixture
def stopped_panel(tmp_path):
    """A panel that created its database, then stopped: what the offline commands expect."""
    server = start_panel(tmp_path)
    server.stop()
    yield server
    server.stop()


# ---- first run -----------------------------------------------------------------------


def test_first_run_prints_credentials_once(tmp_path):
    server = start_panel(tmp_path)
    try:
        first_output = server.output()
        assert first_output.count("A new admin account was created.") == 1
        assert server.username.startswith("admin-") and len(server.password) >= 16
        passwords.check_new_password(server.username, server.password)
        mark = len(server.lines)
        restart(server)
        later = "\n".join(server.lines[mark:])
        assert "panel listening" in later
        assert "password:" not in later and "A new admin account" not in later
        assert server.client().post("/panel/api/setting/all")["success"] is True
    finally:
        server.stop()


def test_first_run_on_every_address_names_the_addresses_a_browser_can_use(tmp_path):
    """A panel on 0.0.0.0 is not reachable at 0.0.0.0: the host's own addresses are named,
    loopback last, each with the base path, and the panel answers at loopback."""
    server = start_panel(tmp_path, "--listen", "0.0.0.0")
    try:
        output = server.output()
        assert "0.0.0.0" not in output.split("A new admin account was created.")[1]
        port_and_path = server.url.split("://127.0.0.1:", 1)[1] + "/"
        printed = re.findall(r"^ +(?:sign in at:)? +(https?://\S+)$", output, re.MULTILINE)
        own = [
            entry.address
            for entries in psutil.net_if_addrs().values()
            for entry in entries
            if entry.family == socket.AF_INET and not entry.address.startswith("127.")
        ]
        assert printed == [f"http://{address}:{port_and_path}" for address in own] + [
            f"http://127.0.0.1:{port_and_path}"
        ]
        assert requests.get(printed[-1], timeout=10).status_code == 200
    finally:
        server.stop()


def test_credentials_differ_between_installs_and_never_reach_the_log(tmp_path):
    one, two = start_panel(tmp_path), start_panel(tmp_path)
    try:
        assert one.username != two.username and one.password != two.password
        log_file = os.path.join(one.data_dir, "logs", "panel.log")
        with open(log_file) as fh:
            assert one.password not in fh.read()
    finally:
        one.stop()
        two.stop()


def test_first_run_stores_a_session_secret_that_survives_restarts(tmp_path):
    server = start_panel(tmp_path)
    try:
        client = server.client()
        secret = setting_rows(server)["sessionSecret"]
        assert len(secret) >= 32
        restart(server)
        assert setting_rows(server)["sessionSecret"] == secret
        client.url = server.url
        assert client.post("/panel/api/setting/all")["success"] is True
    finally:
        server.stop()


def test_admin_admin_is_refused_on_a_new_install(stopped_panel):
    stopped_panel.start()
    reply = stopped_panel.client(login=False).sign_in("admin", "admin")
    assert reply == {"success": False, "msg": "wrong username or password", "obj": None}


# ---- admin show ------------------------------------------------------------------------


def test_admin_show_prints_the_username_and_two_factor_state(stopped_panel):
    result = admin(stopped_panel, "show")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"username: {stopped_panel.username}",
        "two-factor: off",
    ]
    assert stopped_panel.password not in result.stdout


def test_admin_commands_read_the_data_dir_from_the_environment(stopped_panel):
    result = run_appliance("admin", "show", env={"APPLIANCE_DATA_DIR": stopped_panel.data_dir})
    assert result.returncode == 0, result.stderr
    assert f"username: {stopped_panel.username}" in result.stdout


def test_admin_commands_take_a_database_url(stopped_panel, tmp_path):
    db = db_path(stopped_panel)
    for args, env in (
        (["--db", f"sqlite:///{db}"], {}),
        ([], {"APPLIANCE_DB": db}),
    ):
        result = run_appliance(
            "admin", "show", "--data-dir", str(tmp_path / "unrelated"), *args, env=env
        )
        assert result.returncode == 0, result.stderr
        assert f"username: {stopped_panel.username}" in result.stdout


def test_admin_show_without_a_database_says_so_and_creates_nothing(tmp_path):
    data_dir = tmp_path / "typo"
    result = run_appliance("admin", "show", "--data-dir", str(data_dir))
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: no panel database at {data_dir}/appliance.db")
    assert "Traceback" not in result.stderr
    assert not data_dir.exists()


def test_admin_reset_before_first_run_leaves_run_to_print_credentials(tmp_path):
    """An admin command must not create an account nobody knows the password of."""
    server = start_panel(tmp_path)
    server.stop()
    db_rows(server, "DELETE FROM session")
    db_rows(server, "DELETE FROM admin")
    result = admin(server, "show")
    assert result.returncode == 1
    assert "no admin account exists yet; start the panel once" in result.stderr
    server.username = server.password = ""
    try:
        server.start()
        assert server.username.startswith("admin-")
        assert server.client().post("/panel/api/setting/all")["success"] is True
    finally:
        server.stop()


# ---- admin reset -----------------------------------------------------------------------


def test_reset_with_values_replaces_the_credentials_and_ends_sessions(stopped_panel):
    stopped_panel.start()
    old_session = stopped_panel.client()
    assert old_session.post("/panel/api/setting/all")["success"] is True
    stopped_panel.stop()

    result = admin(stopped_panel, "reset", "--username", "owner", "--password", "long enough pw")
    assert result.returncode == 0, result.stderr
    assert printed_credentials(result.stdout) == ("owner", "(as given)")
    assert "every session was signed out" in result.stdout

    stopped_panel.start()
    _, reply = client_for(stopped_panel, "owner", "long enough pw")
    assert reply["success"] is True
    _, reply = client_for(stopped_panel, stopped_panel.username, stopped_panel.password)
    assert reply == {"success": False, "msg": "wrong username or password", "obj": None}
    old_session.url = stopped_panel.url
    stale = old_session.raw("POST", "/panel/api/setting/all")
    assert stale.status_code == 401
    assert stale.json()["success"] is False


def test_reset_without_values_generates_and_prints_new_ones(stopped_panel):
    result = admin(stopped_panel, "reset")
    assert result.returncode == 0, result.stderr
    username, password = printed_credentials(result.stdout)
    assert username.startswith("admin-") and username != stopped_panel.username
    assert len(password) >= 16 and password != stopped_panel.password
    passwords.check_new_password(username, password)  # the rule for typed ones holds
    stopped_panel.start()
    assert client_for(stopped_panel, username, password)[1]["success"] is True
    assert (
        client_for(stopped_panel, stopped_panel.username, stopped_panel.password)[1]["success"]
        is False
    )


def test_reset_with_only_a_username_generates_the_password(stopped_panel):
    result = admin(stopped_panel, "reset", "--username", "keeper")
    assert result.returncode == 0, result.stderr
    username, password = printed_credentials(result.stdout)
    assert username == "keeper"
    assert len(password) >= 16
    stopped_panel.start()
    assert client_for(stopped_panel, "keeper", password)[1]["success"] is True


@pytest.mark.parametrize(
    ("username", "password", "message"),
    [
        ("owner", "short", "the password must be at least 12 characters long"),
        ("admin", "admin", "the password must be at least 12 characters long"),
        ("owner", "password1234", "the password is too easy to guess"),
        ("owner", "123456789012", "the password is too easy to guess"),
        ("owner", "ChangeMe1234", "the password is too easy to guess"),
        ("longusername", "longusername", "the password is too easy to guess"),
        (" padded", "long enough pw", "the username must be 1-64 characters"),
        ("x" * 65, "long enough pw", "the username must be 1-64 characters"),
    ],
)
def test_reset_refuses_weak_values_and_changes_nothing(stopped_panel, username, password, message):
    result = admin(stopped_panel, "reset", "--username", username, "--password", password)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.stderr
    assert "password:" not in result.stdout
    shown = admin(stopped_panel, "show")
    assert f"username: {stopped_panel.username}" in shown.stdout
    stopped_panel.start()
    assert client_for(stopped_panel, stopped_panel.username, stopped_panel.password)[1]["success"]


@pytest.mark.parametrize(
    ("password", "advice"),
    [
        ("admin1234567", "This is similar to a commonly used password."),
        ("iloveyou2026", "This is similar to a commonly used password."),
        ("keeper123456", "Add another word or two."),
    ],
)
def test_reset_refuses_a_common_password_with_advice(stopped_panel, password, advice):
    """The command line judges a password as the API does, the username included."""
    result = admin(stopped_panel, "reset", "--username", "keeper", "--password", password)
    assert result.returncode == 1
    assert f"error: the password is too easy to guess: {advice}" in result.stderr
    assert f"username: {stopped_panel.username}" in admin(stopped_panel, "show").stdout


def test_reset_while_the_panel_runs_takes_effect_at_once(tmp_path):
    server = start_panel(tmp_path)
    try:
        session = server.client()
        result = admin(server, "reset", "--username", "live-owner", "--password", "another long pw")
        assert result.returncode == 0, result.stderr
        assert session.raw("POST", "/panel/api/setting/all").status_code == 401
        assert client_for(server, "live-owner", "another long pw")[1]["success"] is True
    finally:
        server.stop()


# ---- admin disable-2fa -----------------------------------------------------------------


def enable_two_factor(client: ApiClient) -> str:
    secret = pyotp.random_base32()
    reply = client.post(
        "/panel/api/setting/update",
        {
            "twoFactorEnable": True,
            "twoFactorToken": secret,
            "twoFactorCode": pyotp.TOTP(secret).now(),
        },
    )
    assert reply["success"] is True, reply
    return secret


def test_disable_2fa_lets_the_password_alone_sign_in_again(stopped_panel):
    stopped_panel.start()
    enable_two_factor(stopped_panel.client())
    assert stopped_panel.client(login=False).sign_in(
        stopped_panel.username, stopped_panel.password
    ) == {"success": False, "msg": "wrong username, password or two-factor code", "obj": None}
    stopped_panel.stop()

    assert "two-factor: on" in admin(stopped_panel, "show").stdout
    result = admin(stopped_panel, "disable-2fa")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "two-factor sign-in is off"
    assert "two-factor: off" in admin(stopped_panel, "show").stdout

    stopped_panel.start()
    client = stopped_panel.client(login=False)
    assert client.post("/getTwoFactorEnable")["obj"] is False
    assert client.sign_in(stopped_panel.username, stopped_panel.password)["success"] is True


# ---- the command itself ------------------------------------------------------------------


def test_version_and_help():
    assert run_appliance("version").stdout.strip() == __version__
    bare = run_appliance()
    assert bare.returncode == 2
    assert "run" in bare.stdout and "admin" in bare.stdout
    missing = run_appliance("admin")
    assert missing.returncode == 2
    assert "ACTION" in missing.stderr
