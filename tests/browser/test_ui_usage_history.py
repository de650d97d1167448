"""Usage history charts in headless Chromium against a real panel: the client info dialog
and the inbound's history dialog draw what the history routes hold, by the hour and by
the day. History rows are written into the database as the traffic tick writes them."""

from __future__ import annotations

import time

import pytest
from helpers import create_inbound, db_rows, free_port, ok
from ui_pages import DESKTOP, client_row, go, signed_in_page

pytestmark = pytest.mark.ui

HOUR = 3600
GIB = 1024**3


def test_client_info_and_inbound_rows_chart_the_history(browser, panel, watches):
    api = panel.client()
    inbound = create_inbound(
        api,
        {
            "remark": "charted",
            "protocol": "vless",
            "port": free_port(),
            "settings": {"decryption": "none"},
        },
    )
    client = {"email": "ui-history@x"}
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    hour = int(time.time()) // HOUR * HOUR
    for at, up, down in ((hour - 3 * HOUR, GIB, 2 * GIB), (hour, GIB, 0)):
        db_rows(
            panel,
            "INSERT INTO client_usage (email_key, at, up, down) VALUES (?, ?, ?, ?)",
            ("ui-history@x", at, up, down),
        )
    db_rows(
        panel,
        "INSERT INTO inbound_usage (inbound_id, at, up, down) VALUES (?, ?, ?, ?)",
        (inbound["id"], hour, 3 * GIB, GIB),
    )
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    client_row(page, "ui-history@x").locator("[data-testid=client-info]").click()
    history = page.locator(".modal [data-testid=usage-history]")
    total = history.locator("[data-testid=usage-total]")
    total.wait_for()
    assert " ".join(total.inner_text().split()) == "↑ 2.00 GB ↓ 2.00 GB"
    history.locator(".chart canvas").wait_for()
    assert history.get_by_role("button", name="Last 24 hours").get_attribute("aria-pressed") == (
        "true"
    )
    history.get_by_role("button", name="Last 30 days").click()
    history.locator("button[data-step=day][aria-pressed=true]").wait_for()
    assert " ".join(total.inner_text().split()) == "↑ 2.00 GB ↓ 2.00 GB"
    history.locator(".chart canvas").wait_for()
    page.keyboard.press("Escape")

    go(page, "inbounds")
    page.locator(f"tr[data-inbound='{inbound['id']}'] [data-testid=row-menu] summary").click()
    page.locator(f"tr[data-inbound='{inbound['id']}'] [data-testid=inbound-history]").click()
    dialog = page.locator(".modal [data-testid=usage-history]")
    dialog.locator("[data-testid=usage-total]").wait_for()
    assert " ".join(dialog.locator("[data-testid=usage-total]").inner_text().split()) == (
        "↑ 3.00 GB ↓ 1.00 GB"
    )
    dialog.locator(".chart canvas").wait_for()
