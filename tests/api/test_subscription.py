"""The subscription server over HTTP: its three formats, the info page, the headers, who gets
a 404, paths and switches from settings, hosts and subDomain in the links, caching that
never serves stale output, its own TLS pair, and the clients API's plain link lists.

Expected links are rendered by `appliance.links` from the records the API returns, so a
test fails when the server serves anything else than those renderers make of the data.
"""

from __future__ import annotations

import base64
import html
import ipaddress
import itertools
import json
import re
import time
import uuid
from urllib.parse import quote

import pytest
import requests
import segno
import yaml
from cryptography import x509
from helpers import TLS, certs_dir, create_inbound, ok, write_self_signed
from panels import start_panel

from appliance.links import LinkContext, client_links
from appliance.sub.page import COPY_SCRIPT, SCRIPT_HASH

CLIENTS = "/panel/api/clients"
SETTINGS = "/panel/api/setting/update"
HOSTS = "/panel/api/hosts"
_ports = itertools.count(27000)

PLAIN = {"network": "tcp", "security": "none"}
INBOUNDS = {
    "vless": {"decryption": "none"},
    "vmess": {},
    "trojan": {},
    "shadowsocks": {"method": "aes-256-gcm", "network": "tcp"},
}
SCHEMES = {"vless": "vless://", "vmess": "vmess://", "trojan": "trojan://", "shadowsocks": "ss://"}


# ---- helpers ------------------------------------------------------------------------------


def add_inbound(api, protocol: str = "vless", **fields) -> dict:
    payload = {
        "protocol": protocol,
        "remark": f"sub-{protocol}",
        "port": next(_ports),
        "settings": INBOUNDS[protocol],
        "streamSettings": PLAIN,
        **fields,
    }
    return create_inbound(api, payload)


def add_client(api, inbound_ids: list[int], **fields) -> dict:
    client = {"email": f"{uuid.uuid4().hex[:10]}@sub", "subId": uuid.uuid4().hex[:16], **fields}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": inbound_ids}))
    return ok(api.get(f"{CLIENTS}/get/{quote(client['email'])}"))["client"]


def fetch(panel, path: str, **kwargs) -> requests.Response:
    return requests.get(panel.sub_url + path, timeout=10, **kwargs)


def decoded(response: requests.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return base64.b64decode(response.content).decode().split("\n")


def expected_links(api, client: dict, inbound_ids: list[int], address: str = "127.0.0.1"):
    """What the renderers make of the records as the API returns them."""
    ctx = LinkContext(address=address, remark_model="-ieo")
    links = []
    for inbound_id in sorted(inbound_ids):
        inbound = ok(api.get(f"/panel/api/inbounds/get/{inbound_id}"))
        hosts = [h for h in ok(api.get(f"{HOSTS}/byInbound/{inbound_id}")) if h["enable"]]
        links += client_links(inbound, client, hosts, ctx)
    return links


def settings(api, **values) -> None:
    ok(api.post(SETTINGS, values))


def b64(text: str) -> str:
    return "base64:" + base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def api(panel):
    client = panel.client()
    settings(client, subJsonEnable=True, subYamlEnable=True)
    return client


@pytest.fixture
def restore(api):
    """Settings a test changes go back to their defaults afterwards."""
    yield
    settings(
        api,
        subEnable=True,
        subPath="/sub/",
        subJsonPath="/json/",
        subYamlPath="/yaml/",
        subJsonEnable=True,
        subYamlEnable=True,
        subDomain="",
        subTitle="",
        subSupportUrl="",
        subAnnounce="",
        subUpdates=12,
        subEnableRouting=False,
        subRoutingRules="",
        subProfileUrl="",
    )


# ---- the base64 format --------------------------------------------------------------------


def test_base64_lists_the_links_of_every_attached_inbound(api, panel):
    inbounds = [add_inbound(api, protocol) for protocol in INBOUNDS]
    ids = [inbound["id"] for inbound in inbounds]
    client = add_client(api, ids)
    response = fetch(panel, f"/sub/{client['subId']}")
    assert response.headers["Content-Type"].startswith("text/plain")
    links = decoded(response)
    assert links == expected_links(api, client, ids)
    assert [link.split("://")[0] + "://" for link in links] == list(SCHEMES.values())
    assert all("127.0.0.1" in link or link.startswith("vmess://") for link in links)


def test_clients_sharing_a_sub_id_are_served_together_and_summed(api, panel):
    first, second = add_inbound(api), add_inbound(api, "trojan")
    sub_id = uuid.uuid4().hex
    day = 86_400_000
    now = int(time.time() * 1000)
    a = add_client(api, [first["id"]], subId=sub_id, totalGB=1000, expiryTime=now + day)
    b = add_client(api, [second["id"]], subId=sub_id, totalGB=3000, expiryTime=now + 2 * day)
    ok(api.post(f"{CLIENTS}/updateTraffic/{quote(a['email'])}", {"upload": 10, "download": 20}))
    ok(api.post(f"{CLIENTS}/updateTraffic/{quote(b['email'])}", {"upload": 1, "download": 2}))
    response = fetch(panel, f"/sub/{sub_id}")
    assert decoded(response) == expected_links(api, a, [first["id"]]) + expected_links(
        api, b, [second["id"]]
    )
    assert response.headers["Subscription-Userinfo"] == (
        f"upload=11; download=22; total=4000; expire={(now + 2 * day) // 1000}"
    )
    assert response.headers["Profile-Title"] == b64(sub_id)


def test_headers_follow_the_settings(api, panel, restore):
    inbound = add_inbound(api)
    client = add_client(api, [inbound["id"]])
    url = f"/sub/{client['subId']}"
    headers = fetch(panel, url).headers
    assert headers["Subscription-Userinfo"] == "upload=0; download=0; total=0; expire=0"
    assert headers["Profile-Title"] == b64(client["email"])
    assert headers["Profile-Update-Interval"] == str(12 * 60)
    assert headers["Routing-Enable"] == "false"
    assert headers["Profile-Web-Page-Url"] == panel.sub_url + url
    for absent in ("Routing", "Support-Url", "Announce"):
        assert absent not in headers
    settings(
        api,
        subTitle="Ünïcode VPN",
        subSupportUrl="https://t.me/support",
        subAnnounce="Maintenance tonight\nback at 6",
        subUpdates=3,
        subEnableRouting=True,
        subRoutingRules="happ://routing/add/abc",
    )
    headers = fetch(panel, url).headers
    assert headers["Profile-Title"] == b64("Ünïcode VPN")
    assert headers["Support-Url"] == "https://t.me/support"
    assert headers["Announce"] == b64("Maintenance tonight\nback at 6")
    assert headers["Profile-Update-Interval"] == "180"
    assert headers["Routing-Enable"] == "true"
    assert headers["Routing"] == "happ://routing/add/abc"
    settings(api, subRoutingRules="DOMAIN-SUFFIX,ads.example,REJECT\nGEOIP,CN,DIRECT")
    routing = fetch(panel, url).headers["Routing"]
    assert base64.b64decode(routing).decode() == "DOMAIN-SUFFIX,ads.example,REJECT\nGEOIP,CN,DIRECT"
    settings(api, subEnableRouting=False)
    assert "Routing" not in fetch(panel, url).headers


def test_expiry_and_quota_in_the_headers(api, panel):
    inbound = add_inbound(api)
    expiry = int(time.time() * 1000) + 5 * 86_400_000
    client = add_client(api, [inbound["id"]], totalGB=5 * 1024**3, expiryTime=expiry)
    info = fetch(panel, f"/sub/{client['subId']}").headers["Subscription-Userinfo"]
    assert info == f"upload=0; download=0; total={5 * 1024**3}; expire={expiry // 1000}"
    starts_on_use = add_client(api, [inbound["id"]], expiryTime=-7 * 86_400_000)
    info = fetch(panel, f"/sub/{starts_on_use['subId']}").headers["Subscription-Userinfo"]
    assert info.endswith("expire=0")


# ---- who gets a 404 -----------------------------------------------------------------------


def test_unknown_disabled_depleted_expired_get_404(api, panel):
    inbound = add_inbound(api)
    assert fetch(panel, "/sub/no-such-sub").status_code == 404
    disabled = add_client(api, [inbound["id"]], enable=False)
    assert fetch(panel, f"/sub/{disabled['subId']}").status_code == 404
    depleted = add_client(api, [inbound["id"]], totalGB=100)
    assert fetch(panel, f"/sub/{depleted['subId']}").status_code == 200
    ok(
        api.post(
            f"{CLIENTS}/updateTraffic/{quote(depleted['email'])}", {"upload": 60, "download": 40}
        )
    )
    assert fetch(panel, f"/sub/{depleted['subId']}").status_code == 404
    expired = add_client(api, [inbound["id"]], expiryTime=int(time.time() * 1000) - 1000)
    assert fetch(panel, f"/sub/{expired['subId']}").status_code == 404
    for path in ("/sub/", "/sub", "/", "/sub/a/b", "/other/x", "/json/", "/sub/" + "x" * 65):
        assert fetch(panel, path).status_code == 404, path


def test_a_client_on_disabled_inbounds_only_gets_404(api, panel):
    inbound = add_inbound(api)
    client = add_client(api, [inbound["id"]])
    assert fetch(panel, f"/sub/{client['subId']}").status_code == 200
    ok(api.post(f"/panel/api/inbounds/setEnable/{inbound['id']}", {"enable": False}))
    assert fetch(panel, f"/sub/{client['subId']}").status_code == 404
    ok(api.post(f"/panel/api/inbounds/setEnable/{inbound['id']}", {"enable": True}))
    assert fetch(panel, f"/sub/{client['subId']}").status_code == 200


def test_an_expiry_passing_unattended_ends_the_subscription(api, panel):
    """No call changes anything: the cached body must still not outlive the expiry."""
    inbound = add_inbound(api)
    client = add_client(api, [inbound["id"]], expiryTime=int(time.time() * 1000) + 2500)
    assert fetch(panel, f"/sub/{client['subId']}").status_code == 200
    assert fetch(panel, f"/json/{client['subId']}").status_code == 200
    time.sleep(3)
    assert fetch(panel, f"/sub/{client['subId']}").status_code == 404
    assert fetch(panel, f"/json/{client['subId']}").status_code == 404


def test_a_shared_subscription_drops_an_expired_client_unattended(api, panel):
    """The cached body of two clients must not keep serving the one whose expiry passed."""
    first, second = add_inbound(api), add_inbound(api, "trojan")
    sub_id = uuid.uuid4().hex
    lasting = add_client(api, [first["id"]], subId=sub_id)
    add_client(api, [second["id"]], subId=sub_id, expiryTime=int(time.time() * 1000) + 2500)
    assert len(decoded(fetch(panel, f"/sub/{sub_id}"))) == 2
    time.sleep(3)
    assert decoded(fetch(panel, f"/sub/{sub_id}")) == expected_links(api, lasting, [first["id"]])


def test_only_get_and_head(api, panel):
    client = add_client(api, [add_inbound(api)["id"]])
    url = panel.sub_url + f"/sub/{client['subId']}"
    assert requests.post(url, timeout=10).status_code == 405
    head = requests.head(url, timeout=10)
    assert head.status_code == 200
    assert head.content == b""
    assert int(head.headers["Content-Length"]) == len(
        fetch(panel, f"/sub/{client['subId']}").content
    )


def test_odd_requests_get_no_500(api, panel):
    client = add_client(api, [add_inbound(api)["id"]])
    for path in ("/sub/%ff%fe", "/sub/%00", "/sub/..%2f..%2fetc", "/sub/" + "é" * 10):
        assert fetch(panel, path).status_code == 404, path
    response = fetch(panel, f"/sub/{client['subId']}", headers={"Host": "<script>:x"})
    assert response.status_code == 200
    assert "<script>" not in base64.b64decode(response.content).decode()
    for host in ("[::1]:8080", "EXAMPLE.org", "a" * 300):
        assert fetch(panel, f"/sub/{client['subId']}", headers={"Host": host}).status_code == 200


# ---- settings: paths, switches, domain ----------------------------------------------------


def test_paths_and_switches_come_from_settings(api, panel, restore):
    client = add_client(api, [add_inbound(api)["id"]])
    sub_id = client["subId"]
    assert fetch(panel, f"/json/{sub_id}").status_code == 200
    assert fetch(panel, f"/yaml/{sub_id}").status_code == 200
    settings(api, subPath="/s/", subJsonPath="/j/", subYamlPath="/y/")
    assert fetch(panel, f"/sub/{sub_id}").status_code == 404
    assert fetch(panel, f"/json/{sub_id}").status_code == 404
    assert fetch(panel, f"/s/{sub_id}").status_code == 200
    assert fetch(panel, f"/j/{sub_id}").status_code == 200
    assert fetch(panel, f"/y/{sub_id}").status_code == 200
    settings(api, subJsonEnable=False, subYamlEnable=False)
    assert fetch(panel, f"/j/{sub_id}").status_code == 404
    assert fetch(panel, f"/y/{sub_id}").status_code == 404
    settings(api, subEnable=False)
    assert fetch(panel, f"/s/{sub_id}").status_code == 404
    assert requests.post(f"{panel.sub_url}/s/{sub_id}", timeout=10).status_code == 404


def test_sub_domain_goes_into_links_whatever_the_host(api, panel, restore):
    inbound = add_inbound(api)
    client = add_client(api, [inbound["id"]])
    url = f"/sub/{client['subId']}"
    by_host = decoded(fetch(panel, url, headers={"Host": "other.example:1234"}))
    assert by_host == expected_links(api, client, [inbound["id"]], "other.example")
    settings(api, subDomain="sub.example.com")
    response = fetch(panel, url, headers={"Host": "other.example:1234"})
    assert decoded(response) == expected_links(api, client, [inbound["id"]], "sub.example.com")
    assert response.headers["Profile-Web-Page-Url"] == f"http://sub.example.com:1234{url}"


# ---- hosts --------------------------------------------------------------------------------


def test_enabled_hosts_render_one_link_each_in_order(api, panel):
    inbound = add_inbound(api)
    client = add_client(api, [inbound["id"]])
    url = f"/sub/{client['subId']}"
    first = ok(api.post(f"{HOSTS}/add", {"inboundId": inbound["id"], "remark": "A",
                                         "address": "a.example.com", "port": 8443}))  # fmt: skip
    second = ok(api.post(f"{HOSTS}/add", {"inboundId": inbound["id"], "remark": "B",
                                          "address": "b.example.com"}))  # fmt: skip
    links = decoded(fetch(panel, url))
    assert links == expected_links(api, client, [inbound["id"]])
    assert ["a.example.com:8443" in links[0], f"b.example.com:{inbound['port']}" in links[1]] == [
        True,
        True,
    ]
    ok(api.post(f"{HOSTS}/reorder", {"ids": [second["id"], first["id"]]}))
    assert [("b.example.com" in link) for link in decoded(fetch(panel, url))] == [True, False]
    ok(api.post(f"{HOSTS}/setEnable/{second['id']}", {"enable": False}))
    links = decoded(fetch(panel, url))
    assert len(links) == 1 and "a.example.com:8443" in links[0]
    ok(api.post(f"{HOSTS}/del/{first['id']}"))
    links = decoded(fetch(panel, url))
    assert links == expected_links(api, client, [inbound["id"]])
    assert "127.0.0.1" in links[0]


# ---- caching never serves stale output ----------------------------------------------------


def test_changes_show_at_once(api, panel):
    inbound = add_inbound(api)
    client = add_client(api, [inbound["id"]])
    url = f"/sub/{client['subId']}"
    before = decoded(fetch(panel, url))
    new_id = str(uuid.uuid4())
    ok(api.post(f"{CLIENTS}/update/{quote(client['email'])}", {**client, "id": new_id}))
    after = decoded(fetch(panel, url))
    assert new_id in after[0] and new_id not in before[0]
    ok(api.post(f"/panel/api/inbounds/update/{inbound['id']}", {**inbound, "remark": "Renamed"}))
    assert "Renamed" in decoded(fetch(panel, url))[0]
    settings(api, remarkModel="_ei")
    try:
        assert decoded(fetch(panel, url))[0].endswith("#" + quote(f"{client['email']}_Renamed"))
    finally:
        settings(api, remarkModel="-ieo")
    other = add_inbound(api, "trojan")
    ok(api.post(f"{CLIENTS}/{quote(client['email'])}/attach", {"inboundIds": [other["id"]]}))
    assert len(decoded(fetch(panel, url))) == 2


def every_format(panel, sub_id: str) -> dict[str, requests.Response]:
    return {kind: fetch(panel, f"/{kind}/{sub_id}") for kind in ("sub", "json", "yaml")}


def served_text(panel, sub_id: str) -> dict[str, str]:
    """Each format's body as text (base64 decoded), each answered 200."""
    responses = every_format(panel, sub_id)
    assert [r.status_code for r in responses.values()] == [200] * 3, responses
    return {
        "sub": "\n".join(decoded(responses["sub"])),
        "json": responses["json"].text,
        "yaml": responses["yaml"].text,
    }


def test_inbound_edits_show_at_once_in_every_format(api, panel):
    inbound = add_inbound(api)
    other = add_inbound(api, "trojan", streamSettings=TLS)
    client = add_client(api, [inbound["id"], other["id"]])
    before = served_text(panel, client["subId"])  # every body rendered and cached
    assert all("/moved" not in text for text in before.values())
    ws = {"network": "ws", "security": "none", "wsSettings": {"path": "/moved"}}
    ok(api.post(f"/panel/api/inbounds/update/{inbound['id']}", {**inbound, "streamSettings": ws}))
    after = served_text(panel, client["subId"])
    assert "path=%2Fmoved" in after["sub"] and "type=ws" in after["sub"]
    assert after["sub"].split("\n") == expected_links(api, client, [inbound["id"], other["id"]])
    assert json.loads(after["json"])[0]["outbounds"][0]["streamSettings"]["wsSettings"] == {
        "path": "/moved"
    }
    assert yaml.safe_load(after["yaml"])["proxies"][0]["ws-opts"] == {"path": "/moved"}
    # Disabled: the inbound leaves every format; the other one still serves.
    edited = ok(api.get(f"/panel/api/inbounds/get/{inbound['id']}"))
    ok(api.post(f"/panel/api/inbounds/update/{inbound['id']}", {**edited, "enable": False}))
    assert served_text(panel, client["subId"])["sub"].split("\n") == expected_links(
        api, client, [other["id"]]
    )
    assert len(yaml.safe_load(served_text(panel, client["subId"])["yaml"])["proxies"]) == 1
    ok(api.post(f"/panel/api/inbounds/update/{inbound['id']}", {**edited, "enable": True}))
    assert len(decoded(fetch(panel, f"/sub/{client['subId']}"))) == 2
    # Gone: the last inbound deleted leaves nothing to serve.
    ok(api.post(f"/panel/api/inbounds/del/{other['id']}"))
    ok(api.post(f"/panel/api/inbounds/del/{inbound['id']}"))
    assert [r.status_code for r in every_format(panel, client["subId"]).values()] == [404] * 3


def test_host_edits_show_at_once_in_every_format(api, panel):
    inbound = add_inbound(api)
    client = add_client(api, [inbound["id"]])
    host = ok(api.post(f"{HOSTS}/add", {"inboundId": inbound["id"], "remark": "edge",
                                         "address": "old.example.com", "port": 8443}))  # fmt: skip
    assert all("old.example.com" in text for text in served_text(panel, client["subId"]).values())
    ok(api.post(f"{HOSTS}/update/{host['id']}", {**host, "address": "new.example.com"}))
    texts = served_text(panel, client["subId"])
    assert all("new.example.com" in t and "old.example.com" not in t for t in texts.values())
    assert texts["sub"].split("\n") == expected_links(api, client, [inbound["id"]])
    ok(api.post(f"{HOSTS}/setEnable/{host['id']}", {"enable": False}))
    texts = served_text(panel, client["subId"])
    assert all("new.example.com" not in text for text in texts.values())
    assert yaml.safe_load(texts["yaml"])["proxies"][0]["server"] == "127.0.0.1"
    ok(api.post(f"{HOSTS}/setEnable/{host['id']}", {"enable": True}))
    assert "new.example.com" in served_text(panel, client["subId"])["json"]
    ok(api.post(f"{HOSTS}/del/{host['id']}"))
    texts = served_text(panel, client["subId"])
    assert all("new.example.com" not in text for text in texts.values())


def test_a_client_change_keeps_other_subscriptions_right(api, panel):
    """A client change keeps the prepared inbounds: what it changes still shows, and
    a subscription it does not touch is served as before."""
    inbound = add_inbound(api)
    first = add_client(api, [inbound["id"]])
    second = add_client(api, [inbound["id"]])
    untouched = served_text(panel, second["subId"])
    new_id = str(uuid.uuid4())
    ok(api.post(f"{CLIENTS}/update/{quote(first['email'])}", {**first, "id": new_id}))
    assert all(new_id in text for text in served_text(panel, first["subId"]).values())
    assert decoded(fetch(panel, f"/sub/{first['subId']}")) == expected_links(
        api, {**first, "id": new_id}, [inbound["id"]]
    )
    assert served_text(panel, second["subId"]) == untouched


# ---- JSON and YAML ------------------------------------------------------------------------


def test_json_is_one_config_per_link(api, panel):
    ids = [add_inbound(api, protocol)["id"] for protocol in INBOUNDS]
    client = add_client(api, ids)
    response = fetch(panel, f"/json/{client['subId']}")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    assert "Subscription-Userinfo" in response.headers
    configs = response.json()
    assert isinstance(configs, list) and len(configs) == len(ids)
    protocols = [config["outbounds"][0]["protocol"] for config in configs]
    assert protocols == list(INBOUNDS)
    assert all(any(i["protocol"] == "socks" for i in config["inbounds"]) for config in configs)


def test_yaml_is_a_mihomo_document_with_the_routing_rules(api, panel, restore):
    # Mihomo's trojan always speaks TLS: a plain trojan inbound has no proxy form there.
    ids = [
        add_inbound(api, protocol, streamSettings=TLS if protocol == "trojan" else PLAIN)["id"]
        for protocol in INBOUNDS
    ]
    client = add_client(api, ids)
    settings(api, subRoutingRules="DOMAIN-SUFFIX,ads.example,REJECT")
    response = fetch(panel, f"/yaml/{client['subId']}")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/yaml")
    document = yaml.safe_load(response.text)
    names = [proxy["name"] for proxy in document["proxies"]]
    assert [proxy["type"] for proxy in document["proxies"]] == ["vless", "vmess", "trojan", "ss"]
    assert len(set(names)) == len(names)
    assert any(set(names) <= set(group["proxies"]) for group in document["proxy-groups"])
    assert "DOMAIN-SUFFIX,ads.example,REJECT" in document["rules"]
    assert document["rules"][-1].startswith("MATCH")


# ---- the info page ------------------------------------------------------------------------


def test_info_page_by_accept_or_query(api, panel):
    inbound = add_inbound(api)
    client = add_client(api, [inbound["id"]], totalGB=2 * 1024**3)
    url = f"/sub/{client['subId']}"
    for response in (
        fetch(panel, url, headers={"Accept": "text/html,application/xhtml+xml"}),
        fetch(panel, url + "?html=1"),
    ):
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/html")
        page = response.text
        link = expected_links(api, client, [inbound["id"]])[0]
        assert html.escape(link) in page
        # One code for the link and one for the subscription URL itself.
        assert page.count("<svg") == 2
        assert segno.make(panel.sub_url + url, error="m").svg_inline(scale=3) in page
        assert "2.00 GiB" in page
        sub_url = quote(panel.sub_url + url, safe="")
        assert f"v2rayng://install-config?url={sub_url}" in page
        assert f"sing-box://import-remote-profile?url={sub_url}" in page
        assert f"hiddify://import/{panel.sub_url}{url}" in page
        assert "clash://install-config?url=" + quote(panel.sub_url + "/yaml/", safe="") in page
        # The one script, the copy buttons', runs by its hash; nothing inline else would.
        directives = [d.strip() for d in response.headers["Content-Security-Policy"].split(";")]
        assert f"script-src '{SCRIPT_HASH}'" in directives
        assert f"<script>{COPY_SCRIPT}</script>" in page
        assert f'data-copy="{html.escape(panel.sub_url + url)}"' in page
        assert f'data-copy="{html.escape(link)}"' in page
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        assert not re.search(r"(src|href)=\"https?://", page), "nothing is loaded from elsewhere"


def test_info_page_cannot_be_framed_or_sniffed(api, panel):
    client = add_client(api, [add_inbound(api)["id"]])
    page = fetch(panel, f"/sub/{client['subId']}?html=1")
    assert page.status_code == 200
    assert page.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    links = fetch(panel, f"/sub/{client['subId']}")
    assert links.headers["X-Content-Type-Options"] == "nosniff"


def test_info_page_escapes_what_it_shows(api, panel, restore):
    inbound = add_inbound(api, remark='<img src=x onerror="alert(1)">')
    client = add_client(api, [inbound["id"]], email="<script>alert(1)<b>@x")
    settings(api, subTitle='"><script>alert(2)</script>')
    page = fetch(panel, f"/sub/{client['subId']}?html=1").text
    assert page.count("<script>") == 1 and f"<script>{COPY_SCRIPT}</script>" in page
    assert "<img" not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page


# ---- what the panel says at start ---------------------------------------------------------


def test_the_start_names_the_yaml_emitter(panel):
    emitter = "libyaml" if hasattr(yaml, "CSafeDumper") else "pure Python"
    listening = [line for line in panel.lines if "subscription server listening" in line]
    assert listening and f"YAML written by the {emitter} emitter" in listening[-1]


# ---- TLS ----------------------------------------------------------------------------------


def test_own_certificate_pair(tmp_path):
    server = start_panel(tmp_path)
    try:
        cert, key = write_self_signed(
            certs_dir(server), "sub.test", x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
        )
        admin = server.client()
        client = add_client(admin, [add_inbound(admin)["id"]])
        settings(admin, subCertFile=cert, subKeyFile=key)
        mark = len(server.lines)
        ok(admin.post("/panel/api/setting/restartPanel"))
        server.wait_listening(mark)
        assert any(
            "subscription server listening on https://" in line for line in server.lines[mark:]
        )
        https = server.sub_url.replace("http://", "https://")
        response = requests.get(
            f"{https}/sub/{client['subId']}", verify=cert, headers={"Host": "sub.test"}, timeout=10
        )
        assert response.status_code == 200
        assert decoded(response) == expected_links(
            server.client(), client, client["inboundIds"], "sub.test"
        )
        assert response.headers["Profile-Web-Page-Url"] == f"https://sub.test/sub/{client['subId']}"
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"{server.sub_url}/sub/{client['subId']}", timeout=10)
    finally:
        server.stop()


# ---- the clients API's link lists ---------------------------------------------------------


def test_sub_links_and_email_links(api):
    ids = [add_inbound(api, protocol)["id"] for protocol in ("vless", "trojan")]
    client = add_client(api, ids)
    wanted = expected_links(api, client, ids)
    assert ok(api.get(f"{CLIENTS}/subLinks/{client['subId']}")) == wanted
    assert ok(api.get(f"{CLIENTS}/links/{quote(client['email'])}")) == wanted
    assert ok(api.get(f"{CLIENTS}/subLinks/no-such-sub")) == []
    assert ok(api.get(f"{CLIENTS}/links/nobody@nowhere")) == []
    ok(api.post(f"/panel/api/inbounds/setEnable/{ids[1]}", {"enable": False}))
    assert ok(api.get(f"{CLIENTS}/subLinks/{client['subId']}")) == wanted[:1]
    assert ok(api.get(f"{CLIENTS}/links/{quote(client['email'])}")) == wanted
    disabled = add_client(api, ids[:1], enable=False)
    assert ok(api.get(f"{CLIENTS}/subLinks/{disabled['subId']}")) == []
    assert len(ok(api.get(f"{CLIENTS}/links/{quote(disabled['email'])}"))) == 1
