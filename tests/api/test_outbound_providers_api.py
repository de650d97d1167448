"""The WARP tunnel and the VPN provider over HTTP, against local servers shaped like their
public APIs (tests/provider_apis.py).

What is checked is what the admin sees and what the provider got: the key pair made
locally with only its public half sent, the bearer token and basic authentication the
APIs expect, the WireGuard outbound built from the stored account, and every failure of
the remote service answered as a sentence in the envelope, never a 500.
"""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from helpers import free_port, ok, refused
from provider_apis import (
    ALICE_PRIVATE,
    ALICE_PUBLIC,
    SERVERS_PATH,
    WARP_PEER_KEY,
    ProviderApi,
    nord_countries,
    nord_server,
    warp_registration,
)

TUNNEL = "/panel/api/core/tunnel"
VPN = "/panel/api/core/vpn"
SECRET_BODY = b"internal-secret-7f3a is not JSON"


def public_of(private_b64: str) -> str:
    key = X25519PrivateKey.from_private_bytes(base64.b64decode(private_b64))
    return base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


@pytest.fixture(scope="module")
def remote():
    server = ProviderApi()
    yield server
    server.close()


@pytest.fixture
def api(panel, remote):
    client = panel.client()
    ok(
        client.post(
            "/panel/api/setting/update",
            {
                "warpApiUrl": f"http://127.0.0.1:{remote.port}/v0a2158",
                "vpnApiUrl": f"http://127.0.0.1:{remote.port}/v1",
                "allowPrivateDestinations": "warpApiUrl,vpnApiUrl",
            },
        )
    )
    remote.answers.clear()
    remote.requests.clear()
    yield client
    client.post(f"{TUNNEL}/del")
    client.post(f"{VPN}/del")


def register(api, remote, **form) -> dict:
    remote.answers[("POST", "/v0a2158/reg")] = (
        200,
        warp_registration("dev-1", "tok-1", "", "engage.cloudflareclient.com:2408"),
    )
    return ok(api.post(f"{TUNNEL}/reg", data=form))


# ---- WARP ----------------------------------------------------------------------------------


def test_warp_registers_a_local_key_and_builds_the_outbound(api, remote):
    assert ok(api.post(f"{TUNNEL}/data")) is None
    view = register(api, remote)
    sent = remote.requests[-1]
    assert (sent.method, sent.path) == ("POST", "/v0a2158/reg")
    assert sent.body["key"] == public_of(view["privateKey"]) == view["publicKey"]
    assert view["privateKey"] not in str(sent.body)
    assert sent.body["tos"] and sent.body["install_id"] == ""
    assert view["deviceId"] == "dev-1" and view["licenseKey"] == "LICENSE-free-1"
    assert "accessToken" not in view and "tok-1" not in str(view)
    assert view["outbound"] == {
        "tag": "warp",
        "protocol": "wireguard",
        "settings": {
            "secretKey": view["privateKey"],
            "address": ["172.16.0.2/32", "2606:4700:110:8a36::1/128"],
            "peers": [
                {
                    "publicKey": WARP_PEER_KEY,
                    "endpoint": "engage.cloudflareclient.com:2408",
                    "allowedIPs": ["0.0.0.0/0", "::/0"],
                }
            ],
            "mtu": 1280,
            "reserved": [1, 2, 3],
        },
    }
    assert ok(api.post(f"{TUNNEL}/data")) == view


def test_warp_uses_the_admins_key_pair(api, remote):
    view = register(api, remote, privateKey=ALICE_PRIVATE, publicKey=ALICE_PUBLIC)
    assert remote.requests[-1].body["key"] == ALICE_PUBLIC
    assert view["outbound"]["settings"]["secretKey"] == ALICE_PRIVATE
    refused(
        api.post(f"{TUNNEL}/reg", data={"privateKey": ALICE_PRIVATE, "publicKey": WARP_PEER_KEY}),
        "publicKey is not the public half",
    )
    refused(api.post(f"{TUNNEL}/reg", data={"privateKey": "short"}), "privateKey", "32 bytes")


def test_warp_config_license_and_delete_use_the_device_token(api, remote):
    register(api, remote)
    moved = warp_registration("dev-1", "tok-1", "", "engage2.cloudflareclient.com:2408")
    remote.answers[("GET", "/v0a2158/reg/dev-1")] = (200, moved)
    view = ok(api.post(f"{TUNNEL}/config"))
    assert remote.requests[-1].headers["authorization"] == "Bearer tok-1"
    assert view["outbound"]["settings"]["peers"][0]["endpoint"].startswith("engage2.")
    remote.answers[("PUT", "/v0a2158/reg/dev-1/account")] = (
        200,
        {"id": "account-1", "account_type": "limited", "license": "PLUS-1"},
    )
    view = ok(api.post(f"{TUNNEL}/license", data={"license": "PLUS-1"}))
    put = remote.requests[-1]
    assert (put.body, put.headers["authorization"]) == ({"license": "PLUS-1"}, "Bearer tok-1")
    assert (view["licenseKey"], view["accountType"]) == ("PLUS-1", "limited")
    refused(api.post(f"{TUNNEL}/license", data={"license": ""}), "license")
    remote.answers[("DELETE", "/v0a2158/reg/dev-1")] = (204, b"")
    assert ok(api.post(f"{TUNNEL}/del")) == {"remoteError": ""}
    assert remote.requests[-1].method == "DELETE"
    assert ok(api.post(f"{TUNNEL}/data")) is None
    refused(api.post(f"{TUNNEL}/config"), "no WARP device is registered")


def test_warp_failures_are_sentences(api, remote):
    remote.answers[("POST", "/v0a2158/reg")] = (500, {"error": "down"})
    refused(api.post(f"{TUNNEL}/reg"), "the WARP service answered HTTP 500")
    remote.answers[("POST", "/v0a2158/reg")] = (200, SECRET_BODY)
    reply = api.post(f"{TUNNEL}/reg")
    refused(reply, "not JSON")
    assert "internal-secret" not in reply["msg"]
    remote.answers[("POST", "/v0a2158/reg")] = (200, {"id": "x", "token": "t", "config": {}})
    refused(api.post(f"{TUNNEL}/reg"), "has no peers.0")
    assert ok(api.post(f"{TUNNEL}/data")) is None
    refused(api.post(f"{TUNNEL}/teleport"), "not a tunnel action")
    ok(api.post("/panel/api/setting/update", {"warpApiUrl": f"http://127.0.0.1:{free_port()}/"}))
    refused(api.post(f"{TUNNEL}/reg"), "the WARP service could not be reached")
    ok(api.post("/panel/api/setting/update", {"allowPrivateDestinations": ""}))
    refused(api.post(f"{TUNNEL}/reg"), "warpApiUrl", "loopback", "allowPrivateDestinations")


def test_a_delete_refused_by_warp_still_forgets_the_device(api, remote):
    register(api, remote)
    remote.answers[("DELETE", "/v0a2158/reg/dev-1")] = (401, {"error": "gone"})
    assert "HTTP 401" in ok(api.post(f"{TUNNEL}/del"))["remoteError"]
    assert ok(api.post(f"{TUNNEL}/data")) is None


# ---- the VPN provider ------------------------------------------------------------------------


def test_vpn_countries_and_servers(api, remote):
    remote.answers[("GET", "/v1/servers/countries")] = (200, nord_countries())
    countries = ok(api.post(f"{VPN}/countries"))
    assert [(c["id"], c["name"], c["code"]) for c in countries] == [
        (81, "Germany", "DE"),
        (228, "United States", "US"),
    ]
    remote.answers[("GET", SERVERS_PATH)] = (
        200,
        [nord_server(1, "203.0.113.1", ALICE_PUBLIC), nord_server(2, "203.0.113.2", None)],
    )
    servers = ok(api.post(f"{VPN}/servers", data={"countryId": "81"}))
    assert [(s["hostname"], s["publicKey"], s["outbound"]) for s in servers] == [
        ("de1.nordvpn.com", ALICE_PUBLIC, None)
    ]
    ok(api.post(f"{VPN}/setKey", data={"key": ALICE_PRIVATE}))
    assert ok(api.post(f"{VPN}/data")) == {"publicKey": ALICE_PUBLIC}
    outbound = ok(api.post(f"{VPN}/servers", data={"countryId": 81}))[0]["outbound"]
    assert outbound == {
        "tag": "vpn-de1",
        "protocol": "wireguard",
        "settings": {
            "secretKey": ALICE_PRIVATE,
            "address": ["10.5.0.2/32"],
            "peers": [
                {
                    "publicKey": ALICE_PUBLIC,
                    "endpoint": "203.0.113.1:51820",
                    "allowedIPs": ["0.0.0.0/0", "::/0"],
                }
            ],
            "mtu": 1280,
        },
    }
    refused(api.post(f"{VPN}/servers", data={"countryId": "DE"}), "countryId")


def test_vpn_reg_fetches_the_private_key_with_the_token(api, remote):
    assert ok(api.post(f"{VPN}/data")) is None
    remote.answers[("GET", "/v1/users/services/credentials")] = (
        200,
        {"id": 7, "username": "u", "password": "p", "nordlynx_private_key": ALICE_PRIVATE},
    )
    assert ok(api.post(f"{VPN}/reg", data={"token": "a1b2c3d4e5f6"})) == {"publicKey": ALICE_PUBLIC}
    sent = remote.requests[-1].headers["authorization"]
    assert sent == "Basic " + base64.b64encode(b"token:a1b2c3d4e5f6").decode()
    ok(api.post(f"{VPN}/del"))
    assert ok(api.post(f"{VPN}/data")) is None


def test_vpn_failures_are_sentences(api, remote):
    remote.answers[("GET", "/v1/users/services/credentials")] = (401, {"errors": "bad"})
    refused(api.post(f"{VPN}/reg", data={"token": "a1b2c3d4e5f6"}), "HTTP 401", "refused")
    refused(api.post(f"{VPN}/reg", data={"token": "x"}), "token")
    refused(api.post(f"{VPN}/setKey", data={"key": "not-a-key"}), "key", "32 bytes")
    remote.answers[("GET", "/v1/servers/countries")] = (200, {"not": "a list"})
    refused(api.post(f"{VPN}/countries"), "not a list")
    remote.answers[("GET", "/v1/servers/countries")] = (200, SECRET_BODY)
    reply = api.post(f"{VPN}/countries")
    refused(reply, "not JSON")
    assert "internal-secret" not in reply["msg"]
    refused(api.post(f"{VPN}/fly"), "not a VPN action")
    assert ok(api.post(f"{VPN}/data")) is None
