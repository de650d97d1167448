"""A Telegram proxy set up in the browser: an MTProto inbound through the inbound form,
a client with its own key and advertising tag through the client form, and its tg:// link
with a QR code in the links dialog. Same rules as every browser test (ui_pages.py)."""

from __future__ import annotations

import os
import re
import signal

import pytest
from helpers import free_port, ok
from mtproto_helpers import hold_port
from ui_pages import DESKTOP, client_row, expect, go, open_inbound_form, signed_in_page

# The fixtures that give a module one browser and fail a test whose pages logged errors
# or left the origin.


pytestmark = pytest.mark.ui

AD_TAG = "0123456789abcdef0123456789abcdef"
HEX32 = re.compile(r"[0-9a-f]{32}")


def test_mtproto_inbound_client_key_tag_and_link(browser, panel, watches):
    api = panel.client()
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "inbounds")
    port = free_port()
    form = open_inbound_form(page, "ui-telegram", port)
    form.locator("select[name=protocol]").select_option("mtproto")
    form.locator("input[name=domain]").fill("cdn.example.com")
    page.click("button[form=inbound-form]")
    page.wait_for_selector("text=ui-telegram")
    inbound = next(
        i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == "ui-telegram"
    )
    assert (inbound["protocol"], inbound["port"]) == ("mtproto", port)
    assert inbound["settings"]["domain"] == "cdn.example.com"

    go(page, "clients")
    page.click("[data-testid=add-client]")
    form = page.locator("#client-form")
    form.locator("input[name=email]").fill("ui-telegram@example.com")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    form.locator("input[name=adTag]").fill(AD_TAG.upper())
    form.locator("[data-testid=rekey]").click()
    key = form.locator("input[name=secret]").input_value()
    assert HEX32.fullmatch(key)
    page.click("button[form=client-form]")
    client_row(page, "ui-telegram@example.com").wait_for()
    stored = ok(api.get("/panel/api/clients/get/ui-telegram@example.com"))["client"]
    assert (stored["secret"], stored["adTag"]) == (key, AD_TAG)

    client_row(page, "ui-telegram@example.com").locator("[data-testid=links]").click()
    page.wait_for_selector("svg.qr path")
    link = page.locator("code.link-text").first.inner_text()
    assert link.startswith("tg://proxy?server=")
    assert link.endswith(f"&port={port}&secret=ee{key}{b'cdn.example.com'.hex()}")
    page.keyboard.press("Escape")

    # A wrong tag is refused with the panel's sentence, and the form stays open.
    client_row(page, "ui-telegram@example.com").locator("text=Edit").click()
    form = page.locator("#client-form")
    expect(form.locator("input[name=secret]")).to_have_value(key)
    form.locator("input[name=adTag]").fill("xyz")
    page.click("button[form=client-form]")
    page.wait_for_selector("text=adTag must be exactly 32 hexadecimal characters")
    expect(form).to_be_visible()
    page.keyboard.press("Escape")

    # A proxy that cannot start again (another program took its port) is marked on its
    # inbound's row and its clients' rows, with the reason, until it runs again.
    status = ok(api.get("/panel/api/server/status"))
    [proxy] = [p for p in status["mtproto"] if p["inboundId"] == inbound["id"]]
    os.kill(proxy["pid"], signal.SIGKILL)
    holder = hold_port(port)
    try:
        mark = client_row(page, "ui-telegram@example.com").locator(
            "[data-testid=proxy-down-client]"
        )
        expect(mark).to_contain_text("MTProto proxy not running", timeout=15_000)
        expect(mark).to_have_attribute("title", re.compile("cannot listen"), timeout=15_000)
        go(page, "inbounds")
        row = page.locator("tr", has_text="ui-telegram")
        expect(row.locator("[data-testid=proxy-down-inbound]")).to_be_visible()
    finally:
        holder.close()
    expect(row.locator("[data-testid=proxy-down-inbound]")).to_have_count(0, timeout=40_000)
