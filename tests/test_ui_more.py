"""The browser UI's hosts, core settings, settings tools and client tools pages in headless
Chromium, on a panel that runs the real core (Debian's V2Ray) so that the core itself
judges the config template the page saves.

Same rules as tests/test_ui.py, whose helpers these tests share: every page load is
watched for console errors, foreign requests and missing CSP headers, and what the page
shows is checked against what the panel stored, through its API.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import start_panel, stop_and_drop
from core_panel import CORE_ENV, wait_until
from helpers import ok
from test_ui import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, client_row, expect, go, new_page, sign_in
from test_ui import playwright_api as playwright

# The fixture that fails a test whose pages logged errors or left the origin.
from test_ui import watches as watches

pytestmark = pytest.mark.ui

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def core_panel(tmp_path_factory):
    """One panel on the real core for the module."""
    server = start_panel(tmp_path_factory.mktemp("ui-core"), env=CORE_ENV)
    yield server
    stop_and_drop(server)


@pytest.fixture(scope="module")
def api(core_panel):
    return core_panel.client()


@pytest.fixture(scope="module")
def inbound(api):
    return ok(
        api.post(
            "/panel/api/inbounds/add",
            {"remark": "ui-hosts", "protocol": "vless", "port": 24701, "settings": {}},
        )
    )


def screenshot(page, name: str) -> None:
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, f"{name}.png"), full_page=True)


def host_order(api, inbound_id: int) -> list[str]:
    return [h["remark"] for h in ok(api.get(f"/panel/api/hosts/byInbound/{inbound_id}"))]


def fits_phone(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_hosts_add_drag_reorder_disable_and_bulk(browser, core_panel, api, inbound, watches):
    for remark in ("second", "third"):
        ok(api.post("/panel/api/hosts/add", {"inboundId": inbound["id"], "remark": remark}))
    page = new_page(browser, core_panel, watches, viewport=DESKTOP)
    sign_in(page, core_panel)
    go(page, "hosts")
    page.wait_for_selector(f".host-group[data-inbound='{inbound['id']}']")

    page.click("[data-testid=add-host]")
    form = page.locator("#host-form")
    form.locator("select[name=inboundId]").select_option(str(inbound["id"]))
    form.locator("input[name=remark]").fill("cdn")
    form.locator("input[name=address]").fill("cdn.example.com")
    form.locator("input[name=port]").fill("8443")
    form.locator("select[name=security]").select_option("tls")
    form.locator("input[name=sni]").fill("cdn.example.com")
    form.locator("input[name=tags]").fill("edge, fast")
    page.click("button[form=host-form]")
    page.wait_for_selector("tr[data-host] >> text=cdn")
    stored = {h["remark"]: h for h in ok(api.get("/panel/api/hosts/list"))}
    cdn = stored["cdn"]
    assert (cdn["inboundId"], cdn["address"], cdn["port"]) == (
        inbound["id"],
        "cdn.example.com",
        8443,
    )
    assert (cdn["security"], cdn["sni"], cdn["tags"]) == (
        "tls",
        "cdn.example.com",
        ["edge", "fast"],
    )
    assert host_order(api, inbound["id"]) == ["second", "third", "cdn"]

    # Dragged onto the first row, the new host goes first; the panel stores that order.
    row = page.locator(f"tr[data-host='{cdn['id']}']")
    row.drag_to(page.locator(f"tr[data-host='{stored['second']['id']}']"))
    wait_until(lambda: host_order(api, inbound["id"]) == ["cdn", "second", "third"], "drag reorder")
    page.wait_for_selector("text=Order saved")
    # The keyboard way: the down button of the first row swaps it with the second.
    row.locator("[data-testid=move-down]").click()
    wait_until(
        lambda: host_order(api, inbound["id"]) == ["second", "cdn", "third"], "button reorder"
    )
    expect(page.locator("tbody tr").first).to_have_attribute(
        "data-host", str(stored["second"]["id"])
    )

    row.locator(".switch").click()
    page.wait_for_selector("text=Host disabled")
    assert ok(api.get(f"/panel/api/hosts/get/{cdn['id']}"))["enable"] is False

    for remark in ("second", "third"):
        page.locator(f"tr[data-host='{stored[remark]['id']}'] td.select input").check()
    page.locator("[data-testid=host-bulk]").locator("text=Disable").click()
    page.wait_for_selector("text=Done for 2 hosts")
    assert [h["enable"] for h in ok(api.get("/panel/api/hosts/list"))] == [False, False, False]
    screenshot(page, "hosts")


def test_core_template_refusals_are_shown(browser, core_panel, api, watches):
    saved = ok(api.post("/panel/api/core/"))["coreSetting"]
    page = new_page(browser, core_panel, watches, viewport=DESKTOP)
    sign_in(page, core_panel)
    go(page, "core")
    editor = page.locator("textarea[name=coreSetting]")
    expect(editor).to_have_value(saved)

    # Text that is not JSON never leaves the page.
    sent = []
    page.on("request", lambda request: "core/update" in request.url and sent.append(request))
    editor.fill('{"outbounds": [')
    page.locator("[data-testid=template-form] button[type=submit]").click()
    expect(page.locator("[data-testid=template-error]")).to_contain_text("not valid JSON")
    assert sent == []

    # JSON the core refuses: the core's own reason, and the stored template is unchanged.
    refused = json.loads(saved)
    refused["outbounds"].append({"tag": "odd", "protocol": "no-such-protocol"})
    editor.fill(json.dumps(refused, indent=2))
    page.locator("[data-testid=template-form] button[type=submit]").click()
    toast = page.locator(".toast.error", has_text="the core refused the config")
    toast.wait_for()
    assert "no-such-protocol" in toast.inner_text()
    expect(page.locator("[data-testid=template-error]")).to_contain_text("core refused")
    assert ok(api.post("/panel/api/core/"))["coreSetting"] == saved

    # The outbound table follows the editor; a connect-only test answers for each row.
    expect(page.locator("[data-outbound=odd]")).to_be_visible()
    editor.fill(saved)
    page.locator("[data-testid=outbounds-card] select").select_option("tcp")
    page.click("text=Test all")
    results = page.locator("[data-testid=probe-result]")
    expect(results).to_have_count(len(json.loads(saved)["outbounds"]))
    for index in range(results.count()):
        expect(results.nth(index)).not_to_have_text("")
        expect(results.nth(index)).not_to_have_text("testing…")

    # V2Ray has no routing test: the panel's reason is shown beside the form.
    page.locator("[data-testid=route-test] input[name=domain]").fill("example.com")
    page.click("text=Test route")
    expect(page.locator("[data-testid=route-error]")).to_contain_text("needs Xray")
    screenshot(page, "core")


def test_subscription_settings_survive_a_reload(browser, core_panel, api, watches):
    page = new_page(browser, core_panel, watches, viewport=DESKTOP)
    sign_in(page, core_panel)
    go(page, "settings")
    form = page.locator("[data-testid=settings-form]")
    form.locator("input[name=subTitle]").fill("Team VPN")
    form.locator("input[name=subSupportUrl]").fill("https://support.example.com/")
    form.locator("input[name=subJsonEnable]").check()
    form.locator("input[name=subJsonPath]").fill("/feed/")
    form.locator("input[name=subEnableRouting]").check()
    form.locator("textarea[name=subRoutingRules]").fill("DOMAIN-SUFFIX,example.com,DIRECT")
    form.locator("button[type=submit]").first.click()
    page.wait_for_selector("text=Settings saved")

    page.reload()
    form = page.locator("[data-testid=settings-form]")
    expect(form.locator("input[name=subTitle]")).to_have_value("Team VPN")
    expect(form.locator("input[name=subJsonPath]")).to_have_value("/feed/")
    expect(form.locator("input[name=subJsonEnable]")).to_be_checked()
    expect(form.locator("textarea[name=subRoutingRules]")).to_have_value(
        "DOMAIN-SUFFIX,example.com,DIRECT"
    )
    stored = ok(api.post("/panel/api/setting/all"))
    assert (stored["subTitle"], stored["subJsonEnable"], stored["subJsonPath"]) == (
        "Team VPN",
        True,
        "/feed/",
    )
    assert stored["subSupportUrl"] == "https://support.example.com/"
    assert stored["subEnableRouting"] is True

    # The mail test names the stage that failed: nothing is configured yet.
    page.click("[data-testid=test-smtp]")
    expect(page.locator(".toast.error", has_text="failed at connect")).to_be_visible()

    # The chat-bot buttons show the panel's reason: no token is set.
    page.click("[data-testid=test-chat-bot]")
    expect(page.locator(".toast.error", has_text="set tgBotToken first")).to_be_visible()

    with page.expect_download() as download:
        page.click("[data-testid=download-db]")
    assert Path(download.value.path()).read_bytes().startswith(b"SQLite format 3\0")

    page.click("[data-testid=generate-x25519]")
    keys = page.locator("[data-testid=generated] code.token")
    expect(keys).to_have_count(2)
    assert len(keys.first.inner_text()) == 43
    screenshot(page, "settings-tools")


def test_external_link_added_to_a_client(browser, core_panel, api, inbound, watches):
    ok(
        api.post(
            "/panel/api/clients/add",
            {"client": {"email": "ui-ext@example.com"}, "inboundIds": [inbound["id"]]},
        )
    )
    page = new_page(browser, core_panel, watches, viewport=DESKTOP)
    sign_in(page, core_panel)
    go(page, "clients")
    client_row(page, "ui-ext@example.com").locator("[data-testid=external-links]").click()
    page.click("[data-testid=add-external]")
    row = page.locator("[data-testid=external-row]")
    row.locator("select[name=kind]").select_option("subscription")
    row.locator("input[name=value]").fill("https://feeds.example.com/sub/abc")
    row.locator("input[name=linkRemark]").fill("backup feed")
    page.click("button[form=external-form]")
    page.wait_for_selector("text=External links saved")
    stored = ok(api.get("/panel/api/clients/get/ui-ext@example.com"))["externalLinks"]
    assert stored == [
        {
            "kind": "subscription",
            "value": "https://feeds.example.com/sub/abc",
            "remark": "backup feed",
        }
    ]


def test_new_pages_fit_a_phone(browser, core_panel, watches):
    page = new_page(browser, core_panel, watches, viewport=PHONE)
    sign_in(page, core_panel)
    for name in ("hosts", "core", "settings"):
        page.click(".menu-button")
        page.click(f"a[data-page={name}]")
        page.wait_for_selector(f"a[data-page={name}][aria-current=page]", state="attached")
        page.wait_for_selector("main h1")
        page.wait_for_timeout(300)
        assert fits_phone(page), name
        screenshot(page, f"{name}-phone")


def test_client_groups_export_import_and_bulk_adjust(browser, core_panel, api, inbound, watches):
    day = 86_400_000
    expiry = 1_900_000_000_000
    for email in ("ui-g1@example.com", "ui-g2@example.com"):
        client = {"email": email, "expiryTime": expiry, "totalGB": 1 << 30}
        ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    page = new_page(browser, core_panel, watches, viewport=DESKTOP)
    sign_in(page, core_panel)
    go(page, "clients")

    page.click("[data-testid=groups]")
    dialog = page.locator("[role=dialog]")
    dialog.locator("input[name=groupName]").fill("team-a")
    dialog.locator("text=Create group").click()
    dialog.locator("li:has-text('team-a')").locator("text=Rename").click()
    dialog.locator("input[name=newGroupName]").fill("team-b")
    dialog.locator("form:has(input[name=newGroupName]) button[type=submit]").click()
    dialog.locator("li:has-text('team-b')").wait_for()
    assert [g["name"] for g in ok(api.get("/panel/api/clients/groups"))] == ["team-b"]
    dialog.locator("li:has-text('team-b')").locator("text=Delete").click()
    page.locator(".modal .primary.danger").click()
    dialog.locator("text=No groups yet.").wait_for()
    assert ok(api.get("/panel/api/clients/groups")) == []
    page.keyboard.press("Escape")

    with page.expect_download() as download:
        page.click("[data-testid=export]")
    exported = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert {"ui-g1@example.com", "ui-g2@example.com"} <= {i["client"]["email"] for i in exported}

    items = [{"client": {"email": "ui-imported@example.com"}, "inboundIds": [inbound["id"]]}]
    page.click("[data-testid=import]")
    page.locator("textarea[name=importData]").fill(json.dumps(items))
    page.click("button[form=import-form]")
    page.wait_for_selector("text=1 clients imported")
    assert ok(api.get("/panel/api/clients/get/ui-imported@example.com"))["inboundIds"] == [
        inbound["id"]
    ]

    page.fill("[data-testid=client-search]", "ui-g")
    for email in ("ui-g1@example.com", "ui-g2@example.com"):
        client_row(page, email).locator("td.select input").check()
    page.locator("[data-testid=bulk]").locator("text=Adjust").click()
    page.locator("input[name=addDays]").fill("2")
    page.locator("input[name=addGB]").fill("1")
    page.click("button[form=adjust-form]")
    page.wait_for_selector("text=2 clients adjusted")
    adjusted = ok(api.get("/panel/api/clients/get/ui-g1@example.com"))["client"]
    assert (adjusted["expiryTime"], adjusted["totalGB"]) == (expiry + 2 * day, 2 << 30)
    screenshot(page, "clients-tools")
