"""server/getPanelUpdateInfo and server/updatePanel against a release host on loopback.

A threaded HTTP server plays the release host: a GitHub-shaped release list whose assets
are tiny shell scripts standing in for the panel binary (they answer `version` as the
binary does), with checksums as a `.sha256` asset or as the asset's `digest` field.

Over HTTP, a panel started from the package reads the release information and refuses to
replace itself. The replacing itself is exercised in process, where the binary's path
and frozen state can be given: a file in a temporary directory plays the running binary,
and the restart is recorded instead of re-executing the test runner.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from helpers import ok, refused
from release_host import ReleaseHost

from appliance import __version__
from appliance.errors import ServiceError
from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.admin.update import NOT_FROZEN, PanelUpdate
from appliance.store import Store

SERVER = "/panel/api/server"
MACHINE = "x86_64"
ASSET = "appliance-linux-amd64"
OLD_BINARY = b"#!/bin/sh\necho 0.1.0\n"


def panel_script(version: str) -> bytes:
    """A stand-in panel binary: `version` prints the version, anything else fails."""
    return f'#!/bin/sh\n[ "$1" = version ] && echo {version} && exit 0\nexit 2\n'.encode()


class PanelReleaseHost(ReleaseHost):
    """The release host with the fields the update dialog shows: name, page, date, notes."""

    def describe(self, name: str, release: dict) -> dict:
        return {
            "name": f"Appliance {release['tag']}",
            "html_url": f"{self.url}/{name}/{release['tag']}",
            "published_at": "2026-01-02T03:04:05Z",
            "body": "What changed",
        }


def with_checksum_file(tag: str, binary: bytes, checksum: bytes | None = None) -> dict:
    digest = checksum if checksum is not None else hashlib.sha256(binary).hexdigest().encode()
    return {
        "tag": tag,
        "files": {ASSET: binary, ASSET + ".sha256": digest + b"  " + ASSET.encode() + b"\n"},
    }


def with_digest_field(tag: str, binary: bytes, digest: str | None = None) -> dict:
    value = digest or "sha256:" + hashlib.sha256(binary).hexdigest()
    return {"tag": tag, "files": {ASSET: binary}, "digests": {ASSET: value}}


@pytest.fixture(scope="module")
def host():
    server = PanelReleaseHost()
    yield server
    server.close()


# ---- over HTTP: a panel that runs from the package -------------------------------------------


# The release host runs on loopback: the panel is opted in to reach it, as an admin would.
PRIVATE_OK = {"allowPrivateDestinations": "panelUpdateUrl"}


def set_url(api, url: str) -> None:
    ok(api.post("/panel/api/setting/update", {"panelUpdateUrl": url, **PRIVATE_OK}))


def test_no_release_source_is_set_by_default(api):
    refused(api.get(f"{SERVER}/getPanelUpdateInfo"), "panelUpdateUrl")


def test_update_info_reports_a_newer_release(api, host):
    url = host.publish(
        "newer",
        [
            with_checksum_file("v0.3.0", panel_script("0.3.0")),
            {**with_checksum_file("v9.0.0", panel_script("9.0.0")), "prerelease": True},
            {**with_checksum_file("v8.0.0", panel_script("8.0.0")), "draft": True},
            with_checksum_file("v0.2.5", panel_script("0.2.5")),
        ],
    )
    set_url(api, url)
    info = ok(api.get(f"{SERVER}/getPanelUpdateInfo"))
    assert info["currentVersion"] == __version__
    assert info["latestVersion"] == "v0.3.0"
    assert info["updateAvailable"] is True
    assert info["name"] == "Appliance v0.3.0"
    assert info["notes"] == "What changed"
    assert info["publishedAt"] == "2026-01-02T03:04:05Z"
    assert info["canSelfUpdate"] is False


def test_update_info_of_the_latest_endpoint_shape_with_nothing_newer(api, host):
    set_url(api, host.publish("older", [with_digest_field("v0.0.9", b"x")], single=True))
    info = ok(api.get(f"{SERVER}/getPanelUpdateInfo"))
    assert info["latestVersion"] == "v0.0.9"
    assert info["updateAvailable"] is False


def test_update_panel_refuses_when_not_a_binary(api, host):
    set_url(api, host.publish("pkg", [with_checksum_file("v5.0.0", panel_script("5.0.0"))]))
    refused(api.post(f"{SERVER}/updatePanel"), NOT_FROZEN)


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/bad/notjson", b"<html>", ["not JSON"]),
        ("/bad/number", b"42", ["not a release"]),
        ("/bad/empty", b"[]", ["no published release"]),
    ],
)
def test_bad_release_lists_are_reported(api, host, path, body, words):
    set_url(api, host.put(path, body))
    refused(api.get(f"{SERVER}/getPanelUpdateInfo"), *words)


def test_a_missing_list_and_a_bad_url_are_reported(api, host):
    set_url(api, host.url + "/nowhere/releases")
    refused(api.get(f"{SERVER}/getPanelUpdateInfo"), "HTTP 404")
    set_url(api, "ftp://example.com/releases")
    refused(api.get(f"{SERVER}/getPanelUpdateInfo"), "http:// or https://")


# ---- in process: replacing the binary -----------------------------------------------------------


@pytest.fixture
def updater(tmp_path):
    store = Store(str(tmp_path / "panel.db"))
    store.open()
    settings = Settings(store, FilePlaces(str(tmp_path)), ChangeNotice())
    settings.load()
    binary = tmp_path / "install" / "appliance"
    binary.parent.mkdir()
    binary.write_bytes(OLD_BINARY)
    binary.chmod(0o750)
    restarts: list[bool] = []
    service = PanelUpdate(
        settings,
        lambda: restarts.append(True),
        binary=str(binary),
        frozen=True,
        machine=MACHINE,
        version="0.1.0",
    )
    yield service, settings, binary, restarts
    store.close()


def use(settings: Settings, url: str) -> None:
    settings.write(settings.check({"panelUpdateUrl": url, **PRIVATE_OK}))


def leftovers(binary: Path) -> list[str]:
    return sorted(name for name in os.listdir(binary.parent) if name != binary.name)


def test_good_checksum_file_replaces_the_binary_and_restarts(updater, host):
    service, settings, binary, restarts = updater
    new = panel_script("0.2.0")
    use(settings, host.publish("good-file", [with_checksum_file("v0.2.0", new)]))
    assert service.info()["canSelfUpdate"] is True
    message = service.update()
    assert "v0.2.0 installed" in message
    assert binary.read_bytes() == new
    assert stat.S_IMODE(binary.stat().st_mode) == 0o750
    assert restarts == [True]
    assert leftovers(binary) == []


def test_good_digest_field_replaces_the_binary(updater, host):
    service, settings, binary, restarts = updater
    new = panel_script("1.0.0")
    use(settings, host.publish("good-digest", [with_digest_field("1.0.0", new)]))
    service.update()
    assert binary.read_bytes() == new
    assert restarts == [True]


def refused_update(service: PanelUpdate, *words: str) -> None:
    with pytest.raises(ServiceError) as caught:
        service.update()
    for word in words:
        assert word in caught.value.msg, (word, caught.value.msg)


def test_bad_checksum_is_refused_and_the_old_binary_stays(updater, host):
    service, settings, binary, restarts = updater
    wrong = hashlib.sha256(b"something else").hexdigest().encode()
    use(
        settings,
        host.publish("bad-sum", [with_checksum_file("v0.2.0", panel_script("0.2.0"), wrong)]),
    )
    refused_update(service, "does not match", "nothing was replaced")
    assert binary.read_bytes() == OLD_BINARY
    assert restarts == []
    assert leftovers(binary) == []


def test_bad_digest_field_is_refused(updater, host):
    service, settings, binary, restarts = updater
    digest = "sha256:" + "0" * 64
    use(settings, host.publish("bad-digest", [with_digest_field("v0.2.0", b"#!/bin/sh\n", digest)]))
    refused_update(service, "does not match")
    assert binary.read_bytes() == OLD_BINARY
    assert restarts == []


def test_a_release_without_checksum_is_refused(updater, host):
    service, settings, binary, restarts = updater
    use(
        settings,
        host.publish("no-sum", [{"tag": "v0.2.0", "files": {ASSET: panel_script("0.2.0")}}]),
    )
    refused_update(service, "no published SHA-256")
    assert binary.read_bytes() == OLD_BINARY
    assert restarts == []


def test_a_binary_reporting_another_version_is_refused(updater, host):
    service, settings, binary, restarts = updater
    use(settings, host.publish("liar", [with_checksum_file("v0.2.0", panel_script("0.1.5"))]))
    refused_update(service, "reports version '0.1.5'", "not changed")
    assert binary.read_bytes() == OLD_BINARY
    assert restarts == []
    assert leftovers(binary) == []


def test_a_file_that_does_not_run_is_refused(updater, host):
    service, settings, binary, restarts = updater
    use(settings, host.publish("garbage", [with_checksum_file("v0.2.0", b"\x7fELF broken")]))
    refused_update(service, "does not run on this machine")
    assert binary.read_bytes() == OLD_BINARY
    assert restarts == []


def test_nothing_newer_and_no_build_for_this_machine(updater, host):
    service, settings, binary, _ = updater
    use(settings, host.publish("same", [with_checksum_file("v0.1.0", panel_script("0.1.0"))]))
    refused_update(service, "nothing newer")
    other = {"tag": "v0.5.0", "files": {"appliance-linux-mips": b"x"}}
    use(settings, host.publish("other-arch", [other]))
    refused_update(service, "no build for this machine", ASSET)
    assert binary.read_bytes() == OLD_BINARY


def test_a_download_that_fails_keeps_the_old_binary(updater, host):
    service, settings, binary, restarts = updater
    release = with_checksum_file("v0.2.0", panel_script("0.2.0"))
    url = host.publish("gone", [release])
    host.put(f"/gone/v0.2.0/{ASSET}", b"gone", status=410)
    use(settings, url)
    refused_update(service, "HTTP 410")
    assert binary.read_bytes() == OLD_BINARY
    assert restarts == []
    assert leftovers(binary) == []


def test_a_package_install_refuses_before_any_download(tmp_path, host):
    store = Store(str(tmp_path / "panel.db"))
    store.open()
    try:
        settings = Settings(store, FilePlaces(str(tmp_path)), ChangeNotice())
        settings.load()
        use(settings, host.url + "/never/fetched")
        service = PanelUpdate(settings, lambda: None, binary=str(tmp_path / "x"), frozen=False)
        refused_update(service, NOT_FROZEN)
    finally:
        store.close()
