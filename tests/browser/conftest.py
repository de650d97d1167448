"""The fixtures of the browser tests: one Chromium per module, the folder screenshots go
to (tests/artifacts/, not committed; the ones in docs/screenshots/ were picked from there),
the watches that fail a test whose pages did what a user should never see, and a panel
on the stand-in core for the pages that show the core."""

from __future__ import annotations

import os

import pytest
from core_panel import CORE_ENV
from panels import start_panel, stop_and_drop
from ui_pages import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, Watch, playwright_api


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def artifacts():
    os.makedirs(ARTIFACTS, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def watches():
    collected: list[Watch] = []
    yield collected
    for watch in collected:
        watch.check()


@pytest.fixture(scope="module")
def core_panel(tmp_path_factory):
    """A panel on Debian's V2Ray 4.34, for a module's pages that show the core."""
    server = start_panel(tmp_path_factory.mktemp("ui-core"), env=CORE_ENV)
    yield server
    stop_and_drop(server)
