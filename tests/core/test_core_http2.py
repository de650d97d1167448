"""The core API's gRPC channel (h2 underneath), against a gRPC server it shares no code with.

The server is grpcio's (a test dependency only), on loopback: answers and requests larger
than every flow-control window, a stats answer of 100,000 counters, errors in trailers
only with words that need percent-encoding, unknown methods, deadlines, calls at the same
time (threads, and greenlets under gevent's monkey patching), a server restarted between
calls on a connection the client kept, and servers that are not gRPC at all: one that
hangs up, one that never answers, and one scripted to refuse a stream, reset it or go
away before it (those call for gRPC's transparent retry, or not). The real core (V2Ray,
Go's HTTP/2) is exercised by tests/core/test_core_api.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from helpers import clean_env, free_port

from appliance.core.api import CoreApi, CoreApiError, CoreApiUnsupported, channel, wire

SERVICE = "/test.Echo/"
BIG = 12 * 1024 * 1024 + 7
NOT_FOUND_WORDS = "user «ana» 100% gone: not found"
MANY_COUNTERS = {
    f"user>>>client-{number}@example.com>>>traffic>>>{way}": number * 1_000_003 + len(way)
    for number in range(50_000)
    for way in ("uplink", "downlink")
}


def _handlers(state: dict):
    def echo(request: bytes, context) -> bytes:
        state["seen"].append(request)
        return request

    def big(request: bytes, context) -> bytes:
        return bytes(range(256)) * (BIG // 256) + b"x" * (BIG % 256)

    def missing(request: bytes, context) -> bytes:
        context.abort(grpc.StatusCode.NOT_FOUND, NOT_FOUND_WORDS)

    def slow(request: bytes, context) -> bytes:
        time.sleep(1.5)
        return b"late"

    def empty(request: bytes, context) -> bytes:
        return b""

    def pause(request: bytes, context) -> bytes:
        time.sleep(0.5)
        return request

    methods = {
        "Echo": echo,
        "Big": big,
        "Missing": missing,
        "Slow": slow,
        "Empty": empty,
        "Pause": pause,
    }
    return grpc.method_handlers_generic_handler(
        "test.Echo",
        {name: grpc.unary_unary_rpc_method_handler(handler) for name, handler in methods.items()},
    )


def _core_handlers():
    """The two StatsService and HandlerService methods the panel calls most, as a core
    with 100,000 counters answers them, and the refusal of a core's Go layers."""

    def query_stats(request: bytes, context) -> bytes:
        return b"".join(
            wire.bytes_field(1, wire.string_field(1, name) + wire.uint_field(2, value))
            for name, value in MANY_COUNTERS.items()
        )

    def alter_inbound(request: bytes, context) -> bytes:
        context.abort(grpc.StatusCode.UNKNOWN, "v2ray.com/core/proxy/vless: User x already exists.")

    stats = grpc.method_handlers_generic_handler(
        "xray.app.stats.command.StatsService",
        {"QueryStats": grpc.unary_unary_rpc_method_handler(query_stats)},
    )
    handler = grpc.method_handlers_generic_handler(
        "xray.app.proxyman.command.HandlerService",
        {"AlterInbound": grpc.unary_unary_rpc_method_handler(alter_inbound)},
    )
    return [stats, handler]


def _serve(port: int, state: dict) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers([_handlers(state), *_core_handlers()])
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    server.start()
    return server


@pytest.fixture
def served():
    port = free_port()
    state = {"seen": []}
    link = channel.Channel(f"127.0.0.1:{port}")
    served = {"channel": link, "port": port, "state": state, "server": _serve(port, state)}
    yield served
    link.close()
    served["server"].stop(None)


def test_a_call_sends_its_request_and_returns_the_answer(served):
    request = b"\x0a\x05hello" + bytes(range(256))
    assert served["channel"].unary(SERVICE + "Echo", request, 5) == request
    assert served["state"]["seen"] == [request]
    assert served["channel"].unary(SERVICE + "Empty", b"", 5) == b""


def test_an_answer_larger_than_every_window_arrives_whole(served):
    answer = served["channel"].unary(SERVICE + "Big", b"", 30)
    assert len(answer) == BIG
    assert answer[:256] == bytes(range(256)) and answer[-3:] == b"xxx"
    # The connection is kept and goes on working after the windows were given back.
    assert served["channel"].unary(SERVICE + "Big", b"", 30) == answer
    assert served["channel"].unary(SERVICE + "Echo", b"after", 5) == b"after"


def test_a_status_in_the_trailers_becomes_an_error_with_the_servers_words(served):
    with pytest.raises(channel.RpcError) as error:
        served["channel"].unary(SERVICE + "Missing", b"", 5)
    assert (error.value.code, error.value.name) == (channel.NOT_FOUND, "NOT_FOUND")
    assert error.value.details == NOT_FOUND_WORDS
    with pytest.raises(channel.RpcError) as unknown:
        served["channel"].unary(SERVICE + "Nothing", b"", 5)
    assert unknown.value.code == channel.UNIMPLEMENTED
    assert served["channel"].unary(SERVICE + "Echo", b"still", 5) == b"still"


def test_a_call_past_its_deadline_fails_and_the_next_one_works(served):
    started = time.monotonic()
    with pytest.raises(channel.RpcError) as error:
        served["channel"].unary(SERVICE + "Slow", b"", 0.5)
    assert error.value.code == channel.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 1.4
    assert served["channel"].unary(SERVICE + "Echo", b"next", 5) == b"next"


def test_calls_at_the_same_time_each_get_their_own_answer(served):
    answers = {}

    def call(number: int) -> None:
        answers[number] = served["channel"].unary(SERVICE + "Echo", b"%d" % number, 10)

    threads = [threading.Thread(target=call, args=(number,)) for number in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == {number: b"%d" % number for number in range(12)}


def test_a_server_restarted_between_calls_is_called_on_a_new_connection(served):
    assert served["channel"].unary(SERVICE + "Echo", b"one", 5) == b"one"
    served["server"].stop(None).wait()
    with pytest.raises(channel.RpcError) as error:
        served["channel"].unary(SERVICE + "Echo", b"down", 2)
    assert error.value.code == channel.UNAVAILABLE
    served["server"] = _serve(served["port"], served["state"])
    assert served["channel"].unary(SERVICE + "Echo", b"two", 5) == b"two"
    served["server"].stop(None).wait()
    served["server"] = _serve(served["port"], served["state"])
    assert served["channel"].unary(SERVICE + "Echo", b"three", 5) == b"three"
    assert served["state"]["seen"] == [b"one", b"two", b"three"]


def test_nothing_listening_is_unavailable():
    link = channel.Channel(f"127.0.0.1:{free_port()}")
    with pytest.raises(channel.RpcError) as error:
        link.unary(SERVICE + "Echo", b"", 2)
    assert error.value.code == channel.UNAVAILABLE


def test_a_request_larger_than_the_servers_window_is_sent_whole(served):
    request = bytes(range(256)) * 4096 + b"tail"
    assert served["channel"].unary(SERVICE + "Echo", request, 10) == request
    assert served["state"]["seen"] == [request]


def test_a_stats_answer_of_100000_counters_arrives_through_flow_control(served):
    api = CoreApi(f"127.0.0.1:{served['port']}", "xray", timeout=30)
    try:
        assert api.query_stats() == MANY_COUNTERS
        assert api.query_stats() == MANY_COUNTERS
    finally:
        api.close()


def test_the_cores_refusal_reaches_the_caller_in_its_own_words(served):
    api = CoreApi(f"127.0.0.1:{served['port']}", "xray")
    try:
        with pytest.raises(CoreApiError) as refused:
            api.remove_user("vless-in", "x")
        assert (
            refused.value.msg
            == "cannot remove user x from inbound vless-in: User x already exists."
        )
        with pytest.raises(CoreApiUnsupported):
            api.online_users()
        assert len(api.query_stats()) == len(MANY_COUNTERS)
    finally:
        api.close()


def test_a_dead_core_is_unavailable_in_words_that_name_it():
    address = f"127.0.0.1:{free_port()}"
    api = CoreApi(address, "xray", timeout=2)
    with pytest.raises(CoreApiError) as error:
        api.query_stats()
    assert error.value.msg == (
        f"cannot read stats: the core API at {address} is not reachable (is the core running?)"
    )


def _listening() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


def test_a_server_that_hangs_up_is_unavailable():
    with _listening() as listener:

        def hang_up() -> None:
            peer, _ = listener.accept()
            peer.recv(65536)
            peer.close()

        thread = threading.Thread(target=hang_up)
        thread.start()
        link = channel.Channel(f"127.0.0.1:{listener.getsockname()[1]}")
        with pytest.raises(channel.RpcError) as error:
            link.unary(SERVICE + "Echo", b"x", 5)
        thread.join()
    assert error.value.code == channel.UNAVAILABLE


def test_a_server_that_never_answers_times_out_on_time():
    with _listening() as listener:
        link = channel.Channel(f"127.0.0.1:{listener.getsockname()[1]}")
        started = time.monotonic()
        with pytest.raises(channel.RpcError) as error:
            link.unary(SERVICE + "Echo", b"x", 0.5)
        assert time.monotonic() - started < 1.4
        link.close()
    assert error.value.code == channel.DEADLINE_EXCEEDED


def test_a_server_that_speaks_no_http2_is_an_internal_error():
    with _listening() as listener:

        def talk_http1() -> None:
            peer, _ = listener.accept()
            peer.recv(65536)
            peer.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            time.sleep(0.5)
            peer.close()

        thread = threading.Thread(target=talk_http1)
        thread.start()
        link = channel.Channel(f"127.0.0.1:{listener.getsockname()[1]}")
        with pytest.raises(channel.RpcError) as error:
            link.unary(SERVICE + "Echo", b"x", 5)
        thread.join()
    assert error.value.code in (channel.INTERNAL, channel.UNAVAILABLE)


GEVENT_CALLS = """
from gevent import monkey

monkey.patch_all()
import json, sys, time

import gevent

from appliance.core.api import channel

link = channel.Channel(sys.argv[1])
started = time.monotonic()
calls = [gevent.spawn(link.unary, "/test.Echo/Pause", b"%d" % n, 10) for n in range(10)]
gevent.joinall(calls, raise_error=True)
took = time.monotonic() - started
print(json.dumps({"answers": [c.value.decode() for c in calls], "took": took}))
"""


def test_calls_in_greenlets_wait_side_by_side_under_gevent(served):
    result = subprocess.run(
        [sys.executable, "-c", GEVENT_CALLS, f"127.0.0.1:{served['port']}"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["answers"] == [str(number) for number in range(10)]
    # Ten calls of half a second each, one after the other, would take five.
    assert outcome["took"] < 3.5


def _act(behaviour: str, server: h2.connection.H2Connection, stream: int, request: bytes) -> None:
    if behaviour == "refuse":
        server.reset_stream(stream, h2.errors.ErrorCodes.REFUSED_STREAM)
    elif behaviour == "cancel":
        server.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
    elif behaviour == "go away":
        server.close_connection(last_stream_id=0)
    else:
        server.send_headers(stream, [(":status", "200"), ("content-type", "application/grpc")])
        server.send_data(stream, request)
        server.send_headers(stream, [("grpc-status", "0")], end_stream=True)


def _scripted(listener: socket.socket, plan: list[str], seen: list[bytes]) -> None:
    """One connection per behaviour of `plan`, each acting on the first call it gets."""
    for behaviour in plan:
        peer, _ = listener.accept()
        peer.settimeout(5)
        server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        server.initiate_connection()
        peer.sendall(server.data_to_send())
        body = bytearray()
        with peer:
            while data := peer.recv(65536):
                for event in server.receive_data(data):
                    if isinstance(event, h2.events.DataReceived):
                        body += event.data
                    elif isinstance(event, h2.events.StreamEnded):
                        seen.append(bytes(body))
                        _act(behaviour, server, event.stream_id, bytes(body))
                peer.sendall(server.data_to_send())


@pytest.mark.parametrize(
    ("plan", "connections"),
    [(["refuse", "answer"], 2), (["go away", "answer"], 2), (["answer"], 1)],
    ids=["a refused stream", "a GOAWAY below the stream", "an answer"],
)
def test_a_call_the_server_never_started_is_sent_again_on_a_new_connection(plan, connections):
    seen: list[bytes] = []
    with _listening() as listener:
        thread = threading.Thread(target=_scripted, args=(listener, plan, seen))
        thread.start()
        link = channel.Channel(f"127.0.0.1:{listener.getsockname()[1]}")
        assert link.unary(SERVICE + "Echo", b"again", 5) == b"again"
        link.close()
        thread.join()
    assert seen == [b"\0\0\0\0\x05again"] * connections


@pytest.mark.parametrize(
    ("plan", "code"),
    [(["refuse", "refuse"], channel.UNAVAILABLE), (["cancel"], channel.CANCELLED)],
    ids=["refused twice", "cancelled"],
)
def test_a_call_is_sent_at_most_twice_and_a_reset_one_not_again(plan, code):
    seen: list[bytes] = []
    with _listening() as listener:
        thread = threading.Thread(target=_scripted, args=(listener, plan, seen))
        thread.start()
        link = channel.Channel(f"127.0.0.1:{listener.getsockname()[1]}")
        with pytest.raises(channel.RpcError) as error:
            link.unary(SERVICE + "Echo", b"x", 5)
        link.close()
        thread.join()
    assert error.value.code == code
    assert len(seen) == len(plan)
