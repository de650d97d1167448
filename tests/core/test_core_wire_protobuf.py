"""Every message the core API's wire code writes or reads, held to protobuf's own classes.

`appliance.core.api.wire` encodes and decodes the core's messages by hand, so the panel
ships no protobuf runtime. Here the same messages are declared in the .proto syntax of
the core's files (app/stats/command, app/proxyman/command, common/serial/typed_message,
common/protocol/user and headers, proxy/vless, proxy/vmess, proxy/trojan,
app/router/command, app/observatory), one line per field, and built into classes of the
`protobuf` package (a test dependency) with `descriptor_pb2`: no protoc, no generated
files. For each message ours writes, protobuf parses our bytes to the same fields and
writes the same bytes itself; for each message ours reads, ours decodes protobuf's bytes
to the same values. The cases reach the edges: zero values (not on the wire in proto3),
the largest and negative 64-bit integers, unicode, and TypedMessages nested three deep.
"""

from __future__ import annotations

import re

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.api import wire

PACKAGE = "coreapi"
FieldProto = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    "string": FieldProto.TYPE_STRING,
    "bytes": FieldProto.TYPE_BYTES,
    "bool": FieldProto.TYPE_BOOL,
    "int64": FieldProto.TYPE_INT64,
    "uint32": FieldProto.TYPE_UINT32,
    "uint64": FieldProto.TYPE_UINT64,
}
ENUMS = {
    # common/net/network.proto
    "Network": {"Unknown": 0, "RawTCP": 1, "TCP": 2, "UDP": 3, "UNIX": 4},
    # common/protocol/headers.proto
    "SecurityType": {
        "UNKNOWN": 0,
        "LEGACY": 1,
        "AUTO": 2,
        "AES128_GCM": 3,
        "CHACHA20_POLY1305": 4,
        "NONE": 5,
        "ZERO": 6,
    },
}
MESSAGES = {
    "QueryStatsRequest": "string pattern = 1; bool reset = 2",
    "Stat": "string name = 1; int64 value = 2",
    "QueryStatsResponse": "repeated Stat stat = 1",
    "SysStatsResponse": (
        "uint32 NumGoroutine = 1; uint32 NumGC = 2; uint64 Alloc = 3; uint64 TotalAlloc = 4;"
        "uint64 Sys = 5; uint64 Mallocs = 6; uint64 Frees = 7; uint64 LiveObjects = 8;"
        "uint64 PauseTotalNs = 9; uint32 Uptime = 10"
    ),
    "GetStatsRequest": "string name = 1; bool reset = 2",
    "GetAllOnlineUsersResponse": "repeated string users = 1",
    "GetStatsOnlineIpListResponse": "string name = 1; map<string, int64> ips = 2",
    "TypedMessage": "string type = 1; bytes value = 2",
    "User": "uint32 level = 1; string email = 2; TypedMessage account = 3",
    "AddUserOperation": "User user = 1",
    "RemoveUserOperation": "string email = 1",
    "AlterInboundRequest": "string tag = 1; TypedMessage operation = 2",
    "VlessAccount": "string id = 1; string flow = 2; string encryption = 3",
    "SecurityConfig": "SecurityType type = 1",
    "VmessAccount": (
        "string id = 1; uint32 alter_id = 2; SecurityConfig security_settings = 3;"
        "string tests_enabled = 4"
    ),
    "TrojanAccount": "string password = 1; string flow = 2",
    "RoutingContext": (
        "string InboundTag = 1; Network Network = 2; repeated bytes SourceIPs = 3;"
        "repeated bytes TargetIPs = 4; uint32 SourcePort = 5; uint32 TargetPort = 6;"
        "string TargetDomain = 7; string Protocol = 8; string User = 9;"
        "map<string, string> Attributes = 10; repeated string OutboundGroupTags = 11;"
        "string OutboundTag = 12"
    ),
    "TestRouteRequest": (
        "RoutingContext RoutingContext = 1; repeated string FieldSelectors = 2;"
        "bool PublishResult = 3"
    ),
    "GetBalancerInfoRequest": "string tag = 1",
    "OverrideInfo": "string target = 2",
    "PrincipleTargetInfo": "repeated string tag = 1",
    "BalancerMsg": "OverrideInfo override = 5; PrincipleTargetInfo principle_target = 6",
    "GetBalancerInfoResponse": "BalancerMsg balancer = 1",
    "OverrideBalancerTargetRequest": "string balancerTag = 1; string target = 2",
    "GetOutboundStatusRequest": "repeated string outbound_tags = 1",
    "OutboundStatus": (
        "bool alive = 1; int64 delay = 2; string last_error_reason = 3;"
        "string outbound_tag = 4; int64 last_seen_time = 5; int64 last_try_time = 6"
    ),
    "ObservationResult": "repeated OutboundStatus status = 1",
    "GetOutboundStatusResponse": "ObservationResult status = 1",
}
FIELD = re.compile(r"^(repeated )?(map<(\w+), (\w+)>|\w+) (\w+) = (\d+)$")


def _entry_name(field_name: str) -> str:
    return field_name[0].upper() + field_name[1:] + "Entry"


def _set_type(field: FieldProto, kind: str) -> None:
    if kind in SCALARS:
        field.type = SCALARS[kind]
    elif kind in ENUMS:
        field.type = FieldProto.TYPE_ENUM
        field.type_name = f".{PACKAGE}.{kind}"
    else:
        field.type = FieldProto.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{kind}"


def _add_message(file: descriptor_pb2.FileDescriptorProto, name: str, spec: str) -> None:
    message = file.message_type.add(name=name)
    for line in filter(None, (part.strip() for part in spec.split(";"))):
        repeated, kind, key_kind, value_kind, field_name, number = FIELD.match(line).groups()
        field = message.field.add(name=field_name, number=int(number))
        field.label = (
            FieldProto.LABEL_REPEATED if repeated or key_kind else FieldProto.LABEL_OPTIONAL
        )
        if key_kind:
            entry = message.nested_type.add(name=_entry_name(field_name))
            entry.options.map_entry = True
            for entry_name, entry_number, entry_kind in (
                ("key", 1, key_kind),
                ("value", 2, value_kind),
            ):
                entry_field = entry.field.add(name=entry_name, number=entry_number)
                entry_field.label = FieldProto.LABEL_OPTIONAL
                _set_type(entry_field, entry_kind)
            field.type = FieldProto.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.{name}.{entry.name}"
        else:
            _set_type(field, kind)


def _classes() -> dict[str, type]:
    file = descriptor_pb2.FileDescriptorProto(
        name="core_api_test.proto", package=PACKAGE, syntax="proto3"
    )
    for name, values in ENUMS.items():
        enum = file.enum_type.add(name=name)
        for value_name, number in values.items():
            enum.value.add(name=value_name, number=number)
    for name, spec in MESSAGES.items():
        _add_message(file, name, spec)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in MESSAGES
    }


PROTOS = _classes()

INT64_MAX, INT64_MIN, UINT64_MAX = 2**63 - 1, -(2**63), 2**64 - 1
UNICODE = "ünïcødé@例え.jp 🚀"


def parsed(message_name: str, data: bytes):
    """Our bytes as protobuf's class of message `message_name` reads them."""
    message = PROTOS[message_name]()
    message.ParseFromString(data)
    return message


def written(message_name: str, **fields) -> bytes:
    return PROTOS[message_name](**fields).SerializeToString()


def fields_of(message) -> dict:
    return MessageToDict(message, preserving_proto_field_name=True)


def same_bytes(ours: bytes, message_name: str, **fields) -> None:
    """Protobuf reads our bytes as `fields`, and writes exactly our bytes for them."""
    assert fields_of(parsed(message_name, ours)) == fields_of(PROTOS[message_name](**fields))
    assert written(message_name, **fields) == ours


# ---- what the panel writes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "reset"), [("", False), ("user>>>", True), (UNICODE, False), ("x" * 300, True)]
)
def test_query_stats_request(pattern, reset):
    same_bytes(
        wire.query_stats_request(pattern, reset), "QueryStatsRequest", pattern=pattern, reset=reset
    )


@pytest.mark.parametrize("name", ["", "user>>>a@b>>>online", f"user>>>{UNICODE}>>>online"])
def test_online_ip_request(name):
    same_bytes(wire.online_ip_request(name), "GetStatsRequest", name=name)


@pytest.mark.parametrize("email", ["", "e@x", UNICODE])
def test_remove_user_operation(email):
    same_bytes(wire.remove_user_operation(email), "RemoveUserOperation", email=email)


@pytest.mark.parametrize(
    ("user_id", "flow", "encryption"),
    [
        ("", "", ""),
        ("2f3e9a7c-0000-4000-8000-000000000001", "xtls-rprx-vision", ""),
        (UNICODE, "", "none"),
    ],
)
def test_vless_account(user_id, flow, encryption):
    same_bytes(
        wire.vless_account(user_id, flow, encryption),
        "VlessAccount",
        id=user_id,
        flow=flow,
        encryption=encryption,
    )


@pytest.mark.parametrize(
    ("security", "number"),
    [
        ("auto", 2),
        ("aes-128-gcm", 3),
        ("chacha20-poly1305", 4),
        ("none", 5),
        ("zero", 6),
        ("AES-128-GCM", 3),
        ("unknown", 2),
    ],
)
def test_vmess_account(security, number):
    same_bytes(
        wire.vmess_account("id-" + security, security),
        "VmessAccount",
        id="id-" + security,
        security_settings={"type": number},
    )


@pytest.mark.parametrize(
    ("password", "flow"), [("", ""), ("pw", ""), (UNICODE, "xtls-rprx-direct")]
)
def test_trojan_account(password, flow):
    same_bytes(wire.trojan_account(password, flow), "TrojanAccount", password=password, flow=flow)


@pytest.mark.parametrize(
    ("type_name", "value"),
    [("", b""), ("xray.proxy.vless.Account", b"\x0a\x01u"), (UNICODE, bytes(range(256)))],
)
def test_typed_message(type_name, value):
    same_bytes(wire.typed_message(type_name, value), "TypedMessage", type=type_name, value=value)


@pytest.mark.parametrize(("level", "email"), [(0, ""), (1, "e@x"), (2**32 - 1, UNICODE)])
def test_user(level, email):
    account = wire.typed_message("v2ray.core.proxy.trojan.Account", wire.trojan_account("pw"))
    same_bytes(
        wire.user(level, email, account),
        "User",
        level=level,
        email=email,
        account={"type": "v2ray.core.proxy.trojan.Account", "value": wire.trojan_account("pw")},
    )


def test_an_add_user_request_nests_typed_messages_as_protobuf_does():
    vless = wire.vless_account("uuid-1", "xtls-rprx-vision")
    account = wire.typed_message("xray.proxy.vless.Account", vless)
    operation = wire.typed_message(
        "xray.app.proxyman.command.AddUserOperation",
        wire.add_user_operation(wire.user(0, UNICODE, account)),
    )
    ours = wire.alter_inbound_request("vless-in", operation)

    request = parsed("AlterInboundRequest", ours)
    assert request.tag == "vless-in"
    assert request.operation.type == "xray.app.proxyman.command.AddUserOperation"
    added = parsed("AddUserOperation", request.operation.value)
    assert (added.user.level, added.user.email) == (0, UNICODE)
    assert added.user.account.type == "xray.proxy.vless.Account"
    assert fields_of(parsed("VlessAccount", added.user.account.value)) == {
        "id": "uuid-1",
        "flow": "xtls-rprx-vision",
    }

    theirs = PROTOS["AlterInboundRequest"](
        tag="vless-in",
        operation={
            "type": "xray.app.proxyman.command.AddUserOperation",
            "value": written(
                "AddUserOperation",
                user={
                    "email": UNICODE,
                    "account": {"type": "xray.proxy.vless.Account", "value": vless},
                },
            ),
        },
    )
    assert theirs.SerializeToString() == ours


def test_a_remove_user_request():
    operation = wire.typed_message(
        "v2ray.core.app.proxyman.command.RemoveUserOperation", wire.remove_user_operation("e@x")
    )
    same_bytes(
        wire.alter_inbound_request("", operation),
        "AlterInboundRequest",
        operation={
            "type": "v2ray.core.app.proxyman.command.RemoveUserOperation",
            "value": written("RemoveUserOperation", email="e@x"),
        },
    )


@pytest.mark.parametrize(
    "context",
    [
        {},
        {"inbound_tag": "api", "network": "udp", "target_port": 65535},
        {
            "inbound_tag": UNICODE,
            "target_ips": [bytes([1, 1, 1, 1]), b"", bytes(16)],
            "target_domain": "例え.jp",
            "protocol": "tls",
            "user": UNICODE,
        },
    ],
)
def test_routing_context_and_route_test_request(context):
    ours = wire.routing_context(**context)
    expected = {
        "InboundTag": context.get("inbound_tag", ""),
        "Network": {"tcp": 2, "udp": 3}[context.get("network", "tcp")],
        "TargetIPs": context.get("target_ips", []),
        "TargetPort": context.get("target_port", 0),
        "TargetDomain": context.get("target_domain", ""),
        "Protocol": context.get("protocol", ""),
        "User": context.get("user", ""),
    }
    same_bytes(ours, "RoutingContext", **expected)
    same_bytes(
        wire.route_test_request(ours, ["outbound", "", "inbound"]),
        "TestRouteRequest",
        RoutingContext=expected,
        FieldSelectors=["outbound", "", "inbound"],
    )
    same_bytes(wire.route_test_request(b"", []), "TestRouteRequest")


@pytest.mark.parametrize("tag", ["", "balancer", UNICODE])
def test_balancer_requests(tag):
    same_bytes(wire.balancer_info_request(tag), "GetBalancerInfoRequest", tag=tag)
    same_bytes(
        wire.override_balancer_request(tag, ""), "OverrideBalancerTargetRequest", balancerTag=tag
    )
    same_bytes(
        wire.override_balancer_request(tag, "out-" + tag),
        "OverrideBalancerTargetRequest",
        balancerTag=tag,
        target="out-" + tag,
    )


@pytest.mark.parametrize("tags", [[], ["direct"], ["a", "", UNICODE], [""]])
def test_outbound_status_request(tags):
    same_bytes(wire.outbound_status_request(tags), "GetOutboundStatusRequest", outbound_tags=tags)


@settings(max_examples=200, deadline=None)
@given(st.text(), st.booleans())
def test_any_query_stats_request(pattern, reset):
    same_bytes(
        wire.query_stats_request(pattern, reset), "QueryStatsRequest", pattern=pattern, reset=reset
    )


# ---- what the panel reads ----------------------------------------------------------------


@pytest.mark.parametrize(
    "stats",
    [
        [],
        [("", 0)],
        [("a", 0), ("b", 1), ("c", -1)],
        [("user>>>x>>>traffic>>>uplink", INT64_MAX), ("min", INT64_MIN)],
        [(UNICODE, 300), ("x" * 200, 2**40)],
    ],
)
def test_query_stats_response(stats):
    data = written("QueryStatsResponse", stat=[{"name": n, "value": v} for n, v in stats])
    assert wire.decode_query_stats_response(data) == dict(stats)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=60), st.integers(INT64_MIN, INT64_MAX)), max_size=20))
def test_any_query_stats_response(stats):
    data = written("QueryStatsResponse", stat=[{"name": n, "value": v} for n, v in stats])
    assert wire.decode_query_stats_response(data) == dict(stats)


SYS_FIELDS = {
    "NumGoroutine": 2**32 - 1,
    "NumGC": 7,
    "Alloc": UINT64_MAX,
    "TotalAlloc": 2**40,
    "Sys": 1,
    "Mallocs": 0,
    "Frees": 300,
    "LiveObjects": 128,
    "PauseTotalNs": 2**63,
    "Uptime": 86_400,
}


@pytest.mark.parametrize("values", [{}, SYS_FIELDS], ids=["zero", "full"])
def test_sys_stats_response(values):
    assert wire.decode_sys_stats_response(written("SysStatsResponse", **values)) == {
        name: values.get(name, 0) for name in SYS_FIELDS
    }


@pytest.mark.parametrize("users", [[], ["user>>>a@b>>>online"], ["", f"user>>>{UNICODE}>>>online"]])
def test_online_users_response(users):
    assert wire.decode_online_users(written("GetAllOnlineUsersResponse", users=users)) == users


@pytest.mark.parametrize(
    "ips",
    [{}, {"1.2.3.4": 0}, {"2001:db8::1": INT64_MAX, "10.0.0.1": 1_764_000_000, "n": INT64_MIN}],
)
def test_online_ips_response(ips):
    data = written("GetStatsOnlineIpListResponse", name="user>>>a@b>>>online", ips=ips)
    assert wire.decode_online_ips(data) == ips


@pytest.mark.parametrize(
    ("outbound", "groups"), [("", []), ("direct", ["balancer"]), (UNICODE, ["a", UNICODE])]
)
def test_routed_context(outbound, groups):
    data = written(
        "RoutingContext",
        InboundTag="api",
        Network=2,
        TargetIPs=[bytes(4)],
        TargetPort=443,
        Attributes={":path": "/"},
        OutboundTag=outbound,
        OutboundGroupTags=groups,
    )
    assert wire.decode_routed(data) == {"outboundTag": outbound, "outboundGroupTags": groups}


@pytest.mark.parametrize(
    "balancer",
    [
        {},
        {"override": {"target": "out-a"}},
        {"principle_target": {"tag": ["out-b", UNICODE]}},
        {"override": {"target": UNICODE}, "principle_target": {"tag": [""]}},
    ],
)
def test_balancer_info_response(balancer):
    data = written("GetBalancerInfoResponse", balancer=balancer)
    assert wire.decode_balancer_info(data) == {
        "override": balancer.get("override", {}).get("target", ""),
        "principleTargets": balancer.get("principle_target", {}).get("tag", []),
    }


def test_outbound_status_response():
    statuses = [
        {},
        {
            "alive": True,
            "delay": 123,
            "last_error_reason": "",
            "outbound_tag": "proxy",
            "last_seen_time": 1_764_000_000,
            "last_try_time": INT64_MAX,
        },
        {
            "last_error_reason": UNICODE,
            "outbound_tag": UNICODE,
            "delay": -1,
            "last_try_time": INT64_MIN,
        },
    ]
    data = written("GetOutboundStatusResponse", status={"status": statuses})
    assert wire.decode_outbound_status(data) == [
        {
            "tag": status.get("outbound_tag", ""),
            "alive": status.get("alive", False),
            "delay": status.get("delay", 0),
            "lastErrorReason": status.get("last_error_reason", ""),
            "lastSeenTime": status.get("last_seen_time", 0),
            "lastTryTime": status.get("last_try_time", 0),
        }
        for status in statuses
    ]
    assert wire.decode_outbound_status(written("GetOutboundStatusResponse")) == []
