"""Hostile emails in the browser (case 9 of docs/security-cases.md): markup in an email is
shown as the text it is, never parsed into elements, on every view that names a client.

The emails are stored through the API exactly as given (the rules refuse only `/`, `>>>`,
control and format characters, so the right-to-left override U+202E is refused and
right-to-left letters with a U+2028 line separator are stored instead). Each view is
checked for what an admin would see, the email as text, and for what an injection would
leave behind: an element made of the email's markup, an element carrying an inline event
handler, or a JavaScript dialog. The page's Content-Security-Policy would also stop an
inline handler from running; the watches fail the test on the console error that
refusal logs, so the markup must not become elements in the first place.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from helpers import create_plain_vless, free_port, ok
from ui_pages import DESKTOP, client_row, expect, go, signed_in_page

# The fixtures that start Chromium and fail a test whose pages logged errors or left the
# origin.


pytestmark = pytest.mark.ui

CLIENTS = "/panel/api/clients"
IMG = "<img src=x onerror=alert(1)>"
RTL = "\u05e9\u05dc\u05d5\u05dd\u2028<svg onload=alert(2)>@x"
EMAILS = (IMG, RTL)
INJECTED = "img, [onerror], [onload]"


@pytest.fixture(scope="module")
def inbound(panel) -> dict:
    """One inbound holding both hostile clients; the override character is refused."""
    api = panel.client()
    inbound_id = create_plain_vless(api, free_port())
    refused = api.post(
        f"{CLIENTS}/add", {"client": {"email": "\u202egnp.exe@x"}, "inboundIds": [inbound_id]}
    )
    assert refused["success"] is False and "control characters" in refused["msg"], refused
    for email in EMAILS:
        ok(api.post(f"{CLIENTS}/add", {"client": {"email": email}, "inboundIds": [inbound_id]}))
        assert ok(api.get(f"{CLIENTS}/get/{quote(email, safe='')}"))["client"]["email"] == email
    return {"id": inbound_id}


def watched_page(browser, panel, watches) -> tuple:
    """A signed-in page and the list of JavaScript dialogs it opens (none, ever)."""
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    dialogs: list[str] = []

    def opened(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", opened)
    return page, dialogs


def no_injected_elements(scope) -> None:
    assert scope.locator(INJECTED).count() == 0


def test_hostile_emails_show_as_text_on_the_clients_page_and_its_dialogs(
    browser, panel, watches, inbound
):
    page, dialogs = watched_page(browser, panel, watches)
    go(page, "clients")
    table = page.locator("table").filter(has=client_row(page, IMG))
    for email in EMAILS:
        row = client_row(page, email)
        expect(row).to_be_visible()
        assert row.locator("strong.email").text_content() == email
    no_injected_elements(table)
    for email in EMAILS:
        for button in ("client-info", "links"):
            client_row(page, email).locator(f"[data-testid={button}]").click()
            modal = page.locator(".modal")
            expect(modal).to_contain_text(email)
            if button == "client-info":
                modal.locator("[data-testid=client-details]").wait_for()
            else:
                modal.locator("[data-testid=share-links] li").first.wait_for()
            no_injected_elements(modal)
            page.keyboard.press("Escape")
            expect(modal).to_have_count(0)
    assert dialogs == []


def test_hostile_emails_show_as_text_when_an_inbound_is_expanded(browser, panel, watches, inbound):
    page, dialogs = watched_page(browser, panel, watches)
    go(page, "inbounds")
    row = page.locator(f"tr[data-inbound='{inbound['id']}']")
    row.locator("[data-testid=expand-inbound]").click()
    clients = page.locator(f"tr[data-clients-of='{inbound['id']}']")
    expect(clients.locator("[data-testid=inbound-clients] tbody tr")).to_have_count(2)
    for email in EMAILS:
        assert client_row(clients, email).locator("td.email").text_content() == email
    no_injected_elements(clients)
    assert dialogs == []
