"""The core settings page's tabs in headless Chromium, on a panel with the real core.

The Routing, DNS and Outbounds tabs edit the same template the raw JSON editor shows; a
save goes through core/update, which the core may refuse with its reasons.
"""

from __future__ import annotations

import json

import pytest
from helpers import ok
from ui_pages import DESKTOP, expect, go, new_page, sign_in

# The shared browser, and the fixture that fails a test whose pages logged errors or
# left the origin.


pytestmark = pytest.mark.ui

BITTORRENT = {"type": "field", "outboundTag": "blocked", "protocol": ["bittorrent"]}


@pytest.fixture
def api(core_panel):
    return core_panel.client()


def stored_template(api) -> dict:
    return json.loads(ok(api.post("/panel/api/core/"))["coreSetting"])


def without_bittorrent_rule(api) -> dict:
    template = ok(api.get("/panel/api/setting/getDefaultJsonConfig"))
    rules = template["routing"]["rules"]
    template["routing"]["rules"] = [r for r in rules if r.get("protocol") != ["bittorrent"]]
    ok(api.post("/panel/api/core/update", {"coreSetting": json.dumps(template)}))
    return template


def open_core_page(browser, core_panel, watches):
    page = new_page(browser, core_panel, watches, viewport=DESKTOP)
    sign_in(page, core_panel)
    go(page, "core")
    page.wait_for_selector("textarea[name=coreSetting]")
    return page


def save(page) -> None:
    page.locator("[data-testid=template-form] button[type=submit]").click()


def test_routing_preset_is_saved_and_shown_in_the_raw_json(browser, core_panel, api, watches):
    without_bittorrent_rule(api)
    assert BITTORRENT not in stored_template(api)["routing"]["rules"]
    page = open_core_page(browser, core_panel, watches)
    page.click("[data-tab=routing]")
    preset = page.locator("input[name=preset-bittorrent]")
    expect(preset).not_to_be_checked()
    preset.check()
    expect(page.locator("[data-testid=routing-rules]")).to_contain_text("protocol: bittorrent")
    save(page)
    expect(page.locator(".toast.success")).to_be_visible()

    page.reload()
    page.wait_for_selector("textarea[name=coreSetting]")
    raw = json.loads(page.locator("textarea[name=coreSetting]").input_value())
    assert BITTORRENT in raw["routing"]["rules"]
    page.click("[data-tab=routing]")
    expect(page.locator("input[name=preset-bittorrent]")).to_be_checked()
    rules = stored_template(api)["routing"]["rules"]
    assert BITTORRENT in rules
    # Placed after the panel's own API rule, which must stay first.
    assert rules[0]["outboundTag"] == "api"


def test_dns_and_outbound_tabs_edit_the_same_template(browser, core_panel, api, watches):
    without_bittorrent_rule(api)
    page = open_core_page(browser, core_panel, watches)
    page.click("[data-tab=dns]")
    servers = page.locator("textarea[name=dnsServers]")
    servers.fill("1.1.1.1\n\n8.8.8.8 ")
    servers.blur()
    page.locator("select[name=queryStrategy]").select_option("UseIPv4")

    page.click("[data-tab=outbounds]")
    form = page.locator("[data-testid=add-outbound]")
    form.locator("select[name=new-protocol]").select_option("socks")
    form.locator("input[name=new-tag]").fill("blocked")
    form.locator("input[name=new-address]").fill("127.0.0.1")
    form.locator("input[name=new-port]").fill("1080")
    form.locator("input[name=new-user]").fill("me")
    form.locator("input[name=new-pass]").fill("secret")
    page.click("text=Add outbound >> nth=-1")
    expect(page.locator("[data-testid=add-outbound-error]")).to_contain_text(
        "Another outbound already has the tag blocked."
    )
    form.locator("input[name=new-tag]").fill("via-socks")
    page.click("text=Add outbound >> nth=-1")
    expect(page.locator("[data-outbound-edit=via-socks]")).to_be_visible()

    page.click("[data-tab=json]")
    raw = json.loads(page.locator("textarea[name=coreSetting]").input_value())
    assert raw["dns"] == {"servers": ["1.1.1.1", "8.8.8.8"], "queryStrategy": "UseIPv4"}
    assert raw["outbounds"][-1] == {
        "tag": "via-socks",
        "protocol": "socks",
        "settings": {
            "servers": [
                {"address": "127.0.0.1", "port": 1080, "users": [{"user": "me", "pass": "secret"}]}
            ]
        },
    }
    save(page)
    expect(page.locator(".toast.success")).to_be_visible()
    stored = stored_template(api)
    assert stored["dns"] == raw["dns"]
    assert stored["outbounds"][-1]["tag"] == "via-socks"


def test_an_outbound_the_core_refuses_is_not_saved(browser, core_panel, api, watches):
    before = without_bittorrent_rule(api)
    page = open_core_page(browser, core_panel, watches)
    page.click("[data-tab=outbounds]")
    editor = page.locator("[data-outbound-edit=direct]")
    editor.locator("summary").click()
    json_box = editor.locator("textarea[name=outboundJson]")
    json_box.fill("{not json")
    json_box.blur()
    expect(editor.locator("[role=alert]")).to_contain_text("not a valid JSON object")
    json_box.fill(json.dumps({"tag": "direct", "protocol": "no-such-protocol"}))
    json_box.blur()
    save(page)
    expect(page.locator("[data-testid=template-error]")).to_contain_text("core refused")
    assert stored_template(api) == before
