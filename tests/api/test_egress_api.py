"""The egress guard over HTTP: every feature that connects where an admin points it refuses
this machine and the networks behind it unless the admin opted in for that setting.

A service on loopback (`InternalService`) stands for what the guard protects: it listens
on every spelling of this machine's address and counts connections, so "refused" here
means no connection reached it, not merely an error after one. The release host on
loopback plays an opted-in mirror for the redirect and link cases; the machine has no
internet, so a public host that redirects inward is played by an opted-in host, whose
redirects the guard checks the same way.
"""

from __future__ import annotations

import contextlib
import json
import platform

import pytest
from helpers import ok, refused
from internal_service import LOOPBACK_SPELLINGS, OTHER_INTERNAL, SECRET, InternalService

from appliance.services.control.releases import ASSET_SUFFIXES

SERVER = "/panel/api/server"
SETTINGS = "/panel/api/setting"
OPT_IN = "allowPrivateDestinations"
ASSET = f"Xray-linux-{ASSET_SUFFIXES.get(platform.machine(), '64')}.zip"


def configure(api, allowed: str = "", **values) -> None:
    """Save `values` with allowPrivateDestinations set to `allowed` (empty: none)."""
    ok(api.post(f"{SETTINGS}/update", {OPT_IN: allowed, **values}))


@contextlib.contextmanager
def untouched(internal: InternalService):
    """Asserts, when the block ends, that no connection reached `internal`."""
    before = internal.connections
    yield
    assert internal.connections == before, "a connection reached the internal service"


# ---- every spelling ------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", LOOPBACK_SPELLINGS)
def test_each_spelling_of_this_machine_is_refused(api, internal, spelling):
    configure(api, coreReleaseUrl=f"http://{spelling}:{internal.port}/releases")
    with untouched(internal):
        reply = api.get(f"{SERVER}/getCoreVersion")
    refused(reply, "the coreReleaseUrl setting points at", "loopback", OPT_IN)


@pytest.mark.parametrize(("spelling", "kind"), OTHER_INTERNAL.items())
def test_other_internal_addresses_are_refused_by_kind(api, spelling, kind):
    configure(api, coreReleaseUrl=f"http://{spelling}/releases")
    refused(api.get(f"{SERVER}/getCoreVersion"), "coreReleaseUrl", kind)


# ---- every destination ---------------------------------------------------------------------------


def test_every_destination_is_guarded(api, internal):
    where = f"localhost:{internal.port}"
    url = f"http://{where}"
    with untouched(internal):
        configure(api, panelUpdateUrl=f"{url}/releases")
        refused(api.get(f"{SERVER}/getPanelUpdateInfo"), "panelUpdateUrl", OPT_IN)

        for name, key in (("geoip.dat", "geoipUrl"), ("geosite.dat", "geositeUrl")):
            configure(api, **{key: f"{url}/{name}"})
            refused(api.post(f"{SERVER}/updateGeofile/{name}"), key, OPT_IN)

        configure(
            api, tgBotToken="123:abc", tgBotChatId="111", tgBotAPIServer=url, tgBotEnable=False
        )
        refused(api.post(f"{SETTINGS}/testTgBot"), "tgBotAPIServer", OPT_IN)
        refused(api.post("/panel/api/backuptotgbot"), "tgBotAPIServer", OPT_IN)

        configure(api, smtpHost="localhost", smtpPort=internal.port, smtpFrom="a@example.org")
        reply = api.post(f"{SETTINGS}/testSmtp")
        assert (reply["success"], reply["stage"]) == (False, "connect"), reply
        assert "smtpHost" in reply["msg"] and OPT_IN in reply["msg"], reply

        reply = api.post(f"{SERVER}/getRemoteCertHash", data={"server": where})
        refused(reply, "getRemoteCertHash", OPT_IN)


def test_opting_in_one_setting_opens_no_other(api, internal):
    url = f"http://localhost:{internal.port}"
    configure(api, "panelUpdateUrl,smtpHost", coreReleaseUrl=f"{url}/releases")
    with untouched(internal):
        refused(api.get(f"{SERVER}/getCoreVersion"), "coreReleaseUrl", OPT_IN)


# ---- redirects and links from an opted-in host ------------------------------------------------


def test_a_redirect_on_the_opted_in_host_is_followed(api, host):
    host.publish("mirror", [{"tag": "v1.0.0", "files": {"x.zip": b"zip"}}])
    url = host.redirect("/moved/releases", "/mirror/releases")
    configure(api, "coreReleaseUrl", coreReleaseUrl=url)
    reply = api.get(f"{SERVER}/getCoreVersion")
    assert reply["success"] is True, reply
    assert host.hits["/mirror/releases"] >= 1


@pytest.mark.parametrize("target", ["localhost", "127.0.0.1", "[::1]"])
def test_a_redirect_from_the_opted_in_host_to_another_internal_one_is_refused(
    api, host, internal, target
):
    url = host.redirect(f"/inward-{target}/releases", f"http://{target}:{internal.port}/releases")
    configure(api, "coreReleaseUrl", coreReleaseUrl=url)
    with untouched(internal):
        reply = api.get(f"{SERVER}/getCoreVersion")
    refused(reply, "a redirect followed for coreReleaseUrl", "lets only the host written there")


def test_a_download_link_to_an_internal_host_is_refused(panel, api, host, internal):
    link = f"http://localhost:{internal.port}/Xray.zip"
    assets = [{"name": name, "browser_download_url": link} for name in (ASSET, ASSET + ".dgst")]
    release = {"tag_name": "v9.0.0", "assets": assets}
    url = host.put("/linked/releases", json.dumps([release]).encode())
    configure(api, "coreReleaseUrl", coreReleaseUrl=url)
    with untouched(internal):
        reply = api.post(f"{SERVER}/installCore/v9.0.0")
    refused(reply, "coreReleaseUrl leads to localhost", "loopback")


# ---- nothing fetched is echoed -----------------------------------------------------------------


def test_the_chat_bot_test_does_not_repeat_what_the_server_sent(api, internal):
    configure(
        api,
        "tgBotAPIServer",
        tgBotToken="123:abc",
        tgBotChatId="111",
        tgBotAPIServer=f"http://127.0.0.1:{internal.port}",
    )
    reply = api.post(f"{SETTINGS}/testTgBot")
    refused(reply, "getMe failed: HTTP 200")
    assert SECRET not in reply["msg"]


# ---- the setting ----------------------------------------------------------------------------


def test_the_opt_in_setting_is_validated_and_normalised(api):
    configure(api, "")
    refused(
        api.post(f"{SETTINGS}/update", {OPT_IN: "smtpHost, webPort"}),
        OPT_IN,
        "'webPort'",
        "coreReleaseUrl",
    )
    assert ok(api.post(f"{SETTINGS}/all"))[OPT_IN] == ""
    ok(api.post(f"{SETTINGS}/update", {OPT_IN: " smtpHost , coreReleaseUrl,"}))
    assert ok(api.post(f"{SETTINGS}/all"))[OPT_IN] == "coreReleaseUrl,smtpHost"
    configure(api, "")
