"""Subscription URLs and copy buttons in the browser, where a fresh server is first reached:
plain HTTP at a name that is not localhost (`panel.test`, mapped to loopback by Chromium's
resolver), which is no secure context, so the page has no clipboard API.

Each copy is read back by pasting into a text field, as a user would check it; the links
and client info dialogs show the URL the API gives (the info dialog is the screenshot
docs/screenshots/client-qr.png); the Settings page names the flags of the run; the
subscription's own info page shows the QR code of its URL and copies with its one script,
which its Content-Security-Policy lets run.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from urllib.parse import quote, urlsplit

import pytest
from helpers import create_plain_vless, free_port, ok

# The fixtures that fail a test whose pages logged errors or left the origin, and that
# keep screenshots (tests/artifacts/, not committed).
from ui_pages import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DESKTOP,
    client_row,
    go,
    playwright_api,
    screenshot,
    signed_in_page,
)

pytestmark = pytest.mark.ui

CLIENTS = "/panel/api/clients"
NAME = "panel.test"
GIB = 1024**3


@pytest.fixture(scope="module")
def browser():
    rules = f"--host-resolver-rules=MAP {NAME} 127.0.0.1"
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, rules]
        )
        yield chromium
        chromium.close()


def at_name(server) -> SimpleNamespace:
    """The panel as an admin reaches a new server: by a name, over plain HTTP."""
    parts = urlsplit(server.url)
    url = f"http://{NAME}:{parts.port}{parts.path}"
    return SimpleNamespace(url=url, username=server.username, password=server.password)


def open_page(browser, panel, watches):
    page = signed_in_page(browser, at_name(panel), watches, viewport=DESKTOP)
    assert page.evaluate("window.isSecureContext") is False
    assert page.evaluate("typeof navigator.clipboard") == "undefined"
    return page


def pasted(page) -> str:
    """What the clipboard holds: pasted into a text field of the page's own."""
    page.evaluate(
        "() => { const area = document.createElement('textarea');"
        " area.id = 'paste-check'; document.body.appendChild(area); }"
    )
    page.focus("#paste-check")
    page.keyboard.press("Control+V")
    text = page.input_value("#paste-check")
    page.evaluate("() => document.getElementById('paste-check').remove()")
    return text


def add_client(api, email: str, **fields) -> dict:
    inbound = create_plain_vless(api, free_port())
    client = {"email": email, **fields}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound]}))
    return ok(api.get(f"{CLIENTS}/get/{quote(email)}"))["client"]


def find_client(page, email: str):
    go(page, "clients")
    page.fill("[data-testid=client-search]", email)
    row = client_row(page, email)
    row.wait_for()
    return row


def sub_url_at_name(panel, sub_id: str) -> str:
    return f"http://{NAME}:{urlsplit(panel.sub_url).port}/sub/{sub_id}"


def test_links_dialog_shows_and_copies_the_subscription_url(
    browser, panel, api, watches, artifacts
):
    client = add_client(api, "ui-links@x", subId="uilinks")
    page = open_page(browser, panel, watches)
    find_client(page, "ui-links@x").locator("[data-testid=links]").click()
    block = page.locator(".modal [data-testid=sub-url]")
    wanted = sub_url_at_name(panel, client["subId"])
    assert block.locator("code").inner_text() == wanted
    assert block.locator("svg.qr").get_attribute("data-text") == wanted
    block.locator("svg.qr path").wait_for()
    screenshot(page, "client-qr.png")
    page.screenshot(path=os.path.join(artifacts, "links-dialog.png"))
    block.get_by_role("button", name="Copy").click()
    page.locator(".toast.success", has_text="Copied").wait_for()
    assert pasted(page) == wanted
    # A share link's own copy button copies that link, by the same fallback.
    first = page.locator("[data-testid=share-links] li").first
    link = first.locator("code").inner_text()
    assert link.startswith("vless://")
    first.get_by_role("button", name="Copy").click()
    assert pasted(page) == link


def test_client_form_shows_the_subscription_url(browser, panel, api, watches):
    client = add_client(api, "ui-form@x", subId="uiform")
    page = open_page(browser, panel, watches)
    find_client(page, "ui-form@x").get_by_role("button", name="Edit").click()
    block = page.locator("#client-form [data-testid=sub-url]")
    assert block.locator("code").inner_text() == sub_url_at_name(panel, client["subId"])


def test_client_info_dialog(browser, panel, api, watches):
    expiry = 1_900_000_000_000
    client = add_client(api, "ui-info@x", subId="uiinfo", totalGB=2 * GIB, expiryTime=expiry)
    ok(api.post(f"{CLIENTS}/updateTraffic/ui-info@x", {"upload": GIB, "download": GIB // 2}))
    page = open_page(browser, panel, watches)
    find_client(page, "ui-info@x").locator("[data-testid=client-info]").click()
    info = page.locator("[data-testid=client-details]")
    info.wait_for()

    def shown(key: str) -> str:
        return info.locator(f"[data-field={key}] dd").inner_text()

    assert shown("up") == "1.00 GB"
    assert shown("down") == "512.00 MB"
    assert shown("used") == "1.50 GB / 2.00 GB"
    assert shown("remaining") == "512.00 MB"
    assert shown("expiry") == page.evaluate(f"new Date({expiry}).toLocaleString('en-US')")
    block = page.locator(".modal [data-testid=sub-url]")
    wanted = sub_url_at_name(panel, client["subId"])
    assert block.locator("svg.qr").get_attribute("data-text") == wanted
    block.locator("svg.qr path").wait_for()
    screenshot(page, "client-qr.png")
    block.get_by_role("button", name="Copy").click()
    assert pasted(page) == wanted


def test_api_token_copy_and_override_notes(browser, panel, watches):
    page = open_page(browser, panel, watches)
    go(page, "settings")
    # Test panels run with --sub-port 0: the note names the flag and the port bound.
    note = page.locator("[data-testid=override-subPort]")
    assert "--sub-port" in note.inner_text()
    assert "APPLIANCE_SUB_PORT" in note.inner_text()
    assert str(urlsplit(panel.sub_url).port) in note.inner_text()
    assert page.locator("[data-testid=override-subPath]").count() == 0
    page.fill("input[placeholder='Token name']", "copied")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("[data-testid=new-token]").inner_text()
    page.click("[data-testid=copy-token]")
    page.locator(".toast.success", has_text="Copied").wait_for()
    assert pasted(page) == token


def test_sub_page_qr_of_its_url_and_copy_script(browser, panel, api):
    client = add_client(api, "ui-subpage@x", subId="uisubpage")
    url = sub_url_at_name(panel, client["subId"])
    context = browser.new_context(locale="en-US")
    errors: list[str] = []
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    try:
        response = page.goto(url + "?html=1")
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        # The QR code of the page's own address, beside that address.
        assert page.locator(".sub-qr svg").count() == 1
        assert page.locator("input[aria-label=Subscription]").input_value() == url
        button = page.get_by_role("button", name="Copy Subscription")
        button.click()
        assert button.inner_text() == "Copied"
        assert pasted(page) == url
        page.get_by_role("button", name="Copy link 1").click()
        assert pasted(page).startswith("vless://")
        assert errors == []
    finally:
        context.close()
