"""The browser UI: the single page and its static files, served from `appliance/assets/`.

The UI has no build step (plain ES modules and vendored libraries with their versions in
their file names), so serving it is serving files. They are package data, found beside
the package's modules wherever it lives: a checkout, an installed wheel, or the unpack
folder of the PyInstaller bundle (build.spec puts them at the same place in it).

The page is `index.html` with the panel's base path written into its `<base href>`, so
every relative URL the scripts build (API calls, the WebSocket, assets) stays under the
base path whatever it is set to. The page answers at the base path (the sign-in screen)
and at `panel/<page>` (the signed-in pages; the script picks the page from the address).

Every UI response carries a Content-Security-Policy that allows this origin only. Vue's
runtime-only build renders components written as htm tagged templates that call `h()`,
so nothing is compiled from strings in the browser and no `'unsafe-eval'` is needed;
there is no inline script or style either. Versioned vendor files are cached for a year;
the page and the project's own files are revalidated on every load (ETag and
Last-Modified make that a 304), so an upgrade reaches browsers at once.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass

from bottle import HTTPResponse, request, static_file

from appliance.web.api import current_session
from appliance.web.routes import RouteTable

# The pages are the ones the script's router declares (`const PAGES = {...}` in main.js,
# one `name: {` line each): read from there, a page added to the UI is an address the
# server answers at once, so reloading or bookmarking it never lands on an API error.
ROUTER_SCRIPT = os.path.join("js", "main.js")
ROUTER_PAGES = re.compile(r"^const PAGES = \{\n(.*?)^\};", re.MULTILINE | re.DOTALL)
ROUTER_PAGE = re.compile(r"^\s+([a-z][a-z0-9-]*): \{", re.MULTILINE)
HOST_PATTERN = re.compile(r"[A-Za-z0-9.\-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?")
MIME_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".json": "application/json",
    ".svg": "image/svg+xml",
}
# Libraries the first render needs; the chart and QR code libraries load when used.
EAGER_LIBRARIES = ("vue-", "htm-")
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"


def assets_dir() -> str:
    """Where the UI's files are: the package's `assets` folder."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")


def page_names(root: str) -> list[str]:
    """The names of the UI's pages, as its router declares them."""
    with open(os.path.join(root, ROUTER_SCRIPT), encoding="utf-8") as fh:
        declared = ROUTER_PAGES.search(fh.read())
    if declared is None:
        raise RuntimeError(f"{ROUTER_SCRIPT} declares no PAGES: the UI's pages are unknown")
    return ROUTER_PAGE.findall(declared.group(1))


def module_preloads(root: str) -> str:
    """`<link rel="modulepreload">` for every module the page imports before it renders:
    the project's scripts and the libraries `lib.js` imports statically. Announced in the
    HTML, they download in parallel instead of one import level after another."""
    scripts = sorted(
        os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
        for folder, _, names in os.walk(os.path.join(root, "js"))
        for name in names
        if name.endswith(".js")
    )
    vendor = os.path.join(root, "vendor")
    eager = sorted(
        f"vendor/{name}"
        for name in (os.listdir(vendor) if os.path.isdir(vendor) else [])
        if name.startswith(EAGER_LIBRARIES) and name.endswith((".js", ".mjs"))
    )
    return "\n".join(
        f'<link rel="modulepreload" href="assets/{html.escape(path)}">' for path in eager + scripts
    )


def content_security_policy(host: str) -> str:
    """Nothing but this origin: scripts, styles, images, fonts and connections.

    `connect-src 'self'` covers ws:/wss: of the same host in current browsers; the host is
    named explicitly as well for older ones, when the Host header looks like a host."""
    connect = "'self'"
    if HOST_PATTERN.fullmatch(host):
        connect += f" ws://{host} wss://{host}"
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"font-src 'self'; connect-src {connect}; object-src 'none'; base-uri 'self'; "
        "form-action 'self'; frame-ancestors 'none'"
    )


def _security_headers(response: HTTPResponse) -> HTTPResponse:
    response.set_header("Content-Security-Policy", content_security_policy(_host()))
    response.set_header("X-Content-Type-Options", "nosniff")
    response.set_header("Referrer-Policy", "no-referrer")
    response.set_header("X-Frame-Options", "DENY")
    return response


def _host() -> str:
    return request.environ.get("HTTP_HOST", "")


@dataclass(frozen=True)
class UiRouteNeeds:
    base_path: str  # written into the page's <base href>


def ui_routes(needs: UiRouteNeeds) -> RouteTable:
    """GET routes for the page and its files; kept out of the API's OpenAPI document."""
    table = RouteTable(tag="ui")
    root = assets_dir()
    preloads = module_preloads(root)

    def page() -> HTTPResponse:
        with open(os.path.join(root, "index.html"), encoding="utf-8") as fh:
            text = fh.read()
        text = text.replace("{{BASE_PATH}}", html.escape(needs.base_path, quote=True))
        text = text.replace("{{MODULE_PRELOADS}}", preloads)
        # Whether the cookie is a live session: the page then skips asking the API, which
        # would answer a signed-out browser with a 401 in its console on every visit.
        text = text.replace("{{SIGNED_IN}}", "1" if current_session() is not None else "0")
        response = HTTPResponse(text, 200)
        response.content_type = "text/html; charset=utf-8"
        response.set_header("Cache-Control", "no-store")
        return _security_headers(response)

    options = {"auth": False, "csrf": False, "raw": True}
    table.get("/", "The sign-in page", **options)(page)
    table.get("/panel", "The dashboard page", **options)(page)
    table.get("/panel/", "The dashboard page", **options)(page)
    names = "|".join(page_names(root))
    table.get(f"/panel/<name:re:{names}>", "A page of the panel", **options)(lambda name: page())

    @table.get("/assets/<path:path>", "A static file of the UI", **options)
    def asset(path):
        mimetype = MIME_TYPES.get(os.path.splitext(path)[1].lower(), True)
        response = static_file(path, root=root, mimetype=mimetype, charset="utf-8")
        if response.status_code in (200, 304):
            versioned = path.startswith("vendor/")
            response.set_header("Cache-Control", IMMUTABLE if versioned else REVALIDATE)
            _security_headers(response)
        return response

    return table
