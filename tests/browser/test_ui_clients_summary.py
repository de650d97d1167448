"""The clients page asks for the summary (every depleted, expiring and disabled email)
only when it has changed: pages after the first send the version it holds, and the counts
and status tags stay right when a change moves clients between buckets. Headless Chromium
against a real panel (helpers and the watch on console errors come from ui_pages)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from helpers import create_inbound, free_port, ok
from ui_pages import DESKTOP, client_row, expect, go, signed_in_page

API = "/panel/api/clients"


def test_pages_after_the_first_leave_out_an_unchanged_summary(browser, panel, watches):
    api = panel.client()
    inbound = create_inbound(
        api, {"protocol": "vless", "port": free_port(), "settings": {"decryption": "none"}}
    )
    items = [
        {"client": {"email": f"sum{n:02d}@ui", "enable": n % 3 != 0}, "inboundIds": [inbound["id"]]}
        for n in range(30)
    ]
    ok(api.post(f"{API}/bulkCreate", items))
    disabled = ok(api.get(f"{API}/list/paged"))["summary"]["deactive"]

    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    answers: list = []
    page.on(
        "response",
        lambda response: answers.append(response) if "clients/list/paged" in response.url else None,
    )
    go(page, "clients")  # this module's panel holds these 30 clients alone
    chips = page.locator("[data-testid=summary]")
    expect(chips).to_contain_text(f"disabled: {len(disabled)}")
    expect(client_row(page, "sum00@ui")).to_be_visible()

    answers.clear()
    page.get_by_label("Next page").click()
    expect(client_row(page, "sum25@ui")).to_be_visible()
    sent = parse_qs(urlsplit(answers[-1].url).query)
    assert sent["summaryVersion"] and sent["page"] == ["2"]
    assert "summary" not in answers[-1].json()["obj"]
    expect(chips).to_contain_text(f"disabled: {len(disabled)}")
    expect(client_row(page, "sum27@ui").locator(".status")).to_have_text("disabled")

    # A change elsewhere moves a client out of "disabled": the next page carries the new
    # summary, and the counts and the row's status follow it.
    view = ok(api.get(f"{API}/get/sum27@ui"))["client"]
    ok(api.post(f"{API}/update/sum27@ui", {**view, "enable": True}))
    expect(chips).to_contain_text(f"disabled: {len(disabled) - 1}")
    expect(client_row(page, "sum27@ui").locator(".status")).to_have_text("active")
