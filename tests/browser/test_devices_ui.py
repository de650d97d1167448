"""Device limits in the admin UI: a client's deviceLimit set in its form is what the
panel stores, generated clients take the generator's limit, the info dialog lists the
devices its subscription was fetched from (sent by real subscription requests carrying
x-hwid) and frees them one by one or all at once, the clients row counts them, and the
settings page carries the four hwid settings. Headless Chromium against a real panel
(helpers and the watch on console errors come from ui_pages)."""

from __future__ import annotations

import requests
from helpers import create_inbound, free_port, ok
from ui_pages import DESKTOP, client_row, expect, form_field, go, screenshot, signed_in_page

API = "/panel/api/clients"
PHONE_A = {
    "x-hwid": "hwid-ui-phone-a",
    "x-device-os": "Android",
    "x-ver-os": "14",
    "x-device-model": "Pixel 8",
    "user-agent": "Happ/3.1.0",
}
PHONE_B = {
    "x-hwid": "hwid-ui-phone-b",
    "x-device-os": "iOS",
    "x-ver-os": "17.5",
    "x-device-model": "iPhone 15",
    "user-agent": "v2RayTun/2.4",
}


def add_client(api, email: str) -> dict:
    inbound = create_inbound(
        api, {"protocol": "vless", "port": free_port(), "settings": {"decryption": "none"}}
    )
    ok(api.post(f"{API}/add", {"client": {"email": email}, "inboundIds": [inbound["id"]]}))
    return ok(api.get(f"{API}/get/{email}"))["client"]


def fetch_subscription(panel, sub_id: str, headers: dict) -> None:
    reply = requests.get(f"{panel.sub_url}/sub/{sub_id}", headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text


def open_info(page, email: str):
    client_row(page, email).locator("[data-testid=client-info]").click()
    dialog = page.locator(".modal", has_text=email)
    expect(dialog.locator("[data-testid=client-devices]")).to_be_visible()
    return dialog


def confirm(page) -> None:
    page.get_by_role("dialog", name="Please confirm").get_by_role("button", name="OK").click()


def test_device_limit_set_in_the_form_is_saved_and_shown(browser, panel, watches):
    api = panel.client()
    add_client(api, "dev-limit@ui")
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")

    client_row(page, "dev-limit@ui").get_by_role("button", name="Edit").click()
    form = page.locator("#client-form")
    limit = form_field(form, "Device limit")
    expect(limit).to_have_value("0")
    hint = form.locator("label.field", has_text="Device limit").locator(".hint")
    expect(hint).to_contain_text("-1 means no limit")
    limit.fill("3")
    page.click("button[form=client-form]")
    expect(form).to_have_count(0)
    assert ok(api.get(f"{API}/get/dev-limit@ui"))["client"]["deviceLimit"] == 3

    dialog = open_info(page, "dev-limit@ui")
    expect(dialog.locator("[data-field=deviceLimit] dd")).to_have_text("3")
    dialog.get_by_role("button", name="Close").first.click()

    # -1 is no limit, and the info dialog says so in words.
    client_row(page, "dev-limit@ui").get_by_role("button", name="Edit").click()
    expect(limit).to_have_value("3")
    limit.fill("-1")
    page.click("button[form=client-form]")
    expect(form).to_have_count(0)
    assert ok(api.get(f"{API}/get/dev-limit@ui"))["client"]["deviceLimit"] == -1
    dialog = open_info(page, "dev-limit@ui")
    expect(dialog.locator("[data-field=deviceLimit] dd")).to_have_text("Unlimited")


def test_generated_clients_get_the_device_limit_of_the_dialog(browser, panel, watches):
    api = panel.client()
    inbound = create_inbound(
        api, {"protocol": "vless", "port": free_port(), "settings": {"decryption": "none"}}
    )
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    page.click("[data-testid=generate]")
    form = page.locator("#generate-form")
    form.locator("input[name=count]").fill("2")
    form.locator("input[name=prefix]").fill("dev-gen-")
    form.locator("input[name=suffix]").fill("@ui")
    form.locator("input[name=deviceLimit]").fill("2")
    form.locator(f"input[name=inbound][value='{inbound['id']}']").check()
    page.click("button[form=generate-form]")
    expect(page.locator("[data-testid=generate-result]")).to_contain_text("Created 2 clients")
    for n in (1, 2):
        assert ok(api.get(f"{API}/get/dev-gen-{n}@ui"))["client"]["deviceLimit"] == 2


def test_a_device_that_fetched_the_subscription_is_listed_and_deleted(browser, panel, watches):
    api = panel.client()
    ok(api.post("/panel/api/setting/update", {"hwidEnable": True}))
    client = add_client(api, "dev-list@ui")
    fetch_subscription(panel, client["subId"], PHONE_A)

    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    expect(client_row(page, "dev-list@ui").locator("[data-testid=device-count]")).to_contain_text(
        "1 device"
    )
    dialog = open_info(page, "dev-list@ui")
    device = dialog.locator("li[data-hwid='hwid-ui-phone-a']")
    expect(device).to_contain_text("Pixel 8")
    expect(device).to_contain_text("Android 14")
    expect(device).to_contain_text("Happ/3.1.0")
    expect(device).to_contain_text("127.0.0.1")

    device.locator("[data-testid=device-delete]").click()
    confirm(page)
    expect(device).to_have_count(0)
    expect(dialog.locator("[data-testid=client-devices]")).to_contain_text("No device")
    assert ok(api.get(f"{API}/devices/dev-list@ui")) == []


def test_clear_all_frees_every_device_of_the_client(browser, panel, watches):
    api = panel.client()
    ok(api.post("/panel/api/setting/update", {"hwidEnable": True}))
    client = add_client(api, "dev-clear@ui")
    fetch_subscription(panel, client["subId"], PHONE_A)
    fetch_subscription(panel, client["subId"], PHONE_B)

    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    expect(client_row(page, "dev-clear@ui").locator("[data-testid=device-count]")).to_contain_text(
        "2 devices"
    )
    dialog = open_info(page, "dev-clear@ui")
    expect(dialog.locator("li[data-hwid]")).to_have_count(2)
    expect(dialog.locator("li[data-hwid='hwid-ui-phone-b']")).to_contain_text("iOS 17.5")
    screenshot(page, "client-devices.png")

    dialog.locator("[data-testid=devices-clear]").click()
    confirm(page)
    expect(dialog.locator("li[data-hwid]")).to_have_count(0)
    assert ok(api.get(f"{API}/devices/dev-clear@ui")) == []


def test_the_settings_page_carries_the_hwid_settings(browser, panel, watches):
    api = panel.client()
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "settings")
    form = page.locator("[data-testid=settings-form]")
    for name in ("hwidEnable", "hwidDefaultLimit", "hwidRequired", "hwidAnnounce"):
        expect(form.locator(f"[name={name}]")).to_have_count(1)
    expect(form).to_contain_text("Default device limit")

    form.locator("input[name=hwidDefaultLimit]").fill("4")
    form.locator("textarea[name=hwidAnnounce]").fill("Two devices per plan")
    form.locator("button[type=submit]").last.click()
    expect(page.locator(".toast.success")).to_contain_text("Settings saved")
    stored = ok(api.post("/panel/api/setting/all"))
    assert stored["hwidDefaultLimit"] == 4
    assert stored["hwidAnnounce"] == "Two devices per plan"
