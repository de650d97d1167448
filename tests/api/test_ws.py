"""The WebSocket at /ws: who may open it, from which pages, how long it lives, what it
pushes, and what idle or dead sockets cost.

The panel runs as a real process; sockets are opened with websocket-client, the way a
browser tab holds one. Memory and connection counts are read from the panel process
itself, so nothing extra is exposed over HTTP for the sake of the tests.
"""

from __future__ import annotations

import json
import socket
import time

import psutil
import pytest
import websocket
from helpers import (
    PUSH_WAIT,
    connect,
    cookie_header,
    next_message,
    panel_origin,
    run_appliance,
    ws_url,
)
from panels import start_panel
from test_auth_api import NEW_PASSWORD, change_user, code_at, current_step, enable_two_factor
from test_server_api import check_status_shape

IDLE_SOCKETS = 200
RSS_GROWTH_LIMIT = 10 * 1024 * 1024
DEAD_SOCKET_WAIT = 30
CLOSE_WAIT = 10
OTHER_SITE = "the Origin header names another site"


def wait_closed(ws, deadline: float) -> None:
    """Read until the panel closes the socket; fails if it is still open at `deadline`."""
    while time.time() < deadline:
        ws.settimeout(max(deadline - time.time(), 0.1))
        try:
            opcode, _ = ws.recv_data(control_frame=True)
        except (websocket.WebSocketConnectionClosedException, ConnectionError):
            return
        except websocket.WebSocketTimeoutException:
            break
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return
    raise AssertionError("the panel kept the socket open")


def assert_forbidden(panel, client, fragment: str, **options) -> None:
    """The handshake fails with 403 and an envelope saying why: no socket, no message."""
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(
            ws_url(panel), timeout=PUSH_WAIT, cookie=cookie_header(client), **options
        )
    assert refused.value.status_code == 403
    envelope = json.loads(refused.value.resp_body)
    assert envelope["success"] is False
    assert fragment in envelope["msg"]


def assert_refused(panel, **options) -> None:
    """The handshake itself fails with 401: no socket is ever opened."""
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(ws_url(panel), timeout=PUSH_WAIT, **options)
    assert refused.value.status_code == 401
    envelope = json.loads(refused.value.resp_body)
    assert envelope["success"] is False
    assert "signed-in session" in envelope["msg"]


@pytest.fixture
def admin(panel):
    return panel.client()


def test_refused_without_a_cookie(panel):
    assert_refused(panel)


def test_refused_with_a_wrong_cookie(panel, admin):
    name = next(iter(admin.http.cookies.keys()))
    assert_refused(panel, cookie=f"{name}=not-a-session")


def test_bearer_token_is_not_enough(panel, admin):
    created = admin.post("/panel/api/setting/apiTokens/create", json={"name": "ws-bearer"})
    assert created["success"] is True
    assert_refused(panel, header=[f"Authorization: Bearer {created['obj']['token']}"])


def test_refused_after_logout(panel):
    client = panel.client()
    cookie = cookie_header(client)
    assert client.post("/logout")["success"] is True
    assert_refused(panel, cookie=cookie)


def panel_port(panel) -> int:
    return int(panel_origin(panel).rsplit(":", 1)[1])


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:{other_port}",  # another site on the same host: same cookie jar
        "http://localhost:{port}",  # another name for the host is another origin
        "http://attacker.example",
        "null",  # a sandboxed frame or a file
    ],
)
def test_foreign_origins_are_refused_before_the_upgrade(panel, admin, origin):
    origin = origin.format(port=panel_port(panel), other_port=panel_port(panel) + 1)
    assert_forbidden(panel, admin, OTHER_SITE, origin=origin)


def test_a_cookie_upgrade_without_origin_is_refused(panel, admin):
    assert_forbidden(panel, admin, "has no Origin header", suppress_origin=True)


def test_the_panels_own_origin_and_its_web_domain_are_accepted(panel, admin):
    ws = connect(panel, admin, origin=panel_origin(panel))
    try:
        check_status_shape(next_message(ws, "status", time.time() + PUSH_WAIT)["data"])
    finally:
        ws.close()
    saved = admin.post("/panel/api/setting/update", json={"webDomain": "panel.example"})
    assert saved["success"] is True, saved
    try:
        # Behind a reverse proxy on the default port, and directly on the panel's port.
        for origin in ("https://panel.example", f"http://panel.example:{panel_port(panel)}"):
            ws = connect(panel, admin, origin=origin)
            try:
                next_message(ws, "status", time.time() + PUSH_WAIT)
            finally:
                ws.close()
        assert_forbidden(panel, admin, OTHER_SITE, origin="https://panel.example:8443")
        assert_forbidden(panel, admin, OTHER_SITE, origin="https://other.example")
    finally:
        admin.post("/panel/api/setting/update", json={"webDomain": ""})


def test_https_through_a_proxy_is_the_panels_own_origin(panel, admin):
    """A proxy that ends TLS in front of the panel leaves Host as the browser sent it: the
    https origin of that host and port is the panel's own, declared or not. Once a trusted
    proxy says the browser used https, a plain-HTTP origin is another site."""
    origin = panel_origin(panel).replace("http://", "https://")
    forwarded = {"origin": origin, "header": ["X-Forwarded-Proto: https"]}
    ws = connect(panel, admin, **forwarded)
    try:
        next_message(ws, "status", time.time() + PUSH_WAIT)
    finally:
        ws.close()
    saved = admin.post("/panel/api/setting/update", json={"trustedProxies": "127.0.0.1"})
    assert saved["success"] is True, saved
    try:
        ws = connect(panel, admin, **forwarded)
        try:
            next_message(ws, "status", time.time() + PUSH_WAIT)
        finally:
            ws.close()
        plain = {**forwarded, "origin": panel_origin(panel)}
        assert_forbidden(panel, admin, OTHER_SITE, **plain)
    finally:
        admin.post("/panel/api/setting/update", json={"trustedProxies": ""})


def test_logout_closes_the_sessions_open_socket(panel, admin):
    leaving = panel.client()
    ws, kept = connect(panel, leaving), connect(panel, admin)
    try:
        next_message(ws, "status", time.time() + PUSH_WAIT)
        assert leaving.post("/logout")["success"] is True
        wait_closed(ws, time.time() + CLOSE_WAIT)
        # Another session's socket stays: only the ended session's sockets close.
        next_message(kept, "status", time.time() + PUSH_WAIT)
    finally:
        ws.close()
        kept.close()


def test_a_password_change_closes_the_sockets_of_the_other_sessions(fresh_panel):
    changer, other = fresh_panel.client(), fresh_panel.client()
    ended, kept = connect(fresh_panel, other), connect(fresh_panel, changer)
    try:
        next_message(ended, "status", time.time() + PUSH_WAIT)
        reply = change_user(changer, fresh_panel, fresh_panel.username, NEW_PASSWORD)
        assert reply["success"] is True, reply
        wait_closed(ended, time.time() + CLOSE_WAIT)
        next_message(kept, "status", time.time() + PUSH_WAIT)
    finally:
        ended.close()
        kept.close()


def test_turning_on_two_factor_closes_the_sockets_of_the_other_sessions(fresh_panel):
    changer, other = fresh_panel.client(), fresh_panel.client()
    ended, kept = connect(fresh_panel, other), connect(fresh_panel, changer)
    try:
        secret = "JBSWY3DPEHPK3PXPJBSWY3DP"
        reply = enable_two_factor(changer, secret, code_at(secret, current_step()))
        assert reply["success"] is True, reply
        wait_closed(ended, time.time() + CLOSE_WAIT)
        next_message(kept, "status", time.time() + PUSH_WAIT)
    finally:
        ended.close()
        kept.close()


def test_an_offline_admin_reset_closes_every_socket(fresh_panel):
    """`admin reset` runs in another process: the panel finds the ended sessions itself."""
    ws = connect(fresh_panel, fresh_panel.client())
    try:
        next_message(ws, "status", time.time() + PUSH_WAIT)
        env = {"APPLIANCE_DB": fresh_panel.db_url} if fresh_panel.db_url else {}
        result = run_appliance("admin", "reset", "--data-dir", fresh_panel.data_dir, env=env)
        assert result.returncode == 0, result.stderr
        wait_closed(ws, time.time() + CLOSE_WAIT)
    finally:
        ws.close()


def test_plain_get_without_upgrade_is_an_envelope(panel, admin):
    response = admin.raw("GET", "/ws")
    assert response.json() == {
        "success": False,
        "msg": "this route expects a WebSocket upgrade request",
        "obj": None,
    }


def test_status_is_pushed_every_few_seconds(panel, admin):
    ws = connect(panel, admin)
    try:
        deadline = time.time() + PUSH_WAIT
        first = next_message(ws, "status", deadline)
        second = next_message(ws, "status", deadline)
    finally:
        ws.close()
    check_status_shape(first["data"])
    check_status_shape(second["data"])


def test_invalidate_follows_a_change_by_another_client(panel, admin):
    ws = connect(panel, admin)
    try:
        other = panel.client()
        token = other.post("/panel/api/setting/apiTokens/create", json={"name": "ws-other"})
        assert token["success"] is True
        next_message(ws, "invalidate", time.time() + PUSH_WAIT, resource="apiTokens")

        bearer = panel.client(login=False)
        bearer.http.headers["Authorization"] = f"Bearer {token['obj']['token']}"
        added = bearer.post(
            "/panel/api/inbounds/add",
            json={"protocol": "socks", "port": 31081, "settings": {"auth": "noauth"}},
        )
        assert added["success"] is True, added
        next_message(ws, "invalidate", time.time() + PUSH_WAIT, resource="inbounds")
    finally:
        ws.close()


def test_failed_change_sends_no_invalidate(panel, admin):
    ws = connect(panel, admin)
    try:
        failed = admin.post("/panel/api/inbounds/del/987654")
        assert failed["success"] is False
        admin.post("/panel/api/setting/apiTokens/create", json={"name": "ws-marker"})
        message = next_message(ws, "invalidate", time.time() + PUSH_WAIT)
        assert message["resource"] == "apiTokens"  # the failed delete pushed nothing first
    finally:
        ws.close()


def test_restart_panel_sends_a_notification(tmp_path):
    server = start_panel(tmp_path)
    try:
        client = server.client()
        ws = connect(server, client)
        try:
            reply = client.post("/panel/api/setting/restartPanel")
            assert reply["success"] is True
            message = next_message(ws, "notification", time.time() + PUSH_WAIT)
            assert message["title"] and message["body"]
            assert message["severity"] in ("info", "warning", "error", "success")
        finally:
            ws.close()
    finally:
        server.stop()


def ws_connections(panel) -> int:
    """Accepted sockets the panel process still holds open on its own port, in any state:
    a peer that vanished leaves the panel's side in CLOSE_WAIT until the panel closes it."""
    port = int(panel.url.split(":")[2].split("/")[0])
    process = psutil.Process(panel.process.pid)
    return sum(
        1
        for conn in process.net_connections(kind="tcp")
        if conn.status != psutil.CONN_LISTEN and conn.raddr and conn.laddr.port == port
    )


def test_idle_sockets_do_not_grow_memory(tmp_path):
    server = start_panel(tmp_path)
    sockets = []
    try:
        client = server.client()
        for _ in range(IDLE_SOCKETS):
            sockets.append(connect(server, client))
        for ws in sockets[:5]:
            next_message(ws, "status", time.time() + PUSH_WAIT)
        before = server.rss()
        time.sleep(10)  # several status pushes to every socket
        for ws in sockets:  # drain what the panel queued, so every socket stays alive
            ws.settimeout(0.01)
            try:
                while ws.recv():
                    pass
            except websocket.WebSocketTimeoutException:
                pass
        after = server.rss()
        assert after - before < RSS_GROWTH_LIMIT, (before, after)
        assert ws_connections(server) >= IDLE_SOCKETS
        assert server.process.poll() is None
    finally:
        for ws in sockets:
            ws.close()
        server.stop()


def test_dead_sockets_are_dropped(tmp_path):
    server = start_panel(tmp_path)
    try:
        client = server.client()
        baseline = ws_connections(server)
        sockets = [connect(server, client) for _ in range(20)]
        for ws in sockets:
            next_message(ws, "status", time.time() + PUSH_WAIT)
        assert ws_connections(server) >= baseline + 20
        for ws in sockets:  # gone without a close frame, as when a laptop lid shuts
            ws.sock.shutdown(socket.SHUT_RDWR)
            ws.sock.close()
        deadline = time.time() + DEAD_SOCKET_WAIT
        while ws_connections(server) > baseline and time.time() < deadline:
            time.sleep(0.5)
        assert ws_connections(server) <= baseline
        # The panel still pushes to a live socket after dropping the dead ones.
        ws = connect(server, client)
        try:
            next_message(ws, "status", time.time() + PUSH_WAIT)
        finally:
            ws.close()
    finally:
        server.stop()
