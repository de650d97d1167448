"""The fixtures and options every test folder shares: `--db`, the panel of a module
(`panel`, `api`), a panel of a test's own (`fresh_panel`), an echo server, an internal
service and a release host on loopback. The harness behind them is `panels.py`; each
folder's conftest.py adds what its tests alone share."""

from __future__ import annotations

import pytest
from core_helpers import echo_server
from helpers import NETWORKED, drop_database
from internal_service import InternalService
from panels import BACKENDS, ApiClient, backend, created_databases, start_panel, stop_and_drop
from release_host import ReleaseHost


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--db",
        choices=BACKENDS,
        default="sqlite",
        help="database backend of the panels the tests start (default sqlite)",
    )


def pytest_configure(config) -> None:
    backend["kind"] = config.getoption("--db")


def pytest_sessionfinish(session) -> None:
    while created_databases:
        drop_database(created_databases.pop())


# Modules about the SQLite file as such; on a networked run they skip, saying why.
SQLITE_ONLY = {
    "test_cli.py": "the admin commands are tested on the data directory's SQLite file",
    "test_run_options.py": "these tests place and look for the SQLite file",
    "test_migrations.py": "this module runs its SQLite and networked cases itself",
}


def pytest_collection_modifyitems(config, items) -> None:
    kind = backend["kind"]
    if kind == "sqlite":
        return
    for item in items:
        why = SQLITE_ONLY.get(item.path.name) or _names_its_database(item)
        if why:
            item.add_marker(pytest.mark.skip(reason=f"{why}; this run uses --db={kind}"))


def _names_its_database(item) -> str:
    """Why a test parametrized by a networked database (`kind`, `target` ...) skips on a
    run with --db: it picks its database itself, whatever --db says, and the run without
    --db runs it for each database already; "" for the others."""
    params = getattr(item, "callspec", None)
    values = params.params.values() if params is not None else ()
    if not any(isinstance(value, str) and value in NETWORKED for value in values):
        return ""
    return "it names its database itself and runs in the run without --db"


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    """One panel per test module; tests in it share its database."""
    server = start_panel(tmp_path_factory.mktemp("panel"))
    yield server
    stop_and_drop(server)


@pytest.fixture
def fresh_panel(tmp_path):
    """A panel of the test's own, for tests that change sign-in state."""
    server = start_panel(tmp_path)
    yield server
    stop_and_drop(server)


@pytest.fixture
def api(panel) -> ApiClient:
    return panel.client()


@pytest.fixture(scope="module")
def echo():
    """A TCP echo server on loopback for a module's traffic tests; its port."""
    with echo_server() as port:
        yield port


@pytest.fixture(scope="module")
def internal():
    """A service on loopback that counts who connects to it: what the egress guard keeps
    the panel away from, for a module's tests."""
    service = InternalService()
    yield service
    service.close()


@pytest.fixture(scope="module")
def host():
    """A release host on loopback (release_host.py) for a module's download tests."""
    server = ReleaseHost()
    yield server
    server.close()
