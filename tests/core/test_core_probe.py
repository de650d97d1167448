"""core/testOutbound and core/testOutbounds against the real core, over HTTP.

The panel runs Debian's V2Ray 4.34 with a VLESS inbound and one client; the probe URL is a
loopback HTTP server of the test answering 204. A freedom outbound and a VLESS outbound
into the panel's own inbound must reach it through a temporary core; a VLESS outbound to a
closed port, or with a UUID the inbound does not know, must come back as a failed entry.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
import uuid

import pytest
from core_panel import (
    CORE_ENV,
    core_panel,
    http_server,
    loopback_template,
    use_template,
    wait_until,
)
from helpers import free_port, ok, refused
from internal_service import InternalService
from panels import NO_CORE, PanelServer, start_panel

CORE = "/panel/api/core"
PROBE_PATH = "/generate_204"
FREEDOM = {"tag": "direct", "protocol": "freedom", "settings": {}}


def vless(tag: str, port: int, user_id: str, **extra) -> dict:
    server = {
        "address": "127.0.0.1",
        "port": port,
        "users": [{"id": user_id, "encryption": "none"}],
    }
    return {"tag": tag, "protocol": "vless", "settings": {"vnext": [server]}, **extra}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(api, probe requests seen, panel VLESS port, its client's UUID)."""
    with http_server({PROBE_PATH: (204, b"")}) as (probe_port, requested):
        server = core_panel(tmp_path_factory.mktemp("probe"))
        api = server.client()
        url = f"http://127.0.0.1:{probe_port}{PROBE_PATH}"
        # The probe URL's server runs on loopback: opted in, as an admin would.
        settings = {"outboundTestUrl": url, "allowPrivateDestinations": "outboundTestUrl"}
        ok(api.post("/panel/api/setting/update", settings))
        inbound = ok(
            api.post(
                "/panel/api/inbounds/add",
                {
                    "protocol": "vless",
                    "remark": "probe target",
                    "listen": "127.0.0.1",
                    "port": free_port(),
                    "settings": {"decryption": "none"},
                    "streamSettings": {"network": "tcp", "security": "none"},
                },
            )
        )
        user_id = str(uuid.uuid4())
        client = {"email": "probe@test", "id": user_id}
        ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))

        def serving() -> bool:
            config = ok(api.get("/panel/api/server/getConfigJson"))
            tags = {entry.get("tag") for entry in config["inbounds"]}
            return inbound["tag"] in tags

        wait_until(serving, "the core serves the VLESS inbound")
        yield api, requested, inbound["port"], user_id
        server.stop()


def probe(api, outbound, **form) -> dict:
    return api.post(f"{CORE}/testOutbound", data={"outbound": json.dumps(outbound), **form})


def probe_many(api, outbounds, **form) -> dict:
    return api.post(f"{CORE}/testOutbounds", data={"outbounds": json.dumps(outbounds), **form})


def test_freedom_reaches_the_probe_url(setup):
    api, requested, _, _ = setup
    seen = len(requested)
    result = ok(probe(api, FREEDOM))
    assert result["success"] is True, result
    assert (result["tag"], result["mode"], result["statusCode"]) == ("direct", "http", 204)
    assert result["delay"] >= result["firstByteMs"] >= 0
    assert result["tlsMs"] == 0 and result["error"] == ""
    assert requested[seen:] == [PROBE_PATH]


def test_vless_into_the_panels_own_inbound(setup):
    api, requested, port, user_id = setup
    seen = len(requested)
    result = ok(probe(api, vless("via-panel", port, user_id)))
    assert result["success"] is True, result
    assert (result["tag"], result["statusCode"]) == ("via-panel", 204)
    assert requested[seen:] == [PROBE_PATH]


def test_unknown_uuid_and_closed_port_are_failed_entries(setup):
    api, requested, port, _ = setup
    seen = len(requested)
    stranger = ok(probe(api, vless("stranger", port, str(uuid.uuid4()))))
    dead = ok(probe(api, vless("dead", free_port(), str(uuid.uuid4()))))
    for result, tag in ((stranger, "stranger"), (dead, "dead")):
        assert result["success"] is False and result["tag"] == tag, result
        assert result["statusCode"] == 0
        assert "closed before an HTTP answer" in result["error"], result
    assert requested[seen:] == []


def test_batch_keeps_input_order_and_isolates_failures(setup):
    api, _, port, user_id = setup
    outbounds = [
        vless("one", port, user_id),
        vless("dead", free_port(), user_id),
        FREEDOM,
        {"tag": "nonsense", "protocol": "no-such-protocol"},
        vless("one", port, user_id),
    ]
    results = ok(probe_many(api, outbounds))
    assert [r["tag"] for r in results] == ["one", "dead", "direct", "nonsense", "one"]
    assert [r["success"] for r in results] == [True, False, True, False, True]
    assert [r["statusCode"] for r in results] == [204, 0, 204, 0, 204]
    assert "no-such-protocol" in results[3]["error"], results[3]


def test_dialer_chain_comes_from_all_outbounds(setup):
    api, _, port, user_id = setup
    chained = vless("chained", port, user_id, proxySettings={"tag": "hop"})
    dead_hop = {
        "tag": "hop",
        "protocol": "socks",
        "settings": {"servers": [{"address": "127.0.0.1", "port": free_port()}]},
    }
    through_freedom = ok(
        probe(api, chained, allOutbounds=json.dumps([FREEDOM, {**FREEDOM, "tag": "hop"}]))
    )
    through_dead = ok(probe(api, chained, allOutbounds=json.dumps([FREEDOM, dead_hop])))
    assert through_freedom["success"] is True, through_freedom
    assert through_dead["success"] is False, through_dead


def test_tcp_mode_only_dials(setup):
    api, requested, port, _ = setup
    seen = len(requested)
    # A UUID nobody knows: a dial does not speak VLESS, so it still succeeds.
    reachable = ok(probe(api, vless("up", port, str(uuid.uuid4())), mode="tcp"))
    closed_port = free_port()
    dead = ok(probe(api, vless("down", closed_port, str(uuid.uuid4())), mode="tcp"))
    assert (reachable["success"], reachable["mode"], reachable["statusCode"]) == (True, "tcp", 0)
    assert reachable["delay"] == reachable["connectMs"] >= 0
    assert (dead["success"], dead["mode"]) == (False, "tcp")
    assert f"cannot connect to 127.0.0.1:{closed_port}" in dead["error"]
    assert requested[seen:] == []


def test_tcp_mode_probes_udp_transports_and_serverless_outbounds_over_http(setup):
    api, _, port, user_id = setup
    kcp = vless("kcp", free_port(), user_id, streamSettings={"network": "kcp"})
    results = ok(probe_many(api, [kcp, FREEDOM, vless("plain", port, user_id)], mode="tcp"))
    assert [r["mode"] for r in results] == ["http", "http", "tcp"]
    assert [r["success"] for r in results] == [False, True, True]
    assert results[1]["statusCode"] == 204


def test_more_than_fifty_is_refused(setup):
    api, requested, _, _ = setup
    seen = len(requested)
    refused(probe_many(api, [FREEDOM] * 51), "at most 50")
    assert len(ok(probe_many(api, [FREEDOM] * 3))) == 3
    assert len(requested) == seen + 3


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({}, ("outbound is required",)),
        ({"outbound": "{not json"}, ("outbound is not valid JSON",)),
        ({"outbound": "[1]"}, ("must be an outbound object",)),
        ({"outbound": json.dumps({"tag": "x"})}, ("has no protocol",)),
        ({"outbound": json.dumps(FREEDOM), "mode": "udp"}, ("mode must be tcp or empty",)),
        ({"outbound": json.dumps(FREEDOM), "allOutbounds": "{}"}, ("allOutbounds must be",)),
        (
            {"outbound": json.dumps({"tag": "bad", "protocol": "no-such-protocol"})},
            ("refused", "no-such-protocol"),
        ),
    ],
)
def test_bad_single_input(setup, form, words):
    refused(setup[0].post(f"{CORE}/testOutbound", data=form), *words)


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({}, ("outbounds is required",)),
        ({"outbounds": "[]"}, ("non-empty JSON array",)),
        ({"outbounds": json.dumps([FREEDOM, "x"])}, ("outbounds[1] must be an outbound object",)),
    ],
)
def test_bad_batch_input(setup, form, words):
    refused(setup[0].post(f"{CORE}/testOutbounds", data=form), *words)


def test_a_test_url_that_is_not_http_is_named(setup):
    api = setup[0]
    previous = ok(api.post(f"{CORE}/"))["outboundTestUrl"]
    try:
        ok(api.post("/panel/api/setting/update", {"outboundTestUrl": "ftp://127.0.0.1/x"}))
        refused(probe(api, FREEDOM), "outboundTestUrl", "ftp://127.0.0.1/x")
    finally:
        ok(api.post("/panel/api/setting/update", {"outboundTestUrl": previous}))


def test_an_internal_test_url_is_refused_without_the_opt_in(setup):
    api, requested, _, _ = setup
    previous = ok(api.post(f"{CORE}/"))["outboundTestUrl"]
    service, seen = InternalService(), len(requested)
    try:
        ok(api.post("/panel/api/setting/update", {"allowPrivateDestinations": ""}))
        for spelling in ("localhost", "127.0.0.1", "[::1]", "2130706433"):
            url = f"http://{spelling}:{service.port}{PROBE_PATH}"
            ok(api.post("/panel/api/setting/update", {"outboundTestUrl": url}))
            refused(probe(api, FREEDOM), "outboundTestUrl", "loopback", "allowPrivateDestinations")
        assert service.connections == 0
        assert requested[seen:] == []
    finally:
        service.close()
        restored = {"outboundTestUrl": previous, "allowPrivateDestinations": "outboundTestUrl"}
        ok(api.post("/panel/api/setting/update", restored))


def test_without_a_core_the_test_says_so(tmp_path):
    server = start_panel(tmp_path)
    try:
        refused(probe(server.client(), FREEDOM), "temporary core did not start", "not installed")
    finally:
        server.stop()


def test_outbound_test_url_saved_with_the_template(setup):
    api = setup[0]
    with http_server({"/other": (200, b"fine")}) as (port, other):
        current = ok(api.post(f"{CORE}/"))
        previous, template = current["outboundTestUrl"], json.loads(current["coreSetting"])
        try:
            use_template(api, template, outboundTestUrl=f"http://127.0.0.1:{port}/other")
            result = ok(probe(api, FREEDOM))
            assert (result["success"], result["statusCode"]) == (True, 200), result
            assert other == ["/other"]
        finally:
            ok(api.post("/panel/api/setting/update", {"outboundTestUrl": previous}))


# ---- a DNS server that never answers ----------------------------------------------------

SILENT_DNS = "127.0.0.77"


@pytest.fixture
def deaf_resolver_panel(tmp_path):
    """A panel on the real core whose resolv.conf names a DNS server that never answers,
    retried as a dead upstream is (20 s x 3): its own mount namespace, the host's file
    untouched. Binding port 53 and mounting need root; elsewhere the test says why it skips."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a private resolv.conf needs root and unshare(1)")
    deaf = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    deaf.bind((SILENT_DNS, 53))
    conf = tmp_path / "resolv.conf"
    conf.write_text(f"nameserver {SILENT_DNS}\noptions timeout:20 attempts:3\n")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    environment.update({"APPLIANCE_CORE": NO_CORE, **CORE_ENV})
    data_dir = str(tmp_path / "data")
    args = ["--listen", "127.0.0.1", "--port", "0", "--sub-port", "0"]
    server = PanelServer(data_dir, args, environment, expect_credentials=True)
    mount = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
    run = [sys.executable, "-m", "appliance", "run", "--data-dir", data_dir, *args]
    server.launch(["unshare", "-m", "sh", "-c", mount, str(conf), *run])
    try:
        api = server.client()
        use_template(api, loopback_template(api))
        # The test URL is an address: only the outbound's server name is looked up.
        test_url = f"http://127.0.0.1:{free_port()}{PROBE_PATH}"
        settings = {"outboundTestUrl": test_url, "allowPrivateDestinations": "outboundTestUrl"}
        ok(api.post("/panel/api/setting/update", settings))
        yield api
    finally:
        server.stop()
        deaf.close()


@pytest.mark.parametrize("mode", ["tcp", ""])
def test_a_name_without_an_answer_fails_within_seconds_in_words(deaf_resolver_panel, mode):
    api = deaf_resolver_panel
    outbound = vless("unresolved", 443, str(uuid.uuid4()))
    outbound["settings"]["vnext"][0]["address"] = "server.example.com"
    started = time.monotonic()
    result = ok(probe(api, outbound, mode=mode))
    assert time.monotonic() - started < 20
    assert result["success"] is False
    assert "server.example.com did not resolve within 5 s" in result["error"], result
