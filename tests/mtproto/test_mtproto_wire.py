"""The MTProto handshakes as pure functions: openings made by Telethon (the client library
Telegram proxies are tested with) are accepted with the right secret only, fake-TLS hellos
are checked for their signature, domain and clock, and the proxy's own opening towards a
data centre decodes as a data centre decodes it. No sockets."""

from __future__ import annotations

import hashlib
import hmac
import os

import pytest
from mtproto_helpers import client_hello, ctr
from telethon.network.connection.tcpintermediate import RandomizedIntermediatePacketCodec
from telethon.network.connection.tcpmtproxy import MTProxyIO

from appliance.domain.protocols import mtproto_link_secret
from appliance.mtproto.wire import (
    PADDED_TAG,
    SeenOpenings,
    accept_client_hello,
    accept_opening,
    data_centre_opening,
    secret_key,
    server_hello,
    server_name,
)

KEYS = [("alice", bytes(range(16))), ("bob", bytes(range(16, 32)))]


def telethon_opening(key: bytes, dc: int = 2):
    header, encrypt, decrypt = MTProxyIO.init_header(
        b"\xdd" + key, dc, RandomizedIntermediatePacketCodec
    )
    return bytes(header), encrypt, decrypt


def test_the_secret_that_made_an_opening_is_found_and_both_directions_agree():
    header, encrypt, decrypt = telethon_opening(KEYS[1][1], dc=-4)
    opening = accept_opening(header, KEYS, (PADDED_TAG,))
    assert (opening.name, opening.transport, opening.dc) == ("bob", PADDED_TAG, -4)
    assert opening.stream.decrypt.update(encrypt.encrypt(b"to the proxy")) == b"to the proxy"
    assert decrypt.encrypt(opening.stream.encrypt.update(b"to the app")) == b"to the app"


def test_an_opening_of_an_unknown_secret_or_transport_is_refused():
    header, _, _ = telethon_opening(os.urandom(16))
    assert accept_opening(header, KEYS, (PADDED_TAG,)) is None
    header, _, _ = telethon_opening(KEYS[0][1])
    assert accept_opening(header, KEYS, (b"\xee\xee\xee\xee",)) is None


def test_the_data_centre_opening_decodes_as_a_data_centre_decodes_it():
    opening, stream = data_centre_opening(PADDED_TAG, 3)
    reverse = opening[8:56][::-1]
    dc_decrypt = ctr(opening[8:40], opening[40:56])
    dc_encrypt = ctr(reverse[:32], reverse[32:48])
    plain = dc_decrypt.update(opening)
    assert plain[56:60] == PADDED_TAG and int.from_bytes(plain[60:62], "little") == 3
    assert dc_decrypt.update(stream.encrypt.update(b"frames")) == b"frames"
    assert stream.decrypt.update(dc_encrypt.update(b"answers")) == b"answers"
    assert opening[0] != 0xEF and opening[4:8] != bytes(4)


def test_a_fake_tls_hello_is_accepted_for_its_secret_domain_and_time_only():
    now = 1_800_000_000
    hello = client_hello(KEYS[0][1], "cdn.example.com", now)
    assert server_name(hello) == "cdn.example.com"
    assert accept_client_hello(hello, KEYS, "cdn.example.com", now + 5) == KEYS[0]
    assert accept_client_hello(hello, KEYS, "other.example.com", now) is None
    assert accept_client_hello(hello, KEYS[1:], "cdn.example.com", now) is None
    assert accept_client_hello(hello, KEYS, "cdn.example.com", now + 7200) is None
    tampered = hello[:-1] + bytes([hello[-1] ^ 1])
    assert accept_client_hello(tampered, KEYS, "cdn.example.com", now) is None


def test_the_server_hello_is_signed_over_the_client_random_and_the_whole_answer():
    hello = client_hello(KEYS[0][1], "cdn.example.com", 1_800_000_000)
    answer = server_hello(hello, KEYS[0][1])
    blank = answer[:11] + bytes(32) + answer[43:]
    expected = hmac.new(KEYS[0][1], hello[11:43] + blank, hashlib.sha256).digest()
    assert answer[11:43] == expected
    assert answer[44 : 44 + 32] == hello[44 : 44 + 32]  # the session id is echoed


@pytest.mark.parametrize(
    "text", ["000102030405060708090a0b0c0d0e0f", "dd000102030405060708090a0b0c0d0e0f"]
)
def test_secret_forms(text):
    assert secret_key(text) == bytes(range(16))
    assert secret_key("ee" + "00" * 16 + b"a.example".hex()) == bytes(16)
    with pytest.raises(ValueError):
        secret_key("abcd")


def test_link_secrets():
    key = "00" * 16
    assert mtproto_link_secret(key, "") == "dd" + key
    assert mtproto_link_secret(key, "a.example") == "ee" + key + "612e6578616d706c65"


def test_a_replayed_opening_is_seen_and_the_memory_is_bounded():
    seen = SeenOpenings(size=2)
    assert seen.first_time(b"a") and not seen.first_time(b"a")
    assert seen.first_time(b"b") and seen.first_time(b"c")
    assert seen.first_time(b"a")  # forgotten: the oldest went first
