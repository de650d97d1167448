"""The webAllowedHosts setting: which Host headers the panel answers to, over real HTTP.

With webDomain set and webAllowedHosts empty, only that domain, loopback names and the
listen address reach the panel; a page of another site whose name resolves to the panel
(DNS rebinding) gets a 421 envelope on every route, the WebSocket included. The
subscription server answers under any name: client apps reach it by many.
"""

from __future__ import annotations

import socket

import pytest
import requests
import websocket
from helpers import setting_rows

ALL = "/panel/api/setting/all"
UPDATE = "/panel/api/setting/update"
STATUS = "/panel/api/server/status"
REFUSAL = "this panel does not answer to the host name this request was sent to"


def saved(api, body: dict) -> None:
    reply = api.post(UPDATE, body)
    assert reply["success"] is True, reply


def with_host(api, method: str, path: str, host: str | None, **kwargs) -> requests.Response:
    """A request of `api`'s session sent with another Host header (the cookie by hand:
    requests matches cookies against the Host)."""
    cookie = "; ".join(f"{name}={value}" for name, value in api.http.cookies.items())
    headers = {"Cookie": cookie, **kwargs.pop("headers", {})}
    if host is not None:
        headers["Host"] = host
    return api.http.request(method, api.url + path, headers=headers, timeout=10, **kwargs)


def refused_for_host(response: requests.Response) -> None:
    assert response.status_code == 421, response.text
    assert response.json() == {
        "success": False,
        "msg": REFUSAL
        + ("; use the panel's domain, or add the name to the webAllowedHosts setting"),
        "obj": None,
    }
    assert response.headers["Cache-Control"] == "no-store"


def port_of(url: str) -> int:
    return int(url.split("//")[1].split("/")[0].rsplit(":", 1)[1])


def test_without_a_domain_any_host_is_served(panel):
    api = panel.client()
    reply = with_host(api, "GET", STATUS, "anything.example")
    assert reply.status_code == 200 and reply.json()["success"] is True


def test_with_a_domain_only_it_loopback_and_the_listen_address_are_served(fresh_panel):
    api = fresh_panel.client()
    saved(api, {"webDomain": "Panel.Example.com"})
    port = port_of(fresh_panel.url)
    for host in (
        "panel.example.com",
        f"PANEL.example.com:{port}",
        "panel.example.com.",
        f"127.0.0.1:{port}",
        "localhost",
        f"localhost:{port}",
        "[::1]:8443",
        "127.0.0.2",
    ):
        reply = with_host(api, "GET", STATUS, host)
        assert reply.status_code == 200 and reply.json()["success"] is True, host
    for host in ("evil.example", "panel.example.com.evil.example", "10.0.0.1", "", "a b"):
        for method, path in (("GET", STATUS), ("GET", "/"), ("POST", "/login"), ("GET", "/x")):
            refused_for_host(with_host(api, method, path, host))
    # Sign-in from a rebinding page: refused before the password is even looked at.
    rebound = with_host(
        api,
        "POST",
        "/login",
        "evil.example",
        json={"username": fresh_panel.username, "password": fresh_panel.password},
    )
    refused_for_host(rebound)
    assert "appliance_session" not in rebound.cookies


def test_an_http_1_0_request_without_a_host_is_refused_when_hosts_are_limited(fresh_panel):
    api = fresh_panel.client()
    saved(api, {"webDomain": "panel.example.com"})
    with socket.create_connection(("127.0.0.1", port_of(fresh_panel.url)), timeout=10) as conn:
        conn.sendall(b"GET /csrf-token HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 421 "), answer[:100]
    assert REFUSAL.encode() in answer


def test_the_websocket_is_refused_for_another_host(fresh_panel):
    api = fresh_panel.client()
    saved(api, {"webDomain": "panel.example.com"})
    cookie = "; ".join(f"{name}={value}" for name, value in api.http.cookies.items())
    url = fresh_panel.url.replace("http", "ws", 1) + "/ws"
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(url, timeout=10, cookie=cookie, host="evil.example")
    assert refused.value.status_code == 421
    ws = websocket.create_connection(
        url,
        timeout=10,
        cookie=cookie,
        host="panel.example.com",
        origin="http://panel.example.com",
    )
    try:
        assert '"type"' in ws.recv()
    finally:
        ws.close()


def test_an_explicit_list_replaces_the_domain_and_star_allows_any(fresh_panel):
    api = fresh_panel.client()
    saved(
        api, {"webDomain": "panel.example.com", "webAllowedHosts": " Admin.example.org, 192.0.2.7 "}
    )
    assert api.post(ALL)["obj"]["webAllowedHosts"] == "admin.example.org, 192.0.2.7"
    refused_for_host(with_host(api, "GET", STATUS, "panel.example.com"))
    for host in ("admin.example.org", "192.0.2.7:2053", "127.0.0.1"):
        assert with_host(api, "GET", STATUS, host).json()["success"] is True, host
    saved(api, {"webAllowedHosts": "*"})
    assert with_host(api, "GET", STATUS, "evil.example").json()["success"] is True


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("panel.example.com:2053", '(got "panel.example.com:2053")'),
        ("a b", '(got "a b")'),
        ("https://panel.example.com/", '(got "https://panel.example.com/")'),
        ("-dash.example", '(got "-dash.example")'),
        ("*, panel.example.com", "* allows every host; list no other name with it"),
    ],
)
def test_bad_allowed_hosts_are_refused_and_change_nothing(panel, value, message):
    api = panel.client()
    before = setting_rows(panel)
    reply = api.post(UPDATE, {"webAllowedHosts": value})
    assert reply["success"] is False
    assert reply["msg"].startswith("webAllowedHosts")
    assert message in reply["msg"]
    assert setting_rows(panel) == before


def test_sign_in_from_the_domains_page_behind_a_proxy_that_rewrites_host(fresh_panel):
    """The Origin is the panel's domain while the Host is the address the proxy used."""
    api = fresh_panel.client()
    saved(api, {"webDomain": "panel.example.com"})
    credentials = {"username": fresh_panel.username, "password": fresh_panel.password}
    signed = requests.post(
        fresh_panel.url + "/login",
        json=credentials,
        headers={"Origin": "https://panel.example.com"},
        timeout=10,
    )
    assert signed.json() == {"success": True, "msg": "signed in", "obj": None}
    other = requests.post(
        fresh_panel.url + "/login",
        json=credentials,
        headers={"Origin": "https://evil.example"},
        timeout=10,
    )
    assert other.status_code == 403


def test_the_subscription_server_answers_under_any_name(fresh_panel):
    api = fresh_panel.client()
    saved(api, {"webDomain": "panel.example.com"})
    reply = requests.get(
        fresh_panel.sub_url + "/sub/no-such-id", headers={"Host": "evil.example"}, timeout=10
    )
    assert reply.status_code == 404
    assert reply.text == "404 Not Found\n"
