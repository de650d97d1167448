"""One subscription URL for every app: the format follows the app's User-Agent.

Each listed app's User-Agent is sent to the plain subscription path of a real panel and
the body is read back by a parser that is not the renderer: our share-link reader for
base64, `json` for core configs, `yaml.safe_load` and our Mihomo proxy reader for Clash,
and the official sing-box binary (`sing-box check`) for sing-box profiles. Every module
test runs twice: on a panel that serves the subscription port itself, and on one whose
two worker processes serve it, so both read the rules and render alike.
"""

from __future__ import annotations

import base64
import json
import uuid
from urllib.parse import quote

import pytest
import requests
import yaml
from helpers import create_inbound, free_port, ok
from panels import start_panel, stop_and_drop
from sing_box import check_profile

from appliance.domain.sub_formats import DEFAULT_RULES
from appliance.links import LinkContext, client_links
from appliance.links.import_links import read_clash_proxy, read_link

CLIENTS = "/panel/api/clients"
SETTINGS = "/panel/api/setting/update"

INBOUNDS = [
    ("vless", {"decryption": "none"}, {"network": "tcp", "security": "none"}),
    (
        "vmess",
        {},
        {"network": "ws", "security": "none", "wsSettings": {"path": "/vm?ed=2048"}},
    ),
    ("shadowsocks", {"method": "aes-256-gcm", "network": "tcp"}, {"network": "tcp"}),
]
# (app, a User-Agent it sends, the format it must get).
APPS = [
    ("v2rayNG", "v2rayNG/1.9.16", "links"),
    ("v2rayN", "v2rayN/7.4.2", "links"),
    ("Hiddify", "HiddifyNext/2.5.7 (android) like ClashMeta v2ray sing-box", "singbox"),
    ("Streisand", "Streisand/1.6.32 CFNetwork/1568.200.51 Darwin/24.1.0", "links"),
    ("Shadowrocket", "Shadowrocket/2070 CFNetwork/1494.0.7 Darwin/23.4.0 iPhone14,5", "links"),
    ("NekoBox", "NekoBox/Android/1.3.4 (Prefer ClashMeta Format)", "links"),
    ("NekoRay", "nekoray/3.26", "links"),
    ("SFA", "SFA/1.11.4 (Android 14; sing-box 1.11.4; language en_US)", "singbox"),
    ("SFI", "SFI/1.11.4 (iOS 18.1; sing-box 1.11.4; language en)", "singbox"),
    ("SFM", "SFM/1.11.4 (macOS 15.1; sing-box 1.11.4; language en)", "singbox"),
    ("Clash Verge", "clash-verge/v2.0.3", "yaml"),
    ("Mihomo", "mihomo/1.18.9", "yaml"),
    ("Clash Meta for Android", "ClashMetaForAndroid/2.11.4.Meta", "yaml"),
    ("FlClash", "FlClash/v0.8.66 clash-verge Platform/android", "yaml"),
    ("Karing", "karing/1.1.0.658 android", "singbox"),
    ("Happ", "Happ/1.5.2/ios", "links"),
    ("curl", "curl/8.5.0", "links"),
    ("no User-Agent", "", "links"),
]
SFA = APPS[7][1]
V2RAYNG = APPS[0][1]


@pytest.fixture(scope="module", params=["1", "2"], ids=["panel-serves", "two-workers"])
def panel(request, tmp_path_factory):
    server = start_panel(
        tmp_path_factory.mktemp("formats"), env={"APPLIANCE_SUB_WORKERS": request.param}
    )
    yield server
    stop_and_drop(server)


@pytest.fixture(scope="module")
def api(panel):
    client = panel.client()
    ok(client.post(SETTINGS, {"subJsonEnable": True, "subYamlEnable": True}))
    return client


@pytest.fixture(scope="module")
def subscription(api) -> tuple[str, list[str]]:
    """(subId, the share links it must serve) of a client on three inbounds."""
    ids = [
        create_inbound(
            api,
            {
                "protocol": protocol,
                "remark": f"formats-{protocol}",
                "port": free_port(),
                "settings": settings,
                "streamSettings": stream,
            },
        )["id"]
        for protocol, settings, stream in INBOUNDS
    ]
    client = {"email": f"{uuid.uuid4().hex[:10]}@formats", "subId": uuid.uuid4().hex[:16]}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": ids}))
    record = ok(api.get(f"{CLIENTS}/get/{quote(client['email'])}"))["client"]
    ctx = LinkContext(address="127.0.0.1", remark_model="-ieo")
    links = [
        link
        for inbound_id in ids
        for link in client_links(
            ok(api.get(f"/panel/api/inbounds/get/{inbound_id}")), record, [], ctx
        )
    ]
    return client["subId"], links


@pytest.fixture
def default_rules(api):
    yield
    ok(api.post(SETTINGS, {"subFormatRules": DEFAULT_RULES}))


def fetch(panel, path: str, user_agent: str | None = None, **headers) -> requests.Response:
    # A new connection per request, as a client app polls: with workers, any may answer.
    headers = {"Connection": "close", **headers}
    if user_agent is not None:
        headers["User-Agent"] = user_agent
    return requests.get(panel.sub_url + path, headers=headers, timeout=20)


def format_of(response: requests.Response, links: list[str], tmp_path) -> str:
    """The format of a served body, read back by an independent parser, which must
    find in it the servers the subscription has."""
    assert response.status_code == 200, response.text
    kind = response.headers["Content-Type"].split(";")[0]
    if kind == "text/yaml":
        document = yaml.safe_load(response.text)
        plans = [read_clash_proxy(proxy) for proxy in document["proxies"]]
        assert {plan.protocol for plan in plans} == {"vless", "vmess", "shadowsocks"}
        return "yaml"
    if kind == "text/plain":
        served = base64.b64decode(response.content).decode().split("\n")
        assert served == links
        assert [read_link(link).protocol for link in served] == ["vless", "vmess", "shadowsocks"]
        return "links"
    assert kind == "application/json"
    body = json.loads(response.text)
    if isinstance(body, list):
        assert [config["outbounds"][0]["protocol"] for config in body] == [
            "vless",
            "vmess",
            "shadowsocks",
        ]
        return "json"
    servers = [outbound for outbound in body["outbounds"] if "server" in outbound]
    assert [outbound["type"] for outbound in servers] == ["vless", "vmess", "shadowsocks"]
    assert servers[1]["transport"] == {
        "type": "ws",
        "path": "/vm",
        "max_early_data": 2048,
        "early_data_header_name": "Sec-WebSocket-Protocol",
    }
    check_profile(body, tmp_path)
    return "singbox"


@pytest.mark.parametrize(("app", "user_agent", "wanted"), APPS, ids=[app for app, *_ in APPS])
def test_each_app_gets_its_format_on_the_one_url(
    panel, subscription, tmp_path, app, user_agent, wanted
):
    sub_id, links = subscription
    response = fetch(panel, f"/sub/{sub_id}", user_agent)
    assert format_of(response, links, tmp_path) == wanted
    assert response.headers["Vary"] == "Accept, User-Agent"
    assert response.headers["Subscription-Userinfo"].startswith("upload=0; download=0")


def test_formats_alternate_on_one_subscription_without_mixing(panel, subscription, tmp_path):
    """Rendered bodies are cached per subscription: each format under its own key."""
    sub_id, links = subscription
    for user_agent, wanted in [(SFA, "singbox"), (V2RAYNG, "links"), ("mihomo/1", "yaml")] * 2:
        assert format_of(fetch(panel, f"/sub/{sub_id}", user_agent), links, tmp_path) == wanted


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("base64", "links"),
        ("links", "links"),
        ("json", "json"),
        ("clash", "yaml"),
        ("YAML", "yaml"),
        ("singbox", "singbox"),
        ("sing-box", "singbox"),
    ],
)
def test_an_explicit_format_wins_over_the_user_agent_and_the_path(
    panel, subscription, tmp_path, query, wanted
):
    sub_id, links = subscription
    for path, user_agent in [("/sub/", SFA), ("/sub/", V2RAYNG), ("/json/", SFA), ("/yaml/", "")]:
        response = fetch(panel, f"{path}{sub_id}?format={query}", user_agent)
        assert format_of(response, links, tmp_path) == wanted


def test_the_explicit_paths_keep_their_format_whatever_the_app(panel, subscription, tmp_path):
    sub_id, links = subscription
    for user_agent in (SFA, V2RAYNG, "clash-verge/v2.0.3"):
        assert format_of(fetch(panel, f"/json/{sub_id}", user_agent), links, tmp_path) == "json"
        assert format_of(fetch(panel, f"/yaml/{sub_id}", user_agent), links, tmp_path) == "yaml"
        assert "Vary" not in fetch(panel, f"/json/{sub_id}", user_agent).headers


def test_a_browser_still_gets_the_info_page(panel, subscription):
    sub_id, _ = subscription
    response = fetch(panel, f"/sub/{sub_id}", SFA, Accept="text/html,application/xhtml+xml")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("value", ["xml", "", "singbox2", "%00"])
def test_an_unknown_format_is_refused_with_a_sentence(panel, subscription, value):
    sub_id, _ = subscription
    response = fetch(panel, f"/sub/{sub_id}?format={value}")
    if value == "":
        # An empty format names none: the User-Agent decides, as without one.
        assert response.status_code == 200
        return
    assert response.status_code == 400
    assert "unknown format" in response.text
    assert "base64, json, clash or singbox" in response.text


def test_an_unknown_subscription_is_404_in_every_format(panel):
    for query in ("", "?format=singbox", "?format=clash"):
        assert fetch(panel, f"/sub/nobody-{uuid.uuid4().hex[:8]}{query}", SFA).status_code == 404


def test_the_rules_come_from_the_setting(api, panel, subscription, tmp_path, default_rules):
    sub_id, links = subscription
    rules = "json: v2rayng; singbox: curl"
    assert ok(api.post(SETTINGS, {"subFormatRules": rules}))
    assert ok(api.post("/panel/api/setting/all"))["subFormatRules"] == rules
    assert format_of(fetch(panel, f"/sub/{sub_id}", V2RAYNG), links, tmp_path) == "json"
    assert format_of(fetch(panel, f"/sub/{sub_id}", "curl/8.5.0"), links, tmp_path) == "singbox"
    # No rule names the sing-box apps any more: they get the links every app reads.
    assert format_of(fetch(panel, f"/sub/{sub_id}", SFA), links, tmp_path) == "links"


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("xml: v2rayng", "must start with a format"),
        ("v2rayng", "must start with a format"),
        ("singbox: sfa; json:  , ", "names no User-Agent word"),
        ("clash: clash; :x", "rule 2"),
    ],
)
def test_bad_rules_are_refused_and_change_nothing(api, rules, message):
    before = ok(api.post("/panel/api/setting/all"))["subFormatRules"]
    reply = api.post(SETTINGS, {"subFormatRules": rules})
    assert reply["success"] is False
    assert "subFormatRules" in reply["msg"] and message in reply["msg"]
    assert ok(api.post("/panel/api/setting/all"))["subFormatRules"] == before
