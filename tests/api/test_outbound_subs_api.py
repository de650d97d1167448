"""Outbound subscriptions over HTTP: a provider's servers fetched from a URL become core
outbounds, beside the template's own.

The provider is a small HTTP server on loopback started by each test (`http_server`),
so every subscription that must be fetched sets `allowPrivate`; the refusals of the
egress guard are checked against a service that counts connections (`InternalService`),
so "refused" means nothing was fetched. Without a core (API tests), the config the panel
would run (`server/getConfigJson`) shows the merged outbounds.
"""

from __future__ import annotations

import base64
import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from core_panel import http_server, wait_until
from helpers import db_rows, ok, refused
from internal_service import LOOPBACK_SPELLINGS, OTHER_INTERNAL, SECRET
from links_cases import CASES, CTX

from appliance.links import client_clash_proxies, client_links
from appliance.links.clash import clash_document

SUBS = "/panel/api/core/outbound-subs"
TEMPLATE_TAGS = ["direct", "blocked"]
# Spellings of this machine's address beyond the shared list: octal, hex and short forms
# that the system resolver reads the way a connection would, and IPv4-mapped IPv6.
MORE_LOOPBACK = ("0177.0.0.1", "0x7f.0.0.1", "0177.1", "017700000001", "[::ffff:7f00:1]")


def links(*names: str) -> list[str]:
    found = []
    for name in names:
        record, user, hosts = CASES[name]
        found += client_links(record, user, hosts, CTX)
    return found


def body(*names: str) -> bytes:
    return base64.b64encode("\n".join(links(*names)).encode())


def tags_in_config(api) -> list[str]:
    config = ok(api.get("/panel/api/server/getConfigJson"))
    return [outbound.get("tag") for outbound in config["outbounds"]]


def add(api, port: int, path: str = "/sub", **fields) -> dict:
    form = {"url": f"http://127.0.0.1:{port}{path}", "allowPrivate": "true", **fields}
    return ok(api.post(SUBS, data=form))


@pytest.fixture
def clean(api):
    """Each test starts without subscriptions."""
    for sub in ok(api.get(SUBS)):
        ok(api.raw("DELETE", f"{SUBS}/{sub['id']}").json())
    yield api


def test_a_subscription_adds_its_servers_after_the_template_outbounds(clean):
    api = clean
    answers = {"/sub": (200, body("vless_tcp_none", "trojan_tcp_tls"))}
    with http_server(answers) as (port, requested):
        sub = add(api, port, remark="provider")
    assert requested == ["/sub"]
    assert sub["tagPrefix"] == f"sub{sub['id']}-"
    assert sub["tags"] == [f"sub{sub['id']}-DE-alice", f"sub{sub['id']}-DE-alice-2"]
    assert sub["lastError"] == "" and sub["lastRefresh"] > 0
    listed = ok(api.get(SUBS))
    assert [s["id"] for s in listed] == [sub["id"]]
    assert listed[0]["remark"] == "provider" and listed[0]["updateInterval"] == 600
    assert listed[0]["enabled"] is True and listed[0]["prepend"] is False
    assert tags_in_config(api) == [*TEMPLATE_TAGS, *sub["tags"]]
    config = ok(api.get("/panel/api/server/getConfigJson"))
    vless = config["outbounds"][2]
    assert vless["protocol"] == "vless"
    assert vless["settings"]["vnext"][0]["users"][0]["id"] == CASES["vless_tcp_none"][1]["id"]
    assert "_server" not in vless
    # The template the user edits stays as saved.
    template = ok(api.post("/panel/api/core/"))["coreSetting"]
    assert "DE-alice" not in template


def test_prepend_and_move_set_the_order(clean):
    api = clean
    answers = {"/a": (200, body("vless_tcp_none")), "/b": (200, body("vmess_tcp_none"))}
    with http_server(answers) as (port, _):
        first = add(api, port, "/a", tagPrefix="a-")
        second = add(api, port, "/b", tagPrefix="b-")
        assert [s["id"] for s in ok(api.get(SUBS))] == [second["id"], first["id"]]
        assert tags_in_config(api)[-2:] == ["a-DE-alice", "b-DE-alice"]
        ok(api.post(f"{SUBS}/{second['id']}/move", data={"dir": "up"}))
        assert tags_in_config(api)[-2:] == ["b-DE-alice", "a-DE-alice"]
        ok(api.post(f"{SUBS}/{second['id']}/move", data={"dir": "down"}))
        assert tags_in_config(api)[-2:] == ["a-DE-alice", "b-DE-alice"]
        ok(api.post(f"{SUBS}/{second['id']}", data={"prepend": "true"}))
        assert tags_in_config(api) == ["b-DE-alice", *TEMPLATE_TAGS, "a-DE-alice"]
        ok(api.post(f"{SUBS}/{second['id']}", data={"enabled": "false"}))
        assert tags_in_config(api) == [*TEMPLATE_TAGS, "a-DE-alice"]


def test_tags_survive_refreshes_and_a_failed_refresh_keeps_the_outbounds(clean):
    api = clean
    answers = {"/sub": (200, body("vless_tcp_none", "trojan_tcp_tls"))}
    with http_server(answers) as (port, requested):
        sub = add(api, port)
        prefix = sub["tagPrefix"]
        # The provider reorders, renames and adds a server.
        renamed = [link.replace("#DE-alice", "#Renamed") for link in links("trojan_tcp_tls")]
        answers["/sub"] = (200, "\n".join([*renamed, *links("vless_ws_tls")]).encode())
        made = ok(api.post(f"{SUBS}/{sub['id']}/refresh"))
        assert [o["tag"] for o in made] == [f"{prefix}DE-alice-2", f"{prefix}DE-alice"]
        assert made[1]["streamSettings"]["network"] == "ws"
        answers["/sub"] = (500, b"upstream " + SECRET.encode())
        refused(api.post(f"{SUBS}/{sub['id']}/refresh"), "HTTP 500")
        listed = ok(api.get(SUBS))[0]
        assert "HTTP 500" in listed["lastError"] and SECRET not in listed["lastError"]
        assert listed["tags"] == [f"{prefix}DE-alice-2", f"{prefix}DE-alice"]
        assert tags_in_config(api)[-2:] == listed["tags"]
        answers["/sub"] = (200, b"nothing here " + SECRET.encode())
        reply = api.post(f"{SUBS}/{sub['id']}/refresh")
        refused(reply, "no server")
        assert SECRET not in reply["msg"]
        assert tags_in_config(api)[-2:] == listed["tags"]
    assert len(requested) == 4


def test_a_mihomo_profile_is_a_subscription_too(clean):
    api = clean
    record, user, hosts = CASES["vless_grpc_reality"]
    document = clash_document(client_clash_proxies(record, user, hosts, CTX), "")
    with http_server({"/yaml": (200, document.encode())}) as (port, _):
        made = ok(
            api.post(
                f"{SUBS}/parse",
                data={"url": f"http://127.0.0.1:{port}/yaml", "allowPrivate": "true"},
            )
        )
    assert len(made) == 1
    assert made[0]["streamSettings"]["security"] == "reality"
    assert made[0]["streamSettings"]["grpcSettings"]["serviceName"] == "svc"


def test_parse_stores_nothing(clean):
    api = clean
    with http_server({"/sub": (200, body("ss_2022", "hysteria2"))}) as (port, _):
        made = ok(
            api.post(
                f"{SUBS}/parse",
                data={"url": f"http://127.0.0.1:{port}/sub", "allowPrivate": "true"},
            )
        )
    assert [o["protocol"] for o in made] == ["shadowsocks", "hysteria"]
    assert ok(api.get(SUBS)) == []
    assert tags_in_config(api) == [*TEMPLATE_TAGS]


def test_the_background_job_refreshes_each_interval(clean):
    api = clean
    answers = {"/sub": (200, body("vless_tcp_none"))}
    with http_server(answers) as (port, requested):
        sub = add(api, port, updateInterval="10")
        answers["/sub"] = (200, body("vless_tcp_none", "trojan_tcp_tls"))
        wait_until(lambda: len(tags_in_config(api)) == 4, "the job refreshed", timeout=30)
        assert ok(api.get(SUBS))[0]["lastRefresh"] > sub["lastRefresh"]
    assert len(requested) >= 2


def test_delete_and_its_alias(clean):
    api = clean
    with http_server({"/sub": (200, body("vless_tcp_none"))}) as (port, _):
        one, two = add(api, port, tagPrefix="x-"), add(api, port, tagPrefix="y-")
    ok(api.raw("DELETE", f"{SUBS}/{one['id']}").json())
    ok(api.post(f"{SUBS}/{two['id']}/del"))
    assert ok(api.get(SUBS)) == []
    assert tags_in_config(api) == [*TEMPLATE_TAGS]
    refused(api.post(f"{SUBS}/{two['id']}/del"), f"outbound subscription {two['id']}")


# ---- the guard ---------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", [*LOOPBACK_SPELLINGS, *MORE_LOOPBACK])
def test_every_spelling_of_this_machine_is_refused_without_allow_private(clean, internal, spelling):
    before = internal.connections
    url = f"http://{spelling}:{internal.port}/sub"
    reply = clean.post(SUBS, data={"url": url})
    refused(reply, "points at", "allowPrivate")
    assert SECRET not in reply["msg"]
    refused(clean.post(f"{SUBS}/parse", data={"url": url}), "allowPrivate")
    assert internal.connections == before
    assert ok(clean.get(SUBS)) == []


@pytest.mark.parametrize(("spelling", "kind"), OTHER_INTERNAL.items())
def test_other_internal_addresses_are_refused_by_kind(clean, spelling, kind):
    refused(clean.post(SUBS, data={"url": f"http://{spelling}/sub"}), kind)
    assert ok(clean.get(SUBS)) == []


def test_a_redirect_to_this_machine_is_refused(clean, internal):
    """The first host is opted in (a public host cannot be played here); the redirect to
    another internal address is checked all the same."""
    before = internal.connections
    target = f"http://localhost:{internal.port}/sub"
    with redirecting(target) as port:
        reply = clean.post(SUBS, data={"url": f"http://127.0.0.1:{port}/", "allowPrivate": "1"})
    refused(reply, "redirect", "localhost", "loopback")
    assert internal.connections == before
    assert ok(clean.get(SUBS)) == []


@contextlib.contextmanager
def redirecting(target: str) -> Iterator[int]:
    """A loopback HTTP server that answers every GET with a redirect to `target`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_bad_input_changes_nothing(panel, clean):
    api = clean
    with http_server({"/sub": (200, body("vless_tcp_none"))}) as (port, requested):
        url = f"http://127.0.0.1:{port}/sub"
        cases = [
            ({}, "url is required"),
            ({"url": "ftp://example.com/x"}, "http(s)"),
            ({"url": "http://example.com:99999/"}, "port"),
            ({"url": url, "allowPrivate": "yes"}, "allowPrivate"),
            ({"url": url, "allowPrivate": "true", "updateInterval": "5"}, "updateInterval"),
            ({"url": url, "allowPrivate": "true", "tagPrefix": "a b"}, "tagPrefix"),
            ({"url": url, "allowPrivate": "true", "remark": "r" * 300}, "remark"),
        ]
        for form, words in cases:
            refused(api.post(SUBS, data=form), words)
        assert requested == []
        sub = add(api, port, tagPrefix="same-")
        refused(
            api.post(SUBS, data={"url": url, "allowPrivate": "true", "tagPrefix": "same-"}),
            "tagPrefix 'same-' is used",
        )
        refused(api.post(f"{SUBS}/{sub['id']}", data={"updateInterval": "x"}), "updateInterval")
    refused(api.post(f"{SUBS}/99999/refresh"), "does not exist")
    refused(api.post(f"{SUBS}/abc/move", data={"dir": "up"}), "positive integer")
    assert [s["id"] for s in ok(api.get(SUBS))] == [sub["id"]]
    rows = db_rows(panel, "SELECT COUNT(*) FROM outbound_sub")
    assert rows == [(1,)]


def test_a_disabled_subscription_is_saved_without_a_fetch_but_not_with_an_internal_url(clean):
    api = clean
    with http_server({"/sub": (200, body("vless_tcp_none"))}) as (port, requested):
        sub = add(api, port, tagPrefix="off-")
        form = {"enabled": "false", "url": "http://no-such-host.invalid/sub"}
        saved = ok(api.post(f"{SUBS}/{sub['id']}", data=form))
        assert saved["enabled"] is False and saved["tags"] == ["off-DE-alice"]
        assert tags_in_config(api) == TEMPLATE_TAGS
        form = {"url": "http://10.0.0.1/sub", "allowPrivate": "false"}
        refused(api.post(f"{SUBS}/{sub['id']}", data=form), "private", "allowPrivate")
        assert ok(api.get(SUBS))[0]["url"] == "http://no-such-host.invalid/sub"
    assert requested == ["/sub"]


# ---- the servers a subscription names ---------------------------------------------------

SERVER_UUID = "b3c7a5f0-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
# Where the share links point: this machine, a private network, the metadata address, this
# machine in IPv6 form and by name, and one public address.
SERVER_HOSTS = (
    "127.0.0.1",
    "10.0.0.1",
    "169.254.169.254",
    "[::ffff:127.0.0.1]",
    "localhost",
    "1.1.1.1",
)


def server_links(*hosts: str) -> bytes:
    return "\n".join(
        f"vless://{SERVER_UUID}@{host}:443?encryption=none&type=tcp#server-{n}"
        for n, host in enumerate(hosts)
    ).encode()


def server_addresses(api, prefix: str) -> list[str]:
    config = ok(api.get("/panel/api/server/getConfigJson"))
    return [
        outbound["settings"]["vnext"][0]["address"]
        for outbound in config["outbounds"]
        if outbound.get("tag", "").startswith(prefix)
    ]


def test_servers_at_the_metadata_address_never_become_outbounds(clean):
    """The provider is on loopback, so the subscription sets allowPrivate (a public host
    cannot be played here): its internal servers are kept, the metadata address is not.
    Without allowPrivate only the public one is kept (test_outbound_subs)."""
    api = clean
    answers = {"/sub": (200, server_links(*SERVER_HOSTS))}
    with http_server(answers) as (port, _):
        sub = add(api, port, tagPrefix="screened-")
        assert server_addresses(api, "screened-") == [
            "127.0.0.1",
            "10.0.0.1",
            "::ffff:127.0.0.1",
            "localhost",
            "1.1.1.1",
        ]
        assert sub["lastError"] == (
            "1 server was left out: the first, 169.254.169.254, is the cloud metadata "
            "address; the panel never lets the core connect to it"
        )
        assert ok(api.get(SUBS))[0]["lastError"] == sub["lastError"]
        # A refresh that finds only the metadata address keeps the last good outbounds.
        answers["/sub"] = (200, server_links("169.254.169.254", "[::ffff:a9fe:a9fe]"))
        reply = api.post(f"{SUBS}/{sub['id']}/refresh")
        refused(reply, "no server the core can use", "2 servers were left out", "metadata")
        assert len(server_addresses(api, "screened-")) == 5


FROM_LINK = "/panel/api/core/outboundFromLink"
VLESS_LINK = (
    "vless://3b8c7f2e-1d4a-4b6e-9f0a-2c5d8e7f1a3b@edge.example.net:443"
    "?type=ws&security=tls&sni=edge.example.net&path=%2Fws&host=cdn.example.net#Edge%20one"
)


def test_a_share_link_gives_its_outbound_and_nothing_is_stored(clean):
    api = clean
    made = ok(api.post(FROM_LINK, data={"link": VLESS_LINK}))
    assert made["tag"] == "Edge-one"
    assert made["protocol"] == "vless"
    assert made["settings"]["vnext"][0]["address"] == "edge.example.net"
    assert made["settings"]["vnext"][0]["users"][0]["id"] == "3b8c7f2e-1d4a-4b6e-9f0a-2c5d8e7f1a3b"
    assert made["streamSettings"]["network"] == "ws"
    assert made["streamSettings"]["wsSettings"] == {"path": "/ws", "host": "cdn.example.net"}
    assert made["streamSettings"]["tlsSettings"]["serverName"] == "edge.example.net"
    assert ok(api.get(SUBS)) == []
    assert tags_in_config(api) == [*TEMPLATE_TAGS]


@pytest.mark.parametrize(
    "link, words",
    [
        ("", ["paste a share link"]),
        ("ftp://example.net", ["cannot be read", "ftp"]),
        ("vless://@:0", ["cannot be read"]),
        ("x" * 9000, ["at most 8192"]),
    ],
)
def test_a_link_that_is_no_outbound_is_refused_in_words(clean, link, words):
    refused(clean.post(FROM_LINK, data={"link": link}), *words)
