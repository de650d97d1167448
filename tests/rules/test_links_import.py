"""Share links and Mihomo proxies read back: render -> read -> render is identical.

Every renderer case of tests/links_cases.py is rendered by `share` and `clash`, read back
by `import_links`, and rendered again; the two renderings must be byte for byte (or key
for key) the same. Further tests read the forms other panels and apps write and check the
outbound the core would get.
"""

from __future__ import annotations

import base64
import json

import pytest
from links_cases import CASES, CTX

from appliance.links import client_clash_proxies, client_links
from appliance.links.clash import clash_profile, clash_proxy
from appliance.links.import_links import LinkError, read_clash_proxy, read_link
from appliance.links.json_config import proxy_outbound
from appliance.links.outbound_feed import core_outbound, read_feed, tagged_outbounds
from appliance.links.share import share_link

LINKS = [
    (name, index, link)
    for name, (record, user, hosts) in sorted(CASES.items())
    for index, link in enumerate(client_links(record, user, hosts, CTX))
]
PROXIES = [
    (name, index, proxy)
    for name, (record, user, hosts) in sorted(CASES.items())
    for index, proxy in enumerate(client_clash_proxies(record, user, hosts, CTX))
]


@pytest.mark.parametrize(("name", "index", "link"), LINKS, ids=lambda v: str(v)[:40])
def test_every_rendered_link_reads_back_to_itself(name, index, link):
    assert share_link(read_link(link)) == link


@pytest.mark.parametrize(("name", "index", "proxy"), PROXIES, ids=lambda v: str(v)[:40])
def test_every_rendered_mihomo_proxy_reads_back_to_itself(name, index, proxy):
    assert clash_proxy(read_clash_proxy(proxy)) == proxy


def test_the_cases_cover_every_protocol():
    schemes = {link.split("://")[0] for _, _, link in LINKS}
    assert schemes == {"vless", "vmess", "trojan", "ss", "hy2", "hysteria"}


def test_a_link_and_its_mihomo_proxy_give_the_same_outbound():
    record, user, hosts = CASES["vless_ws_tls"]
    link = client_links(record, user, hosts, CTX)[0]
    proxy = client_clash_proxies(record, user, hosts, CTX)[0]
    from_link = proxy_outbound(read_link(link))
    assert from_link["settings"]["vnext"][0]["users"][0]["id"] == user["id"]
    assert from_link["streamSettings"]["wsSettings"] == {
        "path": "/ws?ed=2048",
        "host": "cdn.example.com",
    }
    assert from_link["streamSettings"]["tlsSettings"]["serverName"] == "example.com"
    from_proxy = proxy_outbound(read_clash_proxy(proxy))
    assert from_proxy["settings"] == from_link["settings"]
    assert from_proxy["streamSettings"]["wsSettings"] == from_link["streamSettings"]["wsSettings"]


def test_legacy_shadowsocks_and_plain_2022_forms():
    legacy = "ss://" + base64.b64encode(b"aes-128-gcm:pw@1.2.3.4:8388").decode() + "#old"
    plan = read_link(legacy)
    assert (plan.ss_method, plan.password, plan.address, plan.port, plan.remark) == (
        "aes-128-gcm",
        "pw",
        "1.2.3.4",
        8388,
        "old",
    )
    plan = read_link("ss://2022-blake3-aes-128-gcm:a2V5%3Aa2V5@[2001:db8::2]:443#v6")
    assert (plan.ss_method, plan.password, plan.address) == (
        "2022-blake3-aes-128-gcm",
        "a2V5:a2V5",
        "2001:db8::2",
    )


def test_socks_and_http_proxies():
    userinfo = base64.b64encode(b"bob:pa ss").decode()
    plan = read_link(f"socks://{userinfo}@10.0.0.1:1080#home")
    assert proxy_outbound(plan)["settings"] == {
        "servers": [
            {"address": "10.0.0.1", "port": 1080, "users": [{"user": "bob", "pass": "pa ss"}]}
        ]
    }
    plan = read_link("http://proxy.example:3128")
    assert proxy_outbound(plan)["protocol"] == "http"
    assert proxy_outbound(plan)["settings"] == {
        "servers": [{"address": "proxy.example", "port": 3128}]
    }
    with pytest.raises(LinkError, match="web address"):
        read_link("http://example.com:8080/page.html")


@pytest.mark.parametrize(
    ("link", "words"),
    [
        ("ftp://x@h:1", "not a share-link scheme"),
        ("vless://@h:1", "names no user"),
        ("vless://id@h:99999", "port"),
        ("vless://id@h:1?type=carrier-pigeon", "transport"),
        ("vmess://not-base64!", "base64"),
        ("trojan://pw@:443", "server address"),
    ],
)
def test_unreadable_links_say_why(link, words):
    with pytest.raises(LinkError, match=words):
        read_link(link)


def feed_of(name: str) -> list[str]:
    record, user, hosts = CASES[name]
    return client_links(record, user, hosts, CTX)


def test_a_body_is_read_as_base64_plain_lines_or_mihomo_yaml():
    links = feed_of("vless_tcp_none") + feed_of("trojan_tcp_tls") + feed_of("ss_2022")
    plain = "\n".join([*links, "# a comment", "vless://broken"]).encode()
    encoded = base64.b64encode(plain)
    for body in (plain, encoded, b"\xef\xbb\xbf" + encoded + b"\n"):
        feed = read_feed(body)
        assert [share_link(plan) for plan in feed.plans] == links
        assert feed.skipped == 1
    record, user, hosts = CASES["vless_ws_tls"]
    profile = clash_profile(client_clash_proxies(record, user, hosts, CTX), "")
    feed = read_feed(json.dumps(profile).encode())  # JSON is YAML too
    assert [clash_proxy(plan) for plan in feed.plans] == profile["proxies"]


def test_hysteria_1_is_skipped_with_a_reason():
    feed = read_feed("\n".join(feed_of("hysteria_v1") + feed_of("hysteria2")).encode())
    assert [plan.protocol for plan in feed.plans] == ["hysteria2"]
    assert feed.skipped == 1 and "Hysteria 1" in feed.reasons[0]


def test_tags_stay_with_their_servers_across_refreshes():
    first = read_feed("\n".join(feed_of("vless_tcp_none") + feed_of("trojan_tcp_tls")).encode())
    made = tagged_outbounds(first.plans, "sub1-", [])
    assert [o["tag"] for o in made] == ["sub1-DE-alice", "sub1-DE-alice-2"]
    # The trojan server first now, both renamed, and a new server between them.
    moved = feed_of("vless_tcp_none")[0].replace(":443", ":8443")
    renamed = [
        link.replace("#DE-alice", "#Renamed")
        for link in [*feed_of("trojan_tcp_tls"), moved, *feed_of("vless_tcp_none")]
    ]
    again = tagged_outbounds(read_feed("\n".join(renamed).encode()).plans, "sub1-", made)
    assert [o["tag"] for o in again] == ["sub1-DE-alice-2", "sub1-Renamed", "sub1-DE-alice"]
    assert all("_server" not in core_outbound(o) for o in again)
