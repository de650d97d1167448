"""What the browser tests share: Debian's Chromium driven by Playwright, the watch on every
page load, and the steps most tests start with (sign in, open a page, find a row).

Every page load is watched: a console error, an uncaught exception, a request to another
origin or a UI response without its Content-Security-Policy fails the test that caused
it (the `watches` fixture of conftest.py checks them when the test ends). A module that
imports this one is skipped where Playwright or Chromium is missing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
from helpers import TESTS

CHROMIUM = "/usr/bin/chromium"


CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


ARTIFACTS = str(TESTS / "artifacts")


WAIT_MS = 15_000


DESKTOP = {"width": 1280, "height": 900}


PHONE = {"width": 375, "height": 812}


playwright_api = pytest.importorskip("playwright.sync_api")


expect = playwright_api.expect
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)


@dataclass
class Watch:
    """What one browser context did that a user should never see or cause."""

    origin: str
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    missing_csp: list[str] = field(default_factory=list)

    def attach(self, context) -> None:
        context.on("request", self._request)
        context.on("response", self._response)
        context.on("page", self._page)

    def _page(self, page) -> None:
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def _request(self, request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("data", "blob", "about"):
            return
        if f"{parts.scheme.replace('ws', 'http')}://{parts.netloc}" != self.origin:
            self.foreign.append(request.url)

    def _response(self, response) -> None:
        path = urlsplit(response.url).path
        is_ui = response.request.resource_type == "document" or path.startswith("/assets/")
        csp = response.headers.get("content-security-policy", "")
        if is_ui and "default-src 'self'" not in csp:
            self.missing_csp.append(response.url)

    def check(self) -> None:
        assert self.errors == [], self.errors
        assert self.foreign == [], self.foreign
        assert self.missing_csp == [], self.missing_csp


def origin_of(server) -> str:
    parts = urlsplit(server.url)
    return f"{parts.scheme}://{parts.netloc}"


def new_page(browser, server, watches: list, **options):
    context = browser.new_context(locale="en-US", **options)
    watch = Watch(origin_of(server))
    watch.attach(context)
    watches.append(watch)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    return page


def sign_in(page, server, code: str | None = None) -> None:
    page.goto(server.url + "/")
    page.fill("#login-username", server.username)
    page.fill("#login-password", server.password)
    page.click("button[type=submit]")
    if code is not None:
        page.fill("#login-code", code)
        page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=core-badge]")


def signed_in_page(browser, server, watches: list, **options):
    """A watched page (see `new_page`) on which the admin has signed in: where most tests
    start, so the sign-in steps live in one place."""
    page = new_page(browser, server, watches, **options)
    sign_in(page, server)
    return page


def open_inbound_form(page, remark: str, port: int):
    """Opens the add-inbound form on the inbounds page with `remark` and `port` filled in;
    returns the form for the fields the test sets next."""
    page.click("[data-testid=add-inbound]")
    form = page.locator("#inbound-form")
    form.locator("input[name=remark]").fill(remark)
    form.locator("input[name=port]").fill(str(port))
    return form


def form_field(form, label: str):
    """The input or select of the form field labelled `label`."""
    return form.locator("label.field", has_text=label).locator("input, select").first


def go(page, name: str) -> None:
    page.click(f"a[data-page={name}]")
    page.wait_for_selector(f"a[data-page={name}][aria-current=page]")


def client_row(page, email: str):
    return page.locator(f"tr[data-email='{email}']")


def screenshot(page, name: str) -> None:
    """A screenshot of the whole page into tests/artifacts/ (not committed): the ones in
    docs/screenshots/ are picked from there by hand, so a test run never rewrites them
    with whatever rows earlier tests left."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, name), full_page=True)
