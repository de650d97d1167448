"""An outbound made from a subscription carries real traffic, and a refresh restarts the
core at most once.

The panel runs Debian's V2Ray 4.34 as its core. A second V2Ray on loopback plays the
provider's server (a VMess inbound forwarding to the echo server); the subscription,
served by a small HTTP server of the test, advertises it as a share link and is marked
`prepend`, so its outbound becomes the core's default route. A SOCKS inbound of the panel
then carries a client's bytes through the provider's server to the echo server and back;
with the provider's server stopped they no longer come back, so the bytes did take that
way.
"""

from __future__ import annotations

import base64
import uuid

import pytest
from core_helpers import LOOPBACK, echo_server, inbound, running_core, server_config
from core_panel import core_panel, http_server, wait_until
from core_traffic import add_inbound, in_core, passes, settled_started_count
from helpers import free_port, ok

from appliance.links.plan import LinkPlan, Security
from appliance.links.share import share_link

SUBS = "/panel/api/core/outbound-subs"


def vmess_link(port: int, user_id: str, remark: str) -> str:
    plan = LinkPlan(
        protocol="vmess",
        remark=remark,
        address=LOOPBACK,
        port=port,
        network="tcp",
        security=Security("none"),
        user_id=user_id,
    )
    return share_link(plan)


def running_outbounds(api) -> list[str]:
    config = ok(api.get("/panel/api/server/getConfigJson"))
    return [outbound.get("tag") for outbound in config["outbounds"]]


@pytest.fixture
def panel(tmp_path):
    server = core_panel(tmp_path)
    yield server
    server.stop()


def test_a_subscription_outbound_carries_traffic_and_a_refresh_restarts_once(panel, tmp_path):
    api = panel.client()
    user_id = str(uuid.uuid4())
    upstream_port = free_port()
    upstream = server_config(
        free_port(), inbound("provider", "vmess", upstream_port, {"id": user_id, "email": "p"})
    )
    socks = add_inbound(api, "socks")
    in_core(api, panel, socks)
    body = base64.b64encode(vmess_link(upstream_port, user_id, "Provider 1").encode())
    answers = {"/sub": (200, body)}
    with echo_server() as echo, http_server(answers) as (port, _):
        with running_core(tmp_path, upstream, upstream_port):
            form = {
                "url": f"http://{LOOPBACK}:{port}/sub",
                "allowPrivate": "true",
                "prepend": "true",
                "tagPrefix": "up-",
            }
            sub = ok(api.post(SUBS, data=form))
            assert sub["tags"] == ["up-Provider-1"]
            wait_until(lambda: running_outbounds(api)[0] == "up-Provider-1", "the core runs it")
            wait_until(lambda: passes(socks["port"], echo), "bytes pass through the provider")

            # A refresh that changes nothing restarts nothing.
            starts = settled_started_count(api)
            ok(api.post(f"{SUBS}/{sub['id']}/refresh"))
            assert settled_started_count(api) == starts
            # One that adds a server restarts the core once, and the tag of the first
            # server stays what routing rules may name.
            second = vmess_link(upstream_port + 1, user_id, "Provider 2")
            answers["/sub"] = (200, b"\n".join([base64.b64decode(body), second.encode()]))
            made = ok(api.post(f"{SUBS}/{sub['id']}/refresh"))
            assert [o["tag"] for o in made] == ["up-Provider-1", "up-Provider-2"]
            wait_until(lambda: "up-Provider-2" in running_outbounds(api), "the core reloads")
            assert settled_started_count(api) == starts + 1
            wait_until(lambda: passes(socks["port"], echo), "bytes pass after the reload")
        # The provider's server is gone: the bytes took its way, so they stop.
        assert not passes(socks["port"], echo)


def test_outbounds_the_core_refuses_are_refused_with_its_words(panel):
    """V2Ray 4.34 has no Hysteria: a subscription of one Hysteria 2 server is refused
    when added, and a refresh that brings one keeps the outbounds the core runs."""
    api = panel.client()
    vmess = vmess_link(free_port(), str(uuid.uuid4()), "Runs")
    hysteria = "hy2://secret@203.0.113.9:443/?sni=hy.example.com#Not-here"
    answers = {"/sub": (200, hysteria.encode())}
    with http_server(answers) as (port, _):
        form = {"url": f"http://{LOOPBACK}:{port}/sub", "allowPrivate": "true"}
        reply = api.post(SUBS, data=form)
        assert reply["success"] is False and "the core refuses these outbounds" in reply["msg"]
        assert "the running core (v2fly 4.34.0) cannot run Hysteria 2" in reply["msg"]
        assert ok(api.get(SUBS)) == []
        answers["/sub"] = (200, vmess.encode())
        sub = ok(api.post(SUBS, data=form))
        wait_until(lambda: sub["tags"][0] in running_outbounds(api), "the core runs it")
        answers["/sub"] = (200, f"{vmess}\n{hysteria}".encode())
        refused = api.post(f"{SUBS}/{sub['id']}/refresh")
        assert refused["success"] is False and "core refuses" in refused["msg"]
        listed = ok(api.get(SUBS))[0]
        assert listed["tags"] == sub["tags"] and "core refuses" in listed["lastError"]
        assert running_outbounds(api)[-1] == sub["tags"][0]
