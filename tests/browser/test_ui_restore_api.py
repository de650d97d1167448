"""A backup restored the way an admin does it: downloaded from the Settings page, then
uploaded through the same page's file input in headless Chromium.

Chromium frames a file upload its own way (its boundary, the part headers it writes),
which is exactly what curl-made uploads never showed; the restore must work on every
database the panel runs on, so this module also runs with --db=postgres and --db=mysql.
"""

from __future__ import annotations

import pytest
from helpers import create_inbound, free_port, ok
from panels import start_panel, stop_and_drop
from ui_pages import DESKTOP, go, signed_in_page

pytestmark = pytest.mark.ui

CLIENTS = "/panel/api/clients"
RESTART_WAIT = 40
# Enough clients for a backup of a few hundred kilobytes, like a real panel's.
BACKED_UP_CLIENTS = 1500


@pytest.fixture
def filled_panel(tmp_path):
    server = start_panel(tmp_path)
    api = server.client()
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": free_port(),
            "remark": "restore-ui",
            "settings": {"decryption": "none"},
        },
    )
    items = [
        {"client": {"email": f"kept-{n:05d}@example.com"}, "inboundIds": [inbound["id"]]}
        for n in range(BACKED_UP_CLIENTS)
    ]
    created = api.http.post(api.url + f"{CLIENTS}/bulkCreate", json=items, timeout=300)
    assert ok(created.json())["created"] == BACKED_UP_CLIENTS
    yield server, api, inbound
    stop_and_drop(server)


def emails(api) -> set[str]:
    return {client["email"] for client in ok(api.get(f"{CLIENTS}/list"))}


def test_a_backup_downloaded_from_the_page_restores_through_its_file_input(
    browser, filled_panel, watches, tmp_path
):
    server, api, inbound = filled_panel
    kept = emails(api)
    page = signed_in_page(browser, server, watches, viewport=DESKTOP)
    go(page, "settings")
    with page.expect_download() as download:
        page.click("[data-testid=download-db]")
    backup = tmp_path / "from-the-page.db"
    download.value.save_as(backup)
    assert backup.stat().st_size > 300_000

    ok(api.post(f"{CLIENTS}/add", {"client": {"email": "after@x"}, "inboundIds": [inbound["id"]]}))
    assert emails(api) == kept | {"after@x"}

    mark = len(server.lines)
    form = page.locator("form", has=page.locator("input[type=file][name=db]"))
    form.locator("input[type=file]").set_input_files(str(backup))
    form.locator("button[type=submit]").click()
    page.locator(".modal").get_by_role("button", name="OK").click()
    page.wait_for_selector(".toast.warning >> text=database imported")
    server.wait_listening(mark, timeout=RESTART_WAIT)

    # The restored data is the backup's: the client added after it is gone.
    assert emails(server.client()) == kept
    assert "Traceback" not in server.output(), server.output()
