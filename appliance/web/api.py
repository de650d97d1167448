"""The Bottle app of the panel port, built from the route table.

One plugin does what every route needs, so no handler repeats it: authenticate (session
cookie or `Authorization: Bearer`, within the token's scope), enforce CSRF for cookie
sessions on unsafe methods, turn the handler's result or `ServiceError` into the
envelope, gather the changes a call publishes and deliver them once it succeeded (with
the route's declared `resource` for any its services did not name), add to the message of a client
change that it is stored but not running while the core is out of step, write the audit
log entry of every call that may change something (after the answer when the database
failed the call: a locked SQLite file would hold the answer up a second time), and turn
anything unexpected into an envelope error with the details in the panel log only. A
hook marks every answer of the app `nosniff` and, unless the route chose its own caching
(the UI's files do), `no-store`: answers carry secrets. The plugin also times every call
into its route group's histogram (the route table's tag), for the metrics page.

A bearer token that is unknown, disabled, expired or outside its scope gets one and the
same refusal after the same single lookup, so the answer tells a caller nothing about
which it was. The audit entry of an out-of-scope call is written once the answer has
gone, for the same reason. A node that trusts its managing panel's CA also wants a
verified client certificate with every call of a node token, and says so when one is
missing: the token was right, and the admin needs to know what else is. What a `read`
token is answered passes through `redaction.redact` here, once for every route: a
monitoring credential sees the panel's records but none of its secrets.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import bottle
import gevent
from bottle import HTTPError, HTTPResponse, request, response
from pony.orm import TransactionIntegrityError

from appliance.errors import Forbidden, ServiceError, TooManyRequests, Unauthorized, Unavailable
from appliance.runtime.changes import KINDS, CallChanges
from appliance.runtime.timings import TimingsByName
from appliance.services.admin.audit import Action
from appliance.web.http import (
    BodyTooLarge,
    JsonStream,
    JsonText,
    Reply,
    body_read,
    client_address,
    encode,
    envelope,
    fail,
    raw_header,
    refuse_nul,
)
from appliance.web.redaction import redact, redact_text
from appliance.web.routes import UNSAFE_METHODS, Route, scope_allows
from appliance.web.server import CLIENT_CERTIFICATE

if TYPE_CHECKING:
    from appliance.services.accounts.auth import Auth
    from appliance.services.accounts.tokens import Tokens
    from appliance.services.admin.audit import AuditLog

log = logging.getLogger(__name__)

SESSION_KEY = "appliance.session"
# Signing in and out: allowed on an instance that refuses writes, to read what it says.
SESSION_PATHS = frozenset({"/login", "/logout"})
# The one route a session signed in with credentials scanners try may call.
CHANGE_CREDENTIALS = "/panel/api/setting/updateUser"
# (kind, name) of who is calling, once known: ("admin", username) or ("token", name).
ACTOR_KEY = "appliance.actor"
# The scope of the API token a call came with; absent for sessions and public routes.
SCOPE_KEY = "appliance.token-scope"
TOKEN_REFUSED = (
    "the API token is unknown, disabled or expired, or its scope does not cover this route"
)
INTERNAL_ERROR = "internal error; the panel log has the details"
NODE_CERTIFICATE_MISSING = (
    "this panel trusts the CA of the panel managing it (nodes/mtls/trustCA): a call with a "
    "node token must come over HTTPS with a client certificate that CA signed, and this one "
    "came without; set the node's tlsVerifyMode to mtls on the managing panel"
)


@dataclass(frozen=True)
class ApiNeeds:
    auth: Auth  # session cookies
    tokens: Tokens  # bearer tokens
    # Opens the collector of one call's changes (ChangeNotice.collecting).
    collect_changes: Callable[[], AbstractContextManager[CallChanges]]
    # The error to answer with when `exc` means the database cannot be reached, else None.
    unavailable: Callable[[BaseException], ServiceError | None]
    audit: AuditLog  # where every change and sign-in is written down
    trusted_proxies: Callable[[], list]  # whose X-Forwarded-For names the caller
    core_lag: Callable[[], str]  # why the core does not run what is stored; "" while it does
    # A bearer call that names the panel managing this one (X-Panel-Guid) tells it here.
    managed_by: Callable[[str], None] = lambda guid: None
    # Whether calls with a node token must come with a verified client certificate (a
    # managing panel's CA is trusted: nodes/mtls/trustCA, in effect since the start).
    node_certificate_needed: Callable[[], bool] = lambda: False
    # Why this instance refuses every write but signing in and out ("" while it does not):
    # a newer release migrated the shared database past what this one knows.
    writes_refused: Callable[[], str] = lambda: ""
    # How long calls take, by route group: read by the metrics page.
    request_timings: TimingsByName = field(default_factory=TimingsByName)


class ApiPlugin:
    name = "appliance-api"
    api = 2

    def __init__(self, needs: ApiNeeds):
        self.needs = needs

    def apply(self, callback, route):
        spec: Route = route.config["spec"]
        undeclared = set(_declared(spec)) - set(KINDS)
        if undeclared:
            raise ValueError(f"{spec.path} names no declared kind of change: {undeclared}")
        handle = self.handler(callback, spec)
        timings = self.needs.request_timings.named(spec.tags[0] if spec.tags else "other")

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return handle(*args, **kwargs)
            finally:
                timings.observe(time.perf_counter() - started)

        return timed

    def handler(self, callback, spec: Route):
        """The call with everything the plugin does around it."""

        def wrapper(*args, **kwargs):
            request.environ[ACTOR_KEY] = None
            with self.needs.collect_changes() as changes:
                try:
                    request.environ[SESSION_KEY] = self.identify(spec)
                    self._refuse_writes_behind_the_schema(spec)
                    _check_declared_length(spec.max_body)
                    refuse_nul(kwargs, "the address")
                    for name, value in request.query.allitems():
                        refuse_nul(value, name)
                    result = callback(*args, **kwargs)
                except ServiceError as exc:
                    changes.drop()
                    if isinstance(exc, TooManyRequests):
                        response.set_header("Retry-After", str(exc.retry_after))
                    self.audit(spec, kwargs, exc.status, exc.msg)
                    return fail(exc.msg, exc.status)
                except HTTPResponse as exc:
                    changes.drop()
                    refusal = exc.status_line if exc.status_code >= 400 else ""
                    self.audit(spec, kwargs, exc.status_code, refusal)
                    raise
                except Exception as exc:
                    changes.drop()
                    msg, status = self.failure(exc)
                    # The database failed this call: its entry would wait for the same lock
                    # or server, so it is written once the answer has gone.
                    self.audit(spec, kwargs, status, msg, later=status == 503)
                    return fail(msg, status)
                status = (
                    result.status_code if isinstance(result, HTTPResponse) else response.status_code
                )
                self.audit(spec, kwargs, status, "")
                if request.method in UNSAFE_METHODS:
                    for resource in _declared(spec):
                        changes.declare(resource)
            return self.answer(spec, result)

        return wrapper

    def _refuse_writes_behind_the_schema(self, spec: Route) -> None:
        if request.method in UNSAFE_METHODS and spec.path not in SESSION_PATHS:
            reason = self.needs.writes_refused()
            if reason:
                raise Unavailable(reason)

    def answer(self, spec: Route, result):
        """The envelope of a call that succeeded (its changes already delivered)."""
        if spec.raw or isinstance(result, HTTPResponse):
            return result
        if request.environ.get(SCOPE_KEY) == "read":
            result = _redacted(result)
        if isinstance(result, JsonStream):
            return result.envelope()
        if not isinstance(result, Reply):
            result = Reply("", result)
        msg = result.msg
        note = self.lag_note(spec)
        if note:
            msg = f"{msg}; {note}" if msg else note
        return envelope(True, msg, result.obj, extra=result.extra)

    def lag_note(self, spec: Route) -> str:
        """What to add to the answer of a change to clients while the core is out of
        step: such changes are not tested by the core (at 100,000 clients a test costs a
        second), so "saved" alone would hide that the core does not run them. Inbound
        and template saves are tested before they are stored, and need no note."""
        if spec.resource != "clients" or request.method not in UNSAFE_METHODS:
            return ""
        reason = self.needs.core_lag()
        return f"stored, but not running: the core is out of step: {reason}" if reason else ""

    def failure(self, exc: Exception) -> tuple[str, int]:
        """The message and status of an unexpected exception, logged as it deserves."""
        unavailable = self.needs.unavailable(exc)
        if unavailable is not None:
            # Rolled back by the db_session; the next request reconnects.
            log.warning("%s %s: %s", request.method, request.path, unavailable.msg)
            return unavailable.msg, unavailable.status
        if isinstance(exc, TransactionIntegrityError):
            # Two requests passed a uniqueness check together (the networked
            # databases let them); the index refused the second one.
            log.info("%s %s: %s", request.method, request.path, exc)
            return (
                "this change collides with one saved at the same moment (a name or "
                "email that must be unique); nothing was changed, try again"
            ), 200
        log.exception("%s %s failed", request.method, request.path)
        return INTERNAL_ERROR, 500

    def audit(
        self, spec: Route, params: dict, status: int, refusal: str, later: bool = False
    ) -> None:
        """The audit entry of a call that may change something, when the caller is known
        (a session, a token, or the username a sign-in names): a caller who proved
        nothing is not written down, so nobody can fill the log from outside. `later`
        writes it after the answer has gone."""
        actor = request.environ.get(ACTOR_KEY)
        if not spec.acts or actor is None:
            return
        if spec.routine and not refusal and status < 400:
            return
        kind, name = actor
        action = Action(
            actor=name,
            actor_kind=kind,
            method=request.method,
            route=spec.path,
            params={key: str(value) for key, value in params.items()},
            address=client_address(self.needs.trusted_proxies()),
            status=status,
            success=not refusal and status < 400,
            message=refusal,
            body=body_read(),
        )
        if later or (kind == "token" and status == 401):
            gevent.spawn(self._write, action)  # after the answer, as fast as any refusal
        else:
            self._write(action)

    def _write(self, action: Action) -> None:
        """Write an entry; a failure to write is logged and never changes the answer, since
        the call itself has already happened."""
        try:
            self.needs.audit.record(action)
        except Exception as exc:
            unavailable = self.needs.unavailable(exc)
            if unavailable is None:
                log.exception(
                    "the audit entry of %s %s was not written", action.method, action.route
                )
            else:
                log.warning(
                    "the audit entry of %s %s was not written: %s",
                    action.method,
                    action.route,
                    unavailable.msg,
                )

    def identify(self, spec: Route):
        """The caller's session (None for bearer tokens and public routes); for a
        WebSocket, the one its upgrade was allowed for. Notes who is calling for the
        audit log as soon as that is known."""
        if SESSION_KEY in request.environ:
            return request.environ[SESSION_KEY]
        authorization = raw_header("Authorization")
        if authorization[:7].lower() == "bearer ":
            if not spec.auth:
                return None
            caller = self.needs.tokens.authenticate(authorization[7:].strip())
            if caller is None:
                raise Unauthorized(TOKEN_REFUSED)
            request.environ[ACTOR_KEY] = ("token", caller.name)
            request.environ[SCOPE_KEY] = caller.scope
            if not scope_allows(caller.scope, spec):
                raise Unauthorized(TOKEN_REFUSED)
            if (
                caller.scope == "node"
                and self.needs.node_certificate_needed()
                and not request.environ.get(CLIENT_CERTIFICATE)
            ):
                raise Forbidden(NODE_CERTIFICATE_MISSING)
            managing = raw_header("X-Panel-Guid")
            if managing:
                self.needs.managed_by(managing)
            return None
        session = self.needs.auth.session(request.get_cookie(self.needs.auth.cookie_name))
        if session is None:
            if spec.auth:
                raise Unauthorized("sign in first: no valid session cookie or API token")
            return None
        request.environ[ACTOR_KEY] = ("admin", session.username)
        if spec.csrf and request.method in UNSAFE_METHODS:
            sent = raw_header("X-CSRF-Token")
            if not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
                raise CsrfError(
                    "missing or wrong X-CSRF-Token header; get the token from GET /csrf-token"
                )
        if session.must_change_credentials and spec.auth and spec.path != CHANGE_CREDENTIALS:
            raise Forbidden(
                "the username and password are among the first ones scanners try; change "
                f"them first with POST {CHANGE_CREDENTIALS}"
            )
        return session


def _redacted(result):
    """A handler's result as a `read` token may see it (see `redaction`)."""
    if isinstance(result, Reply):
        return Reply(result.msg, _redacted(result.obj), result.extra)
    if isinstance(result, JsonText):
        return JsonText(redact_text(result.text))
    if isinstance(result, JsonStream):
        return JsonStream(iter([redact_text("".join(result.pieces))]))
    return redact(result)


class CsrfError(ServiceError):
    status = 403


def _declared(spec: Route) -> tuple[str, ...]:
    """The resources a successful unsafe call of `spec` changes (its declared effect)."""
    if not spec.resource:
        return ()
    return (spec.resource,) if isinstance(spec.resource, str) else spec.resource


def _check_declared_length(max_bytes: int) -> None:
    """Refuse a body announced as too large before any handler runs, whether or not the
    handler reads it; `http.body` enforces the same limit on bodies of unknown length."""
    length = request.content_length
    if length > max_bytes:
        raise BodyTooLarge(f"the request body is {length} bytes; the limit here is {max_bytes}")


def current_session():
    return request.environ.get(SESSION_KEY)


def note_sign_in_attempt(username: str) -> None:
    """The sign-in route names who is signing in, for the audit log: the username sent,
    whether or not it turns out to be right."""
    request.environ[ACTOR_KEY] = ("admin", username)


class OnceCompiledRouter(bottle.Router):
    """Bottle's router (pinned at 0.13.4), compiling its combined patterns of routes with
    wildcards once, before the first request, instead of again after every route added:
    with this panel's routes that was 67 compiles of a growing pattern, a third of a
    second of every start."""

    def __init__(self, *args, **kwargs):
        self._stale: set[str] = set()
        super().__init__(*args, **kwargs)

    def _compile(self, method):
        self._stale.add(method)

    def match(self, environ):
        while self._stale:
            super()._compile(self._stale.pop())
        return super().match(environ)


def build_app(needs: ApiNeeds, routes: list[Route]) -> bottle.Bottle:
    app = bottle.Bottle(catchall=True, autojson=False)
    # Set past Bottle's guard against plugins replacing its attributes: no route exists yet.
    vars(app)["router"] = OnceCompiledRouter()
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
        msg = INTERNAL_ERROR
    else:
        msg = str(error.body or error.status_line)
    return encode(False, msg)
