"""Each client's subscription URL as the panel API gives it (`subUrl` of clients/get), and
the settings a flag of the run overrides (setting/overrides).

The URL is what an admin hands to a user, so each test fetches it and checks it serves
that client's subscription, not just that it looks right.
"""

from __future__ import annotations

import base64
import ipaddress
from urllib.parse import quote, urlsplit

import requests
from cryptography import x509
from helpers import certs_dir, create_plain_vless, free_port, ok, write_self_signed
from panels import start_panel

CLIENTS = "/panel/api/clients"


def add_client(api, inbound_id: int, email: str, sub_id: str) -> None:
    client = {"email": email, "subId": sub_id}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]}))


def sub_url(api, email: str, **kwargs) -> str:
    return ok(api.get(f"{CLIENTS}/get/{quote(email)}", **kwargs))["subUrl"]


def served_links(url: str, **kwargs) -> list[str]:
    response = requests.get(url, timeout=10, **kwargs)
    assert response.status_code == 200, response.text
    return base64.b64decode(response.content).decode().split("\n")


def test_without_settings_the_url_is_the_page_host_with_the_sub_port(panel, api):
    add_client(api, create_plain_vless(api, free_port()), "addr-plain@x", "addr-plain_1")
    sub_port = urlsplit(panel.sub_url).port
    url = sub_url(api, "addr-plain@x")
    assert url == f"http://127.0.0.1:{sub_port}/sub/addr-plain_1"
    served = served_links(url)
    assert served == ok(api.get(f"{CLIENTS}/links/addr-plain@x"))
    assert served and all(link.startswith("vless://") for link in served)
    # The admin reached the panel by another name (a fresh server's IP, say): that name.
    panel_port = urlsplit(panel.url).port
    token = ok(api.post("/panel/api/setting/apiTokens/create", {"name": "addr"}))["token"]
    headers = {"Host": f"panel.test:{panel_port}", "Authorization": f"Bearer {token}"}
    other = sub_url(panel.client(login=False), "addr-plain@x", headers=headers)
    assert other == f"http://panel.test:{sub_port}/sub/addr-plain_1"


def test_sub_domain_path_and_certificate_make_the_url(tmp_path):
    server = start_panel(tmp_path)
    try:
        admin = server.client()
        add_client(admin, create_plain_vless(admin, free_port()), "addr-tls@x", "addrtls")
        cert, key = write_self_signed(
            certs_dir(server), "sub.test", x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
        )
        settings = {"subDomain": "sub.test", "subPath": "/s/", "subCertFile": cert}
        ok(admin.post("/panel/api/setting/update", {**settings, "subKeyFile": key}))
        mark = len(server.lines)
        ok(admin.post("/panel/api/setting/restartPanel"))
        server.wait_listening(mark)
        admin = server.client()
        sub_port = urlsplit(server.sub_url).port
        url = sub_url(admin, "addr-tls@x")
        assert url == f"https://sub.test:{sub_port}/s/addrtls"
        # sub.test resolves nowhere here: ask the loopback address under that name.
        loopback = url.replace("https://sub.test:", "https://127.0.0.1:")
        served = served_links(loopback, verify=cert, headers={"Host": f"sub.test:{sub_port}"})
        assert served == ok(admin.get(f"{CLIENTS}/links/addr-tls@x"))
        assert all("@sub.test:" in link for link in served)
    finally:
        server.stop()


def test_flags_that_override_settings_are_named(panel, api):
    overrides = ok(api.get("/panel/api/setting/overrides"))
    # Test panels run with --listen 127.0.0.1 --port 0 --sub-port 0: the ports bound show.
    assert overrides["subPort"] == {
        "flag": "--sub-port",
        "env": "APPLIANCE_SUB_PORT",
        "value": urlsplit(panel.sub_url).port,
    }
    assert overrides["webPort"]["value"] == urlsplit(panel.url).port
    assert overrides["webListen"] == {
        "flag": "--listen",
        "env": "APPLIANCE_LISTEN",
        "value": "127.0.0.1",
    }
    assert set(overrides) == {"webListen", "webPort", "subPort"}
