"""The subscription templates card in the browser: a template typed for a format is
previewed for a client (the rendered body, or the refusal in words), then saved."""

from __future__ import annotations

import uuid

import pytest
from helpers import create_inbound, free_port, ok
from ui_pages import DESKTOP, expect, go, new_page, sign_in

pytestmark = pytest.mark.ui

CLASH = """proxies: {{ proxies | tojson }}
proxy-groups:
  - name: Shop {{ client.email }}
    type: select
    proxies: {{ proxy_names | tojson }}
"""


def test_a_template_is_previewed_for_a_client_refused_in_words_and_saved(browser, panel, watches):
    api = panel.client()
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "remark": "ui-templates",
            "port": free_port(),
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )
    email = f"{uuid.uuid4().hex[:8]}@ui-templates"
    client = {"email": email, "subId": uuid.uuid4().hex[:16]}
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    page = new_page(browser, panel, watches, viewport=DESKTOP)
    sign_in(page, panel)
    go(page, "settings")
    card = page.locator("[data-testid=templates]")
    card.locator("[data-testid=template-tab-clash]").click()
    card.locator("textarea[name=template]").fill(CLASH)
    card.locator("input[name=templateEmail]").fill(email)
    card.locator("[data-testid=template-preview]").click()
    expect(card.locator("[data-testid=template-result]")).to_contain_text(f"Shop {email}")

    card.locator("textarea[name=template]").fill("{{ client.__class__ }}")
    card.locator("[data-testid=template-preview]").click()
    expect(card.locator("[data-testid=template-error]")).to_contain_text(
        "may not read the attribute '__class__'"
    )
    assert not card.locator("[data-testid=template-result]").count()

    card.locator("textarea[name=template]").fill(CLASH)
    card.locator("[data-testid=template-save]").click()
    expect(page.locator(".toast", has_text="Template saved")).to_be_visible()
    stored = {e["format"]: e["template"] for e in ok(api.get("/panel/api/sub/templates/list"))}
    assert stored["clash"] == CLASH.strip()
    ok(api.post("/panel/api/sub/templates/save/clash", {"template": ""}))
