"""Sign-in, sign-out, the CSRF token and the WebSocket: the routes outside /panel/api.

A sign-in that succeeds sets two cookies: the session's, and a device cookie that marks
the browser as one that signed in as that user, which keeps it out of the limit other
browsers share for that username (`services.accounts.throttle`).

Sign-in takes JSON only, and refuses a browser's request whose Origin is another site:
a page elsewhere can post a form, or text without a preflight, but not JSON, so it cannot
sign a visitor's browser into an account of its choosing (login CSRF). Scripts send no
Origin and are unaffected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bottle import request, response

from appliance.errors import Forbidden, ServiceError, Unauthorized
from appliance.web.api import current_session, note_sign_in_attempt
from appliance.web.http import (
    Reply,
    UnsupportedMediaType,
    body,
    client_address,
    is_panel_origin,
    is_tls,
    raw_header,
)
from appliance.web.routes import READ, RouteTable

if TYPE_CHECKING:
    from appliance.services.accounts.auth import Auth, SignedIn
    from appliance.web.hub import Hub

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionRouteNeeds:
    auth: Auth
    hub: Hub  # the WebSocket's subscriptions
    base_path: str  # the session cookie's path
    # Names the panel's pages may be served under: its domain and allowed hosts.
    origin_names: Callable[[], frozenset[str]]
    trusted_proxies: Callable[[], list]  # whose X-Forwarded-* headers count
    # Gives back the database connection of a greenlet that lives on without it.
    release_store: Callable[[], None]


def session_routes(needs: SessionRouteNeeds) -> RouteTable:
    table = RouteTable(tag="session")
    auth = needs.auth

    @table.post(
        "/login",
        "Sign in with username, password and, when enabled, twoFactorCode",
        auth=False,
        csrf=False,
        max_body=8192,
        body={"username": "string", "password": "string", "twoFactorCode": "string"},
    )
    def login():
        _check_sign_in_request(needs.trusted_proxies(), needs.origin_names())
        data = body(8192)
        if not isinstance(data, dict):
            raise ServiceError("send username and password as a JSON object")
        if isinstance(data.get("username"), str):
            note_sign_in_attempt(data["username"])
        address = client_address(needs.trusted_proxies())
        signed_in = auth.login(
            data.get("username"),
            data.get("password"),
            data.get("twoFactorCode"),
            address,
            request.get_cookie(auth.device_cookie_name),
        )
        log.info("admin signed in from %s", address)
        _set_cookies(auth, signed_in, needs.base_path, is_tls(needs.trusted_proxies()))
        return Reply("signed in")

    @table.post("/logout", "End this session", auth=False)
    def logout():
        auth.logout(request.get_cookie(auth.cookie_name))
        response.delete_cookie(auth.cookie_name, path=needs.base_path)
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
        "/getTwoFactorEnable",
        "Whether sign-in asks for a two-factor code",
        auth=False,
        csrf=False,
        effect=READ,
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
        if request.environ.get("HTTP_UPGRADE", "").lower() == "websocket":
            refusal = websocket_refusal(
                request.environ, needs.trusted_proxies(), needs.origin_names()
            )
            if refusal:
                raise Forbidden(refusal)
        session = current_session()
        if session is None:
            raise Unauthorized("the WebSocket needs a signed-in session cookie")
        if socket is None:
            raise ServiceError("this route expects a WebSocket upgrade request")
        subscriber = needs.hub.subscribe(socket, session.id)
        needs.release_store()
        try:
            while socket.receive() is not None:
                pass
        except Exception:  # the browser went away mid-frame: same as a close
            pass
        finally:
            subscriber.close()
        return ""

    return table


def _set_cookies(auth: Auth, signed_in: SignedIn, path: str, secure: bool) -> None:
    """The session's cookie and the device cookie, both out of reach of scripts."""
    for name, value, max_age in (
        (auth.cookie_name, signed_in.session, auth.session_lifetime()),
        (auth.device_cookie_name, signed_in.device, auth.device_cookie_lifetime),
    ):
        response.set_cookie(
            name, value, path=path, max_age=max_age, httponly=True, samesite="lax", secure=secure
        )


def websocket_refusal(environ: dict, trusted: list, names: frozenset[str]) -> str | None:
    """Why this WebSocket upgrade may not go ahead, or None when it may.

    The socket is opened with the session cookie, which the browser also sends when a page
    of another origin opens it (another port of the same host included): the Origin
    header is what tells them apart. Browsers always send one on a WebSocket upgrade, so
    an upgrade without it comes from a program holding the cookie, and is refused too: a
    program can name the panel's address as its Origin."""
    origin = environ.get("HTTP_ORIGIN")
    if not origin:
        return (
            "the WebSocket upgrade has no Origin header; browsers send one, and other "
            "clients must send the panel's own address as Origin"
        )
    if not is_panel_origin(origin, environ, trusted, names):
        return (
            "the WebSocket may be opened only from the panel's own pages; the Origin header "
            "names another site (the panel's address or its webDomain setting is expected)"
        )
    return None


def _check_sign_in_request(trusted: list, names: frozenset[str]) -> None:
    content_type = (request.content_type or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise UnsupportedMediaType(
            "send the sign-in as a JSON object with Content-Type: application/json "
            f"(got {content_type or 'no Content-Type'})"
        )
    origin = raw_header("Origin")
    if origin and not is_panel_origin(origin, request.environ, trusted, names):
        raise Forbidden(
            "sign-in from a page of another site is refused: the Origin header names "
            "neither this request's Host nor the panel's domain"
        )
