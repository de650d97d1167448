"""The inbound, client and outbound forms on a core that lacks features, in headless
Chromium.

On Debian's V2Ray 4.34 the panel refuses REALITY, Vision and the newer transports
(tests/core/test_core_capabilities.py); the forms grey those choices out before the admin
makes them, and say why. Same rules as every browser test (ui_pages.py).
"""

from __future__ import annotations

import uuid

import pytest
from core_panel import CORE_ENV, wait_until
from helpers import certs_dir, free_port, ok, write_self_signed
from panels import start_panel, stop_and_drop
from ui_pages import DESKTOP, expect, go, open_inbound_form, signed_in_page

# The fixtures that give a module one browser and fail a test whose pages logged errors
# or left the origin.


pytestmark = pytest.mark.ui

V2FLY = "the running core (v2fly 4.34.0) cannot run"


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = start_panel(tmp_path_factory.mktemp("ui-v2fly"), env=CORE_ENV)
    api = server.client()
    wait_until(
        lambda: ok(api.get("/panel/api/server/status"))["core"]["state"] == "running",
        "the core runs",
    )
    yield server
    stop_and_drop(server)


def test_the_inbound_form_greys_out_reality_on_v2fly_and_says_why(browser, panel, watches):
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "inbounds")
    form = open_inbound_form(page, "ui-capabilities", free_port())
    reality = form.locator("select[name=security] option[value=reality]")
    expect(reality).to_be_disabled()
    expect(reality).to_have_attribute("title", f"{V2FLY} REALITY; it needs Xray")
    expect(form.locator("select[name=security] option[value=tls]")).to_be_enabled()
    security = form.locator("[data-path='streamSettings.security']")
    expect(security).to_contain_text(f"REALITY: {V2FLY} REALITY; it needs Xray")
    xhttp = form.locator("select[name=network] option[value=xhttp]")
    expect(xhttp).to_be_disabled()
    expect(xhttp).to_have_attribute("title", f"{V2FLY} XHTTP; it needs Xray")
    expect(form.locator("select[name=network] option[value=ws]")).to_be_enabled()
    for protocol, feature in (("hysteria2", "Hysteria 2"), ("wireguard", "WireGuard")):
        option = form.locator(f"select[name=protocol] option[value={protocol}]")
        expect(option).to_be_disabled()
        expect(option).to_have_attribute("title", f"{V2FLY} {feature}; it needs Xray")
    expect(form.locator("select[name=protocol] option[value=vless]")).to_be_enabled()


def test_the_client_form_greys_out_vision_on_v2fly_and_says_why(browser, panel, watches):
    api = panel.client()
    cert, key = write_self_signed(certs_dir(panel), "ui-vision.test")
    tls = {"certificates": [{"certificateFile": cert, "keyFile": key}]}
    payload = {
        "remark": "ui-vision",
        "protocol": "vless",
        "listen": "127.0.0.1",
        "port": free_port(),
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "tls", "tlsSettings": tls},
    }
    inbound = ok(api.post("/panel/api/inbounds/add", payload))
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")
    page.click("[data-testid=add-client]")
    form = page.locator("#client-form")
    form.locator("input[name=email]").fill(f"{uuid.uuid4().hex[:8]}@ui")
    box = form.locator(f"input[name=inbound][value='{inbound['id']}']")
    if not box.is_checked():
        box.check()
    vision = form.locator("select[name=flow] option[value=xtls-rprx-vision]")
    expect(vision).to_be_disabled()
    expect(vision).to_have_attribute("title", f"{V2FLY} XTLS Vision; it needs Xray")
    expect(form).to_contain_text(f"{V2FLY} XTLS Vision")


def test_the_outbound_form_greys_out_what_v2fly_lacks_and_says_why(browser, panel, watches):
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "core")
    page.wait_for_selector("textarea[name=coreSetting]")
    page.click("[data-tab=outbounds]")
    form = page.locator("[data-testid=outbound-form]")
    protocols = (("wireguard", "WireGuard"), ("hysteria", "Hysteria 2"), ("loopback", "Loopback"))
    for protocol, feature in protocols:
        option = form.locator(f"select[name=new-protocol] option[value={protocol}]")
        expect(option).to_be_disabled()
        expect(option).to_have_attribute("title", f"{V2FLY} {feature}; it needs Xray")
    expect(form.locator("[data-testid=add-outbound]")).to_contain_text(
        f"loopback: {V2FLY} Loopback; it needs Xray"
    )
    expect(form.locator("select[name=new-protocol] option[value=vless]")).to_be_enabled()
    form.locator("select[name=new-protocol]").select_option("vless")
    reality = form.locator("select[name=new-security] option[value=reality]")
    expect(reality).to_be_disabled()
    expect(reality).to_have_attribute("title", f"{V2FLY} REALITY; it needs Xray")
    expect(form.locator("select[name=new-security] option[value=tls]")).to_be_enabled()
    expect(form.locator("[data-testid=outbound-stream]")).to_contain_text(
        f"reality: {V2FLY} REALITY; it needs Xray"
    )
    expect(form.locator("select[name=new-network] option[value=xhttp]")).to_be_disabled()
    expect(form.locator("select[name=new-network] option[value=ws]")).to_be_enabled()
