"""Three `appliance run` instances on one fresh PostgreSQL or MariaDB database: what the
cluster tests share. The first makes the admin; the others sign in with its credentials.
On SQLite (a file, one panel) the tests that need them skip."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from core_panel import wait_until
from helpers import create_database, drop_database, server_reachable
from panels import PanelServer, backend, start_panel

NAMES = ("a", "b", "c")
PROPAGATION_SECONDS = 2


def instance_env(name: str) -> dict:
    return {"APPLIANCE_INSTANCE_NAME": f"panel-{name}"}


@contextlib.contextmanager
def three_instances(
    tmp_path_factory,
    env_of: Callable[[Path], dict] = lambda place: {},
    prepare: Callable[[PanelServer], None] = lambda first: None,
    url_of: Callable[[str, str], str] = lambda url, name: url,
) -> Iterator[list[PanelServer]]:
    """The three instances, each in its own directory with `env_of(it)` added to
    its environment; `prepare(first)` runs before the other two start (a setting they
    read at start); each reaches the database at `url_of(its URL, the instance's name)`
    (through a relay).
    Stops them and drops the database after."""
    kind = backend["kind"]
    if kind == "sqlite":
        pytest.skip("several panels share a PostgreSQL or MariaDB database, not a SQLite file")
    if not server_reachable(kind):
        pytest.skip(f"no {kind} server")
    url = create_database(kind)
    # One node key on every host, as the README says: what one instance seals (node
    # tokens, webhook secrets, the shared mTLS CA) the others open.
    node_key = secrets.token_urlsafe(32)
    panels: list[PanelServer] = []
    try:
        for name in NAMES:
            place = tmp_path_factory.mktemp(name)
            env = {**instance_env(name), "APPLIANCE_NODE_KEY": node_key, **env_of(place)}
            server = start_panel(place, "--db", url_of(url, name), env=env)
            if panels:
                server.username, server.password = panels[0].username, panels[0].password
            else:
                server.await_credentials()
                prepare(server)
            panels.append(server)
        yield panels
    finally:
        for server in panels:
            server.stop()
        drop_database(url)


def wait_for(predicate, seconds: float, what: str):
    """`wait_until`, looking often: the propagation it waits for is timed to 2 s."""
    return wait_until(predicate, what, seconds, step=0.05)


def subscription(server: PanelServer, sub_id: str) -> requests.Response:
    return requests.get(
        f"{server.sub_url}/sub/{sub_id}", headers={"Connection": "close"}, timeout=10
    )


def within_2s(servers, predicate, what: str) -> None:
    """`predicate(server)` holds on each of `servers` within 2 s of now."""
    changed = time.monotonic()
    for server in servers:
        wait_for(
            lambda server=server: predicate(server),
            PROPAGATION_SECONDS - (time.monotonic() - changed),
            f"{what} in another instance's subscription",
        )
