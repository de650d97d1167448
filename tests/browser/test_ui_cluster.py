"""The instances on the dashboard: two panels on one PostgreSQL database (whatever the
run's --db, so the SQLite pass sees it too) list each other, the leader marked, and an
instance behind a newer schema says at the top of its dashboard why it refuses writes."""

from __future__ import annotations

import time

import pytest
from core_panel import wait_until
from helpers import create_database, drop_database, networked_rows, ok, server_reachable
from panels import start_panel
from ui_pages import DESKTOP, expect, go, new_page, screenshot, sign_in

from appliance.store.migrations import LATEST

pytestmark = pytest.mark.ui


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not server_reachable("postgres"):
        pytest.skip("no postgres server")
    url = create_database("postgres")
    servers = []
    try:
        for name in ("east", "west"):
            env = {"APPLIANCE_INSTANCE_NAME": f"panel-{name}"}
            server = start_panel(tmp_path_factory.mktemp(name), "--db", url, env=env)
            if servers:
                server.username, server.password = servers[0].username, servers[0].password
            else:
                server.await_credentials()
            servers.append(server)
        yield url, servers
    finally:
        for server in servers:
            server.stop()
        drop_database(url)


def test_the_dashboard_lists_the_instances_and_says_when_one_is_behind(browser, pair, watches):
    url, (east, _) = pair
    api = east.client()
    wait_until(lambda: len(ok(api.get("/panel/api/server/cluster"))) == 2, "both listed", 15)
    page = new_page(browser, east, watches, viewport=DESKTOP)
    sign_in(page, east)
    go(page, "dashboard")
    rows = page.locator("[data-testid=instance-row]")
    expect(rows).to_have_count(2)
    mine = rows.filter(has_text="panel-east")
    expect(mine).to_contain_text("this one")
    expect(page.locator("[data-testid=instances-table]")).to_contain_text("panel-west")
    expect(page.locator("[data-testid=instances-table] .badge", has_text="leader")).to_have_count(1)
    expect(page.locator("[data-testid=writes-refused]")).to_have_count(0)
    screenshot(page, "dashboard-instances.png")

    networked_rows(
        url,
        "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
        (LATEST + 1, "a newer release's migration", int(time.time())),
    )
    wait_until(
        lambda: next(m for m in ok(api.get("/panel/api/server/cluster")) if m["self"])[
            "writesRefused"
        ],
        "east refusing writes",
        15,
    )
    page.reload()
    banner = page.locator("[data-testid=writes-refused]")
    expect(banner).to_contain_text(f"migrated it to version {LATEST + 1}")
    expect(banner).to_contain_text("upgrade this instance")
