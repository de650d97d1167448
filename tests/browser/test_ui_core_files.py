"""The core page's core version picker and geo files in headless Chromium, against the
release host on loopback that tests/core/test_core_releases.py uses: installing a version from
the page, updating the geo files from it, and the routing presets saying which geo file
they need while it is missing.

Each test has a panel of its own, since installing a core or geo files changes its data
directory for good.
"""

from __future__ import annotations

import re

import pytest
from helpers import ok
from release_host import (
    configure,
    core_status,
    good_release,
    installed,
    publish_geofiles,
)
from ui_pages import DESKTOP, expect, go, new_page, sign_in

# The shared browser, and the fixture that fails a test whose pages logged errors or
# left the origin.


pytestmark = pytest.mark.ui

SERVER = "/panel/api/server"


def open_core_page(browser, panel, watches):
    page = new_page(browser, panel, watches, viewport=DESKTOP)
    sign_in(page, panel)
    go(page, "core")
    page.wait_for_selector("[data-testid=core-files]")
    return page


def test_a_core_version_is_installed_from_the_picker(browser, fresh_panel, host, watches):
    api = fresh_panel.client()
    url = host.publish(
        "ui-versions", [good_release("v9.9.9", "9.9.9"), good_release("v9.9.7", "9.9.7")]
    )
    configure(api, coreReleaseUrl=url)
    page = open_core_page(browser, fresh_panel, watches)
    card = page.locator("[data-testid=core-files]")
    picker = card.locator("select[name=coreVersion]")
    expect(picker.locator("option")).to_have_text(["v9.9.9", "v9.9.7"])

    picker.select_option("v9.9.7")
    card.locator("[data-testid=install-core]").click()
    result = card.locator("[data-testid=core-files-result]")
    expect(result).to_contain_text("9.9.7 (v9.9.7) installed", timeout=30_000)
    expect(card.locator("[data-testid=core-files-progress]")).to_have_count(0)
    expect(card.locator("[data-testid=core-running-version]")).to_contain_text("9.9.7")
    assert "9.9.7" in core_status(api)["version"]
    assert b"Xray 9.9.7" in installed(fresh_panel)

    # Switching back to the newest works the same way.
    picker.select_option("v9.9.9")
    card.locator("[data-testid=install-core]").click()
    expect(result).to_contain_text("9.9.9 (v9.9.9) installed", timeout=30_000)
    expect(card.locator("[data-testid=core-running-version]")).to_contain_text("9.9.9")
    assert "9.9.9" in core_status(api)["version"]


def test_a_failed_install_says_why_in_the_card(browser, fresh_panel, host, watches):
    api = fresh_panel.client()
    release = good_release("v9.9.5", "9.9.5")
    asset = next(name for name in release["files"] if name.endswith(".zip"))
    release["files"][asset + ".dgst"] = b"SHA2-256= " + b"0" * 64 + b"\n"
    configure(api, coreReleaseUrl=host.publish("ui-bad-digest", [release]))
    page = open_core_page(browser, fresh_panel, watches)
    card = page.locator("[data-testid=core-files]")
    expect(card.locator("select[name=coreVersion] option")).to_have_text(["v9.9.5"])
    card.locator("[data-testid=install-core]").click()
    result = card.locator("[data-testid=core-files-result]")
    expect(result).to_have_class(re.compile("error-text"), timeout=30_000)
    expect(result).to_contain_text("does not match")
    assert installed(fresh_panel) is None


def test_geo_files_update_from_the_page_and_presets_stop_warning(
    browser, fresh_panel, host, watches
):
    api = fresh_panel.client()
    configure(api, **publish_geofiles(host, "ui-geo", b"ui geoip bytes", b"ui geosite"))
    page = open_core_page(browser, fresh_panel, watches)
    card = page.locator("[data-testid=core-files]")
    for name in ("geoip.dat", "geosite.dat"):
        expect(card.locator(f"tr[data-geofile='{name}']")).to_contain_text("missing")

    # Before anything is saved, the presets that need a missing file name it.
    page.click("[data-tab=routing]")
    expect(page.locator("[data-testid=geo-warning-ads]")).to_contain_text("geosite.dat")
    expect(page.locator("[data-testid=geo-warning-private]")).to_contain_text("geoip.dat")
    expect(page.locator("[data-testid=geo-warning-bittorrent]")).to_have_count(0)
    page.select_option("select[name=country]", "ir")
    country = page.locator("[data-testid=geo-warning-country]")
    expect(country).to_contain_text("geoip.dat, geosite.dat")

    card.locator("[data-testid=update-geofiles]").click()
    expect(card.locator("[data-testid=core-files-result]")).to_contain_text(
        "geoip.dat and geosite.dat updated", timeout=30_000
    )
    for name in ("geoip.dat", "geosite.dat"):
        row = card.locator(f"tr[data-geofile='{name}']")
        expect(row).not_to_contain_text("missing")
        expect(row).to_contain_text(re.compile(r"\d{4}|\d{1,2}/\d{1,2}/\d{2}"))
    assert installed(fresh_panel, "geoip.dat") == b"ui geoip bytes"
    assert all(f["installed"] for f in ok(api.get(SERVER + "/getGeofiles")))

    # Once the files are there, the warnings are gone.
    expect(page.locator("[data-testid^=geo-warning-]")).to_have_count(0)
