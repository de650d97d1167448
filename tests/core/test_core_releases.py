"""Core releases and geo files: listing, verifying and installing them from a real HTTP
server on loopback that plays the release host.

The server publishes a release list shaped like GitHub's, zips holding a tiny shell-script
core that reports a version the way Xray does, their `.dgst` files, and geo files with
`.sha256sum` files. The panel is pointed at it through its settings and driven over HTTP;
what the panel installed is read from its data directory and its status. The service is
also run in-process where a test needs what HTTP cannot give: a clock past the cache's
15 minutes, and a core that refuses what it is handed (the only stand-in here, for the
hand-off to the core service).
"""

from __future__ import annotations

import os
import stat
import time

import pytest
from helpers import free_port, ok, refused
from release_host import (
    ASSET,
    GEOIP,
    GEOSITE,
    PRIVATE_OK,
    SERVER,
    bin_dir,
    configure,
    core_script,
    core_status,
    dgst,
    good_release,
    installed,
    publish_geofiles,
    release_zip,
    sha256sum,
)

from appliance.errors import ServiceError
from appliance.runtime import downloads
from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.control.releases import CoreReleases
from appliance.store import Store

# ---- the version list ------------------------------------------------------------------------


def test_version_list_holds_the_releases_with_a_build_for_this_machine(api, host):
    url = host.publish(
        "listing",
        [
            {"tag": "v10.0.0", "prerelease": True, "files": good_release("x", "1.0.0")["files"]},
            {"tag": "v9.9.10", "draft": True, "files": good_release("x", "1.0.0")["files"]},
            good_release("v9.9.9", "9.9.9"),
            {"tag": "v9.9.8", "files": {"Xray-windows-64.zip": b"zip"}},
            good_release("v9.9.7", "9.9.7"),
        ],
    )
    configure(api, coreReleaseUrl=url)

    assert ok(api.get(SERVER + "/getCoreVersion")) == ["v9.9.9", "v9.9.7"]


def test_version_list_is_cached_and_served_while_the_source_fails(api, host):
    url = host.publish("cached", [good_release("v9.9.9", "9.9.9")])
    configure(api, coreReleaseUrl=url)

    first = ok(api.get(SERVER + "/getCoreVersion"))
    second = ok(api.get(SERVER + "/getCoreVersion"))
    host.put("/cached/releases", b"down for maintenance", status=503)
    third = ok(api.get(SERVER + "/getCoreVersion"))

    assert first == second == third == ["v9.9.9"]
    assert host.hits["/cached/releases"] == 1


def test_changing_the_release_url_fetches_the_new_list(api, host):
    configure(api, coreReleaseUrl=host.publish("before", [good_release("v1.1.1", "1.1.1")]))
    assert ok(api.get(SERVER + "/getCoreVersion")) == ["v1.1.1"]

    configure(api, coreReleaseUrl=host.publish("after", [good_release("v2.2.2", "2.2.2")]))

    assert ok(api.get(SERVER + "/getCoreVersion")) == ["v2.2.2"]


def test_version_list_that_was_never_fetched_fails_with_a_reason(api):
    configure(api, coreReleaseUrl=f"http://127.0.0.1:{free_port()}/releases")

    refused(api.get(SERVER + "/getCoreVersion"), "release list", "connection refused")


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b'{"message": "API rate limit exceeded"}', 403, ["HTTP 403", "200 with the core"]),
        (b"<html>not json</html>", 200, ["not JSON"]),
        (b'{"releases": []}', 200, ["not a release or a list"]),
    ],
)
def test_a_broken_release_list_is_refused_with_a_reason(api, host, body, status, words):
    url = host.put(f"/broken-{status}-{len(body)}/releases", body, status=status)
    configure(api, coreReleaseUrl=url)

    reply = api.get(SERVER + "/getCoreVersion")
    refused(reply, *words)
    assert "rate limit" not in reply["msg"] and "html" not in reply["msg"]


def test_a_release_url_that_is_not_http_is_refused(api):
    configure(api, coreReleaseUrl="ftp://127.0.0.1/releases")

    refused(api.get(SERVER + "/getCoreVersion"), "coreReleaseUrl", "http://")


# ---- installing the core ---------------------------------------------------------------------


def test_install_puts_an_executable_core_in_the_bin_dir_and_runs_it(panel, api, host):
    configure(
        api,
        coreReleaseUrl=host.publish(
            "install", [good_release("v9.9.9", "9.9.9"), good_release("v9.9.8", "9.9.8")]
        ),
    )

    reply = api.post(SERVER + "/installCore/v9.9.8")

    assert ok(reply) is None
    assert "9.9.8" in reply["msg"]
    path = os.path.join(bin_dir(panel), "xray")
    assert installed(panel) == core_script("9.9.8")
    assert os.stat(path).st_mode & stat.S_IXUSR
    assert installed(panel, "geoip.dat") == GEOIP
    assert installed(panel, "geosite.dat") == GEOSITE
    assert [name for name in os.listdir(bin_dir(panel)) if name.startswith(".")] == []
    assert core_status(api)["version"] == "9.9.8"
    assert core_status(api)["state"] == "running"


def test_install_latest_takes_the_newest_release(panel, api, host):
    configure(
        api,
        coreReleaseUrl=host.publish(
            "latest", [good_release("v9.9.9", "9.9.9"), good_release("v9.9.8", "9.9.8")]
        ),
    )

    ok(api.post(SERVER + "/installCore/latest"))

    assert installed(panel) == core_script("9.9.9")
    assert core_status(api)["version"] == "9.9.9"


def install_refused(panel, api, host, name: str, release: dict, *words: str) -> None:
    """Install a good core first, then `release`: refused with `words`, the good core
    and its geo files untouched."""
    configure(api, coreReleaseUrl=host.publish(name, [good_release("v5.5.5", "5.5.5"), release]))
    ok(api.post(SERVER + "/installCore/v5.5.5"))

    refused(api.post(SERVER + f"/installCore/{release['tag']}"), *words)

    assert installed(panel) == core_script("5.5.5")
    assert installed(panel, "geoip.dat") == GEOIP
    assert sorted(os.listdir(bin_dir(panel))) == ["geoip.dat", "geosite.dat", "xray"]
    assert core_status(api)["version"] == "5.5.5"


def test_install_with_a_checksum_mismatch_is_refused(panel, api, host):
    release = good_release("v6.6.6", "6.6.6")
    release["files"][ASSET + ".dgst"] = dgst(b"some other archive")

    install_refused(panel, api, host, "mismatch", release, "SHA-256", "does not match")


def test_install_without_a_published_checksum_is_refused(panel, api, host):
    release = good_release("v6.6.6", "6.6.6")
    del release["files"][ASSET + ".dgst"]

    install_refused(panel, api, host, "nodgst", release, ".dgst", "unverified")


def test_install_of_a_truncated_zip_is_refused(panel, api, host):
    archive = release_zip({"xray": core_script("6.6.6") * 50})[:-40]
    release = {"tag": "v6.6.6", "files": {ASSET: archive, ASSET + ".dgst": dgst(archive)}}

    install_refused(panel, api, host, "truncated", release, "not a valid zip")


def test_install_of_garbage_is_refused(panel, api, host):
    garbage = os.urandom(2048)
    release = {"tag": "v6.6.6", "files": {ASSET: garbage, ASSET + ".dgst": dgst(garbage)}}

    install_refused(panel, api, host, "garbage", release, "not a valid zip")


def test_install_of_a_zip_without_a_core_is_refused(panel, api, host):
    archive = release_zip({"README.md": b"nothing else"})
    release = {"tag": "v6.6.6", "files": {ASSET: archive, ASSET + ".dgst": dgst(archive)}}

    install_refused(panel, api, host, "nocore", release, "holds no 'xray'")


def test_install_of_a_binary_that_is_no_core_is_refused(panel, api, host):
    archive = release_zip({"xray": b"#!/bin/sh\necho hello\n"})
    release = {"tag": "v6.6.6", "files": {ASSET: archive, ASSET + ".dgst": dgst(archive)}}

    install_refused(panel, api, host, "nocoreversion", release, "does not report a core version")


def test_install_of_a_release_the_list_does_not_hold_is_refused(panel, api, host):
    install_refused(panel, api, host, "unknown", {"tag": "v7.7.7", "files": {}}, "v7.7.7")
    refused(api.post(SERVER + "/installCore/v0.0.1"), "no core release 'v0.0.1'", "v5.5.5")


def test_install_of_a_release_whose_archive_is_gone_is_refused(panel, api, host):
    release = good_release("v6.6.6", "6.6.6")
    url = host.publish("gone", [good_release("v5.5.5", "5.5.5"), release])
    configure(api, coreReleaseUrl=url)
    ok(api.post(SERVER + "/installCore/v5.5.5"))
    host.files.pop(f"/gone/v6.6.6/{ASSET}")

    refused(api.post(SERVER + "/installCore/v6.6.6"), "HTTP 404", ASSET)

    assert installed(panel) == core_script("5.5.5")


# ---- geo files -------------------------------------------------------------------------------


def test_update_geofiles_replaces_both_files(panel, api, host):
    configure(api, **publish_geofiles(host, "geo-all", b"new geoip", b"new geosite"))

    ok(api.post(SERVER + "/updateGeofile"))

    assert installed(panel, "geoip.dat") == b"new geoip"
    assert installed(panel, "geosite.dat") == b"new geosite"
    assert core_status(api)["state"] == "running"


def test_geofile_list_says_which_are_missing_and_when_each_was_replaced(fresh_panel, host):
    api = fresh_panel.client()
    missing = ok(api.get(SERVER + "/getGeofiles"))
    assert [(f["name"], f["installed"], f["updatedAt"]) for f in missing] == [
        ("geoip.dat", False, 0),
        ("geosite.dat", False, 0),
    ]
    configure(api, **publish_geofiles(host, "geo-list", b"listed geoip", b"listed"))
    before = time.time() * 1000 - 2000

    ok(api.post(SERVER + "/updateGeofile/geoip.dat"))

    geoip, geosite = ok(api.get(SERVER + "/getGeofiles"))
    assert (geoip["name"], geoip["installed"], geoip["size"]) == ("geoip.dat", True, 12)
    assert geoip["updatedAt"] >= before
    assert (geosite["installed"], geosite["updatedAt"]) == (False, 0)


def test_update_one_geofile_by_path_and_by_form(panel, api, host):
    configure(api, **publish_geofiles(host, "geo-one", b"geoip one", b"geosite one"))
    before = installed(panel, "geosite.dat")

    ok(api.post(SERVER + "/updateGeofile/geoip.dat"))

    assert installed(panel, "geoip.dat") == b"geoip one"
    assert installed(panel, "geosite.dat") == before

    ok(api.post(SERVER + "/updateGeofile", data={"fileName": "geosite.dat"}))

    assert installed(panel, "geosite.dat") == b"geosite one"


def test_geofile_without_a_published_checksum_is_taken(panel, api, host):
    configure(api, **publish_geofiles(host, "geo-nosum", b"unsummed", b"x", {"geoip": b""}))

    ok(api.post(SERVER + "/updateGeofile/geoip.dat"))

    assert installed(panel, "geoip.dat") == b"unsummed"


def test_geofile_checksum_mismatch_replaces_nothing(panel, api, host):
    configure(api, **publish_geofiles(host, "geo-ok", b"geoip kept", b"geosite kept"))
    ok(api.post(SERVER + "/updateGeofile"))
    bad = publish_geofiles(
        host,
        "geo-bad",
        b"geoip new",
        b"geosite new",
        {"geosite": sha256sum(b"other", "geosite.dat")},
    )
    configure(api, **bad)

    refused(api.post(SERVER + "/updateGeofile"), "geosite.dat", "does not match")

    assert installed(panel, "geoip.dat") == b"geoip kept"
    assert installed(panel, "geosite.dat") == b"geosite kept"
    assert sorted(os.listdir(bin_dir(panel))) == ["geoip.dat", "geosite.dat", "xray"]


@pytest.mark.parametrize(
    ("request_args", "words"),
    [
        (("/updateGeofile/evil.dat",), ["fileName", "geoip.dat", "evil.dat"]),
        (("/updateGeofile",), ["fileName", "geoip.dat"]),
    ],
)
def test_unknown_geofile_is_refused(panel, api, request_args, words):
    before = installed(panel, "geoip.dat")
    extra = {} if request_args[0].endswith(".dat") else {"json": {"fileName": ["geoip.dat"]}}

    refused(api.post(SERVER + request_args[0], **extra), *words)

    assert installed(panel, "geoip.dat") == before


def test_geofile_source_that_is_down_replaces_nothing(panel, api, host):
    before = installed(panel, "geoip.dat")
    configure(api, geoipUrl=f"http://127.0.0.1:{free_port()}/geoip.dat")

    refused(api.post(SERVER + "/updateGeofile/geoip.dat"), "geoip.dat", "connection refused")

    assert installed(panel, "geoip.dat") == before


# ---- the service, in-process -------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CoreStandIn:
    """What the core service is asked to do, recorded; `refuse` makes it fail as a core
    that refuses its config does."""

    def __init__(self, state: str = "running"):
        self.state = state
        self.calls: list[tuple] = []
        self.refuse = ""

    def info(self) -> dict:
        return {"state": self.state}

    def use_binary(self, path: str) -> None:
        with open(path, "rb") as fh:
            self.calls.append(("use_binary", path, fh.read()))
        if self.refuse:
            raise ServiceError(self.refuse)

    def restart(self) -> None:
        self.calls.append(("restart",))
        if self.refuse:
            raise ServiceError(self.refuse)


@pytest.fixture
def service(tmp_path, host):
    store = Store(str(tmp_path / "panel.db"))
    store.open()
    settings = Settings(store, FilePlaces(str(tmp_path)), ChangeNotice())
    settings.load()
    clock, core = Clock(), CoreStandIn()
    releases = CoreReleases(settings, str(tmp_path / "core"), core, clock=clock)
    yield releases, settings, clock, core
    store.close()


def set_urls(settings: Settings, **values: str) -> None:
    settings.write(settings.check({**PRIVATE_OK, **values}))


def test_stale_list_is_served_after_15_minutes_while_the_source_fails(service, host):
    releases, settings, clock, _core = service
    set_urls(settings, coreReleaseUrl=host.publish("stale", [good_release("v3.3.3", "3.3.3")]))
    assert releases.versions() == ["v3.3.3"]

    clock.now += 15 * 60 + 1
    host.put("/stale/releases", b"gone", status=500)

    assert releases.versions() == ["v3.3.3"]
    assert host.hits["/stale/releases"] == 2

    host.publish("stale", [good_release("v4.4.4", "4.4.4")])

    assert releases.versions() == ["v4.4.4"]
    assert host.hits["/stale/releases"] == 3


def test_an_oversized_list_is_refused_and_the_cached_one_kept(service, host):
    releases, settings, clock, _core = service
    set_urls(settings, coreReleaseUrl=host.publish("huge", [good_release("v3.3.3", "3.3.3")]))
    assert releases.versions() == ["v3.3.3"]

    clock.now += 15 * 60 + 1
    host.put("/huge/releases", b"[" + b" " * (8 << 20) + b"]")

    assert releases.versions() == ["v3.3.3"]
    clock.now += 15 * 60 + 1
    set_urls(settings, coreReleaseUrl=host.url + "/huge/releases?again")
    host.put("/huge/releases?again", b"[" + b" " * (8 << 20) + b"]")
    with pytest.raises(ServiceError, match="larger than the limit of 8 MB"):
        releases.versions()


def test_a_list_that_stops_arriving_is_given_up_and_the_cached_one_kept(service, host, monkeypatch):
    releases, settings, clock, _core = service
    set_urls(settings, coreReleaseUrl=host.publish("slow", [good_release("v3.3.3", "3.3.3")]))
    assert releases.versions() == ["v3.3.3"]

    monkeypatch.setattr(downloads, "READ_TIMEOUT", 0.5)
    clock.now += 15 * 60 + 1
    host.stalled.add("/slow/releases")

    assert releases.versions() == ["v3.3.3"]
    assert host.hits["/slow/releases"] == 2


def test_list_is_fetched_again_only_after_15_minutes(service, host):
    releases, settings, clock, _core = service
    set_urls(settings, coreReleaseUrl=host.publish("ttl", [good_release("v3.3.3", "3.3.3")]))
    releases.versions()
    clock.now += 15 * 60 - 1
    releases.versions()
    assert host.hits["/ttl/releases"] == 1

    clock.now += 2
    releases.versions()

    assert host.hits["/ttl/releases"] == 2


def test_install_hands_the_new_binary_to_the_core(service, host):
    releases, settings, _clock, core = service
    set_urls(settings, coreReleaseUrl=host.publish("handoff", [good_release("v3.3.3", "3.3.3")]))

    message = releases.install("3.3.3")

    path = os.path.join(releases.bin_dir, "xray")
    assert core.calls == [("use_binary", path, core_script("3.3.3"))]
    assert "Xray 3.3.3" in message


def test_a_core_that_fails_on_the_new_binary_gets_the_old_files_back(service, host):
    releases, settings, _clock, core = service
    set_urls(
        settings,
        coreReleaseUrl=host.publish(
            "putback", [good_release("v3.3.3", "3.3.3"), good_release("v2.2.2", "2.2.2")]
        ),
    )
    releases.install("v2.2.2")
    core.refuse = "the core refused the config: unknown field"

    with pytest.raises(ServiceError, match=r"unknown field.*previous core files were put back"):
        releases.install("v3.3.3")

    with open(os.path.join(releases.bin_dir, "xray"), "rb") as fh:
        assert fh.read() == core_script("2.2.2")
    assert sorted(os.listdir(releases.bin_dir)) == ["geoip.dat", "geosite.dat", "xray"]


def test_a_first_install_the_core_fails_on_leaves_no_files(service, host):
    releases, settings, _clock, core = service
    set_urls(settings, coreReleaseUrl=host.publish("first", [good_release("v3.3.3", "3.3.3")]))
    core.refuse = "the core refused the config"

    with pytest.raises(ServiceError, match="put back"):
        releases.install("v3.3.3")

    assert os.listdir(releases.bin_dir) == []


def test_geofiles_restart_a_running_core_only(service, host):
    releases, settings, _clock, core = service
    set_urls(settings, **publish_geofiles(host, "geo-restart", b"a", b"b"))

    releases.update_geofiles()
    core.state = "stop"
    message = releases.update_geofiles("geoip.dat")

    assert core.calls == [("restart",)]
    assert "loads them when it starts" in message


def test_geofiles_the_core_refuses_are_put_back(service, host):
    releases, settings, _clock, core = service
    set_urls(settings, **publish_geofiles(host, "geo-old", b"old geoip", b"old geosite"))
    releases.update_geofiles()
    set_urls(settings, **publish_geofiles(host, "geo-new", b"new geoip", b"new geosite"))
    core.refuse = "the core refused the config: geosite:private not found"

    with pytest.raises(ServiceError, match=r"geosite:private not found.*put back"):
        releases.update_geofiles()

    for name, data in (("geoip.dat", b"old geoip"), ("geosite.dat", b"old geosite")):
        with open(os.path.join(releases.bin_dir, name), "rb") as fh:
            assert fh.read() == data


def test_a_machine_without_an_xray_build_is_told_so(service, host):
    releases, settings, _clock, _core = service
    releases.machine = "mips"
    set_urls(settings, coreReleaseUrl=host.publish("mips", [good_release("v3.3.3", "3.3.3")]))

    with pytest.raises(ServiceError, match=r"no build .* \(mips\)"):
        releases.versions()
