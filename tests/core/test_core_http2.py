"""The core API's own HTTP/2 client, against an HTTP/2 server it shares no code with.

The server is grpcio's (a test dependency only), on loopback: answers larger than every
flow-control window, errors in trailers only with words that need percent-encoding,
unknown methods, deadlines, calls at the same time, and a server restarted between
calls on a connection the client kept. The HPACK decoder is checked against the
examples of RFC 7541 Appendix C, which exercise the Huffman code and the dynamic table's
eviction. The real core (V2Ray, Go's HTTP/2) is exercised by tests/core/test_core_api.py.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest
from helpers import free_port

from appliance.core import hpack, http2

SERVICE = "/test.Echo/"
BIG = 12 * 1024 * 1024 + 7
NOT_FOUND_WORDS = "user «ana» 100% gone: not found"


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

    methods = {"Echo": echo, "Big": big, "Missing": missing, "Slow": slow, "Empty": empty}
    return grpc.method_handlers_generic_handler(
        "test.Echo",
        {name: grpc.unary_unary_rpc_method_handler(handler) for name, handler in methods.items()},
    )


def _serve(port: int, state: dict) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers([_handlers(state)])
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    server.start()
    return server


@pytest.fixture
def served():
    port = free_port()
    state = {"seen": []}
    channel = http2.Channel(f"127.0.0.1:{port}")
    served = {"channel": channel, "port": port, "state": state, "server": _serve(port, state)}
    yield served
    channel.close()
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
    with pytest.raises(http2.RpcError) as error:
        served["channel"].unary(SERVICE + "Missing", b"", 5)
    assert (error.value.code, error.value.name) == (http2.NOT_FOUND, "NOT_FOUND")
    assert error.value.details == NOT_FOUND_WORDS
    with pytest.raises(http2.RpcError) as unknown:
        served["channel"].unary(SERVICE + "Nothing", b"", 5)
    assert unknown.value.code == http2.UNIMPLEMENTED
    assert served["channel"].unary(SERVICE + "Echo", b"still", 5) == b"still"


def test_a_call_past_its_deadline_fails_and_the_next_one_works(served):
    started = time.monotonic()
    with pytest.raises(http2.RpcError) as error:
        served["channel"].unary(SERVICE + "Slow", b"", 0.5)
    assert error.value.code == http2.DEADLINE_EXCEEDED
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
    with pytest.raises(http2.RpcError) as error:
        served["channel"].unary(SERVICE + "Echo", b"down", 2)
    assert error.value.code == http2.UNAVAILABLE
    served["server"] = _serve(served["port"], served["state"])
    assert served["channel"].unary(SERVICE + "Echo", b"two", 5) == b"two"
    served["server"].stop(None).wait()
    served["server"] = _serve(served["port"], served["state"])
    assert served["channel"].unary(SERVICE + "Echo", b"three", 5) == b"three"
    assert served["state"]["seen"] == [b"one", b"two", b"three"]


def test_nothing_listening_is_unavailable():
    channel = http2.Channel(f"127.0.0.1:{free_port()}")
    with pytest.raises(http2.RpcError) as error:
        channel.unary(SERVICE + "Echo", b"", 2)
    assert error.value.code == http2.UNAVAILABLE


# ---- HPACK, RFC 7541 Appendix C ------------------------------------------------------------


def test_huffman_coded_request_headers_decode_as_in_the_rfc():
    decoder = hpack.Decoder()
    blocks = (
        "828684418cf1e3c2e5f23a6ba0ab90f4ff",
        "828684be5886a8eb10649cbf",
        "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
    )
    decoded = [decoder.decode(bytes.fromhex(block)) for block in blocks]
    assert decoded[0] == [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ]
    assert decoded[1][-1] == ("cache-control", "no-cache")
    assert decoded[2] == [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ]
    assert decoder.size == 164


def test_response_headers_evict_the_oldest_entries_of_a_small_table():
    decoder = hpack.Decoder(256)
    blocks = (
        "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff"
        "6e919d29ad171863c78f0b97c8e9ae82ae43d3",
        "4883640effc1c0bf",
        "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2"
        "e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
    )
    decoded = [decoder.decode(bytes.fromhex(block)) for block in blocks]
    assert decoded[1][0] == (":status", "307")
    assert decoded[2] == [
        (":status", "200"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
        ("location", "https://www.example.com"),
        ("content-encoding", "gzip"),
        ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
    ]
    assert [name for name, _ in decoder.table] == [b"set-cookie", b"content-encoding", b"date"]
    assert decoder.size == 215


def test_a_malformed_header_block_is_an_error():
    with pytest.raises(hpack.HpackError):
        hpack.Decoder().decode(bytes([0x80 | 70]))  # an index past both tables
    with pytest.raises(hpack.HpackError):
        hpack.huffman_decode(b"\xf1\xe3\x00")  # padding that is not all ones
