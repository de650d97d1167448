"""The Nodes page and where things run, in headless Chromium against two real panels.

A central panel (on the real core, so a client can be online) manages a node panel on
loopback. The admin adds the node through the form, which wants a test of the details
first; the list shows it online with the versions the node reports. The inbound form binds
an inbound to the node and the inbound list names it; an online client names the panel it
is connected through; deleting the node says its inbounds stay.

Same rules as every browser test (ui_pages.py).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time
import uuid

import pytest
from core_helpers import echo_server
from core_panel import wait_until
from core_traffic import add_inbound, client_core, passes, push, route, traffic_core_panel
from cryptography.hazmat.primitives import serialization
from helpers import (
    certs_dir,
    db_rows,
    free_port,
    ok,
    self_signed_certificate,
    write_certificate,
    write_key,
)
from node_panels import NODES, ForgingNode, add_node, connection, node_token, with_interval
from panels import start_panel, stop_and_drop
from ui_pages import DESKTOP, WAIT_MS, client_row, expect, go, open_inbound_form, signed_in_page

# The fixtures that give a module one browser and fail a test whose pages logged errors
# or left the origin.


pytestmark = pytest.mark.ui

NODE_NAME = "ui-node"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    node = start_panel(tmp_path_factory.mktemp("node"))
    central = traffic_core_panel(tmp_path_factory.mktemp("central"))
    yield central, node
    stop_and_drop(central)
    stop_and_drop(node)


def node_row(page, name: str):
    return page.locator("[data-testid=nodes-table] tbody tr[data-node]", has_text=name)


def fill_node_form(form, details: dict) -> None:
    form.locator("input[name=name]").fill(NODE_NAME)
    form.locator("select[name=scheme]").select_option(details["scheme"])
    form.locator("input[name=address]").fill(details["address"])
    form.locator("input[name=port]").fill(str(details["port"]))
    form.locator("input[name=basePath]").fill(details["basePath"])
    form.locator("input[name=apiToken]").fill(details["apiToken"])
    form.locator("input[name=allowPrivateAddress]").check()


def inbound_named(api, remark: str) -> dict:
    return next(i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == remark)


def stored_node(api) -> dict | None:
    return next((n for n in ok(api.get(f"{NODES}/list")) if n["name"] == NODE_NAME), None)


def test_a_node_is_added_through_the_form_once_tested(browser, pair, watches, artifacts):
    central, node = pair
    api = central.client()
    details = connection(node, node_token(node, "ui-central"))
    node_status = ok(node.client().get("/panel/api/server/status"))
    page = signed_in_page(browser, central, watches, viewport=DESKTOP)
    go(page, "nodes")
    expect(page.locator("main .empty")).to_contain_text("No nodes yet")

    page.click("[data-testid=add-node]")
    form = page.locator("#node-form")
    fill_node_form(form, {**details, "apiToken": "apl_" + "0" * 43})
    save = page.locator("button[form=node-form]")
    expect(save).to_be_disabled()
    expect(page.locator(".modal-foot")).to_contain_text("Test the connection before saving")

    # The node is reached over http: there is no certificate to pin, and the form says so.
    form.locator("[data-testid=fetch-fingerprint]").click()
    expect(form.locator("[data-testid=fingerprint-result]")).to_contain_text(
        "it has no certificate"
    )

    # A wrong token: the test shows the node's refusal, in words.
    form.locator("[data-testid=node-test]").click()
    result = form.locator("[data-testid=node-test-result]")
    expect(result).to_contain_text("refused the API token")

    # The right token: the result goes (it was for other details), and a test says online.
    form.locator("input[name=apiToken]").fill(details["apiToken"])
    expect(result).to_have_count(0)
    expect(save).to_be_disabled()
    form.locator("[data-testid=node-test]").click()
    expect(result).to_contain_text("Online · ")
    expect(result).to_contain_text(f"panel {node_status['panelVersion']}")
    assert stored_node(api) is None  # a test saves nothing
    page.screenshot(path=os.path.join(artifacts, "node-form.png"))
    expect(save).to_be_enabled()
    save.click()
    expect(form).to_have_count(0)

    row = node_row(page, NODE_NAME)
    expect(row.locator("[data-testid=node-status]")).to_have_text("Online")
    expect(row.locator("[data-testid=node-versions]")).to_contain_text(
        f"Panel {node_status['panelVersion']}"
    )
    expect(row.locator("[data-testid=node-latency]")).to_contain_text(re.compile(r"\d+ ms"))
    expect(row.locator("[data-testid=node-counts]")).to_contain_text("Inbounds: 0")
    saved = stored_node(api)
    assert saved["status"] == "online" and saved["hasApiToken"] is True
    assert (saved["address"], saved["port"], saved["allowPrivateAddress"]) == (
        details["address"],
        details["port"],
        True,
    )

    # Its row opens onto its CPU and memory charts.
    row.locator("[data-testid=expand-node]").click()
    details_row = page.locator(f"tr[data-details-of='{saved['id']}']")
    expect(details_row.locator("[data-testid=node-chart-cpu] .chart canvas")).to_have_count(1)
    expect(details_row.locator("[data-testid=node-chart-mem] .chart canvas")).to_have_count(1)
    expect(details_row).to_contain_text(node_status["guid"])

    # Editing keeps the stored token when the field is left empty; a name change needs
    # no new test.
    row.locator("button", has_text="Edit").click()
    expect(form.locator("input[name=apiToken]")).to_have_value("")
    expect(form.locator("input[name=apiToken]")).to_have_attribute(
        "placeholder", "Stored; leave empty to keep it"
    )
    form.locator("input[name=remark]").fill("first node")
    save.click()
    expect(form).to_have_count(0)
    expect(row).to_contain_text("first node")
    assert stored_node(api)["status"] == "online"

    # Disabled from its switch, the node is not polled; enabled again, a probe finds it.
    row.locator(".switch").click()
    expect(row.locator("[data-testid=node-status]")).to_have_text("Disabled")
    assert stored_node(api)["enable"] is False
    row.locator(".switch").click()
    expect(row.locator("[data-testid=node-status]")).to_have_text("Online")
    row.locator("[data-testid=probe-node]").click()
    expect(page.locator(".toast.success", has_text=f"{NODE_NAME} is online")).to_have_count(1)
    page.screenshot(path=os.path.join(artifacts, "nodes-list.png"), full_page=True)


def test_update_panel_shows_what_each_selected_node_answered(browser, pair, watches):
    central, _ = pair
    api = central.client()
    probe = api.post(f"{NODES}/updatePanel", {"ids": []})
    if "no such route" in probe.get("msg", ""):
        pytest.skip("this panel has no nodes/updatePanel route")
    page = signed_in_page(browser, central, watches, viewport=DESKTOP)
    go(page, "nodes")
    node_row(page, NODE_NAME).locator("td.select input").check()
    page.locator("[data-testid=node-bulk] [data-testid=update-panels]").click()
    page.locator(".modal", has_text="Update the panel").get_by_role("button", name="OK").click()
    results = page.locator("[data-testid=update-results] li")
    expect(results).to_have_count(1)
    expect(results.first).to_contain_text(NODE_NAME)
    # What the node answered, in words: the update started, or why not (a node run from
    # the Python package does not replace itself).
    expect(results.first.locator(".probe")).to_have_text(re.compile(r"\w+ \w+"))


def test_a_node_that_cannot_be_reached_says_why(browser, pair, watches):
    central, node = pair
    api = central.client()
    body = {"name": "ui-private", **connection(node, "apl_" + "1" * 43, allowPrivateAddress=False)}
    refused_node = ok(api.post(f"{NODES}/add", body))
    page = signed_in_page(browser, central, watches, viewport=DESKTOP)
    go(page, "nodes")
    row = node_row(page, "ui-private")
    status = row.locator("[data-testid=node-status]")
    expect(status).to_have_text("Offline")
    expect(status).to_have_attribute("title", re.compile("allowPrivateAddress"))
    row.locator("[data-testid=node-why]").click()
    error = page.locator(f"tr[data-details-of='{refused_node['id']}'] [data-testid=node-error]")
    expect(error).to_have_text(refused_node["lastError"])
    ok(api.post(f"{NODES}/del/{refused_node['id']}"))
    expect(row).to_have_count(0)


def test_an_inbound_bound_to_a_node_names_it_in_the_list(browser, pair, watches):
    central, _ = pair
    api = central.client()
    saved = stored_node(api)
    page = signed_in_page(browser, central, watches, viewport=DESKTOP)
    go(page, "inbounds")
    form = open_inbound_form(page, "ui-on-node", free_port())
    expect(form.locator("select[name=nodeId] option")).to_have_text(["This host", NODE_NAME])
    form.locator("select[name=nodeId]").select_option(str(saved["id"]))
    page.click("button[form=inbound-form]")
    expect(form).to_have_count(0)

    inbound = next(
        i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == "ui-on-node"
    )
    assert inbound["nodeId"] == saved["id"]
    assert inbound["tag"].startswith(f"n{saved['id']}-")
    row = page.locator(f"tr[data-inbound='{inbound['id']}']")
    expect(row.locator("[data-testid=inbound-node]")).to_have_text(f"on {NODE_NAME}")
    expect(row.locator("[data-testid=inbound-node-mark]")).to_have_count(0)

    # A disabled node does not run what is stored: its inbounds say so.
    ok(api.post(f"{NODES}/setEnable/{saved['id']}", {"enable": False}))
    mark = row.locator("[data-testid=inbound-node-mark]")
    expect(mark).to_have_text("node disabled")
    # Changes waiting for the node (its record marked dirty, as a failed push leaves it):
    # its inbounds and its row on the Nodes page say it is out of step.
    db_rows(central, "UPDATE node SET dirty = ? WHERE id = ?", (True, saved["id"]))
    # No change notice says so: the page sees it with the node list it reads again.
    expect(mark).to_have_text("out of step", timeout=WAIT_MS)
    expect(mark).to_have_attribute("title", re.compile("replayed|sent again"))
    # ...and so do the clients attached to them.
    ok(
        api.post(
            "/panel/api/clients/add",
            {"client": {"email": "ui-on-node@example.com"}, "inboundIds": [inbound["id"]]},
        )
    )
    go(page, "clients")
    client_mark = client_row(page, "ui-on-node@example.com").locator(
        "[data-testid=client-node-mark]"
    )
    expect(client_mark).to_have_text(f"{NODE_NAME}: out of step")
    go(page, "nodes")
    expect(node_row(page, NODE_NAME).locator("[data-testid=node-out-of-step]")).to_have_count(1)
    db_rows(central, "UPDATE node SET dirty = ? WHERE id = ?", (False, saved["id"]))
    ok(api.post(f"{NODES}/setEnable/{saved['id']}", {"enable": True}))
    expect(node_row(page, NODE_NAME).locator("[data-testid=node-out-of-step]")).to_have_count(0)
    go(page, "inbounds")
    expect(mark).to_have_count(0)
    go(page, "clients")
    expect(client_mark).to_have_count(0)
    go(page, "inbounds")

    # The form of the bound inbound opens on its node.
    row.locator("button", has_text="Edit").click()
    expect(page.locator("#inbound-form select[name=nodeId]")).to_have_value(str(saved["id"]))
    page.keyboard.press("Escape")


def test_an_online_client_names_the_panel_it_is_connected_through(browser, pair, watches, tmp_path):
    central, _ = pair
    api = central.client()
    inbound = add_inbound(api, "vless")
    client = {"email": "ui-online@e2e", "id": str(uuid.uuid4())}
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    path = route(inbound, client)
    with echo_server() as echo_port, client_core(tmp_path, [path]):
        wait_until(lambda: passes(path[0], echo_port), "the client connects")
        push(path[0], echo_port, 64 * 1024)
        wait_until(
            lambda: client["email"] in ok(api.post("/panel/api/clients/onlines")),
            "the client is online",
        )
    page = signed_in_page(browser, central, watches, viewport=DESKTOP)
    go(page, "clients")
    row = client_row(page, client["email"])
    expect(row.locator(".status")).to_have_text("online")
    # With nodes to tell apart, an online client names where it is connected.
    expect(row.locator("[data-testid=online-where]")).to_have_text("· This host")


def test_an_address_a_node_saw_names_the_node_in_the_client_dialogs(browser, pair, watches):
    central, node = pair
    api = central.client()
    saved = stored_node(api)
    email = "ui-seen-on-node@example.com"
    payload = {
        "protocol": "vless",
        "remark": "ui-seen-on-node",
        "listen": "127.0.0.1",
        "port": free_port(),
        "nodeId": saved["id"],
        "settings": {"decryption": "none"},
    }
    inbound = ok(api.post("/panel/api/inbounds/add", payload))
    ok(
        api.post(
            "/panel/api/clients/add", {"client": {"email": email}, "inboundIds": [inbound["id"]]}
        )
    )
    wait_until(
        lambda: node.client().get(f"/panel/api/clients/get/{email}")["success"],
        "the client is on the node",
    )
    # The node's core saw the client at an address; the central panel's poll collects it.
    sighting = {"email": email, "ips": [{"ip": "198.51.100.44", "timestamp": int(time.time())}]}
    ok(node.client().post("/panel/api/server/clientIps", {"ips": [sighting]}))
    wait_until(
        lambda: any(
            entry["nodeId"] == saved["id"]
            for entry in api.post(f"/panel/api/clients/ips/{email}").get("seenBy", [])
        ),
        "the central panel records what the node saw",
    )
    page = signed_in_page(browser, central, watches, viewport=DESKTOP)
    go(page, "clients")
    client_row(page, email).get_by_role("button", name="IPs").click()
    listed = page.locator("[data-testid=client-ips] li")
    expect(listed).to_have_count(1)
    expect(listed.locator("code")).to_have_text("198.51.100.44")
    expect(listed.locator("[data-testid=ip-node]")).to_have_text(f"on {NODE_NAME}")
    page.keyboard.press("Escape")
    client_row(page, email).locator("[data-testid=client-info]").click()
    addresses = page.locator("[data-testid=client-addresses] li")
    expect(addresses.locator("[data-testid=ip-node]")).to_have_text(f"on {NODE_NAME}")
    page.keyboard.press("Escape")
    ok(api.post(f"/panel/api/clients/del/{email}"))
    ok(api.post(f"/panel/api/inbounds/del/{inbound['id']}"))


def test_deleting_a_node_says_its_inbounds_stay(browser, pair, watches):
    central, _ = pair
    api = central.client()
    saved = stored_node(api)
    page = signed_in_page(browser, central, watches, viewport=DESKTOP)
    go(page, "nodes")
    row = node_row(page, NODE_NAME)
    expect(row.locator("[data-testid=node-counts]")).to_contain_text("Inbounds: 1")
    row.locator("button", has_text="Delete").click()
    dialog = page.locator(".modal", has_text="Delete node")
    expect(dialog).to_contain_text("Inbounds bound to it stay in this panel")
    dialog.get_by_role("button", name="OK").click()
    expect(page.locator(".toast.success")).to_contain_text("its 1 inbound(s) stay in the panel")
    expect(page.locator("main .empty")).to_contain_text("No nodes yet")
    assert stored_node(api) is None

    go(page, "inbounds")
    inbound = next(
        i for i in ok(api.get("/panel/api/inbounds/list")) if i["remark"] == "ui-on-node"
    )
    row = page.locator(f"tr[data-inbound='{inbound['id']}']")
    expect(row.locator("[data-testid=inbound-node]")).to_have_text(f"on #{saved['id']}")
    expect(row.locator("[data-testid=inbound-node-mark]")).to_have_text("node deleted")


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_a_tls_node_is_pinned_to_the_fingerprint_the_admin_confirmed(
    browser, pair, watches, tmp_path
):
    central, _ = pair
    api = central.client()
    tls_node = start_panel(tmp_path / "tls-node")
    try:
        token = node_token(tls_node, "ui-central-tls")  # while it still speaks http
        key, certificate = self_signed_certificate("127.0.0.1")
        directory = certs_dir(tls_node)
        files = {
            "webCertFile": write_certificate(directory / "cert.pem", certificate),
            "webKeyFile": write_key(directory / "key.pem", key),
        }
        admin = tls_node.client()
        ok(admin.post("/panel/api/setting/update", files))
        mark = len(tls_node.lines)
        ok(admin.post("/panel/api/setting/restartPanel"))
        tls_node.wait_listening(mark)
        assert tls_node.url.startswith("https://")
        details = connection(tls_node, token)
        expected = base64.b64encode(
            hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).digest()
        ).decode()

        page = signed_in_page(browser, central, watches, viewport=DESKTOP)
        go(page, "nodes")
        page.click("[data-testid=add-node]")
        form = page.locator("#node-form")
        fill_node_form(form, details)
        form.locator("input[name=name]").fill("ui-tls-node")
        # The system CAs do not know a self-signed certificate: the test says so.
        form.locator("[data-testid=node-test]").click()
        result = form.locator("[data-testid=node-test-result]")
        expect(result).to_contain_text("certificate")
        expect(result).not_to_contain_text("Online")

        form.locator("[data-testid=fetch-fingerprint]").click()
        expect(form.locator("[data-testid=fingerprint-result] code")).to_have_text(expected)
        form.locator("[data-testid=pin-fingerprint]").click()
        expect(form.locator("select[name=tlsVerifyMode]")).to_have_value("pin")
        expect(form.locator("input[name=certFingerprint]")).to_have_value(expected)
        form.locator("[data-testid=node-test]").click()
        expect(result).to_contain_text("Online · ")
        page.click("button[form=node-form]")
        expect(form).to_have_count(0)
        expect(node_row(page, "ui-tls-node").locator("[data-testid=node-status]")).to_have_text(
            "Online"
        )
        saved = next(n for n in ok(api.get(f"{NODES}/list")) if n["name"] == "ui-tls-node")
        assert (saved["tlsVerifyMode"], saved["certFingerprint"]) == ("pin", expected)
        ok(api.post(f"{NODES}/del/{saved['id']}"))
    finally:
        stop_and_drop(tls_node)


def test_a_node_reporting_on_clients_not_bound_to_it_is_marked(browser, watches, tmp_path_factory):
    """A node that sends counters for a client of an inbound here: its row says how many
    such reports were ignored, and names them."""
    node = start_panel(tmp_path_factory.mktemp("forging-node"))
    central = with_interval(start_panel(tmp_path_factory.mktemp("forged-central")))
    forging = ForgingNode(node)
    try:
        api = central.client()
        inbound = add_inbound(api, "vless")
        email = "ext@ui"
        body = {"client": {"email": email}, "inboundIds": [inbound["id"]]}
        ok(api.post("/panel/api/clients/add", body))

        def forged(obj: dict) -> dict:
            obj["clients"].append({"email": email, "up": 1 << 30, "down": 1 << 30})
            return obj

        forging.forgers = {"/panel/api/clients/counters": forged}
        record = add_node(api, node, "forging", port=forging.port)
        wait_until(
            lambda: ok(api.get(f"{NODES}/get/{record['id']}"))["ignoredReports"]["count"] == 1,
            "the forged report is ignored",
            30,
        )
        page = signed_in_page(browser, central, watches, viewport=DESKTOP)
        go(page, "nodes")
        row = node_row(page, "forging")
        mark = row.locator("[data-testid=node-ignored-reports]")
        expect(mark).to_have_text("ignored reports: 1")
        expect(mark).to_have_attribute("title", re.compile(re.escape(email)))
        row.locator("[data-testid=expand-node]").click()
        names = page.locator(
            f"tr[data-details-of='{record['id']}'] [data-testid=node-ignored-names]"
        )
        expect(names).to_contain_text(email)
    finally:
        forging.close()
        stop_and_drop(central)
        stop_and_drop(node)
