"""The core settings page's outbound sources in headless Chromium: a subscription added
through its form shows its outbounds with their source and refresh in the outbound list,
a failed refresh shows its error, and the WARP tunnel's and the VPN provider's outbounds
go into the template being edited, which the template's save stores.
"""

from __future__ import annotations

import base64
import json

import pytest
from core_panel import http_server
from helpers import ok
from links_cases import CASES, CTX
from provider_apis import (
    ALICE_PRIVATE,
    ALICE_PUBLIC,
    SERVERS_PATH,
    ProviderApi,
    nord_countries,
    nord_server,
    warp_registration,
)
from ui_pages import DESKTOP, expect, go, new_page, sign_in

# The shared browser, and the fixture that fails a test whose pages logged errors or
# left the origin.
from appliance.links import client_links

pytestmark = pytest.mark.ui


@pytest.fixture
def api(panel):
    client = panel.client()
    for sub in ok(client.get("/panel/api/core/outbound-subs")):
        ok(client.post(f"/panel/api/core/outbound-subs/{sub['id']}/del"))
    return client


def open_core_page(browser, panel, watches):
    page = new_page(browser, panel, watches, viewport=DESKTOP)
    sign_in(page, panel)
    go(page, "core")
    page.wait_for_selector("[data-testid=outbound-sources]")
    return page


def test_a_subscription_added_in_the_page_lists_its_outbounds(browser, panel, api, watches):
    record, user, hosts = CASES["vless_tcp_none"]
    body = base64.b64encode("\n".join(client_links(record, user, hosts, CTX)).encode())
    answers = {"/sub": (200, body)}
    with http_server(answers) as (port, _):
        page = open_core_page(browser, panel, watches)
        form = page.locator("[data-testid=sub-form]")
        form.locator("input[name=subRemark]").fill("Provider")
        form.locator("input[name=subUrl]").fill(f"http://127.0.0.1:{port}/sub")
        form.locator("input[name=subTagPrefix]").fill("prov-")
        form.locator("button[type=submit]").click()
        expect(page.locator("[data-testid=sub-problem]")).to_contain_text("allowPrivate")
        form.locator("input[name=subAllowPrivate]").check()
        form.locator("button", has_text="Preview").click()
        expect(page.locator("[data-testid=sub-preview]")).to_contain_text("prov-DE-alice")
        form.locator("button[type=submit]").click()
        row = page.locator("[data-testid=outbound-subs] tr[data-sub]")
        expect(row).to_contain_text("Provider")
        listed = page.locator("[data-testid=outbounds-card] tr[data-outbound=prov-DE-alice]")
        expect(listed).to_contain_text("Subscription Provider")
        expect(listed).to_contain_text("refreshed")
        expect(page.locator("tr[data-outbound=direct]")).to_contain_text("Template")

        answers["/sub"] = (500, b"down")
        row.locator("button", has_text="Refresh").click()
        expect(row.locator("[data-testid=sub-error]")).to_contain_text("HTTP 500")
        expect(listed).to_contain_text("HTTP 500")
    assert [s["remark"] for s in ok(api.get("/panel/api/core/outbound-subs"))] == ["Provider"]


def test_warp_and_vpn_outbounds_go_into_the_template(browser, panel, api, watches):
    remote = ProviderApi()
    try:
        ok(
            api.post(
                "/panel/api/setting/update",
                {
                    "warpApiUrl": f"http://127.0.0.1:{remote.port}/v0a2158",
                    "vpnApiUrl": f"http://127.0.0.1:{remote.port}/v1",
                    "allowPrivateDestinations": "warpApiUrl,vpnApiUrl",
                },
            )
        )
        remote.answers[("POST", "/v0a2158/reg")] = (
            200,
            warp_registration("dev-9", "tok-9", "", "engage.cloudflareclient.com:2408"),
        )
        remote.answers[("GET", "/v1/servers/countries")] = (200, nord_countries())
        remote.answers[("GET", SERVERS_PATH)] = (200, [nord_server(1, "203.0.113.1", ALICE_PUBLIC)])
        page = open_core_page(browser, panel, watches)
        warp = page.locator("[data-testid=warp-part]")
        warp.locator("button", has_text="Register").click()
        expect(warp.locator("[data-testid=warp-account]")).to_contain_text("dev-9")
        warp.locator("button", has_text="Add to template").click()
        expect(page.locator("tr[data-outbound=warp]")).to_contain_text("WARP tunnel")

        vpn = page.locator("[data-testid=vpn-part]")
        vpn.locator("input[name=vpnKey]").fill(ALICE_PRIVATE)
        vpn.locator("button", has_text="Store key").click()
        expect(vpn.locator("[data-testid=vpn-key]")).to_contain_text(ALICE_PUBLIC)
        vpn.locator("button", has_text="Load countries").click()
        vpn.locator("select[name=vpnCountry]").select_option("81")
        vpn.locator("button", has_text="Load servers").click()
        vpn.locator("[data-testid=vpn-servers] button", has_text="Add to template").click()
        expect(page.locator("tr[data-outbound=vpn-de1]")).to_contain_text("VPN provider")

        page.locator("[data-testid=template-form] button[type=submit]").click()
        # "Add to template" toasts too: the save's own toast says the template is stored.
        expect(page.locator(".toast.success").last).to_contain_text("Template saved")
        stored = json.loads(ok(api.post("/panel/api/core/"))["coreSetting"])
        tags = [outbound["tag"] for outbound in stored["outbounds"]]
        assert tags[-2:] == ["warp", "vpn-de1"]
        assert stored["outbounds"][-1]["settings"]["secretKey"] == ALICE_PRIVATE
    finally:
        api.post("/panel/api/core/tunnel/del")
        api.post("/panel/api/core/vpn/del")
        remote.close()
