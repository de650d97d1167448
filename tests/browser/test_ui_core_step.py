"""The browser UI when the core is out of step with what is stored, in headless Chromium.

A panel on the real core (Debian's V2Ray 4.34) holds an inbound that core refuses, as a
database restored from a panel on Xray would; the next change makes the core refuse its
config and keep running the old one. The header, that inbound's row and the rows of its
clients must say so in words, while the rows the core runs as stored stay unmarked. Same
rules as every browser test (ui_pages.py).
"""

from __future__ import annotations

import json
import uuid

import pytest
from core_helpers import REFUSED_STREAM
from core_panel import CORE_ENV, wait_until
from core_traffic import in_core
from helpers import db_rows, free_port, ok
from panels import start_panel
from ui_pages import client_row, expect, go, signed_in_page

# The fixture that fails a test whose pages logged errors or left the origin.


pytestmark = pytest.mark.ui

INBOUNDS = "/panel/api/inbounds"


def add_vless(api, remark: str) -> dict:
    payload = {
        "protocol": "vless",
        "remark": remark,
        "listen": "127.0.0.1",
        "port": free_port(),
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "none"},
    }
    return ok(api.post(f"{INBOUNDS}/add", payload))


def add_client(api, email: str, inbound: dict) -> None:
    client = {"email": email, "id": str(uuid.uuid4())}
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))


@pytest.fixture(scope="module")
def out_of_step(tmp_path_factory):
    """A panel on the real core whose inbound `restored` the core refuses (meek written into
    the database) and whose inbound `fine` it runs; a client is on each. Yields (server,
    restored, fine, email on restored, email on fine)."""
    server = start_panel(tmp_path_factory.mktemp("out-of-step"), env=CORE_ENV)
    try:
        api = server.client()
        restored, fine = add_vless(api, "restored"), add_vless(api, "fine")
        emails = [f"{uuid.uuid4().hex[:8]}@ui" for _ in range(2)]
        # The client of `fine` runs before the core is made to refuse anything.
        add_client(api, emails[1], fine)
        in_core(api, server, restored, fine)
        stream = json.dumps(REFUSED_STREAM)
        db_rows(
            server, "UPDATE inbound SET stream_settings = ? WHERE id = ?", (stream, restored["id"])
        )
        add_client(api, emails[0], restored)
        wait_until(
            lambda: ok(api.get("/panel/api/server/status"))["core"]["inStep"] is False,
            "the core refuses the stored config",
        )
        yield server, restored, fine, *emails
    finally:
        server.stop()


def test_the_header_and_the_inbound_row_say_the_core_is_out_of_step(browser, out_of_step, watches):
    server, restored, fine, _, _ = out_of_step
    page = signed_in_page(browser, server, watches)
    badge = page.locator("[data-testid=core-badge]")
    expect(badge).to_contain_text("Core: running, out of step: the core refused the config")
    expect(badge).to_contain_text("unknown transport protocol: meek")
    go(page, "inbounds")
    mark = page.locator(f"tr[data-inbound='{restored['id']}'] [data-testid=stale-inbound]")
    expect(mark).to_have_text("Not running as saved: the core refused the config")
    expect(mark).to_have_attribute("title", badge.get_attribute("title"))
    fine_row = page.locator(f"tr[data-inbound='{fine['id']}']")
    expect(fine_row).to_be_visible()
    expect(fine_row.locator("[data-testid=stale-inbound]")).to_have_count(0)


def test_a_client_on_an_inbound_the_core_does_not_run_is_marked(browser, out_of_step, watches):
    server, _, _, on_restored, on_fine = out_of_step
    page = signed_in_page(browser, server, watches)
    badge = page.locator("[data-testid=core-badge]")
    # The badge says "unknown" until the page's first status has arrived.
    expect(badge).to_contain_text("out of step")
    reason = badge.get_attribute("title")
    go(page, "clients")
    mark = client_row(page, on_restored).locator("[data-testid=stale-client]")
    expect(mark).to_have_text("Not running as saved")
    expect(mark).to_have_attribute("title", reason)
    fine_row = client_row(page, on_fine)
    expect(fine_row).to_be_visible()
    expect(fine_row.locator("[data-testid=stale-client]")).to_have_count(0)
