"""packaging/install.sh and uninstall.sh into a throwaway root, against a release server on
loopback that serves the built binary and a stand-in core release (a zip with its `.dgst`,
as Xray publishes them); and the systemd unit they install.

What a VPS owner sees is checked: the files in place, credentials that sign in on the
port and path the installer printed, an upgrade that keeps them, a core whose checksum
does not match refused with nothing installed, and an uninstall that keeps the data
unless told to purge it.
"""

from __future__ import annotations

import configparser
import functools
import hashlib
import http.server
import re
import shutil
import sqlite3
import subprocess
import threading
import zipfile
from pathlib import Path

import psutil
import pytest
from frozen_build import ROOT, frozen_binary
from helpers import clean_env
from panels import LISTEN_RE, ApiClient

from appliance.store.migrations import LATEST

pytestmark = pytest.mark.frozen

INSTALL = ROOT / "packaging" / "install.sh"
UNINSTALL = ROOT / "packaging" / "uninstall.sh"
UNIT = ROOT / "systemd" / "appliance.service"
FAKE_CORE = b'#!/bin/sh\necho "Xray 25.1.30 (stand-in core for the installer test)"\n'
RUN_TIMEOUT = 120
BINARY = "usr/local/bin/appliance"
LIB_DIR = "usr/local/lib/appliance"
DATA_DIR = "var/lib/appliance"


# ---- a release server on loopback ----------------------------------------------------------


def core_zip(path: Path) -> str:
    """A core release like Xray's: the binary and geo files at the root of a zip."""
    with zipfile.ZipFile(path, "w") as bundle:
        info = zipfile.ZipInfo("xray")
        info.external_attr = 0o755 << 16
        bundle.writestr(info, FAKE_CORE)
        bundle.writestr("geoip.dat", b"geoip")
        bundle.writestr("geosite.dat", b"geosite")
        bundle.writestr("README.md", b"not installed")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def binary(tmp_path_factory) -> str:
    return frozen_binary(tmp_path_factory.mktemp("frozen-build"))


@pytest.fixture(scope="module")
def release(binary, tmp_path_factory):
    """Serves good.zip (its .dgst right), bad.zip (its .dgst names other bytes) and the
    panel binary with its .sha256; yields the base URL."""
    files = tmp_path_factory.mktemp("release")
    digest = core_zip(files / "good.zip")
    (files / "good.zip.dgst").write_text(f"MD5= 0\nSHA1= 0\nSHA2-256= {digest}\nSHA2-512= 0\n")
    core_zip(files / "bad.zip")
    (files / "bad.zip.dgst").write_text(f"SHA2-256= {'0' * 64}\n")
    shutil.copy(binary, files / "appliance")
    binary_digest = hashlib.sha256((files / "appliance").read_bytes()).hexdigest()
    (files / "appliance.sha256").write_text(f"{binary_digest}  appliance\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(files))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def run_script(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=clean_env(),
    )


def install(release: str, root: Path, core: str = "good.zip") -> subprocess.CompletedProcess:
    return run_script(
        INSTALL,
        "--root",
        str(root),
        "--binary",
        f"{release}/appliance",
        "--core-url",
        f"{release}/{core}",
        "--no-systemctl",
    )


def printed(output: str, label: str) -> str:
    match = re.search(rf"^\s*{label}:\s*(\S+)\s*$", output, re.MULTILINE)
    assert match, f"no {label} in:\n{output}"
    return match.group(1)


def installed_command(root: Path, *args: str) -> list[str]:
    """The installed binary running `args` on the installed data directory."""
    return [str(root / BINARY), *args, "--data-dir", str(root / DATA_DIR)]


def admin_show(root: Path) -> str:
    result = subprocess.run(
        installed_command(root, "admin", "show"),
        capture_output=True,
        text=True,
        timeout=30,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stderr
    return printed(result.stdout, "username")


def panels_running_from(root: Path) -> list[int]:
    """Processes whose program lies under `root`: none once a script has finished."""
    found = []
    for process in psutil.process_iter(["pid", "exe"]):
        if (process.info["exe"] or "").startswith(str(root)):
            found.append(process.info["pid"])
    return found


def sign_in_on_installed_settings(root: Path, username: str, password: str) -> str:
    """Start the installed binary on its data as the unit would (no port flag: the stored
    setting decides), sign in, stop it; returns the URL it served."""
    process = subprocess.Popen(
        [*installed_command(root, "run"), "--listen", "127.0.0.1", "--sub-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
    )
    printed_lines = []
    try:
        for line in process.stdout:
            printed_lines.append(line)
            match = LISTEN_RE.search(line)
            if match:
                break
        else:
            pytest.fail("the installed panel exited before listening:\n" + "".join(printed_lines))
        url = f"http://127.0.0.1:{match.group(2)}{match.group(3)}"
        assert ApiClient(url.rstrip("/")).sign_in(username, password)["success"] is True
        return url
    finally:
        process.terminate()
        process.wait(15)


# ---- install, upgrade, uninstall -----------------------------------------------------------


def test_install_upgrade_uninstall(binary, release, tmp_path):
    root = tmp_path / "root"
    first = install(release, root)
    assert first.returncode == 0, first.stdout + first.stderr

    installed = root / BINARY
    data = root / DATA_DIR
    assert installed.is_symlink()
    assert installed.resolve() == (root / LIB_DIR / "appliance").resolve()
    assert installed.read_bytes() == Path(binary).read_bytes()
    assert installed.stat().st_mode & 0o777 == 0o755
    assert (root / "etc/systemd/system/appliance.service").read_text() == UNIT.read_text()
    assert data.stat().st_mode & 0o777 == 0o700
    assert (data / "appliance.db").is_file()
    assert (data / "core/bin/xray").read_bytes() == FAKE_CORE
    assert (data / "core/bin/geosite.dat").read_bytes() == b"geosite"
    assert not (data / "core/bin/README.md").exists()
    assert "systemctl was not called" in first.stdout
    assert panels_running_from(root) == [], "the installer left its first run running"

    username, password = printed(first.stdout, "username"), printed(first.stdout, "password")
    port, path = printed(first.stdout, "port"), printed(first.stdout, "path")
    assert re.fullmatch(r"/[a-z0-9]{12}/", path)
    assert admin_show(root) == username
    url = sign_in_on_installed_settings(root, username, password)
    assert url == f"http://127.0.0.1:{port}{path}"

    second = install(release, root)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "upgraded in place" in second.stdout
    assert "password" not in second.stdout
    assert (root / LIB_DIR / "appliance.previous").read_bytes() == Path(binary).read_bytes()
    assert admin_show(root) == username
    assert sign_in_on_installed_settings(root, username, password) == url

    kept = run_script(UNINSTALL, "--root", str(root), "--no-systemctl")
    assert kept.returncode == 0, kept.stderr
    assert not installed.is_symlink()
    assert not (root / LIB_DIR).exists()
    assert not (root / "etc/systemd/system/appliance.service").exists()
    assert (data / "appliance.db").is_file()
    assert "kept" in kept.stdout

    purged = run_script(UNINSTALL, "--root", str(root), "--no-systemctl", "--purge")
    assert purged.returncode == 0, purged.stderr
    assert not data.exists()


def test_core_with_a_wrong_checksum_is_refused(release, tmp_path):
    root = tmp_path / "root"
    result = install(release, root, core="bad.zip")
    assert result.returncode != 0
    assert "does not match the published one" in result.stderr
    assert not root.exists() or not any(root.iterdir())


def test_binary_with_a_wrong_checksum_is_refused(release, tmp_path):
    root = tmp_path / "root"
    result = run_script(
        INSTALL,
        *("--root", str(root), "--binary", f"{release}/appliance"),
        *("--binary-sha256", "ab" * 32, "--no-core", "--no-systemctl"),
    )
    assert result.returncode != 0
    assert "SHA-256 of the panel binary" in result.stderr
    assert not root.exists() or not any(root.iterdir())


def test_core_without_a_published_checksum_is_refused(release, tmp_path):
    result = install(release, tmp_path / "root", core="appliance.sha256")
    assert result.returncode != 0
    assert "no checksum for" in result.stderr


# ---- the unit ------------------------------------------------------------------------------


def unit_sections() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_unit_runs_the_installed_binary_hardened():
    unit = unit_sections()
    service = unit["Service"]
    assert service["ExecStart"] == "/usr/local/bin/appliance run"
    assert service["Environment"] == "APPLIANCE_DATA_DIR=/var/lib/appliance"
    assert service["Restart"] == "on-failure"
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["ReadWritePaths"].split() == ["/var/lib/appliance", "/usr/local/lib/appliance"]
    assert service["ProtectHome"] == "yes"
    assert service["PrivateTmp"] == "yes"
    assert service["CapabilityBoundingSet"] == "CAP_NET_BIND_SERVICE"
    assert service["AmbientCapabilities"] == "CAP_NET_BIND_SERVICE"
    assert service["StandardOutput"] == "journal"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_unit_passes_systemd_analyze_verify(binary, tmp_path):
    """systemd checks every key and value; only the binary's path is pointed at the built
    one, since none is installed in /usr/local/bin here."""
    unit = tmp_path / "appliance.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/appliance", binary))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "Unknown" not in result.stderr, result.stderr


def test_schema_is_current_after_install(release, tmp_path):
    """The database a first install leaves is at the binary's schema version."""
    root = tmp_path / "root"
    assert install(release, root).returncode == 0
    with sqlite3.connect(root / "var/lib/appliance/appliance.db") as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == LATEST
