"""The core page's rule and outbound forms in headless Chromium, on a panel whose core is
the real Xray.

A routing rule takes every condition Xray reads, and an outbound every protocol Xray has
(WireGuard, Hysteria 2, loopback and REALITY among them, which Debian's V2Ray lacks: the
core here is Xray, behind tests/xray_cli.py). What the forms build is written into the
template the raw JSON editor shows; the template's save (core/update) has the core test it,
and `server/getConfigJson` shows what the core runs.
"""

from __future__ import annotations

import base64
import json

import pytest
import xray_cli
from core_panel import wait_until
from helpers import ok
from panels import start_panel, stop_and_drop
from ui_pages import DESKTOP, expect, go, new_page, sign_in

# The shared browser, and the fixture that fails a test whose pages logged errors or
# left the origin.


pytestmark = pytest.mark.ui

UUID = "3b8c7f2e-1d4a-4b6e-9f0a-2c5d8e7f1a3b"
VLESS_LINK = (
    f"vless://{UUID}@edge.example.net:443"
    "?type=ws&security=tls&sni=edge.example.net&path=%2Fws&host=cdn.example.net#Edge%20one"
)
WG_SECRET = base64.b64encode(bytes(range(32))).decode()
WG_PEER = base64.b64encode(bytes(range(32, 64))).decode()
REALITY_KEY = base64.urlsafe_b64encode(bytes(range(64, 96))).decode().rstrip("=")


@pytest.fixture(scope="module")
def xray_panel(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ui-core-forms")
    server = start_panel(directory, env={"APPLIANCE_CORE": str(xray_cli.install(directory))})
    yield server
    stop_and_drop(server)


@pytest.fixture
def api(xray_panel):
    """The panel's API, on the default template."""
    client = xray_panel.client()
    template = ok(client.get("/panel/api/setting/getDefaultJsonConfig"))
    ok(client.post("/panel/api/core/update", {"coreSetting": json.dumps(template)}))
    return client


def running(api, saved: dict) -> dict:
    """The config the core runs, once it has restarted on the `saved` template: the core
    restarts after the save has answered."""

    def restarted():
        config = ok(api.get("/panel/api/server/getConfigJson"))
        same = config["routing"]["rules"]
        tags = [o.get("tag") for o in config["outbounds"]]
        return (
            config
            if same == saved["routing"]["rules"]
            and tags[: len(saved["outbounds"])] == [o["tag"] for o in saved["outbounds"]]
            else None
        )

    return wait_until(restarted, "the core runs the saved template")


def open_tab(browser, server, watches, tab: str):
    page = new_page(browser, server, watches, viewport=DESKTOP)
    sign_in(page, server)
    go(page, "core")
    page.wait_for_selector("textarea[name=coreSetting]")
    page.click(f"[data-tab={tab}]")
    return page


def raw_json(page) -> dict:
    page.click("[data-tab=json]")
    return json.loads(page.locator("textarea[name=coreSetting]").input_value())


def save(page) -> dict:
    """Saves the template the page shows; that template."""
    template = raw_json(page)
    page.locator("[data-testid=template-form] button[type=submit]").click()
    expect(page.locator(".toast.success")).to_be_visible()
    return template


def fill_rule(page, **fields) -> None:
    form = page.locator("[data-testid=rule-form]")
    for name, value in fields.items():
        if name in ("network", "targetKind", "target"):
            form.locator(f"select[name=rule-{name}]").select_option(value)
        elif name == "protocol":
            for sniffed in value:
                form.locator(f"input[name=rule-protocol-{sniffed}]").check()
        elif name == "attrs":
            form.locator("textarea[name=rule-attrs]").fill(value)
        else:
            form.locator(f"input[name=rule-{name}]").fill(value)


def test_a_rule_built_in_the_form_is_what_the_core_runs(browser, xray_panel, api, watches):
    page = open_tab(browser, xray_panel, watches, "routing")
    page.click("[data-testid=rule-add]")
    fill_rule(page, port="443")
    page.click("[data-testid=rule-apply]")
    expect(page.locator("[data-testid=rule-error]")).to_contain_text("Choose the outbound")
    fill_rule(page, port="443,70000", target="blocked")
    page.click("[data-testid=rule-apply]")
    expect(page.locator("[data-testid=rule-error]")).to_contain_text("ports from 1 to 65535")
    fill_rule(
        page,
        domain="domain:example.com, full:api.example.org",
        port="443, 8000-8100",
        network="tcp,udp",
        sourcePort="1000-2000",
        source="10.0.0.0/8",
        user="alice@example.com",
        protocol=["tls"],
        attrs=":method: GET",
        target="blocked",
    )
    page.click("[data-testid=rule-apply]")
    expect(page.locator("[data-testid=routing-rules]")).to_contain_text("port: 443,8000-8100")
    rule = {
        "type": "field",
        "domain": ["domain:example.com", "full:api.example.org"],
        "source": ["10.0.0.0/8"],
        "user": ["alice@example.com"],
        "port": "443,8000-8100",
        "sourcePort": "1000-2000",
        "network": "tcp,udp",
        "protocol": ["tls"],
        "attrs": {":method": "GET"},
        "outboundTag": "blocked",
    }
    assert raw_json(page)["routing"]["rules"][1] == rule
    rules = running(api, save(page))["routing"]["rules"]
    assert rules[0]["outboundTag"] == "api"
    assert rules[1] == rule


def test_a_rule_is_edited_moved_and_deleted_in_the_form(browser, xray_panel, api, watches):
    template = json.loads(ok(api.post("/panel/api/core/"))["coreSetting"])
    first = {"type": "field", "outboundTag": "blocked", "domain": ["full:one.example"]}
    second = {"type": "field", "outboundTag": "blocked", "port": "8443", "ruleTag": "mine"}
    template["routing"]["rules"] += [first, second]
    ok(api.post("/panel/api/core/update", {"coreSetting": json.dumps(template)}))
    page = open_tab(browser, xray_panel, watches, "routing")
    row = page.locator("[data-testid=routing-rules] tbody tr", has_text="port: 8443")
    row.locator("[data-testid=rule-edit]").click()
    form = page.locator("[data-testid=rule-form]")
    expect(form.locator("input[name=rule-port]")).to_have_value("8443")
    expect(form.locator("input[name=rule-ruleTag]")).to_have_value("mine")
    fill_rule(page, port="8443,9443", network="udp", target="direct")
    page.click("[data-testid=rule-apply]")
    edited = {**second, "port": "8443,9443", "network": "udp", "outboundTag": "direct"}
    page.locator("[data-testid=routing-rules] tbody tr", has_text="port: 8443,9443").get_by_role(
        "button", name="Move up"
    ).click()
    rules = running(api, save(page))["routing"]["rules"]
    assert rules[-2:] == [edited, first]

    page.click("[data-tab=routing]")
    page.locator("[data-testid=routing-rules] tbody tr", has_text="full:one.example").get_by_role(
        "button", name="Delete"
    ).click()
    rules = running(api, save(page))["routing"]["rules"]
    assert first not in rules
    assert rules[-1] == edited


def add_outbound(page, protocol: str, tag: str, **fields) -> None:
    form = page.locator("[data-testid=outbound-form]")
    form.locator("select[name=new-protocol]").select_option(protocol)
    form.locator("input[name=new-tag]").fill(tag)
    for name, value in fields.items():
        control = form.locator(f"[name=new-{name}]")
        if control.evaluate("e => e.tagName") == "SELECT":
            control.select_option(value)
        else:
            control.fill(value)
    page.click("[data-testid=outbound-apply]")
    expect(page.locator(f"[data-outbound-edit='{tag}']")).to_be_visible()


SERVER = {"address": "203.0.113.7", "port": "443"}
TLS = {"security": "tls", "sni": "edge.example.net", "fingerprint": "chrome", "alpn": "h2"}
FORMS = [
    ("freedom", "out-freedom", {"domainStrategy": "UseIPv4"}),
    ("blackhole", "out-blackhole", {"response": "http"}),
    ("dns", "out-dns", {"address": "1.1.1.1", "port": "53"}),
    ("loopback", "out-loopback", {"inboundTag": "api"}),
    ("http", "out-http", {**SERVER, "user": "me", "pass": "pw"}),
    ("socks", "out-socks", {**SERVER, "network": "ws", "path": "/s"}),
    (
        "vless",
        "out-vless",
        {
            **SERVER,
            "id": UUID,
            "flow": "xtls-rprx-vision",
            "security": "reality",
            "sni": "www.example.com",
            "fingerprint": "chrome",
            "publicKey": REALITY_KEY,
            "shortId": "0123abcd",
        },
    ),
    (
        "vmess",
        "out-vmess",
        {
            **SERVER,
            "id": UUID,
            "vmessSecurity": "aes-128-gcm",
            "network": "grpc",
            "serviceName": "svc",
            **TLS,
        },
    ),
    (
        "trojan",
        "out-trojan",
        {
            **SERVER,
            "password": "trojan-pw",
            "network": "httpupgrade",
            "path": "/up",
            "host": "cdn.example.net",
            **TLS,
        },
    ),
    (
        "shadowsocks",
        "out-ss",
        {
            **SERVER,
            "method": "aes-256-gcm",
            "password": "ss-pw",
            "network": "xhttp",
            "path": "/x",
            "mode": "packet-up",
        },
    ),
    (
        "wireguard",
        "out-wg",
        {
            "secretKey": WG_SECRET,
            "localAddress": "10.7.0.2/32",
            "peerPublicKey": WG_PEER,
            "endpoint": "203.0.113.9:51820",
        },
    ),
    (
        "hysteria",
        "out-hy2",
        {**SERVER, "password": "hy-pw", "sni": "edge.example.net", "alpn": "h3"},
    ),
]


def test_an_outbound_of_every_protocol_from_the_form_is_accepted_by_the_core(
    browser, xray_panel, api, watches
):
    page = open_tab(browser, xray_panel, watches, "outbounds")
    form = page.locator("[data-testid=outbound-form]")
    form.locator("select[name=new-protocol]").select_option("vless")
    form.locator("input[name=new-tag]").fill("half")
    page.click("[data-testid=outbound-apply]")
    expect(page.locator("[data-testid=add-outbound-error]")).to_contain_text("address and a port")
    for protocol, tag, fields in FORMS:
        add_outbound(page, protocol, tag, **fields)
    made = {o["tag"]: o for o in running(api, save(page))["outbounds"]}
    server = {"address": "203.0.113.7", "port": 443}
    assert made["out-freedom"]["settings"] == {"domainStrategy": "UseIPv4"}
    assert made["out-blackhole"]["settings"] == {"response": {"type": "http"}}
    assert made["out-dns"]["settings"] == {"address": "1.1.1.1", "port": 53}
    assert made["out-loopback"]["settings"] == {"inboundTag": "api"}
    assert made["out-http"]["settings"] == {
        "servers": [{**server, "users": [{"user": "me", "pass": "pw"}]}]
    }
    assert made["out-socks"]["streamSettings"] == {
        "network": "ws",
        "security": "none",
        "wsSettings": {"path": "/s"},
    }
    assert made["out-vless"] == {
        "tag": "out-vless",
        "protocol": "vless",
        "settings": {
            "vnext": [
                {
                    **server,
                    "users": [{"id": UUID, "encryption": "none", "flow": "xtls-rprx-vision"}],
                }
            ]
        },
        "streamSettings": {
            "network": "tcp",
            "security": "reality",
            "realitySettings": {
                "serverName": "www.example.com",
                "fingerprint": "chrome",
                "publicKey": REALITY_KEY,
                "shortId": "0123abcd",
            },
        },
    }
    assert made["out-vmess"]["settings"]["vnext"][0]["users"] == [
        {"id": UUID, "security": "aes-128-gcm"}
    ]
    assert made["out-vmess"]["streamSettings"] == {
        "network": "grpc",
        "security": "tls",
        "grpcSettings": {"serviceName": "svc"},
        "tlsSettings": {"serverName": "edge.example.net", "fingerprint": "chrome", "alpn": ["h2"]},
    }
    assert made["out-trojan"]["settings"] == {"servers": [{**server, "password": "trojan-pw"}]}
    assert made["out-trojan"]["streamSettings"]["httpupgradeSettings"] == {
        "path": "/up",
        "host": "cdn.example.net",
    }
    assert made["out-ss"]["settings"] == {
        "servers": [{**server, "method": "aes-256-gcm", "password": "ss-pw"}]
    }
    assert made["out-ss"]["streamSettings"]["xhttpSettings"] == {"path": "/x", "mode": "packet-up"}
    assert made["out-wg"]["settings"] == {
        "secretKey": WG_SECRET,
        "address": ["10.7.0.2/32"],
        "peers": [{"publicKey": WG_PEER, "endpoint": "203.0.113.9:51820"}],
        "noKernelTun": True,
    }
    assert made["out-hy2"] == {
        "tag": "out-hy2",
        "protocol": "hysteria",
        "settings": {"version": 2, **server},
        "streamSettings": {
            "network": "hysteria",
            "security": "tls",
            "hysteriaSettings": {"version": 2, "auth": "hy-pw"},
            "tlsSettings": {"serverName": "edge.example.net", "alpn": ["h3"]},
        },
    }


def test_an_outbound_imported_from_a_vless_link_fills_the_form_and_saves(
    browser, xray_panel, api, watches
):
    page = open_tab(browser, xray_panel, watches, "outbounds")
    form = page.locator("[data-testid=outbound-form]")
    form.locator("input[name=outbound-link]").fill("vless://not a link")
    page.click("[data-testid=outbound-import]")
    expect(page.locator("[data-testid=add-outbound-error]")).to_contain_text("cannot be read")
    form.locator("input[name=outbound-link]").fill(VLESS_LINK)
    page.click("[data-testid=outbound-import]")
    expect(form.locator("input[name=new-tag]")).to_have_value("Edge-one")
    expect(form.locator("select[name=new-protocol]")).to_have_value("vless")
    expect(form.locator("input[name=new-address]")).to_have_value("edge.example.net")
    expect(form.locator("input[name=new-id]")).to_have_value(UUID)
    expect(form.locator("select[name=new-network]")).to_have_value("ws")
    expect(form.locator("input[name=new-path]")).to_have_value("/ws")
    expect(form.locator("select[name=new-security]")).to_have_value("tls")
    page.click("[data-testid=outbound-apply]")
    (made,) = [o for o in running(api, save(page))["outbounds"] if o["tag"] == "Edge-one"]
    assert made["settings"]["vnext"] == [
        {"address": "edge.example.net", "port": 443, "users": [{"id": UUID, "encryption": "none"}]}
    ]
    assert made["streamSettings"]["network"] == "ws"
    assert made["streamSettings"]["wsSettings"] == {"path": "/ws", "host": "cdn.example.net"}
    assert made["streamSettings"]["security"] == "tls"
    assert made["streamSettings"]["tlsSettings"]["serverName"] == "edge.example.net"


def test_the_raw_json_and_the_forms_follow_each_other(browser, xray_panel, api, watches):
    page = open_tab(browser, xray_panel, watches, "outbounds")
    add_outbound(page, "socks", "upstream", address="198.51.100.4", port="1080")
    page.locator("[data-outbound-edit=upstream] summary").click()
    page.locator("[data-outbound-edit=upstream] [data-testid=outbound-edit]").click()
    form = page.locator("[data-testid=outbound-form]")
    form.locator("input[name=new-port]").fill("1081")
    page.click("[data-testid=outbound-apply]")
    template = raw_json(page)
    (upstream,) = [o for o in template["outbounds"] if o["tag"] == "upstream"]
    assert upstream["settings"] == {"servers": [{"address": "198.51.100.4", "port": 1081}]}

    upstream["settings"]["servers"][0]["port"] = 1082
    template["routing"]["rules"].append(
        {"type": "field", "outboundTag": "upstream", "port": "25", "localPort": "2053"}
    )
    editor = page.locator("textarea[name=coreSetting]")
    editor.fill(json.dumps(template, indent=2))
    editor.blur()
    page.click("[data-tab=outbounds]")
    page.locator("[data-outbound-edit=upstream] summary").click()
    page.locator("[data-outbound-edit=upstream] [data-testid=outbound-edit]").click()
    expect(form.locator("input[name=new-port]")).to_have_value("1082")
    page.click("[data-tab=routing]")
    row = page.locator("[data-testid=routing-rules] tbody tr", has_text="port: 25")
    row.locator("[data-testid=rule-edit]").click()
    rule_form = page.locator("[data-testid=rule-form]")
    expect(rule_form.locator("input[name=rule-localPort]")).to_have_value("2053")
    expect(rule_form.locator("select[name=rule-target]")).to_have_value("upstream")
    config = running(api, save(page))
    assert {"type": "field", "outboundTag": "upstream", "port": "25", "localPort": "2053"} in (
        config["routing"]["rules"]
    )
