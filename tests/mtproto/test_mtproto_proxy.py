"""The MTProto proxy process on its own, as the panel starts it: config file, token on
stdin, management port on stdout. Its management API is checked for what the panel relies
on (the token, whole-set replacement of secrets that closes only withdrawn secrets'
connections, cumulative per-secret counters) and its life for what keeps it from
outliving the panel."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests
from helpers import clean_env, free_port
from mtproto_helpers import (
    FakeTlsClient,
    StandInDataCentre,
    big_answer,
    client_hello,
    telethon_connect,
    telethon_exchange,
    telethon_round,
)

ALICE = "00112233445566778899aabbccddeeff"
BOB = "ffeeddccbbaa99887766554433221100"


class Proxy:
    def __init__(
        self,
        tmp_path,
        dc: StandInDataCentre,
        secrets: dict,
        port: int | None = None,
        domain: str = "",
        **extra,
    ):
        self.port = port or free_port()
        self.token = os.urandom(16).hex()
        path = tmp_path / f"proxy-{self.port}.json"
        config = {
            "listen": "127.0.0.1",
            "port": self.port,
            "domain": domain,
            "dataCenters": [dc.address] * 5,
            # The stand-in data centre is on loopback, which the panel allows only on the
            # admin's say-so (test_a_data_centre_on_loopback_needs_the_opt_in).
            "dataCentersInternal": True,
            "secrets": secrets,
            **extra,
        }
        path.write_text(json.dumps(config))
        env = clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", ""))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "appliance", "mtproto-proxy", str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.process.stdin.write(json.dumps({"token": self.token}).encode() + b"\n")
        self.process.stdin.flush()
        first = self.process.stdout.readline()
        self.api = f"http://127.0.0.1:{json.loads(first)['managementPort']}" if first else ""

    def call(self, method: str, path: str, token: str | None = None, **kwargs):
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return requests.request(method, self.api + path, headers=headers, timeout=5, **kwargs)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def dc():
    stand_in = StandInDataCentre()
    yield stand_in
    stand_in.close()


@pytest.fixture
def proxy(tmp_path, dc):
    running = Proxy(tmp_path, dc, {"alice": {"secret": ALICE, "adTag": ""}})
    yield running
    running.stop()


def test_the_management_api_wants_the_token(proxy):
    assert requests.get(proxy.api + "/stats", timeout=5).status_code == 401
    assert proxy.call("GET", "/stats", token="wrong").status_code == 401
    assert proxy.call("PUT", "/secrets", token="wrong", json={"secrets": {}}).status_code == 401
    assert proxy.call("GET", "/stats").status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"secrets": []},
        {"secrets": {"x": {"secret": "abcd"}}},
        {"secrets": {"x": {"secret": BOB, "adTag": "123"}}},
        {"secrets": {"x": "plain"}},
    ],
)
def test_malformed_secrets_are_refused_and_change_nothing(proxy, body):
    reply = proxy.call("PUT", "/secrets", json=body)
    assert reply.status_code == 400 and reply.json()["error"]
    assert proxy.call("GET", "/secrets").json() == {"secrets": {"alice": ""}}
    telethon_exchange(proxy.port, "dd" + ALICE, [b"still works....."])


def test_withdrawing_a_secret_closes_its_connections_only(proxy):
    tag = "ab" * 16
    both = {"alice": {"secret": ALICE, "adTag": ""}, "bob": {"secret": BOB, "adTag": tag}}
    assert proxy.call("PUT", "/secrets", json={"secrets": both}).json() == {"active": 2}
    assert proxy.call("GET", "/secrets").json() == {"secrets": {"alice": "", "bob": tag}}

    async def scenario():
        alice, alice_capture = await telethon_connect(proxy.port, "dd" + ALICE)
        bob, bob_capture = await telethon_connect(proxy.port, "dd" + BOB)
        await telethon_round(alice, alice_capture, b"a" * 16)
        await telethon_round(bob, bob_capture, b"b" * 16)
        stats = await asyncio.to_thread(proxy.call, "GET", "/stats")
        users = stats.json()["users"]
        assert users["alice"]["connections"] == 1 and users["bob"]["connections"] == 1
        assert users["alice"]["ips"] == ["127.0.0.1"]
        only_alice = {"secrets": {"alice": both["alice"]}}
        await asyncio.to_thread(proxy.call, "PUT", "/secrets", json=only_alice)
        with pytest.raises((ConnectionError, OSError, asyncio.TimeoutError)):
            await telethon_round(bob, bob_capture, b"b" * 16)
        # A new advertising tag for alice is taken with her connection open.
        retagged = {"secrets": {"alice": {"secret": ALICE, "adTag": tag}}}
        await asyncio.to_thread(proxy.call, "PUT", "/secrets", json=retagged)
        answer = await telethon_round(alice, alice_capture, b"c" * 16)
        await alice.disconnect()
        await bob.disconnect()
        return alice_capture, answer

    capture, answer = asyncio.run(scenario())
    assert len(answer) == 32
    assert proxy.call("GET", "/secrets").json() == {"secrets": {"alice": tag}}
    users = proxy.call("GET", "/stats").json()["users"]
    # Counters outlive the connections and the secret: the panel reads what bob moved.
    assert users["bob"]["connections"] == 0 and users["bob"]["bytes_in"] > 64
    assert users["alice"]["bytes_in"] == 64 + len(capture.sent)
    assert users["alice"]["bytes_out"] == 2 * 36


def test_large_packets_arrive_whole_both_ways_in_both_disguises(tmp_path, dc, proxy):
    # Many TLS records and many socket reads each way; Telethon without `cryptg`
    # decrypts in pure Python, so a few hundred KiB keep the test quick.
    upload = os.urandom(300_000)
    order = b"send" + (700_000).to_bytes(4, "little")
    before = len(dc.received)
    capture, answers = telethon_exchange(proxy.port, "dd" + ALICE, [upload, order])
    assert bytes(dc.received[before]) == bytes(capture.sent)
    assert answers[1] == big_answer(order)

    tls = Proxy(tmp_path, dc, {"alice": {"secret": ALICE, "adTag": ""}}, domain="a.example")
    try:
        app = FakeTlsClient(tls.port, "ee" + ALICE + b"a.example".hex())
        before = len(dc.received)
        app.send(upload)
        app.send(order)
        app.recv()
        assert app.recv() == big_answer(order)
        assert bytes(dc.received[before]) == bytes(app.sent)
        app.close()
    finally:
        tls.stop()


class Site:
    """The real site behind a fake-TLS domain, on loopback: it answers `SITE:` and the
    first bytes it was sent."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"SITE:" + conn.recv(100))


def site_answer(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        answer = b""
        while piece := sock.recv(4096):
            answer += piece
        return answer


def test_fake_tls_sends_what_is_not_ours_to_the_real_site(tmp_path, dc):
    site = Site()
    secrets = {"alice": {"secret": ALICE, "adTag": ""}}
    proxy = Proxy(tmp_path, dc, secrets, domain="a.example", front=site.address, frontInternal=True)
    try:
        probe = b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"
        assert site_answer(proxy.port, probe) == b"SITE:" + probe[:100]
        wrong = client_hello(bytes.fromhex(BOB), "a.example", time.time())
        assert site_answer(proxy.port, wrong) == b"SITE:" + wrong[:100]
        app = FakeTlsClient(proxy.port, "ee" + ALICE + b"a.example".hex())
        app.send(b"still ours......")
        assert len(app.recv()) == 32
        app.close()
        # The same signed hello again is a replay: it meets the site, not the proxy.
        right = client_hello(bytes.fromhex(ALICE), "a.example", time.time())
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as first:
            first.sendall(right)
            assert first.recv(3) == b"\x16\x03\x03"  # the proxy's ServerHello
        assert site_answer(proxy.port, right) == b"SITE:" + right[:100]
    finally:
        proxy.stop()
    # Without the test's permission the proxy relays to no internal address.
    guarded = Proxy(tmp_path, dc, secrets, domain="a.example", front=site.address)
    try:
        assert site_answer(guarded.port, b"GET / HTTP/1.1\r\n\r\n") == b""
    finally:
        guarded.stop()


def test_a_data_centre_on_loopback_needs_the_opt_in(tmp_path, dc):
    secrets = {"alice": {"secret": ALICE, "adTag": ""}}
    guarded = Proxy(tmp_path, dc, secrets, dataCentersInternal=False)
    before = len(dc.received)
    try:
        with pytest.raises((ConnectionError, OSError, asyncio.TimeoutError)):
            telethon_exchange(guarded.port, "dd" + ALICE, [b"x" * 16])
        assert len(dc.received) == before
        assert guarded.call("GET", "/stats").json()["users"] == {}
    finally:
        guarded.stop()
    opted_in = Proxy(tmp_path, dc, secrets)
    try:
        capture, _ = telethon_exchange(opted_in.port, "dd" + ALICE, [b"y" * 16])
        assert bytes(dc.received[before]) == bytes(capture.sent)
    finally:
        opted_in.stop()


def test_a_refused_connection_counts_for_nobody(proxy):
    with pytest.raises((ConnectionError, OSError, asyncio.TimeoutError)):
        telethon_exchange(proxy.port, "dd" + BOB, [b"x" * 16])
    raw = socket.create_connection(("127.0.0.1", proxy.port))
    raw.sendall(os.urandom(200))
    raw.settimeout(5)
    assert raw.recv(10) == b""  # closed without a word
    raw.close()
    assert proxy.call("GET", "/stats").json()["users"] == {}


def test_the_proxy_leaves_when_its_panel_is_gone(proxy):
    proxy.process.stdin.close()
    assert proxy.process.wait(timeout=10) == 0


def test_a_taken_port_is_said_and_the_process_exits(tmp_path, dc):
    holder = socket.create_server(("127.0.0.1", 0))
    try:
        taken = Proxy(tmp_path, dc, {}, port=holder.getsockname()[1])
        assert taken.process.wait(timeout=10) == 1
        assert b"cannot listen on 127.0.0.1" in taken.process.stderr.read()
    finally:
        holder.close()
