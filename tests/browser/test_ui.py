"""The browser UI in headless Chromium (Debian's `/usr/bin/chromium`, driven by Playwright).

A real panel runs on loopback; the tests click through the pages as an admin would and
check what the admin would see, and what the panel stored (through its API). Every page
load is watched: a console error, an uncaught exception, a request to another origin or a
UI response without its Content-Security-Policy fails the test that caused it.
Screenshots of the main pages go to tests/artifacts/ (not committed); the ones in
docs/screenshots/ were picked from there.
"""

from __future__ import annotations

import copy
import os
import re
import socket
import time

import psutil
import pyotp
import pytest
from helpers import free_port, ok
from panels import start_panel
from ui_pages import (
    DESKTOP,
    PHONE,
    Watch,
    client_row,
    expect,
    form_field,
    go,
    new_page,
    open_inbound_form,
    sign_in,
    signed_in_page,
)

pytestmark = pytest.mark.ui

PAGES = ("dashboard", "inbounds", "clients", "nodes", "logs", "settings")
BULK_CLIENTS = 10_000


def test_pages_render_on_origin_with_csp(browser, panel, watches, artifacts):
    page = new_page(browser, panel, watches, viewport=DESKTOP)
    response = page.goto(panel.url + "/")
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "unsafe" not in csp
    sign_in(page, panel)
    page.wait_for_selector(".cards .stat")
    page.wait_for_selector(".chart canvas")
    for name in PAGES:
        go(page, name)
        page.wait_for_selector("main h1")
        page.wait_for_timeout(500)
        page.screenshot(path=os.path.join(artifacts, f"{name}.png"), full_page=True)
    # A page address typed or reloaded directly serves the same application.
    page.goto(panel.url + "/panel/logs")
    page.wait_for_selector("a[data-page=logs][aria-current=page]")


def test_every_page_of_the_navigation_survives_a_reload(browser, panel, watches):
    """Each address the navigation shows is one the server answers with the UI: reloaded
    or opened from a bookmark, it shows that page, never an API error. The pages are read
    from the navigation itself, so a page added later is covered too."""
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    links = page.locator("nav a[data-page]")
    entries = [
        (links.nth(i).get_attribute("data-page"), links.nth(i).evaluate("a => a.href"))
        for i in range(links.count())
    ]
    assert len(entries) >= len(PAGES)
    for name, address in entries:
        response = page.goto(address)
        assert response.status == 200, (address, response.status)
        assert response.headers["content-type"].startswith("text/html"), address
        page.wait_for_selector(f"a[data-page={name}][aria-current=page]")
        page.reload()
        page.wait_for_selector(f"a[data-page={name}][aria-current=page]")
        assert page.url == address


def test_static_files_are_cached_by_kind(panel):
    api = panel.client(login=False)
    vendor = api.raw("GET", "/assets/vendor/htm-3.1.1.mjs")
    assert vendor.status_code == 200
    assert "immutable" in vendor.headers["Cache-Control"]
    assert vendor.headers["Content-Type"].startswith("text/javascript")
    own = api.raw("GET", "/assets/js/main.js")
    assert own.headers["Cache-Control"] == "no-cache"
    again = api.raw("GET", "/assets/js/main.js", headers={"If-None-Match": own.headers["ETag"]})
    assert again.status_code == 304
    missing = api.raw("GET", "/assets/js/../../app.py")
    assert missing.status_code in (403, 404)
    assert "appliance" not in missing.text


def test_inbound_client_search_links_disable_and_live_update(browser, panel, watches, artifacts):
    api = panel.client()
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)

    go(page, "inbounds")
    form = open_inbound_form(page, "ui-vless", 24443)
    page.click("button[form=inbound-form]")
    page.wait_for_selector("text=ui-vless")
    inbound = next(i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == "ui-vless")
    assert (inbound["protocol"], inbound["port"]) == ("vless", 24443)

    go(page, "clients")
    page.click("[data-testid=add-client]")
    form = page.locator("#client-form")
    form.locator("input[name=email]").fill("ui-alice@example.com")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    page.click("button[form=client-form]")
    client_row(page, "ui-alice@example.com").wait_for()
    stored = ok(api.get("/panel/api/clients/get/ui-alice@example.com"))
    assert stored["inboundIds"] == [inbound["id"]] and stored["client"]["enable"] is True

    items = [
        {"client": {"email": f"bulk-{n:05d}@example.com"}, "inboundIds": [inbound["id"]]}
        for n in range(BULK_CLIENTS)
    ]
    created = api.http.post(api.url + "/panel/api/clients/bulkCreate", json=items, timeout=600)
    assert ok(created.json())["created"] == BULK_CLIENTS

    page.reload()
    page.wait_for_selector("[data-testid=clients-table]")
    page.fill("[data-testid=client-search]", "ui-alice")
    expect(page.locator("[data-testid=count]")).to_have_text(f"1 of {BULK_CLIENTS + 1} clients")
    assert page.locator("[data-testid=clients-table] tbody tr").count() == 1
    page.screenshot(path=os.path.join(artifacts, "clients-search.png"), full_page=True)

    client_row(page, "ui-alice@example.com").locator("[data-testid=links]").click()
    links = api.raw("GET", "/panel/api/clients/links/ui-alice@example.com")
    if links.status_code == 200 and links.json()["success"]:
        page.wait_for_selector("svg.qr path")
        assert page.locator("code.link-text").first.inner_text().startswith("vless://")
        page.screenshot(path=os.path.join(artifacts, "client-links.png"))
    else:
        page.wait_for_selector("text=This panel does not provide share links yet.")
    page.keyboard.press("Escape")

    # A second browser, signed in on its own, shows the same row...
    other = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(other, "clients")
    other.fill("[data-testid=client-search]", "ui-alice")
    other_switch = client_row(other, "ui-alice@example.com").locator("input[role=switch]")
    assert other_switch.is_checked()

    # ...and sees it disabled here without reloading: the WebSocket said clients changed.
    client_row(page, "ui-alice@example.com").locator(".switch").click()
    page.wait_for_selector("text=Client disabled")
    assert ok(api.get("/panel/api/clients/get/ui-alice@example.com"))["client"]["enable"] is False
    expect(other_switch).not_to_be_checked()
    other.context.close()


def test_protocol_forms_save_transport_and_security(browser, panel, watches):
    api = panel.client()
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "inbounds")

    form = open_inbound_form(page, "ui-reality", 24601)
    form_field(form, "Transport").last.select_option("grpc")
    form_field(form, "Service name").fill("tunnel")
    form_field(form, "Security").select_option("reality")
    page.click("text=Generate keys")
    expect(form_field(form, "Private key")).not_to_have_value("")
    form_field(form, "Target (host:port)").fill("example.com:443")
    form_field(form, "Server names").fill("example.com, www.example.com")
    page.click("button[form=inbound-form]")
    page.wait_for_selector("text=ui-reality")

    form = open_inbound_form(page, "ui-ss", 24602)
    form.locator("select[name=protocol]").select_option("shadowsocks")
    form_field(form, "Cipher").select_option("aes-256-gcm")
    page.click("button[form=inbound-form]")
    page.wait_for_selector("text=ui-ss")

    stored = {i["remark"]: i for i in ok(api.get("/panel/api/inbounds/list"))}
    stream = stored["ui-reality"]["streamSettings"]
    assert (stream["network"], stream["security"]) == ("grpc", "reality")
    assert stream["grpcSettings"]["serviceName"] == "tunnel"
    assert stream["realitySettings"]["serverNames"] == ["example.com", "www.example.com"]
    assert len(stream["realitySettings"]["privateKey"]) == 43
    assert stored["ui-ss"]["protocol"] == "shadowsocks"
    assert stored["ui-ss"]["settings"]["method"] == "aes-256-gcm"

    # Editing keeps what the form does not show and changes what it does.
    page.locator("tr", has_text="ui-reality").locator("text=Edit").click()
    form = page.locator("#inbound-form")
    form.locator("input[name=remark]").fill("ui-reality-2")
    page.click("button[form=inbound-form]")
    page.wait_for_selector("text=ui-reality-2")
    edited = ok(api.get(f"/panel/api/inbounds/get/{stored['ui-reality']['id']}"))
    assert (
        edited["streamSettings"]["realitySettings"]["privateKey"]
        == (stream["realitySettings"]["privateKey"])
    )


def test_error_envelope_is_shown_to_the_user(browser, panel, watches):
    api = panel.client()
    taken = ok(
        api.post(
            "/panel/api/inbounds/add",
            {"remark": "holder", "protocol": "vless", "port": 32055, "settings": {}},
        )
    )
    page = signed_in_page(browser, panel, watches)
    go(page, "inbounds")
    page.click("[data-testid=add-inbound]")
    page.locator("#inbound-form input[name=port]").fill(str(taken["port"]))
    page.click("button[form=inbound-form]")
    reply = api.post("/panel/api/inbounds/add", {"protocol": "vless", "port": taken["port"]})
    assert reply["success"] is False
    toast = page.locator(".toast.error")
    toast.wait_for()
    assert reply["msg"].split(";")[0] in toast.inner_text()


def test_persian_turns_the_page_right_to_left(browser, panel, watches, artifacts):
    page = signed_in_page(browser, panel, watches, viewport=PHONE)
    page.select_option("[data-testid=language]", "fa")
    page.wait_for_function("() => document.documentElement.dir === 'rtl'")
    assert page.evaluate("document.documentElement.lang") == "fa"
    page.click(".menu-button")
    assert page.locator("a[data-page=clients]").inner_text().strip().endswith("کاربران")
    page.click("a[data-page=clients]")
    page.wait_for_selector("[data-testid=clients-table]")
    page.screenshot(path=os.path.join(artifacts, "clients-fa-phone.png"))
    # Nothing spills sideways at phone width.
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.select_option("[data-testid=language]", "en")
    page.wait_for_function("() => document.documentElement.dir === 'ltr'")


def test_uptime_under_a_day_is_minutes_and_hours(browser, panel, watches):
    """The dashboard's uptime card: "0 days" said nothing for the whole first day."""
    page = signed_in_page(browser, panel, watches)
    seconds = [0, 59, 300, 3599, 3600, 5 * 3600 + 7 * 60, 86399, 3 * 86400 + 5]
    shown = page.evaluate(
        """async (seconds) => {
          const url = new URL("assets/js/components.js", document.baseURI).href;
          const { formatUptime } = await import(url);
          return seconds.map(formatUptime);
        }""",
        seconds,
    )
    assert shown == [
        "0 min",
        "0 min",
        "5 min",
        "59 min",
        "1 h 0 min",
        "5 h 7 min",
        "23 h 59 min",
        "3 days",
    ]
    value = page.locator(".card.stat", has_text="Uptime").locator(".stat-value")
    expect(value).to_have_text(re.compile(r"^\d+ min$|^\d+ h \d+ min$|^\d+ days$"))


def test_sign_in_over_plain_http_from_another_machine_warns(browser, tmp_path, watches):
    """Over plain HTTP at the host's network address the password crosses the network in
    clear, and the sign-in page says so; at loopback (an SSH tunnel) it does not."""
    lan = next(
        (
            entry.address
            for entries in psutil.net_if_addrs().values()
            for entry in entries
            if entry.family == socket.AF_INET and not entry.address.startswith("127.")
        ),
        None,
    )
    if lan is None:
        pytest.skip("this machine has no network address besides loopback")
    server = start_panel(tmp_path, "--listen", "0.0.0.0")
    try:
        local = new_page(browser, server, watches)
        local.goto(server.url + "/")
        local.wait_for_selector("#login-username")
        expect(local.get_by_test_id("plain-http-warning")).to_have_count(0)
        remote = copy.copy(server)
        remote.url = server.url.replace("127.0.0.1", lan)
        page = new_page(browser, remote, watches)
        page.goto(remote.url + "/")
        warning = page.get_by_test_id("plain-http-warning")
        expect(warning).to_contain_text("the password travels unencrypted")
        page.fill("#login-username", server.username)
        page.fill("#login-password", server.password)
        page.click("button[type=submit]")
        page.wait_for_selector("[data-testid=core-badge]")
    finally:
        server.stop()


HEADER_LAYOUT = """header => {
  const box = (element) => element.getBoundingClientRect();
  const shown = [...header.children].filter((child) => box(child).height > 0);
  const signOut = shown[shown.length - 1];
  return {
    oneLine: Math.max(...shown.map((c) => box(c).top))
      < Math.min(...shown.map((c) => box(c).bottom)),
    signOutHeight: box(signOut).height,
    themeHeight: box(header.querySelector("[data-testid=theme]")).height,
    signOutRight: box(signOut).right,
    scrollWidth: document.documentElement.scrollWidth,
  };
}"""


def test_header_stays_on_one_line_at_360_px(browser, panel, watches):
    """On a 360 px phone Sign out neither wraps nor drops to a line of its own, in any
    language; nothing spills sideways."""
    page = signed_in_page(browser, panel, watches, viewport={"width": 360, "height": 740})
    for code, sign_out in (("en", "Sign out"), ("ru", "Выйти"), ("fa", "خروج"), ("zh", "退出登录")):
        page.select_option("[data-testid=language]", code)
        button = page.locator("header.topbar > button").last
        expect(button).to_have_text(re.compile(sign_out))
        layout = page.locator("header.topbar").evaluate(HEADER_LAYOUT)
        assert layout["oneLine"], (code, layout)
        assert layout["signOutHeight"] <= layout["themeHeight"] + 4, (code, layout)
        assert layout["signOutRight"] <= 360 and layout["scrollWidth"] <= 360, (code, layout)
    page.select_option("[data-testid=language]", "en")


def test_inbound_row_keeps_its_actions_in_a_menu(browser, tmp_path, watches):
    """A row shows Edit and Add client; the other actions wait in its menu, so a row is
    one line tall at desktop width, and each of them is still one click away."""
    server = start_panel(tmp_path)
    try:
        api = server.client()
        settings = {"decryption": "none"}
        payload = {
            "protocol": "vless",
            "remark": "row-menu",
            "port": free_port(),
            "settings": settings,
        }
        inbound = ok(api.post("/panel/api/inbounds/add", payload))
        page = signed_in_page(browser, server, watches, viewport=DESKTOP)
        go(page, "inbounds")
        row = page.locator(f"tr[data-inbound='{inbound['id']}']")
        visible = row.locator("td.actions > button")
        expect(visible).to_have_text(["Edit", "Add client"])
        assert row.bounding_box()["height"] <= 70
        row.locator("[data-testid=row-menu] summary").click()
        menu = row.locator("[data-testid=row-menu] .menu-items button")
        expect(menu).to_have_text(
            ["Clone", "Export", "Export links", "History", "Reset traffic", "Delete"]
        )
        menu.filter(has_text="History").click()
        expect(page.locator("[role=dialog]")).to_be_visible()
        expect(row.locator("[data-testid=row-menu] .menu-items")).to_be_hidden()
    finally:
        server.stop()


def test_dark_theme_toggle(browser, panel, watches):
    page = signed_in_page(browser, panel, watches, color_scheme="light")
    background = "getComputedStyle(document.body).backgroundColor"
    light = page.evaluate(background)
    page.click("[data-testid=theme]")  # auto -> light
    page.click("[data-testid=theme]")  # light -> dark
    page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
    assert page.evaluate(background) != light
    page.click("[data-testid=theme]")  # back to the system's choice
    assert page.evaluate("document.documentElement.dataset.theme") is None


def test_two_factor_setup_and_sign_in(browser, tmp_path, watches, artifacts):
    server = start_panel(tmp_path)
    try:
        page = signed_in_page(browser, server, watches, viewport=DESKTOP)
        go(page, "settings")
        page.click("text=Set up two-factor")
        secret = page.locator("[data-testid=totp-secret]").inner_text().strip()
        page.wait_for_selector(".two-factor svg.qr path")
        page.screenshot(path=os.path.join(artifacts, "settings-2fa.png"), full_page=True)
        totp = pyotp.TOTP(secret)
        # A code is good once: enabling spends the previous step's code, sign-in the current.
        page.fill("input[name=totp-code]", totp.at(time.time() - 30))
        page.click("text=Turn on two-factor")
        page.wait_for_selector("text=Sign-in asks for a code from your authenticator app.")
        assert ok(server.client(login=False).post("/getTwoFactorEnable")) is True

        page.click("text=Sign out")
        page.wait_for_selector("#login-username")
        sign_in(page, server, code=totp.now())
        page.wait_for_selector(".cards .stat")
    finally:
        server.stop()


def test_wrong_password_is_explained(browser, panel, watches):
    page = new_page(browser, panel, watches)
    page.goto(panel.url + "/")
    page.fill("#login-username", panel.username)
    page.fill("#login-password", "not-the-password")
    page.click("button[type=submit]")
    page.locator(".toast.error").wait_for()
    assert page.locator("#login-username").is_visible()


def test_api_token_is_shown_once_and_works(browser, panel, watches):
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "settings")
    page.fill("input[placeholder='Token name']", "ui-script")
    page.click("text=Create token")
    token = page.locator("[data-testid=new-token]").inner_text().strip()
    page.keyboard.press("Escape")
    page.wait_for_selector("li:has-text('ui-script')")
    bearer = panel.client(login=False)
    reply = bearer.get("/panel/api/server/status", headers={"Authorization": f"Bearer {token}"})
    assert ok(reply)["panelVersion"]
    assert page.locator("[data-testid=new-token]").count() == 0


def test_a_restart_that_moves_the_panel_takes_the_page_to_its_new_address(browser, tmp_path):
    """A new base path waits for a restart: the save says so, and after "Restart panel"
    the page follows the panel to where it answers now, with a live header there."""
    server = start_panel(tmp_path, "--port", str(free_port()))
    try:
        # The old address stops answering during the restart, which the console reports;
        # only other origins and missing CSP headers are faults here.
        seen: list[Watch] = []
        page = new_page(browser, server, seen, viewport=DESKTOP)
        sign_in(page, server)
        go(page, "settings")
        form = page.locator("[data-testid=settings-form]")
        form.locator("input[name=webBasePath]").fill("/moved-here/")
        form.locator("button[type=submit].primary").click()
        page.wait_for_selector(".toast.warning >> text=Restart the panel to apply: Base path")

        mark = len(server.lines)
        page.locator(".page-head").get_by_role("button", name="Restart panel").click()
        page.locator(".modal").get_by_role("button", name="OK").click()
        server.wait_listening(mark, timeout=60)
        assert server.url.endswith("/moved-here")
        page.wait_for_url(server.url + "/panel/settings", timeout=60_000)
        if page.locator("#login-username").count():
            sign_in(page, server)
        page.wait_for_selector("[data-testid=core-badge]")
        page.wait_for_selector(".topbar .live.on")
        state = ok(server.client().get("/panel/api/server/status"))["core"]["state"]
        expect(page.locator("[data-testid=core-badge]")).to_have_class(
            f"badge core-{state.replace(' ', '_')}"
        )
        for watch in seen:
            assert watch.foreign == [] and watch.missing_csp == [], watch
    finally:
        server.stop()
