"""The browser UI's hosts, core settings, settings tools, client tools and inbound tools
pages in headless Chromium, on a panel that runs the real core (Debian's V2Ray) so that
the core itself judges the config template the page saves, and moves the bytes whose
counters the pages show live.

Same rules as every browser test (ui_pages.py): every page load is
watched for console errors, foreign requests and missing CSP headers, and what the page
shows is checked against what the panel stored, through its API.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from core_helpers import LOOPBACK, client_config, echo_server, running_core, socks_echo
from core_panel import CORE_ENV, loopback_template, wait_until
from helpers import certs_dir, free_port, ok, write_self_signed
from panels import start_panel, stop_and_drop
from ui_pages import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    WAIT_MS,
    client_row,
    expect,
    go,
    new_page,
    sign_in,
)
from ui_pages import playwright_api as playwright

# The fixture that fails a test whose pages logged errors or left the origin.


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
def api(core_panel):
    return core_panel.client()


@pytest.fixture(scope="module")
def inbound(api):
    return ok(
        api.post(
            "/panel/api/inbounds/add",
            {"remark": "ui-hosts", "protocol": "vless", "port": 32071, "settings": {}},
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
    page.wait_for_selector("text=1 client imported")
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


def fallbacks_of(api, inbound_id: int) -> list[tuple]:
    rules = ok(api.get(f"/panel/api/inbounds/{inbound_id}/fallbacks"))
    return [(r["childId"], r["name"], r["alpn"], r["path"], r["dest"], r["xver"]) for r in rules]


def test_fallback_rules_edited_on_a_tls_master(browser, core_panel, api, watches):
    certificate, key = write_self_signed(certs_dir(core_panel), "fallback.example.com")
    tls = {"certificates": [{"certificateFile": certificate, "keyFile": key}]}
    master = ok(
        api.post(
            "/panel/api/inbounds/add",
            {
                "remark": "ui-master",
                "protocol": "vless",
                "listen": LOOPBACK,
                "port": free_port(),
                "settings": {"decryption": "none"},
                "streamSettings": {"network": "tcp", "security": "tls", "tlsSettings": tls},
            },
        )
    )
    child = ok(
        api.post(
            "/panel/api/inbounds/add",
            {"remark": "ui-child", "protocol": "vless", "listen": LOOPBACK, "port": free_port()},
        )
    )
    page = new_page(browser, core_panel, watches, viewport=DESKTOP)
    sign_in(page, core_panel)
    go(page, "inbounds")
    # Only an inbound that can hold rules offers the editor.
    expect(page.locator(f"tr[data-inbound='{child['id']}'] [data-testid=fallbacks]")).to_have_count(
        0
    )
    page.locator(f"tr[data-inbound='{master['id']}'] [data-testid=row-menu] summary").click()
    page.locator(f"tr[data-inbound='{master['id']}'] [data-testid=fallbacks]").click()
    dialog = page.locator("[role=dialog]")
    dialog.locator("text=No fallback rules yet.").wait_for()
    rows = dialog.locator("[data-testid=fallback-row]")

    dialog.locator("[data-testid=add-fallback]").click()
    rows.nth(0).locator("input[name=dest]").fill("8080")
    rows.nth(0).locator("input[name=path]").fill("/blog")
    rows.nth(0).locator("select[name=alpn]").select_option("h2")
    dialog.locator("[data-testid=add-fallback]").click()
    rows.nth(1).locator("select[name=childId]").select_option(str(child["id"]))
    rows.nth(1).locator("input[name=name]").fill("web.example.com")
    rows.nth(1).locator("select[name=xver]").select_option("1")
    # The child's rule goes first: rules are tried in the order shown.
    rows.nth(1).locator("[data-testid=move-up]").click()
    screenshot(page, "inbound-fallbacks")
    page.click("button[form=fallback-form]")
    page.wait_for_selector("text=Fallbacks saved")
    expect(dialog).to_have_count(0)
    assert fallbacks_of(api, master["id"]) == [
        (child["id"], "web.example.com", "", "", "", 1),
        (None, "", "h2", "/blog", "8080", 0),
    ]
    rendered = ok(api.get(f"/panel/api/inbounds/get/{master['id']}"))["settings"]["fallbacks"]
    assert rendered[0]["dest"] == f"{LOOPBACK}:{child['port']}"

    # A rule the panel refuses: its reason is the toast, the dialog stays, nothing changes.
    page.locator(f"tr[data-inbound='{master['id']}'] [data-testid=row-menu] summary").click()
    page.locator(f"tr[data-inbound='{master['id']}'] [data-testid=fallbacks]").click()
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("select[name=childId]")).to_have_value(str(child["id"]))
    dialog.locator("[data-testid=add-fallback]").click()
    rows.nth(2).locator("input[name=dest]").fill("not a destination")
    page.click("button[form=fallback-form]")
    toast = page.locator(".toast.error", has_text="fallbacks[2].dest")
    toast.wait_for()
    assert "not a destination" in toast.inner_text()
    expect(rows).to_have_count(3)
    assert len(fallbacks_of(api, master["id"])) == 2

    # Removing the bad rule and the child's leaves the one rule that was second.
    rows.nth(2).locator("[data-testid=remove-fallback]").click()
    rows.nth(0).locator("[data-testid=remove-fallback]").click()
    page.click("button[form=fallback-form]")
    # The first save's toast may still be up: the dialog closes once this save is stored.
    expect(dialog).to_have_count(0)
    assert fallbacks_of(api, master["id"]) == [(None, "", "h2", "/blog", "8080", 0)]


def test_inbound_exported_then_imported_is_a_new_inbound(browser, core_panel, api, watches):
    source = ok(
        api.post(
            "/panel/api/inbounds/add",
            {
                "remark": "ui-export",
                "protocol": "shadowsocks",
                "listen": LOOPBACK,
                "port": free_port(),
                "settings": {"method": "aes-256-gcm", "network": "tcp"},
                "streamSettings": {"network": "tcp", "security": "none"},
                "sniffing": {"enabled": True, "destOverride": ["http", "tls"]},
            },
        )
    )
    page = new_page(browser, core_panel, watches, viewport=DESKTOP)
    sign_in(page, core_panel)
    go(page, "inbounds")
    with page.expect_download() as download:
        page.locator(f"tr[data-inbound='{source['id']}'] [data-testid=row-menu] summary").click()
        page.locator(f"tr[data-inbound='{source['id']}'] [data-testid=export-inbound]").click()
    exported = Path(download.value.path())
    assert json.loads(exported.read_text(encoding="utf-8"))["id"] == source["id"]

    page.click("[data-testid=import-inbound]")
    page.locator("input[name=inboundFile]").set_input_files(str(exported))
    # The original's port and tag are in use: the dialog offers both for change.
    port = page.locator("input[name=importPort]")
    expect(port).to_have_value(str(source["port"]))
    expect(page.locator("input[name=importTag]")).to_have_value(source["tag"])
    screenshot(page, "inbound-import")
    page.click("button[form=inbound-import-form]")
    page.locator(".toast.error", has_text="already used").wait_for()
    new_port = free_port()
    port.fill(str(new_port))
    page.locator("input[name=importTag]").fill("")
    page.click("button[form=inbound-import-form]")
    page.wait_for_selector("text=Inbound ui-export imported")

    copies = [i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == "ui-export"]
    assert len(copies) == 2
    imported = next(i for i in copies if i["id"] != source["id"])
    assert imported["id"] > source["id"] and imported["port"] == new_port
    assert imported["tag"] != source["tag"]
    for key in ("protocol", "listen", "settings", "streamSettings", "sniffing", "enable"):
        assert imported[key] == source[key], key
    expect(page.locator(f"tr[data-inbound='{imported['id']}']")).to_be_visible()


@pytest.fixture
def ticking_panel(tmp_path):
    """A panel of the test's own on the real core that counts traffic every second (the
    traffic job reads its interval at start, so the panel restarts once) and runs the
    loopback template, so bytes can reach an echo server on 127.0.0.1."""
    server = start_panel(tmp_path / "ticking", env=CORE_ENV)
    try:
        api = server.client()
        ok(api.post("/panel/api/setting/update", {"trafficInterval": 1}))
        template = json.dumps(loopback_template(api))
        ok(api.post("/panel/api/core/update", {"coreSetting": template}))
        mark = len(server.lines)
        ok(api.post("/panel/api/setting/restartPanel"))
        server.wait_listening(mark)
        yield server
    finally:
        stop_and_drop(server)


def serving(api, tag: str) -> bool:
    config = ok(api.get("/panel/api/server/getConfigJson"))
    running = ok(api.get("/panel/api/server/status"))["core"]["state"] == "running"
    return running and tag in [inbound.get("tag") for inbound in config["inbounds"]]


class Traffic:
    """Bytes through the real core: one SOCKS route of a client core to the panel's VLESS
    inbound as `client`, echoed back by a local server, sent once or kept flowing."""

    def __init__(self, socks_port: int, echo_port: int):
        self.socks_port, self.echo_port = socks_port, echo_port
        self.flowing = threading.Event()
        self.thread = threading.Thread(target=self._flow, daemon=True)

    def send(self, size: int = 64 * 1024) -> bool:
        payload = os.urandom(size)
        try:
            return socks_echo(self.socks_port, self.echo_port, payload) == payload
        except OSError:
            return False

    def _flow(self) -> None:
        while self.flowing.is_set():
            self.send(8 * 1024)
            time.sleep(0.2)

    def start_flowing(self) -> None:
        self.flowing.set()
        self.thread.start()

    def stop_flowing(self) -> None:
        self.flowing.clear()
        self.thread.join()


def test_live_traffic_refreshes_the_pages_in_place(browser, ticking_panel, watches, tmp_path):
    api = ticking_panel.client()
    inbound = ok(
        api.post(
            "/panel/api/inbounds/add",
            {
                "remark": "ui-live",
                "protocol": "vless",
                "listen": LOOPBACK,
                "port": free_port(),
                "settings": {"decryption": "none"},
                "streamSettings": {"network": "tcp", "security": "none"},
            },
        )
    )
    client = {"email": "ui-live@example.com", "id": str(uuid.uuid4())}
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    # Clients listed after it fill the page, so that it scrolls.
    others = [
        {"client": {"email": f"zz-other-{n:02d}@example.com"}, "inboundIds": [inbound["id"]]}
        for n in range(30)
    ]
    assert ok(api.post("/panel/api/clients/bulkCreate", others))["created"] == len(others)
    wait_until(lambda: serving(api, inbound["tag"]), "the core serves the new inbound")
    route = (free_port(), "vless", inbound["port"], client)

    page = new_page(browser, ticking_panel, watches, viewport=DESKTOP)
    sign_in(page, ticking_panel)
    page.wait_for_selector(".live.on")
    go(page, "clients")
    row = client_row(page, client["email"])
    used = row.locator("td[data-label=Traffic]")
    expect(used).to_have_text("0 B / ∞")
    row.locator("td.select input").check()
    # The row element itself must survive a refresh: replaced rows would flicker.
    row.evaluate("element => { element.dataset.seen = 'before'; }")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    scrolled = page.evaluate("window.scrollY")
    assert scrolled > 0
    paged: list[float] = []
    page.on(
        "request",
        lambda request: "clients/list/paged" in request.url and paged.append(time.monotonic()),
    )

    with echo_server() as echo_port, running_core(tmp_path, client_config([route]), route[0]):
        traffic = Traffic(route[0], echo_port)
        wait_until(traffic.send, "bytes pass through the panel's inbound")
        expect(used).not_to_have_text("0 B / ∞", timeout=WAIT_MS)
        assert row.get_attribute("data-seen") == "before"
        assert page.evaluate("window.scrollY") == scrolled
        expect(row.locator("td.select input")).to_be_checked()
        expect(page.locator("[data-testid=bulk]")).to_contain_text("1 selected")
        stored = ok(api.get(f"/panel/api/clients/traffic/{client['email']}"))
        assert stored["up"] + stored["down"] >= 64 * 1024

        # Ticks every second while bytes flow: the page refreshes at most every 5 s.
        traffic.start_flowing()
        try:
            page.wait_for_timeout(7_000)
        finally:
            traffic.stop_flowing()
        gaps = [later - earlier for earlier, later in itertools.pairwise(paged)]
        assert len(paged) >= 2 and min(gaps) > 4.5, paged

        go(page, "inbounds")
        counters = page.locator(f"tr[data-inbound='{inbound['id']}'] td[data-label=Traffic]")
        before = counters.inner_text()
        traffic.send(256 * 1024)
        expect(counters).not_to_have_text(before, timeout=WAIT_MS)
