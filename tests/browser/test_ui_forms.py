"""The client and inbound forms, Persian on a phone, and the clients table in headless
Chromium: what an admin sees when a form is incomplete or refused, quantities and chart
legends in a right-to-left language, and the table's rows, bulk actions and paging.

Same rules as every browser test (ui_pages.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import sing_box
import xray_core
from core_helpers import LOOPBACK
from core_panel import wait_until
from helpers import free_port, ok
from proving import carries, prove
from sing_box_links import CERTS, SERVER_NAME, mutate, server_inbound
from ui_pages import DESKTOP, client_row, expect, form_field, go, open_inbound_form, signed_in_page

# The fixtures that give a module one browser and fail a test whose pages logged errors
# or left the origin.
from appliance.links.import_links import read_link
from appliance.services.outbounds.wireguard import public_key_of

pytestmark = pytest.mark.ui

PERSIAN_PHONE = {"width": 390, "height": 844}
GB = 1 << 30
SHORT_ID = re.compile(r"(?:[0-9a-f]{2}){1,8}")
WG_KEY = re.compile(r"^[A-Za-z0-9+/]{43}=$")


def add_inbound(api, remark: str, protocol: str = "vless") -> dict:
    payload = {"remark": remark, "protocol": protocol, "port": free_port(), "settings": {}}
    return ok(api.post("/panel/api/inbounds/add", payload))


def inbound_box(form, inbound: dict):
    return form.locator(f"input[name=inbound][value='{inbound['id']}']")


def test_client_form_preselects_inbounds_and_says_what_is_missing(browser, panel, watches):
    api = panel.client()
    first, second = add_inbound(api, "ui-pick-1"), add_inbound(api, "ui-pick-2")
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "clients")

    # Several inbounds and no earlier choice: none is ticked, and saving says so in words.
    page.click("[data-testid=add-client]")
    form = page.locator("#client-form")
    form.locator("input[name=email]").fill("ui-pick-a@example.com")
    expect(inbound_box(form, first)).not_to_be_checked()
    expect(inbound_box(form, second)).not_to_be_checked()
    page.click("button[form=client-form]")
    expect(page.locator(".toast.error")).to_contain_text("Choose at least one inbound")
    expect(page.locator(".toast.error")).not_to_contain_text("inboundIds")
    expect(form.locator("[data-testid=client-inbounds]")).to_have_attribute("aria-invalid", "true")
    assert api.get("/panel/api/clients/get/ui-pick-a@example.com")["success"] is False

    inbound_box(form, second).check()
    expect(form.locator("[data-testid=client-inbounds]")).not_to_have_attribute(
        "aria-invalid", "true"
    )
    page.click("button[form=client-form]")
    client_row(page, "ui-pick-a@example.com").wait_for()
    assert ok(api.get("/panel/api/clients/get/ui-pick-a@example.com"))["inboundIds"] == [
        second["id"]
    ]

    # The next new client starts with the inbounds the last one got.
    page.click("[data-testid=add-client]")
    expect(inbound_box(form, second)).to_be_checked()
    expect(inbound_box(form, first)).not_to_be_checked()
    page.keyboard.press("Escape")

    # Added from an inbound's row, a client starts on that inbound.
    go(page, "inbounds")
    page.locator(f"tr[data-inbound='{first['id']}'] [data-testid=add-client-here]").click()
    form = page.locator("#client-form")
    expect(inbound_box(form, first)).to_be_checked()
    expect(inbound_box(form, second)).not_to_be_checked()
    form.locator("input[name=email]").fill("ui-pick-b@example.com")
    page.click("button[form=client-form]")
    expect(page.locator("#client-form")).to_have_count(0)
    assert ok(api.get("/panel/api/clients/get/ui-pick-b@example.com"))["inboundIds"] == [
        first["id"]
    ]


def test_reality_form_generates_what_clients_need_and_names_refused_fields(browser, panel, watches):
    api = panel.client()
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "inbounds")
    form = open_inbound_form(page, "ui-reality-full", free_port())
    form.locator("select[name=security]").select_option("reality")

    # Choosing REALITY brings keys (the public one too), short ids and a fingerprint.
    public = form.locator("input[name=publicKey]")
    expect(public).to_have_value(re.compile(r"^[A-Za-z0-9_-]{43}$"))
    expect(form.locator("input[name=privateKey]")).to_have_value(re.compile(r"^[A-Za-z0-9_-]{43}$"))
    short_ids = form.locator("input[name=shortIds]").input_value().split(", ")
    assert len(short_ids) >= 2 and all(SHORT_ID.fullmatch(s) for s in short_ids), short_ids
    assert len({len(s) for s in short_ids}) == len(short_ids)
    expect(form.locator("select[name=fingerprint]")).to_have_value("chrome")
    options = form.locator("select[name=fingerprint] option").all_inner_texts()
    assert {
        "chrome",
        "firefox",
        "safari",
        "ios",
        "android",
        "edge",
        "360",
        "qq",
        "random",
        "randomized",
    } <= set(options)
    first_public = public.input_value()
    page.click("text=Generate keys")
    expect(public).not_to_have_value(first_public)
    page.click("text=Generate short IDs")
    expect(form.locator("input[name=shortIds]")).not_to_have_value(", ".join(short_ids))

    # A suggested target fills the server names it answers to.
    targets = form.locator("datalist#reality-targets option")
    assert "www.apple.com:443" in [
        targets.nth(i).get_attribute("value") for i in range(targets.count())
    ]
    form.locator("input[name=realityTarget]").fill("www.apple.com:443")
    expect(form.locator("input[name=serverNames]")).to_have_value(re.compile(r"^www\.apple\.com"))
    form.locator("select[name=fingerprint]").select_option("firefox")
    form.locator("input[name=spiderX]").fill("/start")

    # A refused field is named by its label and marked, not given as a path.
    form.locator("input[name=privateKey]").fill("not-a-key")
    page.click("button[form=inbound-form]")
    toast = page.locator(".toast.error")
    expect(toast).to_contain_text("Private key")
    expect(toast).not_to_contain_text("streamSettings")
    wrong = form.locator("label.field.invalid")
    expect(wrong).to_have_count(1)
    expect(wrong).to_contain_text("Private key")
    expect(form.locator("input[name=privateKey]")).to_be_focused()

    page.click("text=Generate keys")
    expect(public).not_to_have_value("")
    expect(wrong).to_have_count(1)  # still marked until the next save
    public_key = public.input_value()
    page.click("button[form=inbound-form]")
    page.wait_for_selector("text=ui-reality-full")
    stored = next(
        i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == "ui-reality-full"
    )
    reality = stored["streamSettings"]["realitySettings"]
    assert reality["target"] == "www.apple.com:443"
    assert reality["serverNames"][0] == "www.apple.com"
    assert reality["settings"]["publicKey"] == public_key
    assert reality["settings"]["fingerprint"] == "firefox"
    assert reality["settings"]["spiderX"] == "/start"
    assert all(SHORT_ID.fullmatch(s) for s in reality["shortIds"])


# The horizontal positions of a quantity's number and unit, and the quantity's own box.
QUANTITY_LAYOUT = """element => {
  const text = element.textContent;
  const at = (start, end) => {
    const range = document.createRange();
    range.setStart(element.firstChild, start);
    range.setEnd(element.firstChild, end);
    return range.getBoundingClientRect().left;
  };
  const space = text.indexOf(" ");
  return {text, number: at(0, space), unit: at(space + 1, text.length),
          left: element.getBoundingClientRect().left};
}"""


def test_persian_phone_keeps_quantities_in_order_and_translates_charts(browser, panel, watches):
    api = panel.client()
    inbound = add_inbound(api, "ui-fa")
    client = {"email": "ui-fa@example.com", "totalGB": 10 * GB}
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    page = signed_in_page(browser, panel, watches, viewport=PERSIAN_PHONE)
    page.wait_for_selector(".chart canvas")
    legend = page.locator(".u-legend").first
    expect(legend).to_contain_text("Time")

    page.select_option("[data-testid=language]", "fa")
    page.wait_for_function("() => document.documentElement.dir === 'rtl'")
    # The chart legend follows the language: its series and the time, no English left.
    expect(legend).to_contain_text("زمان")
    expect(legend).to_contain_text("ارسال")
    expect(legend).not_to_contain_text("Time")
    expect(legend).not_to_contain_text("Upload")

    # With the menu open on a phone, Sign out stays on top and works.
    page.click(".menu-button")
    expect(page.locator("nav.sidenav")).to_be_visible()
    sign_out = page.locator("header.topbar button", has_text="خروج")
    covered = sign_out.evaluate(
        """button => { const box = button.getBoundingClientRect();
        const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
        return !button.contains(hit); }"""
    )
    assert covered is False
    page.click("a[data-page=clients]")

    # "0 B / 10.00 GB" reads right to left as two whole quantities, each number before its
    # unit: not "B / 10.00 0 GB".
    cell = client_row(page, "ui-fa@example.com").locator("td").nth(3)
    quantities = cell.locator("bdi.qty")
    expect(quantities).to_have_count(2)
    used, total = (quantities.nth(i).evaluate(QUANTITY_LAYOUT) for i in range(2))
    assert (used["text"], total["text"]) == ("0 B", "10.00 GB")
    assert used["number"] < used["unit"] and total["number"] < total["unit"]
    assert used["left"] > total["left"]  # the first quantity is on the right

    page.click(".menu-button")
    page.locator("header.topbar button", has_text="خروج").click()
    page.wait_for_selector("#login-username")


def test_clients_table_rows_bulk_reset_and_paging(browser, panel, watches):
    api = panel.client()
    inbound = add_inbound(api, "ui-table")
    items = [
        {"client": {"email": f"ui-page-{n:02d}@example.com"}, "inboundIds": [inbound["id"]]}
        for n in range(55)
    ]
    assert ok(api.post("/panel/api/clients/bulkCreate", items))["created"] == len(items)
    page = signed_in_page(browser, panel, watches, viewport={"width": 1280, "height": 600})
    go(page, "clients")
    page.fill("[data-testid=client-search]", "ui-page-")
    first = client_row(page, "ui-page-00@example.com")
    first.wait_for()

    # The actions cell lines up with the rest of its row.
    boxes = first.locator("td").evaluate_all(
        "cells => cells.map(cell => {"
        " const box = cell.getBoundingClientRect(); return [box.top, box.height]; })"
    )
    assert len({tuple(round(v) for v in box) for box in boxes}) == 1, boxes

    # Resetting traffic in bulk asks first; the message counts in the language's forms.
    first.locator("td.select input").check()
    page.locator("[data-testid=bulk] button", has_text="Reset traffic").click()
    dialog = page.locator("[role=dialog]", has_text="Reset the traffic of 1 client?")
    expect(dialog).to_be_visible()
    dialog.locator("button", has_text="Cancel").click()
    expect(page.locator(".toast.success")).to_have_count(0)
    page.locator("[data-testid=bulk] button", has_text="Reset traffic").click()
    page.locator("[role=dialog] button", has_text="OK").click()
    expect(page.locator(".toast.success")).to_contain_text(re.compile(r"Done for 1 client(?!s)"))
    client_row(page, "ui-page-01@example.com").locator("td.select input").check()
    page.locator("[data-testid=bulk] button", has_text="Reset traffic").click()
    expect(page.locator("[role=dialog]")).to_contain_text("Reset the traffic of 2 clients?")
    page.locator("[role=dialog] button", has_text="OK").click()
    expect(page.locator(".toast.success").last).to_contain_text("Done for 2 clients")

    # The next (full) page starts at the top of the table, not at the pager at the bottom.
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    page.click("button[aria-label='Next page']")
    client_row(page, "ui-page-25@example.com").wait_for()
    page.wait_for_function(
        "() => { const top = document.querySelector('.table-wrap').getBoundingClientRect().top;"
        " return Math.abs(top) < 100; }"
    )


def stored_inbound(api, remark: str) -> dict:
    listed = next(i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == remark)
    return ok(api.get(f"/panel/api/inbounds/get/{listed['id']}"))


def test_hysteria2_inbound_and_client_from_the_forms_give_a_link_that_carries_bytes(
    browser, panel, watches, tmp_path, echo
):
    certs = Path(panel.data_dir) / "certs"
    certs.mkdir(exist_ok=True)
    (certs / "hy2.pem").write_text(CERTS.cert_pem)
    (certs / "hy2.key").write_text(CERTS.key_pem)
    api = panel.client()
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "inbounds")
    form = open_inbound_form(page, "ui-hy2", free_port())
    form.locator("select[name=protocol]").select_option("hysteria2")
    # QUIC always speaks TLS: the section asks for the certificate straight away.
    expect(form.locator("select[name=security]")).to_have_count(0)
    form_field(form, "Listen address").fill(LOOPBACK)
    form.locator("input[name=serverName]").fill(SERVER_NAME)
    form.locator("input[name=certificateFile]").fill(str(certs / "hy2.pem"))
    form.locator("input[name=keyFile]").fill(str(certs / "hy2.key"))
    page.click("button[form=inbound-form]")
    page.wait_for_selector("text=ui-hy2")
    inbound = stored_inbound(api, "ui-hy2")
    assert inbound["protocol"] == "hysteria2"
    stream = inbound["streamSettings"]
    assert (stream["network"], stream["security"]) == ("hysteria", "tls")

    # The client form asks for the Hysteria password once a Hysteria inbound is ticked.
    go(page, "clients")
    page.click("[data-testid=add-client]")
    client_form = page.locator("#client-form")
    client_form.locator("input[name=email]").fill("ui-hy2@example.com")
    inbound_box(client_form, inbound).uncheck()
    expect(client_form.locator("input[name=auth]")).to_have_count(0)
    inbound_box(client_form, inbound).check()
    client_form.locator("[data-testid=new-auth]").click()
    expect(client_form.locator("input[name=auth]")).to_have_value(re.compile(r"^[A-Za-z0-9]{16}$"))
    client_form.locator("input[name=auth]").fill("hy2-form-auth")
    page.click("button[form=client-form]")
    client_row(page, "ui-hy2@example.com").wait_for()
    assert ok(api.get("/panel/api/clients/get/ui-hy2@example.com"))["client"]["auth"] == (
        "hy2-form-auth"
    )

    # The inbound's link, read by a sing-box client app, reaches a server built from the
    # stored inbound; the same link with another password does not.
    record = stored_inbound(api, "ui-hy2")
    (item,) = ok(api.get(f"/panel/api/inbounds/{record['id']}/links"))["items"]
    (link,) = item["links"]
    assert link.startswith(("hy2://hy2-form-auth@", "hysteria2://hy2-form-auth@")), link
    server = sing_box.server_config(server_inbound(record))
    with sing_box.running(tmp_path, "ui-hy2-server", server):
        prove(tmp_path, "ui-hy2", read_link(link), echo, works=True, trusts_ca=True)
        wrong = read_link(mutate(link, "hy2-form-auth", "hy2-wrong-auth"))
        prove(tmp_path, "ui-hy2-wrong", wrong, echo, works=False, trusts_ca=True)


def config_lines(text: str) -> dict[tuple[str, str], str]:
    """A wg-quick config as {(section, key): value}."""
    values, section = {}, ""
    for line in text.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif " = " in line:
            key, value = line.split(" = ", 1)
            values[(section, key)] = value
    return values


def test_wireguard_inbound_from_the_form_gives_peer_configs_that_match_its_keys(
    browser, panel, watches, tmp_path, echo
):
    api = panel.client()
    page = signed_in_page(browser, panel, watches, viewport=DESKTOP)
    go(page, "inbounds")
    port = free_port()
    form = open_inbound_form(page, "ui-wg", port)
    form.locator("select[name=protocol]").select_option("wireguard")
    # A new WireGuard inbound starts with a server key pair from the panel's key route.
    expect(form.locator("input[name=wgPublicKey]")).to_have_value(WG_KEY)
    expect(form.locator("input[name=secretKey]")).to_have_value(WG_KEY)
    form.locator("[data-testid=wg-add-peer]").click()
    form.locator("[data-testid=wg-add-peer]").click()
    peers = form.locator("[data-testid=wg-peer]")
    expect(peers).to_have_count(2)
    expect(peers.nth(1).locator("input[name=allowedIPs]")).to_have_value("10.0.0.3/32")
    config = peers.first.locator("textarea[name=peerConfig]").input_value()
    link = peers.first.locator("input[name=peerLink]").input_value()
    peers.nth(1).get_by_role("button", name="Remove peer").click()
    expect(peers).to_have_count(1)
    page.click("button[form=inbound-form]")
    page.wait_for_selector("text=ui-wg")

    settings = stored_inbound(api, "ui-wg")["settings"]
    (peer,) = settings["peers"]
    server_public = public_key_of(settings["secretKey"])
    assert settings["pubKey"] == server_public
    values = config_lines(config)
    assert public_key_of(values[("Interface", "PrivateKey")]) == peer["publicKey"]
    assert values[("Interface", "PrivateKey")] == peer["privateKey"]
    assert values[("Interface", "Address")] == "10.0.0.2/32" == ", ".join(peer["allowedIPs"])
    assert values[("Peer", "PublicKey")] == server_public
    assert values[("Peer", "Endpoint")] == f"{LOOPBACK}:{port}"
    parts = urlsplit(link)
    query = parse_qs(parts.query)
    assert (parts.scheme, parts.hostname, parts.port) == ("wireguard", LOOPBACK, port)
    assert unquote(parts.username) == peer["privateKey"]
    assert query["publickey"] == [server_public]
    assert query["address"] == ["10.0.0.2/32"]

    # The real Xray runs the inbound as the panel's core config has it, and an Xray client
    # built from the peer's config alone completes the WireGuard handshake with it: each
    # side holds the other's public key. (Bytes stop there: the server's network stack
    # drops packets for loopback, where the test's echo server is.)
    core = ok(api.get("/panel/api/server/getConfigJson"))
    (served,) = [i for i in core["inbounds"] if i.get("protocol") == "wireguard"]
    ready = free_port()
    marker = {"tag": "ready", "listen": LOOPBACK, "port": ready, "protocol": "socks"}
    server = {**xray_core.server_config(served, marker), "log": {"loglevel": "debug"}}
    with xray_core.running(tmp_path, "ui-wg-server", server, ready):
        outbound = {
            "protocol": "wireguard",
            "settings": {
                "secretKey": values[("Interface", "PrivateKey")],
                "address": [values[("Interface", "Address")]],
                "peers": [
                    {
                        "publicKey": values[("Peer", "PublicKey")],
                        "endpoint": values[("Peer", "Endpoint")],
                        "allowedIPs": ["0.0.0.0/0", "::/0"],
                    }
                ],
                "mtu": int(values[("Interface", "MTU")]),
                "noKernelTun": True,
            },
        }
        socks = free_port()
        client = {**xray_core.client_config(outbound, socks), "log": {"loglevel": "debug"}}
        with xray_core.running(tmp_path, "ui-wg-client", client, socks):

            def shook_hands() -> bool:
                carries(socks, echo)
                return "Received handshake response" in xray_core.log_text(tmp_path, "ui-wg-client")

            wait_until(shook_hands, "a WireGuard handshake with the inbound", 15)
    assert "Sending handshake response" in xray_core.log_text(tmp_path, "ui-wg-server")
