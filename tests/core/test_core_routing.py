"""core/routeTest, core/balancerStatus and core/balancerOverride.

Against the real core (V2Ray 4.34, which serves no RoutingService): input is checked
against the running config first, and what the core cannot do comes back as a failure
that names the core and what it lacks. Against a loopback gRPC server speaking Xray's
RoutingService messages (Xray cannot run here): the method paths and the bytes of each
request and answer, field by field as Xray's app/router/command/command.proto numbers them.
"""

from __future__ import annotations

import ipaddress
from concurrent import futures

import grpc
import pytest
from core_panel import core_panel, loopback_template, use_template
from helpers import ok, refused

from appliance.core.api import CoreApi, CoreApiUnsupported, wire

CORE = "/panel/api/core"
BALANCED = {"type": "field", "domain": ["full:balanced.test"], "balancerTag": "spread"}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """A panel on the real core whose template has a balancer `spread` over two outbounds."""
    server = core_panel(tmp_path_factory.mktemp("routing"))
    client = server.client()
    template = loopback_template(client)
    template["outbounds"].append({"tag": "second", "protocol": "freedom", "settings": {}})
    template["routing"]["balancers"] = [{"tag": "spread", "selector": ["direct", "second"]}]
    template["routing"]["rules"].append(BALANCED)
    use_template(client, template)
    yield client
    server.stop()


# ---- against V2Ray 4.34 ------------------------------------------------------------------


def test_route_test_needs_xray(api):
    refused(
        api.post(f"{CORE}/routeTest", data={"domain": "example.com", "port": "443"}),
        "the running core (v2fly 4.34.0) has no routing test; it needs Xray",
    )


def test_balancer_override_needs_xray(api):
    refused(
        api.post(f"{CORE}/balancerOverride", data={"tag": "spread", "target": "second"}),
        "the running core (v2fly 4.34.0) has no balancer override; it needs Xray",
    )
    refused(
        api.post(f"{CORE}/balancerOverride", data={"tag": "spread", "target": ""}),
        "has no balancer override; it needs Xray",
    )


def test_balancer_status_needs_xray(api):
    refused(
        api.post(f"{CORE}/balancerStatus", data={"tags": "spread"}),
        "the running core (v2fly 4.34.0) has no balancer status; it needs Xray",
    )


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({}, ("tag is required",)),
        ({"tag": " "}, ("tag is required",)),
        ({"tag": "nowhere", "target": "direct"}, ("no balancer 'nowhere'", "balancers: spread")),
        ({"tag": "spread", "target": "ghost"}, ("no outbound 'ghost'", "direct, blocked, second")),
    ],
)
def test_override_input_is_checked_against_the_running_config(api, form, words):
    refused(api.post(f"{CORE}/balancerOverride", data=form), *words)


def test_status_of_an_unknown_balancer(api):
    refused(
        api.post(f"{CORE}/balancerStatus", data={"tags": "spread, ghost"}), "no balancer 'ghost'"
    )


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({}, ("domain or ip is required",)),
        ({"port": "80"}, ("domain or ip is required",)),
        ({"ip": "300.1.1.1"}, ("ip must be an IPv4 or IPv6 address",)),
        ({"domain": "a.test", "port": "70000"}, ("port must be from 1 to 65535",)),
        ({"domain": "a.test", "port": "x"}, ("port must be from 1 to 65535",)),
        ({"domain": "a.test", "network": "icmp"}, ("network must be tcp or udp",)),
        ({"domain": "a" * 300}, ("domain must be at most 255 characters",)),
    ],
)
def test_route_test_input(api, form, words):
    refused(api.post(f"{CORE}/routeTest", data=form), *words)


def test_route_test_as_json_body(api):
    refused(api.post(f"{CORE}/routeTest", {"domain": 5}), "domain must be a string")


def test_with_the_core_stopped(api):
    ok(api.post("/panel/api/server/stopCoreService"))
    try:
        refused(api.post(f"{CORE}/routeTest", data={"domain": "a.test"}), "the core is not running")
        refused(api.post(f"{CORE}/balancerStatus", data={}), "the core is not running")
    finally:
        ok(api.post("/panel/api/server/restartCoreService"))


# ---- Xray's RoutingService messages ----------------------------------------------------


class RecordingRouter:
    """A gRPC server on loopback that records each call and answers fixed bytes."""

    def __init__(self, answers: dict[str, bytes]):
        self.calls: list[tuple[str, bytes]] = []
        self.answers = answers
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers([self])
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def service(self, details):
        method = details.method
        if method not in self.answers:
            return None

        def answer(request: bytes, context) -> bytes:
            self.calls.append((method, request))
            return self.answers[method]

        return grpc.unary_unary_rpc_method_handler(
            answer, request_deserializer=None, response_serializer=None
        )


@pytest.fixture
def router():
    routing = "/xray.app.router.command.RoutingService/"
    # GetBalancerInfoResponse{balancer{override{target:"second"}, principle_target{tag:[...]}}}
    override = wire.bytes_field(5, wire.string_field(2, "second"))
    principle = wire.bytes_field(6, wire.string_field(1, "direct") + wire.string_field(1, "second"))
    # RoutingContext answer: OutboundGroupTags "spread", OutboundTag "second".
    routed = wire.string_field(11, "spread") + wire.string_field(12, "second")
    observed = wire.bytes_field(
        1,
        wire.bytes_field(
            1,
            wire.uint_field(1, 1)
            + wire.uint_field(2, 123)
            + wire.string_field(4, "second")
            + wire.uint_field(5, 1700000000)
            + wire.uint_field(6, 1700000001),
        ),
    )
    recorder = RecordingRouter(
        {
            routing + "TestRoute": routed,
            routing + "GetBalancerInfo": wire.bytes_field(1, override + principle),
            routing + "OverrideBalancerTarget": b"",
            "/xray.core.app.observatory.command.ObservatoryService/GetOutboundStatus": observed,
        }
    )
    recorder.server.start()
    client = CoreApi(f"127.0.0.1:{recorder.port}", "xray")
    yield recorder, client
    client.close()
    recorder.server.stop(None)


def test_test_route_request_and_answer(router):
    recorder, client = router
    context = wire.routing_context(
        inbound_tag="in",
        network="udp",
        target_ips=[ipaddress.ip_address("10.0.0.1").packed],
        target_port=53,
        target_domain="a.test",
        protocol="dns",
        user="u@test",
    )
    assert client.route(context) == {"outboundTag": "second", "outboundGroupTags": ["spread"]}
    method, request = recorder.calls[-1]
    assert method == "/xray.app.router.command.RoutingService/TestRoute"
    sent = dict(wire.fields(request))
    assert dict(wire.fields(sent[1])) == {
        1: b"in",
        2: 3,  # Network UDP
        4: bytes([10, 0, 0, 1]),
        6: 53,
        7: b"a.test",
        8: b"dns",
        9: b"u@test",
    }
    assert sent[2] == b"outbound"  # FieldSelectors
    assert 3 not in sent  # never published to the routing statistics


def test_balancer_info_and_override_messages(router):
    recorder, client = router
    assert client.balancer_info("spread") == {
        "override": "second",
        "principleTargets": ["direct", "second"],
    }
    client.override_balancer("spread", "second")
    client.override_balancer("spread", "")
    calls = recorder.calls
    assert calls[0] == ("/xray.app.router.command.RoutingService/GetBalancerInfo", b"\n\x06spread")
    assert calls[1][0] == "/xray.app.router.command.RoutingService/OverrideBalancerTarget"
    assert list(wire.fields(calls[1][1])) == [(1, b"spread"), (2, b"second")]
    assert list(wire.fields(calls[2][1])) == [(1, b"spread")]


def test_observatory_status_message(router):
    _, client = router
    assert client.outbound_status() == [
        {
            "tag": "second",
            "alive": True,
            "delay": 123,
            "lastErrorReason": "",
            "lastSeenTime": 1700000000,
            "lastTryTime": 1700000001,
        }
    ]


def test_a_method_the_server_lacks_is_unsupported(router):
    _, client = router
    v2ray_named = CoreApi(client.address, "v2ray.core")
    try:
        with pytest.raises(CoreApiUnsupported):
            v2ray_named.balancer_info("spread")
    finally:
        v2ray_named.close()
