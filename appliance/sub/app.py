"""The subscription server's WSGI app: `/sub/`, `/json/` and `/yaml/` (paths from settings).

One URL serves every app: on the plain subscription path (`/sub/`) the format follows
the app's User-Agent by the `subFormatRules` setting (base64 share links, core JSON
configs, Mihomo YAML or a sing-box profile; appliance.domain.sub_formats), and a browser
gets the info page. `?format=` (base64, json, clash, singbox) names the format outright
on any subscription path; `/json/` and `/yaml/` keep serving their own format, each
while its switch is on.

The info page is the admin's template when `subTemplatePage` holds one
(appliance.services.clients.sub_templates), under the same Content-Security-Policy: its
one script is still the copy buttons' (`copy_script`), and every value is HTML-escaped.

`/sub/<subId>?format=info` answers JSON for the subscription's owner: the usage, quota
and expiry of the page, and this month's usage day by day (`month`).

It is a bare WSGI callable rather than a Bottle app: client apps poll it all day, every
request is one of three GETs, and routing them is a prefix test. Settings are read on
every request (a dictionary lookup), so a changed path, title or switch applies at once;
the listening address, port and certificate apply on the next start, like the panel's.

A subscription id that matches nothing, matches only clients that are disabled, out of
quota or expired, or whose clients sit on no enabled inbound, gets the same 404 as an
unknown path: the answer tells nothing about which ids exist.

Links point at the `subDomain` setting when it is set (the server still answers under
any name it is reached by), else at the host name the request came to; a Host header
that is not a host name is replaced by the address the server listens on.

A database that is unavailable for a while (a networked server gone, the SQLite file
locked or read-only) gets 503 with the reason and a Retry-After: client apps keep the
configuration they have and ask again.

With `hwidEnable` on, every answer for a subscription (each format, the info page and
`?format=info`) first admits the requesting device (appliance.services.clients.devices),
before any cached body is looked at. A device refused gets 403 with
`x-hwid-max-devices-reached: true` and the `hwidAnnounce` text as `Announce`: apps such
as Happ show that text on an answer that is not 200 and keep the configuration they
had, where a 404 would look like a deleted subscription.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Callable
from urllib.parse import parse_qs, quote

from appliance.domain.sub_formats import FORMATS_TEXT, format_for_agent, format_name
from appliance.errors import ServiceError
from appliance.runtime.wsgi import client_address, request_host
from appliance.services.admin.settings_rules import trusted_networks
from appliance.services.clients.devices import Devices, device_headers, effective_limit
from appliance.services.clients.sub_templates import expiry_text, import_links, page_values
from appliance.services.clients.subscriptions import Lookup, Subscriptions
from appliance.sub.page import COPY_SCRIPT, SCRIPT_HASH, info_page

log = logging.getLogger(__name__)

# (format, path setting, switch setting); the links path has no switch of its own.
ROUTES = (
    ("links", "subPath", ""),
    ("json", "subJsonPath", "subJsonEnable"),
    ("yaml", "subYamlPath", "subYamlEnable"),
)
CONTENT_TYPES = {
    "links": "text/plain; charset=utf-8",
    "json": "application/json; charset=utf-8",
    "yaml": "text/yaml; charset=utf-8",
    "singbox": "application/json; charset=utf-8",
    "html": "text/html; charset=utf-8",
}
PAGE_SECURITY = [
    # The page loads nothing: styles inline, QR codes inline SVG, and the one script it
    # runs is its copy buttons', allowed by hash. No other site may frame it (its links
    # are credentials a framing page could dress up).
    (
        "Content-Security-Policy",
        f"default-src 'none'; style-src 'unsafe-inline'; script-src '{SCRIPT_HASH}'; "
        "frame-ancestors 'none'; form-action 'self'",
    ),
    ("X-Frame-Options", "DENY"),
    # A subscription URL is a credential: it must not leave in a Referer.
    ("Referrer-Policy", "no-referrer"),
]
NOT_FOUND = b"404 Not Found\n"
HEADER_UNSAFE = re.compile(r"[^\x20-\x7e]")


class SubscriptionApp:
    """`refresh`, when given, runs first in every request: a worker process drops there
    what it cached from before the panel's last change (appliance.sub_worker)."""

    def __init__(
        self,
        settings,
        subscriptions: Subscriptions,
        devices: Devices,
        refresh: Callable[[], None] | None = None,
    ):
        self.settings = settings
        self.subscriptions = subscriptions
        self.devices = devices
        self.refresh = refresh

    def __call__(self, environ, start_response):
        try:
            status, headers, body = self.respond(environ)
        except Exception as exc:
            unavailable = self.subscriptions.unavailable(exc)
            if unavailable is not None:
                # Client apps keep what they have and ask again later.
                log.warning("subscription request: %s", unavailable.msg)
                status, headers = "503 Service Unavailable", [("Retry-After", "30")]
                body = f"{unavailable.msg}\n".encode()
            else:
                log.exception("subscription request %s failed", environ.get("PATH_INFO"))
                status, headers, body = "500 Internal Server Error", [], b"internal error\n"
        headers.append(("Content-Length", str(len(body))))
        headers.append(("X-Content-Type-Options", "nosniff"))
        if not any(name == "Content-Type" for name, _ in headers):
            headers.append(("Content-Type", "text/plain; charset=utf-8"))
        start_response(status, headers)
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

    def respond(self, environ) -> tuple[str, list[tuple[str, str]], bytes]:
        if self.refresh is not None:
            self.refresh()
        get = self.settings.get
        if not get("subEnable"):
            return _not_found()
        method = environ.get("REQUEST_METHOD", "GET")
        route = self._route(_path(environ))
        query = _query(environ) if route is not None else {}
        if (
            method == "POST"
            and route is not None
            and route[0] == "links"
            and "deleteDevice" in query
        ):
            return self._delete_device(environ, route[1], query)
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", [("Allow", "GET, HEAD")], b""
        if route is None:
            return _not_found()
        path_kind, sub_id = route
        if "\x00" in sub_id:  # no subId holds one, and PostgreSQL could not even look
            return _not_found()
        asked = query.get("format")
        # The info page is for a browser on the plain path; it shows the share links.
        # `?format=info` gives the subscription's owner its usage as JSON there.
        info = path_kind == "links" and asked == ["info"]
        page = not asked and path_kind == "links" and _wants_html(environ, query)
        if info:
            kind = "links"
        elif asked:
            kind = format_name(asked[0])
            if kind is None:
                message = f"unknown format '{_header_safe(asked[0][:40])}': use {FORMATS_TEXT}\n"
                return "400 Bad Request", [], message.encode()
        elif path_kind == "links" and not page:
            kind = format_for_agent(environ.get("HTTP_USER_AGENT", ""), get("subFormatRules"))
        else:
            kind = path_kind
        devices = get("hwidEnable")
        headers = device_headers(environ) if devices else None
        lookup = self.subscriptions.lookup(sub_id, headers["hwid"] if devices else "")
        if lookup is None:
            return _not_found()
        if devices:
            refused = self._admit(environ, headers, lookup)
            if refused is not None:
                return refused
        name, authority = request_host(environ)
        address = get("subDomain") or name
        rendered = self.subscriptions.render(kind, lookup, address)
        if not rendered.found:
            return _not_found()
        page_url = self._url(environ, authority, "subPath", sub_id)
        headers = self._headers(lookup, page_url)
        if path_kind == "links":
            # What the plain path answers depends on these request headers.
            headers.append(("Vary", "Accept, User-Agent"))
        if info:
            usage = lookup.usage
            answer = {
                "title": self._title(lookup),
                "upload": usage.upload,
                "download": usage.download,
                "total": usage.total,
                "expire": usage.expire,
                "month": self.subscriptions.month(lookup),
            }
            headers.append(("Content-Type", CONTENT_TYPES["json"]))
            return "200 OK", headers, json.dumps(answer).encode()
        if page:
            json_url = (
                self._url(environ, authority, "subJsonPath", sub_id) if get("subJsonEnable") else ""
            )
            yaml_url = (
                self._url(environ, authority, "subYamlPath", sub_id) if get("subYamlEnable") else ""
            )
            body = self._custom_page(lookup, rendered.links, page_url, json_url, yaml_url)
            body = body or info_page(
                title=self._title(lookup),
                usage=lookup.usage,
                month=self.subscriptions.month(lookup),
                links=rendered.links,
                sub_url=page_url,
                json_url=json_url,
                yaml_url=yaml_url,
                devices=self.devices.of_sub_id(lookup.sub_id) if get("hwidEnable") else None,
            )
            return (
                "200 OK",
                [*headers, *PAGE_SECURITY, ("Content-Type", CONTENT_TYPES["html"])],
                body,
            )
        headers.append(("Content-Type", CONTENT_TYPES[kind]))
        return "200 OK", headers, rendered.body

    def _custom_page(
        self, lookup: Lookup, links: list[str], sub_url: str, json_url: str, yaml_url: str
    ) -> bytes | None:
        """The page by the admin's template (subTemplatePage); None for the built-in one,
        also when the template fails for this subscription (logged)."""
        template = self.subscriptions.page_template()
        if template is None:
            return None
        values = self.subscriptions.common_values(lookup, frozenset())
        values.update(
            page_values(
                usage=lookup.usage,
                expire_text=expiry_text(lookup.usage.expire),
                links=links,
                sub_url=sub_url,
                json_url=json_url,
                yaml_url=yaml_url,
                apps=import_links(self._title(lookup), sub_url, yaml_url),
                copy_script=COPY_SCRIPT,
            )
        )
        try:
            return template.render(values).encode()
        except ServiceError as exc:
            log.warning(
                "subscription page %s: %s; served the built-in page", lookup.sub_id, exc.msg
            )
            return None

    def _delete_device(
        self, environ, sub_id: str, query: dict[str, list[str]]
    ) -> tuple[str, list[tuple[str, str]], bytes]:
        """The page's remove button: forget one device, then back to the page (303)."""
        if not self.settings.get("hwidEnable") or "\x00" in sub_id:
            return _not_found()
        lookup = self.subscriptions.lookup(sub_id)
        if lookup is None:
            return _not_found()
        hwid = query["deleteDevice"][0]
        if not self.devices.remove_of_sub_id(lookup.sub_id, hwid):
            return "400 Bad Request", [], b"no such device on this subscription\n"
        _, authority = request_host(environ)
        location = self._url(environ, authority, "subPath", sub_id)
        return "303 See Other", [("Location", location), ("Cache-Control", "no-store")], b""

    def _admit(
        self, environ, headers: dict[str, str], lookup: Lookup
    ) -> tuple[str, list[tuple[str, str]], bytes] | None:
        """None when the device of `headers` is served; else the refusal."""
        get = self.settings.get
        limit = effective_limit(
            (client.device_limit for client, _ in lookup.clients), get("hwidDefaultLimit")
        )
        address = client_address(environ, trusted_networks(get("trustedProxies")))
        if self.devices.admit(lookup.sub_id, headers, address, limit, lookup.device_slot):
            return None
        refusal = [("x-hwid-max-devices-reached", "true"), ("Cache-Control", "no-store")]
        if get("hwidAnnounce"):
            refusal.append(("Announce", _base64_value(get("hwidAnnounce"))))
        if not headers["hwid"]:
            return "403 Forbidden", refusal, b"this subscription needs the device id (x-hwid)\n"
        return "403 Forbidden", refusal, b"the device limit of this subscription is reached\n"

    def _route(self, path: str) -> tuple[str, str] | None:
        """(format, subscription id) of a request path, None when it is none of ours."""
        for kind, path_key, switch in ROUTES:
            prefix = self.settings.get(path_key)
            if path.startswith(prefix) and (not switch or self.settings.get(switch)):
                sub_id = path[len(prefix) :]
                return (kind, sub_id) if sub_id and "/" not in sub_id else None
        return None

    def _headers(self, lookup: Lookup, page_url: str) -> list[tuple[str, str]]:
        """The spec's subscription headers. Support-Url and Announce are sent only when
        set; Routing only when routing is enabled and rules are set."""
        get = self.settings.get
        usage = lookup.usage
        headers = [
            (
                "Subscription-Userinfo",
                f"upload={usage.upload}; download={usage.download}; total={usage.total}; "
                f"expire={usage.expire}",
            ),
            ("Profile-Title", _base64_value(self._title(lookup))),
            ("Profile-Web-Page-Url", _header_safe(get("subProfileUrl") or page_url)),
            # subUpdates is in hours; the header is in minutes.
            ("Profile-Update-Interval", str(get("subUpdates") * 60)),
            ("Routing-Enable", "true" if get("subEnableRouting") else "false"),
            ("Cache-Control", "no-store"),
        ]
        if get("subSupportUrl"):
            headers.append(("Support-Url", _header_safe(get("subSupportUrl"))))
        if get("subAnnounce"):
            headers.append(("Announce", _base64_value(get("subAnnounce"))))
        rules = get("subRoutingRules")
        if get("subEnableRouting") and rules:
            headers.append(("Routing", _routing_value(rules)))
        return headers

    def _title(self, lookup: Lookup) -> str:
        return self.settings.get("subTitle") or lookup.title

    def _url(self, environ, authority: str, path_key: str, sub_id: str) -> str:
        """The address of this subscription in another format, as a client reaches it:
        the subDomain (with the port the request used) when set, else the Host."""
        domain = self.settings.get("subDomain")
        if domain:
            port = authority.rsplit(":", 1)[1] if re.search(r":\d+$", authority) else ""
            authority = f"{domain}:{port}" if port else domain
        scheme = environ.get("wsgi.url_scheme", "http")
        return f"{scheme}://{authority}{self.settings.get(path_key)}{quote(sub_id, safe='')}"


def _not_found() -> tuple[str, list[tuple[str, str]], bytes]:
    return "404 Not Found", [], NOT_FOUND


def _path(environ) -> str:
    """PATH_INFO as text: the server hands it over percent-decoded, as latin-1."""
    raw = environ.get("PATH_INFO", "")
    try:
        return raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return ""


def _query(environ) -> dict[str, list[str]]:
    query = environ.get("QUERY_STRING")
    return parse_qs(query) if query else {}


def _wants_html(environ, query: dict[str, list[str]]) -> bool:
    if query.get("html") == ["1"]:
        return True
    return "text/html" in environ.get("HTTP_ACCEPT", "")


def _base64_value(text: str) -> str:
    """A header value that carries any Unicode: the "base64:" form client apps decode."""
    return "base64:" + base64.b64encode(text.encode()).decode()


def _header_safe(text: str) -> str:
    return HEADER_UNSAFE.sub("", text)


def _routing_value(rules: str) -> str:
    """Sent as is when it is one line of printable ASCII (a client app's routing deep
    link, say); otherwise base64 of it, since a header cannot hold line breaks."""
    if not HEADER_UNSAFE.search(rules):
        return rules
    return base64.b64encode(rules.encode()).decode()
