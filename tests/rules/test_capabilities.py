"""The capability table read without a core: what each kind and version runs, what an
inbound, a client flow or a template asks of it, and which stored inbounds a core leaves
out. The same table refuses saves on a real core in tests/core/test_core_capabilities.py."""

from __future__ import annotations

from appliance.core.capabilities import (
    config_features,
    inbound_features,
    missing,
    refusal,
    runnable,
    table_of,
)
from appliance.core.process import CoreFlavor

V2FLY = CoreFlavor("v2fly", "4.34.0", "v2ray.core")
OLD_XRAY = CoreFlavor("xray", "1.8.4", "xray")
XRAY = CoreFlavor("xray", "26.10.10", "xray")
REALITY_VLESS = {
    "id": 1,
    "tag": "in-1",
    "protocol": "vless",
    "nodeId": None,
    "enable": True,
    "settings": {"decryption": "none"},
    "streamSettings": {"network": "tcp", "security": "reality"},
    "clientRows": [],
}


def test_versions_compare_across_xrays_change_of_numbering():
    assert missing({"XHTTP", "REALITY"}, OLD_XRAY) == ["XHTTP"]
    assert missing({"XHTTP", "REALITY", "Hysteria 2", "ML-DSA-65"}, XRAY) == []
    assert refusal(["XHTTP"], OLD_XRAY) == (
        "the running core (Xray 1.8.4) cannot run XHTTP; XHTTP needs Xray 24.11.30 or later"
    )


def test_without_a_core_nothing_is_missing():
    assert missing({"REALITY", "XTLS Vision"}, None) == []
    assert table_of(None)["installed"] is False


def test_a_flow_counts_only_where_the_inbound_carries_one():
    tls = {**REALITY_VLESS, "streamSettings": {"network": "tcp", "security": "tls"}}
    ws = {**REALITY_VLESS, "streamSettings": {"network": "ws", "security": "tls"}}
    assert inbound_features(tls, ["xtls-rprx-vision"]) == {"XTLS Vision"}
    assert inbound_features(ws, ["xtls-rprx-vision"]) == set()
    assert inbound_features(tls, [""]) == set()


def test_a_template_asks_for_what_its_outbounds_use():
    template = {
        "outbounds": [
            {"protocol": "freedom"},
            {
                "protocol": "vless",
                "settings": {"vnext": [{"users": [{"id": "x", "flow": "xtls-rprx-vision"}]}]},
                "streamSettings": {"network": "xhttp", "security": "reality"},
            },
            {"protocol": "wireguard", "settings": {}},
        ]
    }
    assert config_features(template) == {"XTLS Vision", "XHTTP", "REALITY", "WireGuard"}


def test_the_core_leaves_out_what_it_cannot_run_here_but_not_on_a_node_or_disabled():
    on_node = {**REALITY_VLESS, "id": 2, "nodeId": 7}
    disabled = {**REALITY_VLESS, "id": 3, "enable": False}
    vision = {
        **REALITY_VLESS,
        "id": 4,
        "tag": "in-4",
        "streamSettings": {"network": "tcp", "security": "tls"},
        "clientRows": [{"flow": ""}, {"flow": "xtls-rprx-vision"}],
    }
    views = [REALITY_VLESS, on_node, disabled, vision]
    kept, unfit = runnable(views, V2FLY)
    assert kept == [on_node, disabled]
    assert unfit == {
        1: "inbound in-1 is left out: the running core (v2fly 4.34.0) cannot run REALITY; "
        "it needs Xray",
        4: "inbound in-4 is left out: the running core (v2fly 4.34.0) cannot run XTLS Vision; "
        "it needs Xray",
    }
    assert runnable(views, XRAY) == (views, {})
