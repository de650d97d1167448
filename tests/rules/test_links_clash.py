"""Mihomo proxies and the YAML profile of the `/yaml/` subscription.

tests/golden/links/clash_proxies.yaml holds, per case, the proxies written by hand from
Mihomo's proxy schema; an empty list marks links Mihomo cannot express. The profile is
read back with yaml.safe_load and checked the way Mihomo would refuse it: a missing key
of a proxy type, a duplicate proxy name, a group naming an unknown proxy, no MATCH rule.
"""

from __future__ import annotations

import pytest
import yaml
from helpers import GOLDEN
from links_cases import ALICE, CASES, CTX, NO_LINK_PROTOCOLS, inbound

from appliance.links import clash_document, client_clash_proxies

GOLDEN = yaml.safe_load((GOLDEN / "links" / "clash_proxies.yaml").read_text())

# Keys Mihomo's schema requires (or every client needs to connect) per proxy type.
REQUIRED = {
    "vless": {"name", "type", "server", "port", "uuid", "udp", "tls", "network"},
    "vmess": {
        "name",
        "type",
        "server",
        "port",
        "uuid",
        "alterId",
        "cipher",
        "udp",
        "tls",
        "network",
    },
    "trojan": {"name", "type", "server", "port", "password", "udp", "network"},
    "ss": {"name", "type", "server", "port", "cipher", "password", "udp"},
    "hysteria2": {"name", "type", "server", "port", "password", "udp"},
    "hysteria": {"name", "type", "server", "port", "auth-str", "protocol", "up", "down", "udp"},
}
NETWORK_OPTIONS = {"ws": "ws-opts", "grpc": "grpc-opts", "http": "http-opts", "xhttp": "xhttp-opts"}


def proxies_of(name: str) -> list[dict]:
    record, user, hosts = CASES[name]
    return client_clash_proxies(record, user, hosts, CTX)


def every_proxy() -> list[dict]:
    return [proxy for name in sorted(CASES) for proxy in proxies_of(name)]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_proxies_match_their_golden(name):
    assert proxies_of(name) == GOLDEN[name]


def test_every_proxy_has_the_keys_of_its_type():
    proxies = every_proxy()
    assert {proxy["type"] for proxy in proxies} == set(REQUIRED)
    for proxy in proxies:
        missing = REQUIRED[proxy["type"]] - set(proxy)
        assert not missing, (proxy["name"], missing)
        options = NETWORK_OPTIONS.get(proxy.get("network"))
        if options:
            assert isinstance(proxy[options], dict), proxy
        if proxy.get("reality-opts"):
            assert proxy["reality-opts"]["public-key"] and proxy.get("client-fingerprint")
        assert isinstance(proxy["port"], int) and proxy["udp"] is True


@pytest.mark.parametrize("protocol", NO_LINK_PROTOCOLS)
def test_protocols_without_a_link_form_give_no_proxy(protocol):
    assert client_clash_proxies(inbound(protocol, {}, {}), ALICE, [], CTX) == []


def load(document: str) -> dict:
    profile = yaml.safe_load(document)
    assert isinstance(profile, dict)
    return profile


def test_document_lists_proxies_in_one_select_group_and_ends_in_match():
    proxies = proxies_of("hosts") + proxies_of("hysteria2")
    rules = (
        "DOMAIN-SUFFIX,ir,DIRECT\n\n# local networks\n- IP-CIDR,10.0.0.0/8,DIRECT\nGEOIP,CN,REJECT"
    )
    profile = load(clash_document(proxies, rules))
    assert profile["proxies"][:3] == GOLDEN["hosts"]
    names = [proxy["name"] for proxy in profile["proxies"]]
    assert profile["proxy-groups"] == [
        {"name": "PROXY", "type": "select", "proxies": [*names, "DIRECT"]}
    ]
    assert profile["rules"] == [
        "DOMAIN-SUFFIX,ir,DIRECT",
        "IP-CIDR,10.0.0.0/8,DIRECT",
        "GEOIP,CN,REJECT",
        "MATCH,PROXY",
    ]
    assert profile["mode"] == "rule"


def test_document_keeps_a_match_rule_the_setting_ends_with():
    profile = load(clash_document(proxies_of("vmess_tcp_none"), "MATCH,DIRECT\n"))
    assert profile["rules"] == ["MATCH,DIRECT"]


def test_duplicate_names_are_made_unique():
    proxy = proxies_of("vmess_tcp_none")[0]
    profile = load(clash_document([proxy, proxy, {**proxy, "name": "PROXY"}], ""))
    names = [p["name"] for p in profile["proxies"]]
    assert names == ["DE-alice", "DE-alice 2", "PROXY 2"]
    assert profile["proxy-groups"][0]["proxies"] == [*names, "DIRECT"]
    assert profile["rules"] == ["MATCH,PROXY"]


def test_unicode_names_are_written_as_text():
    proxy = {**proxies_of("trojan_tcp_tls")[0], "name": "Straße 🇩🇪"}
    document = clash_document([proxy], "")
    assert "Straße 🇩🇪" in document
    assert load(document)["proxies"][0]["name"] == "Straße 🇩🇪"


def test_empty_subscription_is_still_a_valid_profile():
    profile = load(clash_document([], ""))
    assert profile["proxies"] == []
    assert profile["proxy-groups"][0]["proxies"] == ["DIRECT"]
    assert profile["rules"] == ["MATCH,PROXY"]


def test_every_case_proxy_survives_the_yaml_round_trip():
    proxies = every_proxy()
    profile = load(clash_document(proxies, ""))
    assert len(proxies) > 20
    for written, read in zip(proxies, profile["proxies"], strict=True):
        assert {k: v for k, v in read.items() if k != "name"} == {
            k: v for k, v in written.items() if k != "name"
        }
