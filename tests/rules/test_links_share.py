"""Share links: every protocol, transport and security against hand-written goldens.

The expected links in tests/golden/links/share_links.json and the VMess objects in
vmess_links.json were written from the published formats (Xray share-link standard as
v2rayN/v2rayNG read it, v2rayN VMess format "2", SIP002, Hysteria URI schemes), with
query keys in sorted order and values escaped like encodeURIComponent. Further tests
parse produced links back with urllib to check single fields against the inbound.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from helpers import GOLDEN
from links_cases import (
    ALICE,
    CASES,
    CTX,
    NO_LINK_PROTOCOLS,
    REALITY,
    REALITY_PUBLIC,
    SS_SERVER_KEY,
    SS_USER_KEY,
    TLS,
    UUID,
    VISION,
    VLESS,
    client,
    inbound,
)

from appliance.links import (
    LinkContext,
    client_clash_proxies,
    client_json_configs,
    client_links,
)

LINKS = GOLDEN / "links"
SHARE = json.loads((LINKS / "share_links.json").read_text())
VMESS = json.loads((LINKS / "vmess_links.json").read_text())


def links_of(name: str, ctx: LinkContext = CTX) -> list[str]:
    record, user, hosts = CASES[name]
    return client_links(record, user, hosts, ctx)


def query(link: str) -> dict[str, str]:
    """The query of a link as single values (the standard forbids repeated keys)."""
    parsed = parse_qs(urlsplit(link).query, keep_blank_values=True, strict_parsing=True)
    assert all(len(values) == 1 for values in parsed.values()), link
    return {key: values[0] for key, values in parsed.items()}


def vmess_payload(link: str) -> dict:
    assert link.startswith("vmess://")
    return json.loads(base64.b64decode(link[len("vmess://") :], validate=True))


@pytest.mark.parametrize("name", sorted(SHARE))
def test_link_matches_its_golden(name):
    assert links_of(name) == SHARE[name]


@pytest.mark.parametrize("name", sorted(VMESS))
def test_vmess_link_matches_its_golden(name):
    links = links_of(name)
    assert [vmess_payload(link) for link in links] == VMESS[name]
    # Standard base64 (with padding) of UTF-8 JSON, nothing after it.
    assert all("#" not in link and len(link[8:]) % 4 == 0 for link in links)


def test_every_case_has_a_golden_link():
    assert set(CASES) <= set(SHARE) | set(VMESS) | {"hosts_force_tls"}
    assert not (set(SHARE) | set(VMESS)) - set(CASES)


@pytest.mark.parametrize("protocol", NO_LINK_PROTOCOLS)
def test_protocols_without_a_link_form_give_nothing(protocol):
    record = inbound(protocol, {}, {})
    assert client_links(record, ALICE, [], CTX) == []
    assert client_links(record, ALICE, [{"remark": "h", "address": "x.example"}], CTX) == []


def test_mtproto_links_name_the_secret_and_hosts_override_the_server():
    key = "00112233445566778899aabbccddeeff"
    padded = inbound("mtproto", {}, {})
    assert client_links(padded, client(secret=key), [], CTX) == [
        f"tg://proxy?server=vpn.example.com&port=443&secret=dd{key}"
    ]
    fake_tls = inbound("mtproto", {}, {"domain": "cdn.example.com"})
    hosts = [{"remark": "a", "address": "a.example"}, {"remark": "b", "port": 8443}]
    assert client_links(fake_tls, client(secret=key), hosts, CTX) == [
        f"tg://proxy?server=a.example&port=443&secret=ee{key}{b'cdn.example.com'.hex()}",
        f"tg://proxy?server=vpn.example.com&port=8443&secret=ee{key}{b'cdn.example.com'.hex()}",
    ]
    # No secret, no link; and no JSON or Mihomo form of a Telegram proxy.
    assert client_links(padded, ALICE, [], CTX) == []
    assert client_json_configs(padded, client(secret=key), [], CTX) == []
    assert client_clash_proxies(padded, client(secret=key), [], CTX) == []


def test_vless_ws_link_parses_back_to_the_inbound_fields():
    link = links_of("vless_ws_tls")[0]
    parts = urlsplit(link)
    assert (parts.scheme, parts.username, parts.hostname, parts.port) == (
        "vless",
        UUID,
        "vpn.example.com",
        443,
    )
    assert unquote(parts.fragment) == "DE-alice"
    assert query(link) == {
        "type": "ws",
        "security": "tls",
        "encryption": "none",
        "path": "/ws?ed=2048",
        "host": "cdn.example.com",
        "sni": "example.com",
        "alpn": "http/1.1",
        "fp": "chrome",
    }


def test_upgrade_transports_offer_http1_alone_and_the_others_keep_the_inbounds_alpn():
    # A WebSocket or HTTPUpgrade client offering h2 gets h2 from a server listing it first,
    # and its HTTP/1.1 upgrade then fails (tests/core/test_links_proven.py shows it in sing-box).
    h2_only = {**TLS, "alpn": ["h2"]}
    for network, objects in (("ws", {"wsSettings": {"path": "/w"}}), ("httpupgrade", {})):
        for tls, alpn in ((TLS, "http/1.1"), (h2_only, None)):
            stream = {"network": network, "security": "tls", "tlsSettings": tls, **objects}
            link = client_links(inbound("vless", stream, VLESS), ALICE, [], CTX)[0]
            assert query(link).get("alpn") == alpn, (network, tls["alpn"])
    for network in ("tcp", "grpc"):
        stream = {"network": network, "security": "tls", "tlsSettings": TLS}
        link = client_links(inbound("vless", stream, VLESS), ALICE, [], CTX)[0]
        assert query(link)["alpn"] == "h2,http/1.1", network


def test_vision_flow_only_where_the_core_accepts_it():
    assert query(links_of("vless_raw_tls_vision")[0])["flow"] == "xtls-rprx-vision"
    # WebSocket cannot carry Vision: the client's flow is left out.
    assert "flow" not in query(links_of("vless_ws_tls")[0])
    # A host that strips TLS from a Vision inbound strips the flow too.
    record = CASES["vless_raw_tls_vision"][0]
    relay = {"remark": "relay", "address": "relay.example", "security": "none"}
    [link] = client_links(record, VISION, [relay], CTX)
    assert query(link)["security"] == "none" and "flow" not in query(link)
    # A client flow-capable inbound with xhttp + VLESS Encryption keeps it.
    xhttp = inbound(
        "vless",
        {"network": "xhttp", "security": "none", "xhttpSettings": {"path": "/e"}},
        {"decryption": "mlkem768x25519plus.native.600s.key", "encryption": "mlkem768x25519plus.c"},
    )
    [link] = client_links(xhttp, VISION, [], CTX)
    assert query(link)["flow"] == "xtls-rprx-vision"
    assert query(link)["encryption"] == "mlkem768x25519plus.c"


def test_reality_public_key_comes_from_settings_or_is_derived_from_the_private_key():
    derived = query(links_of("vless_tcp_reality_vision")[0])
    assert derived["pbk"] == REALITY_PUBLIC
    stored = {**REALITY, "settings": {"publicKey": "STORED-KEY", "fingerprint": "firefox"}}
    record = inbound("vless", {"network": "tcp", "security": "reality", "realitySettings": stored})
    [link] = client_links(record, ALICE, [], CTX)
    fields = query(link)
    assert (fields["pbk"], fields["fp"], fields["sni"], fields["sid"]) == (
        "STORED-KEY",
        "firefox",
        "www.microsoft.com",
        "6ba85179e30d4fc2",
    )
    assert "spx" not in fields


def test_tcp_http_obfuscation_lists_every_path_and_host():
    fields = query(links_of("vless_tcp_http_none")[0])
    assert fields["headerType"] == "http"
    assert fields["path"].split(",") == ["/index", "/a b"]
    assert fields["host"].split(",") == ["a.example.com", "b.example.com"]


def test_shadowsocks_userinfo_follows_sip002():
    legacy = urlsplit(links_of("ss_aes_256_gcm")[0])
    padded = legacy.username + "=" * (-len(legacy.username) % 4)
    assert base64.urlsafe_b64decode(padded).decode() == "aes-256-gcm:s3cret/pass"
    assert "=" not in legacy.username and legacy.password is None
    # The client's own cipher wins over the inbound's for legacy methods.
    chosen = urlsplit(links_of("ss_client_method")[0]).username
    decoded = base64.urlsafe_b64decode(chosen + "=" * (-len(chosen) % 4)).decode()
    assert decoded.startswith("chacha20-ietf-poly1305:")
    # 2022 ciphers: plain, percent-encoded, password = server key ":" user key.
    modern = urlsplit(links_of("ss_2022")[0])
    assert unquote(modern.username) == "2022-blake3-aes-128-gcm"
    assert unquote(modern.password) == f"{SS_SERVER_KEY}:{SS_USER_KEY}"
    assert (modern.hostname, modern.port) == ("vpn.example.com", 443)


def test_hysteria_links():
    hy2 = urlsplit(links_of("hysteria2")[0])
    assert (hy2.scheme, unquote(hy2.username), hy2.port) == ("hy2", "hy-auth+1", 443)
    assert query(links_of("hysteria2")[0]) == {
        "sni": "hy.example.com",
        "alpn": "h3",
        "mport": "20000-30000",
    }
    v1 = query(links_of("hysteria_v1")[0])
    assert (v1["auth"], v1["upmbps"], v1["downmbps"], v1["protocol"]) == (
        "hy-auth+1",
        "50",
        "200",
        "udp",
    )
    # QUIC always carries TLS: a host saying "none" does not strip it.
    record, user, _ = CASES["hysteria2"]
    [link] = client_links(record, user, [{"remark": "x", "security": "none"}], CTX)
    assert query(link)["sni"] == "hy.example.com"


def test_hosts_override_address_port_sni_and_security_in_order():
    links = links_of("hosts")
    parsed = [urlsplit(link) for link in links]
    assert [(p.hostname, p.port) for p in parsed] == [
        ("cdn.example.net", 8443),
        ("10.1.2.3", 443),
        ("2001:db8::1", 443),
    ]
    assert [query(link)["security"] for link in links] == ["tls", "none", "tls"]
    assert [query(link).get("sni") for link in links] == ["front.example.net", None, "example.com"]
    assert [unquote(p.fragment) for p in parsed] == [
        "DE-alice-CDN",
        "DE-alice-plain relay",
        "DE-alice-v6",
    ]


def test_host_with_empty_address_uses_the_context_address():
    record, user, _ = CASES["trojan_tcp_tls"]
    [link] = client_links(record, user, [{"remark": "same", "address": "", "port": None}], CTX)
    assert urlsplit(link).hostname == "vpn.example.com"


def test_host_asking_for_reality_on_a_tls_inbound_keeps_tls():
    record, user, _ = CASES["trojan_tcp_tls"]
    [link] = client_links(record, user, [{"remark": "r", "security": "reality"}], CTX)
    assert query(link)["security"] == "tls"


def test_external_proxies_expand_only_without_hosts():
    record, user, _ = CASES["external_proxy"]
    assert len(client_links(record, user, [], CTX)) == 2
    [link] = client_links(record, user, [{"remark": "only host", "address": "h.example"}], CTX)
    assert urlsplit(link).hostname == "h.example"


@pytest.mark.parametrize(
    ("model", "remark"),
    [
        ("-ieo", "DE-alice-CDN"),
        ("|eio", "alice|DE|CDN"),
        ("_e", "alice"),
        (" oi", "CDN DE"),
        ("", "DE-alice-CDN"),
    ],
)
def test_remark_model_decides_the_fragment(model, remark):
    record, user, _ = CASES["vless_tcp_none"]
    host = {"remark": "CDN", "address": "", "security": "same"}
    [link] = client_links(record, user, [host], LinkContext("vpn.example.com", model))
    assert unquote(urlsplit(link).fragment) == remark


def test_remark_with_spaces_and_unicode_is_percent_encoded():
    record = inbound("trojan", {"network": "tcp", "security": "tls", "tlsSettings": TLS})
    record["remark"] = "Straße #1 🇩🇪"
    [link] = client_links(record, ALICE, [], CTX)
    fragment = link.split("#", 1)[1]
    assert fragment.isascii() and " " not in fragment and "#" not in fragment
    assert unquote(fragment) == "Straße #1 🇩🇪-alice"


def test_settings_given_as_json_text_render_the_same_links():
    record, user, hosts = CASES["vless_grpc_reality"]
    legacy = {
        **record,
        "settings": json.dumps(record["settings"]),
        "streamSettings": json.dumps(record["streamSettings"]),
    }
    assert client_links(legacy, user, hosts, CTX) == SHARE["vless_grpc_reality"]


def test_client_without_the_protocol_secret_gets_no_link():
    record, _, _ = CASES["trojan_tcp_tls"]
    assert client_links(record, client(password=""), [], CTX) == []
    vless, _, _ = CASES["vless_tcp_none"]
    assert client_links(vless, client(id=""), [], CTX) == []


def test_odd_records_give_no_link_instead_of_an_error():
    assert client_links({}, ALICE, [], CTX) == []
    broken = inbound("vless", "{not json", "[]")
    [link] = client_links(broken, ALICE, [], CTX)
    assert query(link) == {"type": "tcp", "security": "none", "encryption": "none"}
