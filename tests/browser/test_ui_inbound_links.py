"""An inbound's links exported from its row of the inbounds list (shown, copied and
downloaded as text), in headless Chromium against a real panel (helpers and the watch on
console errors and foreign requests come from ui_pages)."""

from __future__ import annotations

import os
from urllib.parse import quote

from helpers import create_plain_vless, free_port, ok
from ui_pages import DESKTOP, expect, go, signed_in_page

CLIENTS = "/panel/api/clients"


def test_export_links_dialog(browser, panel, watches, artifacts):
    api = panel.client()
    port = free_port()
    inbound, other = create_plain_vless(api, port), create_plain_vless(api, free_port())
    clients = {"ui-links-1@x": [inbound], "ui-links-2@x": [inbound, other], "ui-links-3@x": [other]}
    for email, inbound_ids in clients.items():
        ok(api.post(f"{CLIENTS}/add", {"client": {"email": email}, "inboundIds": inbound_ids}))
    on_inbound = [
        link
        for email in ("ui-links-1@x", "ui-links-2@x")
        for link in ok(api.get(f"{CLIENTS}/links/{quote(email)}"))
        if f":{port}" in link
    ]
    sub_urls = [
        ok(api.get(f"{CLIENTS}/get/{quote(email)}"))["subUrl"]
        for email in ("ui-links-1@x", "ui-links-2@x")
    ]
    assert len(on_inbound) == 2 and all(sub_urls)

    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "inbounds")
    page.locator(f"tr[data-inbound='{inbound}'] [data-testid=row-menu] summary").click()
    page.locator(f"tr[data-inbound='{inbound}'] [data-testid=export-links]").click()
    dialog = page.locator(".modal")
    expect(dialog.locator("#export-links")).to_have_value("\n".join(on_inbound))
    expect(dialog.locator("#export-subUrls")).to_have_value("\n".join(sub_urls))
    page.screenshot(path=os.path.join(artifacts, "inbound-links.png"))

    dialog.locator("[data-testid=export-links] button.copy").click()
    expect(page.get_by_text("Copied to the clipboard")).to_be_visible()
    with page.expect_download() as download:
        dialog.locator("[data-testid=download-links]").click()
    assert download.value.suggested_filename.startswith("links-")
    with open(download.value.path(), encoding="utf-8") as saved:
        assert saved.read() == "\n".join(on_inbound) + "\n"
