"""The route table: every panel route declared once, with what it needs.

Each route names its method, path, a one-line summary, whether it needs a signed-in
caller, and which resource a successful call changes (pushed to browsers as
`invalidate`). The Bottle app and the OpenAPI document are both generated from this
table, so the published description cannot drift from what is served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_MAX_BODY = 1 << 20


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
