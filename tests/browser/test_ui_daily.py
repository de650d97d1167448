"""Things an admin meets every day in the browser UI: the port a clone starts with, the
times in a client's IPs dialog, the question before the core stops, one toast per action,
and the log opening at its newest line. Headless Chromium against a real panel on the
stand-in core (helpers and the watch on console errors and foreign requests come from
test_ui)."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from core_panel import wait_until
from helpers import create_inbound, free_port, ok
from ui_pages import DESKTOP, expect, go, signed_in_page

CLIENTS = "/panel/api/clients"
SEEN = 1_700_000_000


def vless(api, remark: str) -> dict:
    payload = {"remark": remark, "protocol": "vless", "port": free_port()}
    return create_inbound(api, {**payload, "settings": {"decryption": "none"}})


def core_state(api) -> str:
    return ok(api.get("/panel/api/server/status"))["core"]["state"]


def notices_arrive(page, notices: list, count: int) -> None:
    """Until `count` notifications came over the page's WebSocket: Playwright hands its
    events over only while it is called, so the wait runs through the page."""
    for _ in range(150):
        if len(notices) >= count:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"{count} notifications expected, got {notices}")


def test_a_clone_starts_with_a_free_port(browser, core_panel, watches):
    api = core_panel.client()
    inbound = vless(api, "clone-port")
    page = signed_in_page(browser, core_panel, watches, viewport=DESKTOP)
    go(page, "inbounds")
    page.locator(f"tr[data-inbound='{inbound['id']}'] [data-testid=row-menu] summary").click()
    page.locator(f"tr[data-inbound='{inbound['id']}'] [data-testid=clone-inbound]").click()
    field = page.locator("#clone-form input[name=clonePort]")
    expect(field).not_to_have_value("0")
    port = int(field.input_value())
    settings = ok(api.post("/panel/api/setting/all"))
    taken = {i["port"] for i in ok(api.get("/panel/api/inbounds/list"))}
    assert 0 < port < 65536
    assert port not in taken | {urlsplit(core_panel.url).port, settings["subPort"]}
    page.click("button[form=clone-form]")
    page.wait_for_selector("text=Inbound clone-port copy created")
    ports = {i["remark"]: i["port"] for i in ok(api.get("/panel/api/inbounds/list"))}
    assert ports["clone-port copy"] == port


def test_the_ips_dialog_says_when_in_words(browser, core_panel, watches):
    api = core_panel.client()
    inbound = vless(api, "ips-dates")
    email = "ips-dates@example.org"
    ok(api.post(f"{CLIENTS}/add", {"client": {"email": email}, "inboundIds": [inbound["id"]]}))
    sighting = {"email": email, "ips": [{"ip": "192.0.2.61", "timestamp": SEEN}]}
    ok(api.post("/panel/api/server/clientIps", {"ips": [sighting]}))
    page = signed_in_page(browser, core_panel, watches, viewport=DESKTOP)
    go(page, "clients")
    page.locator(f"tr[data-email='{email}']").get_by_role("button", name="IPs").click()
    listed = page.locator("[data-testid=client-ips] li")
    expect(listed).to_have_count(1)
    shown = page.evaluate(f"new Date({SEEN * 1000}).toLocaleString('en')")
    expect(listed).to_have_text(f"192.0.2.61 last seen {shown}")
    assert str(SEEN) not in listed.inner_text()


def watched_page(browser, server, watches) -> tuple:
    """A signed-in dashboard and the notifications its WebSocket receives."""
    page = signed_in_page(browser, server, watches, viewport=DESKTOP)
    notices: list[str] = []
    page.on(
        "websocket",
        lambda socket: socket.on(
            "framereceived",
            lambda frame: '"notification"' in str(frame) and notices.append(str(frame)),
        ),
    )
    page.reload()
    page.wait_for_selector("[data-testid=core-badge]")
    return page, notices


def test_stopping_the_core_asks_first(browser, core_panel, watches):
    api = core_panel.client()
    vless(api, "stop-asks")
    wait_until(lambda: core_state(api) == "running", "the core runs")
    page, notices = watched_page(browser, core_panel, watches)
    stop = page.locator("main").get_by_role("button", name="Stop", exact=True)
    stop.click()
    dialog = page.get_by_role("dialog", name="Please confirm")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert core_state(api) == "running"
    stop.click()
    dialog.get_by_role("button", name="OK").click()
    wait_until(lambda: core_state(api) == "stop", "the core stops once confirmed")
    notices_arrive(page, notices, 1)
    expect(page.locator(".toast")).to_have_count(1)
    page.locator("main").get_by_role("button", name="Start", exact=True).click()
    wait_until(lambda: core_state(api) == "running", "the core runs again")


def test_one_restart_shows_one_toast(browser, core_panel, watches):
    api = core_panel.client()
    vless(api, "restart-once")
    wait_until(lambda: core_state(api) == "running", "the core runs")
    page, notices = watched_page(browser, core_panel, watches)
    page.locator("main").get_by_role("button", name="Restart", exact=True).click()
    notices_arrive(page, notices, 1)
    page.locator(".toast.success").wait_for()
    expect(page.locator(".toast")).to_have_count(1)
    expect(page.locator(".toast")).to_contain_text("The core restarted")


def test_a_success_clears_the_errors_of_the_same_action(browser, core_panel, watches):
    api = core_panel.client()
    inbound = vless(api, "toasts")
    ok(api.post(f"{CLIENTS}/add", {"client": {"email": "taken@ex"}, "inboundIds": [inbound["id"]]}))
    page = signed_in_page(browser, core_panel, watches, viewport=DESKTOP)
    go(page, "clients")
    page.click("[data-testid=add-client]")
    form = page.locator("#client-form")
    form.locator("input[name=email]").fill("taken@ex")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    page.click("button[form=client-form]")
    expect(page.locator(".toast.error")).to_have_count(1)
    form.locator("input[name=email]").fill("fresh@ex")
    page.click("button[form=client-form]")
    page.locator(".toast.success").wait_for()
    expect(page.locator(".toast.error")).to_have_count(0)


def test_logs_open_at_the_newest_line_and_stay_where_the_admin_reads(
    browser,
    core_panel,
    watches,
):
    page = signed_in_page(browser, core_panel, watches, viewport={"width": 1280, "height": 320})
    go(page, "logs")
    page.locator("main select").nth(1).select_option("debug")
    log = page.locator("[data-testid=log]")
    log.wait_for()
    at_end = "(log) => log.scrollHeight - log.scrollTop - log.clientHeight < 4"
    assert log.evaluate("(log) => log.scrollHeight > log.clientHeight + 50")
    wait_until(lambda: log.evaluate(at_end), "the log shows its newest line")
    log.evaluate("(log) => { log.scrollTop = 0; log.dispatchEvent(new Event('scroll')); }")
    page.get_by_role("button", name="Refresh").click()
    page.get_by_role("button", name="Refresh").wait_for(state="visible")
    expect(page.get_by_role("button", name="Refresh")).to_be_enabled()
    assert log.evaluate("(log) => log.scrollTop") == 0
    log.evaluate(
        "(log) => { log.scrollTop = log.scrollHeight; log.dispatchEvent(new Event('scroll')); }"
    )
    page.locator("main select").nth(0).select_option("500")
    expect(page.get_by_role("button", name="Refresh")).to_be_enabled()
    wait_until(lambda: log.evaluate(at_end), "the log follows its newest line")


def test_the_client_form_shows_sets_and_renews_the_uuid_and_password(
    browser,
    core_panel,
    watches,
):
    api = core_panel.client()
    inbound = vless(api, "keys-vless")
    trojan = create_inbound(
        api,
        {"remark": "keys-trojan", "protocol": "trojan", "port": free_port(), "settings": {}},
    )
    page = signed_in_page(browser, core_panel, watches, viewport=DESKTOP)
    go(page, "clients")
    page.click("[data-testid=add-client]")
    form = page.locator("#client-form")
    form.locator("input[name=email]").fill("keys@ex")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    field = form.locator("input[name=uuid]")
    first = field.input_value()
    assert str(uuid.UUID(first)) == first
    expect(form.locator("input[name=password]")).to_have_count(0)
    form.locator("[data-testid=new-uuid]").click()
    expect(field).not_to_have_value(first)
    assert str(uuid.UUID(field.input_value())) == field.input_value()
    field.fill("not-a-uuid")
    page.click("button[form=client-form]")
    expect(page.locator(".toast.error")).to_contain_text("id must be a UUID")
    chosen = str(uuid.uuid4())
    field.fill(chosen)
    page.click("button[form=client-form]")
    page.locator(".toast.success").wait_for()
    assert ok(api.get(f"{CLIENTS}/get/keys@ex"))["client"]["id"] == chosen

    ok(api.post(f"{CLIENTS}/keys@ex/attach", {"inboundIds": [trojan["id"]]}))
    stored = ok(api.get(f"{CLIENTS}/get/keys@ex"))["client"]["password"]
    page.reload()
    page.locator("tr[data-email='keys@ex']").get_by_role("button", name="Edit").click()
    password = form.locator("input[name=password]")
    expect(password).to_have_value(stored)
    expect(form.locator("input[name=uuid]")).to_have_value(chosen)
    form.locator("[data-testid=new-password]").click()
    expect(password).not_to_have_value(stored)
    renewed = password.input_value()
    assert len(renewed) == 16
    page.click("button[form=client-form]")
    page.locator(".toast.success").wait_for()
    client = ok(api.get(f"{CLIENTS}/get/keys@ex"))["client"]
    assert (client["password"], client["id"]) == (renewed, chosen)
