"""What the panel lets its core run: saves the detected core cannot honour are refused.

V2Ray 4.34 (Debian's `v2ray`, the stand-in core) accepts a VLESS inbound with REALITY and
clients with the Vision flow in its test mode, then serves plain VLESS: the save would
say "saved", the links advertise REALITY and Vision, and no real app connects. Here a
panel on that core refuses each feature it lacks with a sentence naming the core and the
feature, tells the browser the same through `server/coreCapabilities`, and a panel with
no core refuses nothing on those grounds. The real Xray accepting the same saves, and an
inbound stored under Xray left out once the panel runs on V2Ray, are in
tests/core/test_xray_panel.py.
"""

from __future__ import annotations

import json
import uuid

import pytest
import requests
import xray_cli
from core_helpers import LOOPBACK, V2RAY
from core_panel import CORE_ENV, loopback_template, wait_until
from helpers import REALITY, certs_dir, free_port, ok, refused, write_self_signed
from panels import start_panel, stop_and_drop

from appliance.links.import_links import decode_base64

INBOUNDS = "/panel/api/inbounds"
CLIENTS = "/panel/api/clients"
CAPABILITIES = "/panel/api/server/coreCapabilities"
V2FLY = "the running core (v2fly 4.34.0) cannot run"

# One inbound per feature V2Ray 4.34 lacks, and the word its refusal names.
LACKING = {
    "REALITY": {
        "protocol": "vless",
        "settings": {"decryption": "none"},
        "streamSettings": REALITY,
    },
    "XHTTP": {
        "protocol": "vless",
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "xhttp", "security": "none"},
    },
    "Hysteria 2": {"protocol": "hysteria2"},
    "Shadowsocks 2022": {
        "protocol": "shadowsocks",
        "settings": {"method": "2022-blake3-aes-128-gcm", "network": "tcp,udp"},
    },
}


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = start_panel(tmp_path_factory.mktemp("v2fly"), env=CORE_ENV)
    api = server.client()
    wait_until(lambda: ok(api.get("/panel/api/server/status"))["core"]["state"] == "running", "")
    yield server
    stop_and_drop(server)


def stored_ports(api) -> set[int]:
    return {row["port"] for row in ok(api.get(f"{INBOUNDS}/list"))}


@pytest.mark.parametrize("feature", sorted(LACKING))
def test_v2fly_refuses_what_it_cannot_run_with_a_sentence(api, feature):
    port = free_port()
    reply = api.post(f"{INBOUNDS}/add", {**LACKING[feature], "listen": LOOPBACK, "port": port})
    refused(reply, f"{V2FLY} {feature}; it needs Xray")
    assert port not in stored_ports(api)


def test_an_update_and_an_import_are_held_to_the_core_too(api):
    plain = {
        "protocol": "vless",
        "listen": LOOPBACK,
        "port": free_port(),
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "none"},
    }
    inbound = ok(api.post(f"{INBOUNDS}/add", plain))
    reply = api.post(f"{INBOUNDS}/update/{inbound['id']}", {**plain, **LACKING["REALITY"]})
    refused(reply, f"{V2FLY} REALITY")
    stored = ok(api.get(f"{INBOUNDS}/get/{inbound['id']}"))
    assert stored["streamSettings"]["security"] == "none"
    exported = {**LACKING["XHTTP"], "listen": LOOPBACK, "port": free_port()}
    refused(api.post(f"{INBOUNDS}/import", {"data": json.dumps(exported)}), f"{V2FLY} XHTTP")
    assert exported["port"] not in stored_ports(api)


def test_a_vision_client_is_refused_on_v2fly(api, panel):
    cert, key = write_self_signed(certs_dir(panel), "vision.test")
    stream = {
        "network": "tcp",
        "security": "tls",
        "tlsSettings": {"certificates": [{"certificateFile": cert, "keyFile": key}]},
    }
    payload = {"protocol": "vless", "listen": LOOPBACK, "port": free_port()}
    inbound = ok(
        api.post(
            f"{INBOUNDS}/add",
            {**payload, "settings": {"decryption": "none"}, "streamSettings": stream},
        )
    )
    email = f"{uuid.uuid4().hex[:8]}@vision"
    client = {"email": email, "id": str(uuid.uuid4()), "flow": "xtls-rprx-vision"}
    body = {"client": client, "inboundIds": [inbound["id"]]}
    refused(api.post(f"{CLIENTS}/add", body), f"{V2FLY} XTLS Vision; it needs Xray")
    refused(api.get(f"{CLIENTS}/get/{email}"))
    ok(api.post(f"{CLIENTS}/add", {**body, "client": {**client, "flow": ""}}))
    update = {"client": {**client, "flow": "xtls-rprx-vision"}}
    refused(api.post(f"{CLIENTS}/update/{email}", update), f"{V2FLY} XTLS Vision")
    assert ok(api.get(f"{CLIENTS}/get/{email}"))["client"]["flow"] == ""


def test_a_template_with_a_reality_outbound_is_refused_on_v2fly(api):
    template = loopback_template(api)
    template["outbounds"].append(
        {
            "tag": "far",
            "protocol": "vless",
            "settings": {"vnext": [{"address": "far.test", "port": 443, "users": []}]},
            "streamSettings": {"network": "tcp", "security": "reality"},
        }
    )
    reply = api.post("/panel/api/core/update", {"coreSetting": json.dumps(template)})
    refused(reply, f"{V2FLY} REALITY")
    running = ok(api.get("/panel/api/server/getConfigJson"))
    assert "far" not in {o.get("tag") for o in running["outbounds"]}


def test_the_capability_table_of_v2fly_says_what_it_lacks_and_why(api):
    table = ok(api.get(CAPABILITIES))
    assert (table["kind"], table["version"], table["installed"]) == ("v2fly", "4.34.0", True)
    features = table["features"]
    for feature in ("REALITY", "XTLS Vision", "XHTTP", "Hysteria 2", "Shadowsocks 2022"):
        assert features[feature] == {
            "runs": False,
            "reason": f"{V2FLY} {feature}; it needs Xray",
        }


def test_without_a_core_nothing_is_refused_on_capability_grounds(tmp_path):
    server = start_panel(tmp_path)
    try:
        api = server.client()
        assert ok(api.get(CAPABILITIES)) == {
            "kind": "",
            "version": "",
            "installed": False,
            "features": {},
        }
        for payload in LACKING.values():
            ok(api.post(f"{INBOUNDS}/add", {**payload, "port": free_port()}))
    finally:
        stop_and_drop(server)


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_reality_inbound_stored_under_xray_is_left_out_once_the_core_is_v2fly(tmp_path, workers):
    """A core change that loses a feature: the inbound asking for it is out of step
    (status, log), the core runs without it, and no link advertises it, whether the panel
    serves subscriptions itself or its worker processes do."""
    binary = xray_cli.install(tmp_path)
    env = {"APPLIANCE_CORE": str(binary), "APPLIANCE_SUB_WORKERS": workers}
    server = start_panel(tmp_path, env=env)
    try:
        api = server.client()
        reality = ok(api.post(f"{INBOUNDS}/add", {**LACKING["REALITY"], "port": free_port()}))
        plain = ok(
            api.post(
                f"{INBOUNDS}/add",
                {
                    "protocol": "vless",
                    "port": free_port(),
                    "settings": {"decryption": "none"},
                    "streamSettings": {"network": "tcp", "security": "none"},
                },
            )
        )
        sub_id = uuid.uuid4().hex
        client = {"email": "both@cap", "id": str(uuid.uuid4()), "subId": sub_id}
        ok(
            api.post(
                f"{CLIENTS}/add", {"client": client, "inboundIds": [reality["id"], plain["id"]]}
            )
        )
        assert "security=reality" in subscription(server, sub_id)

        server.stop()
        server.env["APPLIANCE_CORE"] = V2RAY
        server.start()
        api = server.client()
        core = wait_until(
            lambda: (
                (c := ok(api.get("/panel/api/server/status"))["core"])["state"] == "running" and c
            ),
            "the panel runs on V2Ray",
        )
        assert core["inStep"] is False
        assert core["staleInbounds"] == [reality["id"]]
        assert f"{V2FLY} REALITY" in core["errorMsg"]
        running = ok(api.get("/panel/api/server/getConfigJson"))
        tags = {inbound.get("tag") for inbound in running["inbounds"]}
        assert plain["tag"] in tags and reality["tag"] not in tags
        assert len(status_workers(api)) == (0 if workers == "1" else 2)
        for _ in range(4):  # consecutive fetches land on either worker
            links = subscription(server, sub_id).splitlines()
            assert len(links) == 1 and "reality" not in links[0], links
        handed_out = ok(api.get(f"{CLIENTS}/links/both@cap"))
        assert len(handed_out) == 1 and "reality" not in handed_out[0], handed_out
        said = [line for line in server.lines if "out of step" in line and reality["tag"] in line]
        assert len(said) == 1, said
    finally:
        stop_and_drop(server)


def status_workers(api) -> list[int]:
    return ok(api.get("/panel/api/server/status"))["subWorkers"]


def subscription(server, sub_id: str) -> str:
    response = requests.get(f"{server.sub_url}/sub/{sub_id}", timeout=10)
    return decode_base64(response.text)
