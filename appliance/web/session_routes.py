"""Sign-in, sign-out, the CSRF token and the WebSocket: the routes outside /panel/api."""

from __future__ import annotations

import logging

from bottle import request, response

from appliance.errors import ServiceError, Unauthorized
from appliance.web.api import current_session
from appliance.web.http import Reply, body, client_address, is_tls
from appliance.web.routes import RouteTable

log = logging.getLogger(__name__)


def session_routes(panel) -> RouteTable:
    table = RouteTable(tag="session")
    auth = panel.auth

    @table.post(
        "/login",
        "Sign in with username, password and, when enabled, twoFactorCode",
        auth=False,
        csrf=False,
        max_body=8192,
        body={"username": "string", "password": "string", "twoFactorCode": "string"},
    )
    def login():
        data = body(8192)
        if not isinstance(data, dict):
            raise ServiceError("send username and password as a JSON object or a form")
        address = client_address(panel.trusted_proxies())
        cookie = auth.login(
            data.get("username"), data.get("password"), data.get("twoFactorCode"), address
        )
        log.info("admin signed in from %s", address)
        response.set_cookie(
            auth.cookie_name,
            cookie,
            path=panel.base_path,
            max_age=auth.session_lifetime(),
            httponly=True,
            samesite="lax",
            secure=is_tls(panel.trusted_proxies()),
        )
        return Reply("signed in")

    @table.post("/logout", "End this session", auth=False)
    def logout():
        auth.logout(request.get_cookie(auth.cookie_name))
        response.delete_cookie(auth.cookie_name, path=panel.base_path)
        return Reply("signed out")

    @table.get(
        "/csrf-token", "The CSRF token to send as X-CSRF-Token on unsafe requests", auth=False
    )
    def csrf_token():
        session = current_session()
        if session is None:
            raise Unauthorized("sign in first: the CSRF token belongs to a session")
        return session.csrf_token

    @table.post(
        "/getTwoFactorEnable", "Whether sign-in asks for a two-factor code", auth=False, csrf=False
    )
    def two_factor_enabled():
        return auth.two_factor_enabled()

    @table.get(
        "/ws",
        "WebSocket: status, invalidate, notification and coreState messages",
        auth=False,
        raw=True,
    )
    def websocket():
        socket = request.environ.get("wsgi.websocket")
        if current_session() is None:
            raise Unauthorized("the WebSocket needs a signed-in session cookie")
        if socket is None:
            raise ServiceError("this route expects a WebSocket upgrade request")
        subscriber = panel.hub.subscribe(socket)
        panel.store.release()
        try:
            while socket.receive() is not None:
                pass
        except Exception:  # the browser went away mid-frame: same as a close
            pass
        finally:
            subscriber.close()
        return ""

    return table
