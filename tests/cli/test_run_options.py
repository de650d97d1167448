"""`appliance run`: its options and environment variables, the data directory, which port
wins between the command line and the stored settings, and the two listening sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import requests
from helpers import clean_env, free_port
from panels import PanelServer

from appliance import config
from appliance.web.server import listen


class CommandPanel(PanelServer):
    """A panel started with exactly `args` (no implied --data-dir), so environment
    variables can supply what flags do not."""

    def start(self) -> CommandPanel:
        self.launch([sys.executable, "-m", "appliance", "run", *self.args])
        return self


@pytest.fixture
def launched():
    """Starts panels for a test and stops every one of them afterwards."""
    panels: list[PanelServer] = []

    def launch(args: list[str], env: dict, data_dir: str = "") -> PanelServer:
        server = (PanelServer if data_dir else CommandPanel)(data_dir, args, env)
        panels.append(server)
        return server.start()

    yield launch
    for server in panels:
        server.stop()


def run_briefly(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a command that is expected to exit on its own."""
    return subprocess.run(
        [sys.executable, "-m", "appliance", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env or clean_env(),
    )


# ---- options resolved without a process ------------------------------------------------


def test_data_dir_is_var_lib_for_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert config.default_data_dir() == "/var/lib/appliance"


def test_data_dir_is_per_user_otherwise(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config.default_data_dir() == str(tmp_path / ".local" / "share" / "appliance")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert config.default_data_dir() == str(tmp_path / "xdg" / "appliance")


def args(**values) -> Namespace:
    names = ("data_dir", "listen", "port", "sub_port", "db", "log_level")
    return Namespace(**{name: values.get(name) for name in names})


def test_resolve_defaults_put_the_sqlite_file_in_the_data_dir(monkeypatch, tmp_path):
    for name in config.ENV.values():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    options = config.resolve(args())
    data_dir = str(tmp_path / ".local" / "share" / "appliance")
    assert options == config.Options(data_dir=data_dir, db=os.path.join(data_dir, "appliance.db"))
    assert options.log_file == os.path.join(data_dir, "logs", "panel.log")


def test_resolve_reads_every_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("APPLIANCE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("APPLIANCE_LISTEN", "127.0.0.2")
    monkeypatch.setenv("APPLIANCE_PORT", "8443")
    monkeypatch.setenv("APPLIANCE_SUB_PORT", "8444")
    monkeypatch.setenv("APPLIANCE_DB", "postgresql://u:p@db.example/panel")
    monkeypatch.setenv("APPLIANCE_LOG_LEVEL", "debug")
    assert config.resolve(args()) == config.Options(
        data_dir=str(tmp_path / "data"),
        db="postgresql://u:p@db.example/panel",
        listen="127.0.0.2",
        port=8443,
        sub_port=8444,
        log_level="debug",
    )


def test_resolve_flags_beat_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("APPLIANCE_DATA_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("APPLIANCE_PORT", "8443")
    monkeypatch.setenv("APPLIANCE_DB", str(tmp_path / "env.db"))
    options = config.resolve(
        args(data_dir=str(tmp_path / "flag"), port="9443", db=str(tmp_path / "flag.db"))
    )
    assert options.data_dir == str(tmp_path / "flag")
    assert options.port == 9443
    assert options.db == str(tmp_path / "flag.db")


def test_certificate_folders_come_from_flags_or_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("APPLIANCE_CERT_DIRS", f"{tmp_path}/a:relative:")
    monkeypatch.chdir(tmp_path)
    assert config.resolve(args()).cert_dirs == (f"{tmp_path}/a", f"{tmp_path}/relative")
    flagged = Namespace(**vars(args()), cert_dirs=[f"{tmp_path}/flag"])
    assert config.resolve(flagged).cert_dirs == (f"{tmp_path}/flag",)


@pytest.mark.parametrize("value", ["abc", "65536", "-1", "1.5"])
def test_resolve_refuses_a_bad_port_with_a_sentence(monkeypatch, value):
    monkeypatch.delenv("APPLIANCE_PORT", raising=False)
    with pytest.raises(SystemExit) as raised:
        config.resolve(args(port=value))
    assert str(raised.value).startswith("--port must be a port number from 0 to 65535")


# ---- the listening socket --------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_listen_sets_tcp_nodelay_and_accepted_connections_inherit_it(host):
    server = listen(host, 0)
    try:
        assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        client = socket.create_connection(server.getsockname()[:2])
        accepted, _ = server.accept()
        try:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            accepted.close()
            client.close()
    finally:
        server.close()


# ---- a real process --------------------------------------------------------------------


def test_one_process_serves_the_panel_and_an_empty_subscription_server(launched, tmp_path):
    server = launched(
        ["--listen", "127.0.0.1", "--port", "0", "--sub-port", "0"],
        clean_env(),
        data_dir=str(tmp_path / "data"),
    )
    assert server.client().post("/panel/api/setting/all")["success"] is True
    reply = requests.get(server.sub_url + "/sub/anything", timeout=10)
    assert reply.status_code == 404
    assert requests.get(server.sub_url + "/", timeout=10).status_code == 404
    ports = [int(server.url.rsplit(":", 1)[1]), int(server.sub_url.rsplit(":", 1)[1])]
    assert listening_inodes(ports) <= socket_inodes(server.process.pid)


def listening_inodes(ports: list[int]) -> set[str]:
    """Inodes of the IPv4 sockets listening on `ports` (state 0A in /proc/net/tcp)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].split(":")[1], 16) in ports:
            inodes.add(fields[9])
    assert len(inodes) == len(ports)
    return inodes


def socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets `pid` holds; a descriptor it closes while they are read (a
    request's connection) is passed over."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except FileNotFoundError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    return inodes


def test_environment_variables_configure_run(launched, tmp_path):
    port, sub_port = free_port(), free_port()
    db = tmp_path / "elsewhere" / "panel.db"
    server = launched(
        [],
        clean_env(
            APPLIANCE_DATA_DIR=str(tmp_path / "data"),
            APPLIANCE_LISTEN="127.0.0.1",
            APPLIANCE_PORT=str(port),
            APPLIANCE_SUB_PORT=str(sub_port),
            APPLIANCE_DB=f"sqlite:///{db}",
        ),
    )
    assert server.url == f"http://127.0.0.1:{port}"
    assert server.sub_url == f"http://127.0.0.1:{sub_port}"
    assert "panel listening on http://127.0.0.1:" in server.output()
    assert server.client().post("/panel/api/setting/all")["success"] is True
    assert db.is_file()
    assert not (tmp_path / "data" / "appliance.db").exists()
    assert (tmp_path / "data" / "logs" / "panel.log").is_file()


def test_flags_beat_environment_variables(launched, tmp_path):
    port = free_port()
    server = launched(
        ["--listen", "127.0.0.1", "--port", str(port), "--sub-port", "0"],
        clean_env(APPLIANCE_PORT=str(free_port()), APPLIANCE_LISTEN="0.0.0.0"),
        data_dir=str(tmp_path / "data"),
    )
    assert server.url == f"http://127.0.0.1:{port}"
    assert "panel listening on http://127.0.0.1:" in server.output()


def test_db_flag_puts_the_database_where_it_says(launched, tmp_path):
    db = tmp_path / "custom.db"
    launched(
        ["--listen", "127.0.0.1", "--port", "0", "--sub-port", "0", "--db", str(db)],
        clean_env(),
        data_dir=str(tmp_path / "data"),
    )
    assert db.is_file()
    assert not (tmp_path / "data" / "appliance.db").exists()


def test_stored_port_applies_unless_the_command_line_names_one(launched, tmp_path):
    data_dir = str(tmp_path / "data")
    cli_port, stored_port = free_port(), free_port()
    first = launched(
        ["--listen", "127.0.0.1", "--port", str(cli_port), "--sub-port", "0"],
        clean_env(),
        data_dir=data_dir,
    )
    client = first.client()
    reply = client.post("/panel/api/setting/update", {"webPort": stored_port})
    assert reply["success"] is True, reply

    mark = len(first.lines)
    assert client.post("/panel/api/setting/restartPanel")["success"] is True
    first.wait_listening(mark)
    assert first.url == f"http://127.0.0.1:{cli_port}"
    first.stop()

    second = launched(["--listen", "127.0.0.1", "--sub-port", "0"], clean_env(), data_dir=data_dir)
    assert second.url == f"http://127.0.0.1:{stored_port}"
    second.username, second.password = first.username, first.password
    assert second.client().post("/panel/api/setting/all")["obj"]["webPort"] == stored_port


def test_environment_port_also_beats_the_stored_setting(launched, tmp_path):
    data_dir = str(tmp_path / "data")
    first = launched(
        ["--listen", "127.0.0.1", "--port", "0", "--sub-port", "0"], clean_env(), data_dir=data_dir
    )
    assert first.client().post("/panel/api/setting/update", {"webPort": free_port()})["success"]
    first.stop()
    env_port = free_port()
    second = launched(
        ["--listen", "127.0.0.1", "--sub-port", "0"],
        clean_env(APPLIANCE_PORT=str(env_port)),
        data_dir=data_dir,
    )
    assert second.url == f"http://127.0.0.1:{env_port}"


def test_a_taken_port_stops_the_start_with_a_sentence(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_briefly(
            ["run", "--data-dir", str(tmp_path), "--listen", "127.0.0.1", "--port", str(port)]
        )
    assert result.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port} for the panel" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_bad_port_flag_exits_with_a_sentence(tmp_path):
    result = run_briefly(["run", "--data-dir", str(tmp_path), "--port", "70000"])
    assert result.returncode != 0
    assert "--port must be a port number from 0 to 65535 (got 70000)" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_database_url_exits_with_a_sentence(tmp_path):
    result = run_briefly(["run", "--data-dir", str(tmp_path), "--db", "oracle://x/y"])
    assert result.returncode == 1
    assert "database URL scheme must be sqlite, postgresql or mysql" in result.stderr
    assert "Traceback" not in result.stderr
