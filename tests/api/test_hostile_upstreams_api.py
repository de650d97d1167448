"""Every upstream the panel calls, turned hostile, over real HTTP: a small server on
loopback (tests/provider_apis.py) stands in for the WARP and VPN providers, the core and
panel release lists, the Bot API and a node, and answers each hostile shape in turn
(JSON nested 100,000 deep, bytes that are not UTF-8, NaN, a number of 5,000 digits, not
JSON, the wrong top level, nothing, a body that never ends).

What the admin sees is checked: each route answers `success:false` with a sentence that
carries the reader's reason and none of the sender's bytes, never a 500; `nodes/add`
saves nothing; a node that turns hostile once added shows the reason on its row while
its heartbeat keeps running, logs one line for it rather than a traceback every beat,
and the next good answer clears it.
"""

from __future__ import annotations

import pytest
from core_panel import wait_until
from helpers import ok, refused
from node_panels import NODES
from provider_apis import ENDLESS, HOSTILE, ProviderApi

TOKEN = "123456789:AAH-hostile_token-XYZ"
STATUS_PATH = "/panel/api/server/status"
SLIM_PATH = "/panel/api/inbounds/list/slim"
# Each route named in case 38, with the upstream request it makes and the words its
# refusal starts from.
ROUTES = {
    "tunnel/reg": ("POST", "/panel/api/core/tunnel/reg", ("POST", "/warp/reg"), "WARP"),
    "vpn/countries": (
        "POST",
        "/panel/api/core/vpn/countries",
        ("GET", "/vpn/servers/countries"),
        "VPN provider",
    ),
    "getPanelUpdateInfo": (
        "GET",
        "/panel/api/server/getPanelUpdateInfo",
        ("GET", "/panel/releases"),
        "the panel release list",
    ),
    "getCoreVersion": (
        "GET",
        "/panel/api/server/getCoreVersion",
        ("GET", "/core/releases"),
        "the core release list",
    ),
    "testTgBot": (
        "POST",
        "/panel/api/setting/testTgBot",
        ("POST", f"/bot{TOKEN}/getMe"),
        "getMe",
    ),
    "nodes/test": ("POST", f"{NODES}/test", ("GET", STATUS_PATH), "node 'hostile' answered"),
    "nodes/inbounds": ("POST", f"{NODES}/inbounds", ("GET", SLIM_PATH), "node 'hostile'"),
    "nodes/add": ("POST", f"{NODES}/add", ("GET", STATUS_PATH), "node 'hostile' answered"),
}
SHAPES = {**{name: body for name, (body, _) in HOSTILE.items()}, "endless": ENDLESS}
WORDS = {**{name: words for name, (_, words) in HOSTILE.items()}, "endless": "larger than"}
# Where a route reads a shape as JSON and then names what is wrong with it in its own
# words: the provider APIs answer some calls with no body at all, so an empty answer is
# none there; a release list says what it should have been.
OWN_WORDS = {
    ("empty", "tunnel/reg"): "answer has no id",
    ("empty", "vpn/countries"): "is not a list",
    ("wrong-top", "getPanelUpdateInfo"): "not a release or a list of them",
    ("wrong-top", "getCoreVersion"): "not a release or a list of them",
}


def status_of_a_node(guid: str = "guid-of-the-node") -> dict:
    """A node's `server/status` envelope, with the fields the heartbeat reads."""
    status = {
        "cpu": 3.5,
        "mem": {"current": 512, "total": 2048},
        "core": {"state": "running", "version": "26.1.1"},
        "panelVersion": "0.9.0",
        "guid": guid,
        "parentGuid": "",
    }
    return {"success": True, "msg": "", "obj": status}


@pytest.fixture(scope="module")
def upstream():
    server = ProviderApi()
    yield server
    server.close()


@pytest.fixture(scope="module")
def api(panel, upstream):
    client = panel.client()
    base = f"http://127.0.0.1:{upstream.port}"
    ok(
        client.post(
            "/panel/api/setting/update",
            {
                "warpApiUrl": f"{base}/warp",
                "vpnApiUrl": f"{base}/vpn",
                "panelUpdateUrl": f"{base}/panel/releases",
                "coreReleaseUrl": f"{base}/core/releases",
                "tgBotAPIServer": base,
                "tgBotToken": TOKEN,
                "tgBotChatId": "111",
                "allowPrivateDestinations": (
                    "warpApiUrl,vpnApiUrl,panelUpdateUrl,coreReleaseUrl,tgBotAPIServer"
                ),
            },
        )
    )
    return client


def node_fields(upstream: ProviderApi, name: str = "hostile") -> dict:
    return {
        "name": name,
        "scheme": "http",
        "address": "127.0.0.1",
        "port": upstream.port,
        "basePath": "/",
        "apiToken": "apl_" + "h" * 43,
        "allowPrivateAddress": True,
    }


def call(api, upstream: ProviderApi, route: str) -> dict:
    method, path, _, _ = ROUTES[route]
    body = node_fields(upstream) if route.startswith("nodes/") else None
    if method == "GET":
        return api.get(path)
    return api.post(path, body)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_route_refuses_a_hostile_upstream_with_a_sentence(panel, api, upstream, shape):
    upstream.answers.clear()
    upstream.answers[("GET", STATUS_PATH)] = (200, status_of_a_node())
    before = ok(api.get(f"{NODES}/list"))
    for route, (_, _, asked, lead) in ROUTES.items():
        upstream.answers[asked] = (200, SHAPES[shape])
        reply = call(api, upstream, route)
        refused(reply, lead, OWN_WORDS.get((shape, route), WORDS[shape]))
        assert "internal-secret" not in reply["msg"], reply
        if route != "nodes/inbounds":
            del upstream.answers[asked]
    assert ok(api.get(f"{NODES}/list")) == before
    assert "Traceback" not in panel.output()


def test_nodes_add_saves_nothing_for_a_hostile_node_and_saves_a_good_one(panel, api, upstream):
    upstream.answers.clear()
    upstream.answers[("GET", STATUS_PATH)] = (200, HOSTILE["deep"][0])
    refused(api.post(f"{NODES}/add", node_fields(upstream, "first")), "nested too deeply")
    assert [n for n in ok(api.get(f"{NODES}/list")) if n["name"] == "first"] == []
    upstream.answers[("GET", STATUS_PATH)] = (200, status_of_a_node())
    added = ok(api.post(f"{NODES}/add", node_fields(upstream, "first")))
    assert added["status"] == "online" and added["guid"] == "guid-of-the-node"
    ok(api.post(f"{NODES}/del/{added['id']}"))


def test_a_node_that_turns_hostile_shows_why_and_its_heartbeat_goes_on(panel, api, upstream):
    upstream.answers.clear()
    upstream.answers[("GET", STATUS_PATH)] = (200, status_of_a_node())
    added = ok(api.post(f"{NODES}/add", node_fields(upstream, "turns")))
    assert added["status"] == "online", added
    mark = len(panel.lines)
    try:
        upstream.answers[("GET", STATUS_PATH)] = (200, HOSTILE["deep"][0])

        def hostile_row() -> dict | None:
            row = ok(api.get(f"{NODES}/get/{added['id']}"))
            return row if row["status"] == "error" else None

        row = wait_until(hostile_row, "the heartbeat shows the hostile answer", 20)
        assert "nested too deeply" in row["lastError"], row
        assert "not the panel API's answer" in row["lastError"], row
        # The heartbeat keeps beating: another answer is asked for after the first.
        asked = len([r for r in upstream.requests if r.path == STATUS_PATH])
        wait_until(
            lambda: len([r for r in upstream.requests if r.path == STATUS_PATH]) > asked + 1,
            "two more heartbeats of the hostile node",
            20,
        )
        upstream.answers[("GET", STATUS_PATH)] = (200, status_of_a_node())

        def online_row() -> dict | None:
            row = ok(api.get(f"{NODES}/get/{added['id']}"))
            return row if row["status"] == "online" else None

        row = wait_until(online_row, "the next good answer clears the error", 20)
        assert row["lastError"] == ""
        logged = panel.lines[mark:]
        assert "Traceback" not in "\n".join(logged)
        assert len([line for line in logged if "-> error" in line]) == 1, logged
    finally:
        ok(api.post(f"{NODES}/del/{added['id']}"))


# ---- outbound subscriptions (Clash YAML) -------------------------------------------------------

SUBS = "/panel/api/core/outbound-subs"
GOOD_LINK = "vless://0a1b2c3d-1111-2222-3333-444455556666@93.184.215.14:443?type=tcp#one"
# A profile nested 100,000 levels deep: composing it recursed in libyaml's C code until the
# whole panel process died.
DEEP_PROFILE = b"proxies: " + b"[" * 100_000 + b"]" * 100_000
ALIAS_BOMB = (
    b'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    + b"".join(f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]\n".encode() for n in range(1, 9))
    + b"proxies: [*a8]\n"
)


@pytest.mark.parametrize(
    ("profile", "words"),
    [(DEEP_PROFILE, "nested more than 64 levels"), (ALIAS_BOMB, "aliases are expanded")],
)
def test_a_hostile_clash_profile_is_refused_and_its_refresh_records_why(
    panel, api, upstream, profile, words
):
    upstream.answers.clear()
    upstream.answers[("GET", "/sub")] = (200, GOOD_LINK.encode())
    mark = len(panel.lines)
    form = {
        "url": f"http://127.0.0.1:{upstream.port}/sub",
        "allowPrivate": "true",
        "updateInterval": "10",
    }
    sub = ok(api.post(SUBS, data=form))
    try:
        assert sub["tags"] == [f"sub{sub['id']}-one"]
        upstream.answers[("GET", "/sub")] = (200, profile)
        refused(api.post(f"{SUBS}/parse", data=form), "Clash profile", words)
        refused(api.post(f"{SUBS}/{sub['id']}/refresh"), "Clash profile", words)
        asked = len(upstream.requests)
        # The background refresh meets the same profile and keeps running.
        wait_until(lambda: len(upstream.requests) > asked, "the background refresh", 30)
        row = ok(api.get(SUBS))[0]
        assert words in row["lastError"] and row["tags"] == sub["tags"]
        upstream.answers[("GET", "/sub")] = (200, GOOD_LINK.encode())
        ok(api.post(f"{SUBS}/{sub['id']}/refresh"))
        assert ok(api.get(SUBS))[0]["lastError"] == ""
        # What the panel logged while the profile was refused (the module's nodes of the
        # tests before go on in the background, and have tests of their own).
        assert not any("Traceback" in line for line in panel.lines[mark:])
    finally:
        ok(api.raw("DELETE", f"{SUBS}/{sub['id']}").json())
