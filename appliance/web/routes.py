"""The route table: every panel route declared once, with what it needs.

Each route names its method, path, a one-line summary, whether it needs a signed-in
caller, and which resource a successful call changes (pushed to browsers as
`invalidate`). The Bottle app and the OpenAPI document are both generated from this
table, so the published description cannot drift from what is served.

Every route declares its effect: `read` (it only reads what the panel stores), `write`
(it may change something) or `egress` (it makes the panel open a connection somewhere: a
node, an upstream, a release list, a mail server, a probe). Left unsaid, a GET route reads
and any other writes; a route that connects says so whatever its method, since where the
panel connects is itself something a caller may be able to choose. Writes and egress are
actions: written to the audit log (a `routine` one only when it is refused), and out of
reach of `read` tokens. What each token scope may call is decided below (`scope_allows`),
from the table alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_MAX_BODY = 1 << 20
READ = "read"
WRITE = "write"
EGRESS = "egress"
EFFECTS = (READ, WRITE, EGRESS)


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Callable
    summary: str
    auth: bool = True
    resource: str | tuple[str, ...] = ""  # what a successful call changes; "" for reads
    csrf: bool = True
    max_body: int = DEFAULT_MAX_BODY
    body: dict | None = None  # OpenAPI schema of the request body, when it has one
    form: bool = False  # the body is a form rather than JSON
    raw: bool = False  # the handler builds its own response (files, upgrades)
    tags: tuple[str, ...] = ()
    # read, write or egress; "" stands for read on GET and write on any other method.
    effect: str = ""
    # A change a machine makes every few seconds (a managing panel's pushes): audited only
    # when refused, so that one entry per node every ten seconds does not bury the admins'.
    routine: bool = False

    def __post_init__(self) -> None:
        if not self.effect:
            object.__setattr__(self, "effect", READ if self.method == "GET" else WRITE)
        if self.effect not in EFFECTS:
            raise ValueError(f"{self.method} {self.path}: effect must be one of {EFFECTS}")

    @property
    def acts(self) -> bool:
        """Whether a call may change something or reach outside: audited, refused to
        `read` tokens."""
        return self.effect != READ


# What a managing panel needs to drive this panel as a node: its inbounds and clients
# (with their traffic), the core's status and restart, outbound traffic, the nodes it
# manages in turn, its certificate paths and its own update.
NODE_PREFIXES = ("/panel/api/inbounds/", "/panel/api/clients/")
NODE_ROUTES = frozenset(
    {
        ("GET", "/panel/api/server/status"),
        ("POST", "/panel/api/server/restartCoreService"),
        ("GET", "/panel/api/core/getOutboundsTraffic"),
        ("GET", "/panel/api/server/descendants"),
        ("GET", "/panel/api/server/getWebCertFiles"),
        ("GET", "/panel/api/server/getPanelUpdateInfo"),
        ("POST", "/panel/api/server/updatePanel"),
        ("GET", "/panel/api/server/clientIps"),
    }
)
# Reads that hand out every secret the panel holds (password hashes, the TOTP secret, the
# chat-bot token): a whole-database download is for admin tokens only.
SECRET_READS = frozenset({"/panel/api/server/getDb", "/panel/api/server/getMigration"})


def scope_allows(scope: str, route: Route) -> bool:
    """Whether an API token of `scope` may call `route`."""
    if scope == "admin":
        return True
    if scope == "read":
        return route.effect == READ and route.path not in SECRET_READS
    if scope == "node":
        return route.path.startswith(NODE_PREFIXES) or (route.method, route.path) in NODE_ROUTES
    return False


@dataclass
class RouteTable:
    prefix: str = ""
    tag: str = ""
    routes: list[Route] = field(default_factory=list)

    def add(self, method: str, path: str, summary: str, **options) -> Callable:
        def register(handler: Callable) -> Callable:
            self.routes.append(
                Route(
                    method,
                    self.prefix + path,
                    handler,
                    summary,
                    tags=(self.tag,) if self.tag else (),
                    **options,
                )
            )
            return handler

        return register

    def get(self, path: str, summary: str, **options) -> Callable:
        return self.add("GET", path, summary, **options)

    def post(self, path: str, summary: str, **options) -> Callable:
        return self.add("POST", path, summary, **options)

    def delete(self, path: str, summary: str, **options) -> Callable:
        return self.add("DELETE", path, summary, **options)
