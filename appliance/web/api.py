"""The Bottle app of the panel port, built from the route table.

One plugin does what every route needs, so no handler repeats it: authenticate (session
cookie or `Authorization: Bearer`), enforce CSRF for cookie sessions on unsafe methods,
turn the handler's result or `ServiceError` into the envelope, push `invalidate` after a
successful change, and turn anything unexpected into an envelope error with the details
in the panel log only. A hook marks every answer of the app `nosniff` and, unless the
route chose its own caching (the UI's files do), `no-store`: answers carry secrets.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import bottle
from bottle import HTTPError, HTTPResponse, request, response
from pony.orm import TransactionIntegrityError

from appliance.errors import ServiceError, TooManyRequests, Unauthorized
from appliance.web.http import BodyTooLarge, JsonStream, Reply, encode, envelope, fail, raw_header
from appliance.web.routes import UNSAFE_METHODS, Route

if TYPE_CHECKING:
    from appliance.services.accounts.auth import Auth
    from appliance.services.accounts.tokens import Tokens

log = logging.getLogger(__name__)

SESSION_KEY = "appliance.session"


@dataclass(frozen=True)
class ApiNeeds:
    auth: Auth  # session cookies
    tokens: Tokens  # bearer tokens
    changed: Callable[[str], None]  # after a successful change to a resource
    # The error to answer with when `exc` means the database cannot be reached, else None.
    unavailable: Callable[[BaseException], ServiceError | None]


class ApiPlugin:
    name = "appliance-api"
    api = 2

    def __init__(self, needs: ApiNeeds):
        self.needs = needs

    def apply(self, callback, route):
        spec: Route = route.config["spec"]

        def wrapper(*args, **kwargs):
            try:
                request.environ[SESSION_KEY] = self.identify(spec)
                _check_declared_length(spec.max_body)
                result = callback(*args, **kwargs)
            except ServiceError as exc:
                if isinstance(exc, TooManyRequests):
                    response.set_header("Retry-After", str(exc.retry_after))
                return fail(exc.msg, exc.status)
            except HTTPResponse:
                raise
            except Exception as exc:
                unavailable = self.needs.unavailable(exc)
                if unavailable is not None:
                    # Rolled back by the db_session; the next request reconnects.
                    log.warning("%s %s: %s", request.method, request.path, unavailable.msg)
                    return fail(unavailable.msg, unavailable.status)
                if isinstance(exc, TransactionIntegrityError):
                    # Two requests passed a uniqueness check together (the networked
                    # databases let them); the index refused the second one.
                    log.info("%s %s: %s", request.method, request.path, exc)
                    return fail(
                        "this change collides with one saved at the same moment (a name or "
                        "email that must be unique); nothing was changed, try again"
                    )
                log.exception("%s %s failed", request.method, request.path)
                return fail("internal error; the panel log has the details", 500)
            if spec.resource and request.method in UNSAFE_METHODS:
                resources = (spec.resource,) if isinstance(spec.resource, str) else spec.resource
                for resource in resources:
                    self.needs.changed(resource)
            if spec.raw or isinstance(result, HTTPResponse):
                return result
            if isinstance(result, Reply):
                return envelope(True, result.msg, result.obj)
            if isinstance(result, JsonStream):
                return result.envelope()
            return envelope(True, "", result)

        return wrapper

    def identify(self, spec: Route):
        """The caller's session (None for bearer tokens and public routes); for a
        WebSocket, the one its upgrade was allowed for."""
        if SESSION_KEY in request.environ:
            return request.environ[SESSION_KEY]
        authorization = raw_header("Authorization")
        if authorization[:7].lower() == "bearer ":
            if not spec.auth:
                return None
            if not self.needs.tokens.authenticate(authorization[7:].strip()):
                raise Unauthorized("the API token is unknown or disabled")
            return None
        session = self.needs.auth.session(request.get_cookie(self.needs.auth.cookie_name))
        if session is None:
            if spec.auth:
                raise Unauthorized("sign in first: no valid session cookie or API token")
            return None
        if spec.csrf and request.method in UNSAFE_METHODS:
            sent = raw_header("X-CSRF-Token")
            if not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
                raise CsrfError(
                    "missing or wrong X-CSRF-Token header; get the token from GET /csrf-token"
                )
        return session


class CsrfError(ServiceError):
    status = 403


def _check_declared_length(max_bytes: int) -> None:
    """Refuse a body announced as too large before any handler runs, whether or not the
    handler reads it; `http.body` enforces the same limit on bodies of unknown length."""
    length = request.content_length
    if length > max_bytes:
        raise BodyTooLarge(f"the request body is {length} bytes; the limit here is {max_bytes}")


def current_session():
    return request.environ.get(SESSION_KEY)


def build_app(needs: ApiNeeds, routes: list[Route]) -> bottle.Bottle:
    app = bottle.Bottle(catchall=True, autojson=False)
    app.install(ApiPlugin(needs))
    app.add_hook("after_request", _no_store_nosniff)
    for spec in routes:
        app.route(spec.path, spec.method, spec.handler, spec=spec)
    app.default_error_handler = _error_page
    return app


def _no_store_nosniff() -> None:
    if "Cache-Control" not in response.headers:
        response.set_header("Cache-Control", "no-store")
    response.set_header("X-Content-Type-Options", "nosniff")


def _error_page(error: HTTPError) -> str:
    """Bottle's own errors (unknown route, wrong method, crashes) as envelopes."""
    error.content_type = "application/json; charset=utf-8"
    if error.status_code == 404:
        msg = f"no such route: {request.method} {request.path}"
    elif error.status_code == 405:
        allowed = error.headers.get("Allow", "")
        msg = f"{request.method} is not allowed on {request.path}; use {allowed}"
    elif error.status_code >= 500:
        if error.exception is not None:
            log.error("unhandled error on %s %s: %r", request.method, request.path, error.exception)
        msg = "internal error; the panel log has the details"
    else:
        msg = str(error.body or error.status_line)
    return encode(False, msg)
