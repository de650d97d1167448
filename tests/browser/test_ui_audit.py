"""The audit log in the browser: the settings page lists what was done, by whom, and
filters it; the API token form takes a scope and an expiry."""

from __future__ import annotations

import pytest
from helpers import ok
from ui_pages import DESKTOP, expect, go, new_page, sign_in

# The shared browser, and the fixture that fails a test whose pages logged errors or
# left the origin.


pytestmark = pytest.mark.ui


def test_the_audit_card_lists_entries_and_tokens_get_a_scope(browser, panel, watches):
    api = panel.client()
    ok(api.post("/panel/api/setting/update", {"pageSize": 33}))
    page = new_page(browser, panel, watches, viewport=DESKTOP)
    sign_in(page, panel)
    go(page, "settings")
    audit = page.locator("[data-testid=audit]")
    row = audit.locator("tr", has_text="/panel/api/setting/update")
    expect(row.first).to_contain_text(panel.username)
    expect(row.first).to_contain_text("pageSize")

    page.fill("input[placeholder='Token name']", "monitoring")
    page.select_option("select[name=tokenScope]", "read")
    page.fill("input[name=tokenExpires]", "2099-12-31")
    page.click("button:has-text('Create token')")
    expect(page.locator("[data-testid=new-token]")).to_be_visible()
    page.click("button:has-text('Close')")
    token = [t for t in ok(api.get("/panel/api/setting/apiTokens")) if t["name"] == "monitoring"]
    assert token[0]["scope"] == "read" and token[0]["expiresAt"] > 4_000_000_000_000

    page.fill("input[name=auditRoute]", "apiTokens/create")
    audit.locator("button[type=submit]").click()
    expect(audit.locator("[data-testid=audit-count]")).to_have_text("1 entries")
    expect(audit.locator("tbody tr")).to_contain_text("/panel/api/setting/apiTokens/create")
