"""The panel as `pip install .` and `pipx install .` give it: a wheel built from the
checkout, installed into a venv of its own and run from its console script.

The wheel is built with pip from a copy of the checkout (so no build files land in it)
and must hold every file of the browser UI; an installed panel without them answers
every page with a 500. The venv gets the wheel alone, then a `.pth` file that lends it
this environment's dependencies, so nothing is downloaded again; the panel runs with
PYTHONPATH unset from a folder outside the checkout, so the package it imports is the
wheel's, never the source tree. pipx builds the same wheel with pip and installs it into
a venv the same way, so this covers it too.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT, clean_env
from panels import PanelServer

pytestmark = pytest.mark.slow

ASSETS = ROOT / "appliance" / "assets"
BUILD_TIMEOUT = 300
PIP = [sys.executable, "-m", "pip"]
# Files of each kind the page needs, with the type the panel must serve them as.
TYPED_FILES = {
    "js/main.js": "text/javascript",
    "css/app.css": "text/css",
    "i18n/en.json": "application/json",
    "favicon.svg": "image/svg+xml",
    "vendor/htm-3.1.1.mjs": "text/javascript",
}


def asset_files() -> list[str]:
    """Every file of the UI in the checkout, relative to the assets folder."""
    return sorted(
        path.relative_to(ASSETS).as_posix()
        for path in ASSETS.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


def run(command: list[str], **options) -> str:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=BUILD_TIMEOUT, **options
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}{result.stderr}"
    return result.stdout


def outside_env() -> dict:
    """The environment of a command run as a user would: no PYTHONPATH to the checkout."""
    environment = clean_env()
    environment.pop("PYTHONPATH", None)
    return environment


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """`pip wheel .` of a copy of what the build reads: pip builds in the source folder."""
    source = tmp_path_factory.mktemp("source")
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(
        ROOT / "appliance",
        source / "appliance",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    out = tmp_path_factory.mktemp("wheel")
    run([*PIP, "wheel", "--no-deps", "--quiet", "-w", str(out), "."], cwd=source)
    (built,) = out.glob("appliance-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed, and this environment's dependencies lent."""
    home = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", "--without-pip", str(home)])
    python = str(home / "bin" / "python")
    # The wheel goes in first, into a venv that sees nothing else (not even the checkout
    # through PYTHONPATH): pip then has no other installation of the package to weigh it
    # against, and would skip a wheel of the same version as one it found.
    install = ["install", "--no-deps", "--no-index", "--quiet", str(wheel)]
    run([*PIP, "--python", python, *install], env=outside_env())
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    lent = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(site.strip()) / "dependencies.pth").write_text("\n".join(sorted(lent)) + "\n")
    return home


@pytest.fixture(scope="module")
def installed_panel(venv, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere")
    server = PanelServer(
        str(outside / "data"),
        ["--listen", "127.0.0.1", "--port", "0", "--sub-port", "0"],
        outside_env(),
    )
    server.expect_credentials = True
    with contextlib.chdir(outside):
        server.launch(
            [str(venv / "bin" / "appliance"), "run", "--data-dir", server.data_dir, *server.args]
        )
    yield server
    server.stop()


def test_wheel_holds_every_file_of_the_ui(wheel):
    files = asset_files()
    assert "index.html" in files
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = [path for path in files if f"appliance/assets/{path}" not in names]
        assert not missing, f"{wheel.name} lacks {missing}"
        for path in files:
            assert archive.read(f"appliance/assets/{path}") == (ASSETS / path).read_bytes()


def test_the_venv_imports_the_package_from_the_wheel(venv, tmp_path):
    where = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import appliance, appliance.web.ui as ui; print(appliance.__file__); "
            "print(ui.assets_dir())",
        ],
        cwd=str(tmp_path),
        env=outside_env(),
    ).split()
    assert Path(where[0]).is_relative_to(venv), where
    assert Path(where[1]).is_relative_to(venv), where
    assert (Path(where[1]) / "index.html").read_bytes() == (ASSETS / "index.html").read_bytes()


def test_installed_panel_serves_its_pages_signed_in(installed_panel):
    api = installed_panel.client(login=False)
    signed_out = api.raw("GET", "/")
    assert signed_out.status_code == 200, signed_out.text[:500]
    assert 'data-session="0"' in signed_out.text
    assert api.sign_in(installed_panel.username, installed_panel.password)["success"]
    for path in ("/", "/panel/dashboard", "/panel/clients"):
        page = api.raw("GET", path)
        assert page.status_code == 200, (path, page.text[:500])
        assert page.headers["Content-Type"] == "text/html; charset=utf-8"
        assert 'data-session="1"' in page.text, page.text[:500]
        assert '<script type="module" src="assets/js/main.js">' in page.text


def test_installed_panel_serves_every_file_the_page_links(installed_panel):
    api = installed_panel.client()
    page = api.raw("GET", "/panel/dashboard").text
    linked = re.findall(r'(?:href|src)="assets/([^"?#]+)', page)
    assert "js/main.js" in linked, page[:500]
    for path in sorted({*linked, *TYPED_FILES}):
        served = api.raw("GET", f"/assets/{path}")
        assert served.status_code == 200, path
        assert served.content == (ASSETS / path).read_bytes(), path
        if path in TYPED_FILES:
            assert served.headers["Content-Type"].split(";")[0] == TYPED_FILES[path], path
