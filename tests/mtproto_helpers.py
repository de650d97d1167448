"""What the MTProto tests share: a stand-in Telegram data centre on loopback, Telethon's
MTProxy connection driven through our proxy, and a fake-TLS client.

The stand-in data centre removes the obfuscation the way a Telegram data centre does
(written here from the protocol, not imported from the proxy, so a mistake in one is not
mirrored in the other), keeps every byte it received per connection, and answers every
padded-intermediate frame with the SHA-256 of its body. Telethon's
ConnectionTcpMTProxyRandomizedIntermediate is the client for "dd" secrets; Telethon has
no fake TLS, so for "ee" secrets the TLS disguise is our own code here while the
obfuscation and the framing inside it are still Telethon's.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import hmac
import logging
import os
import socket
import struct
import threading
import time

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from telethon.network.connection import ConnectionTcpMTProxyRandomizedIntermediate
from telethon.network.connection.tcpintermediate import RandomizedIntermediatePacketCodec
from telethon.network.connection.tcpmtproxy import MTProxyIO

LOGGERS = collections.defaultdict(lambda: logging.getLogger("telethon"))
PADDED = b"\xdd\xdd\xdd\xdd"


def ctr(key: bytes, iv: bytes):
    return Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor()


class StandInDataCentre:
    """A TCP server on loopback that speaks obfuscated2 (no secret) like a data centre."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytearray] = []
        self.dc_ids: list[int] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        got = bytearray()
        with self.lock:
            self.received.append(got)
        try:
            init = _exactly(conn, 64)
            reverse = init[8:56][::-1]
            decrypt = ctr(init[8:40], init[40:56])
            encrypt = ctr(reverse[:32], reverse[32:48])
            plain = decrypt.update(init)
            if plain[56:60] != PADDED:
                return
            with self.lock:
                self.dc_ids.append(int.from_bytes(plain[60:62], "little", signed=True))
            pending = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                data = decrypt.update(data)
                got += data
                pending += data
                while len(pending) >= 4:
                    size = struct.unpack("<I", pending[:4])[0]
                    if len(pending) < 4 + size:
                        break
                    body, pending = pending[4 : 4 + size], pending[4 + size :]
                    answer = big_answer(body) if body.startswith(b"send") else None
                    answer = answer or hashlib.sha256(body).digest()
                    conn.sendall(encrypt.update(struct.pack("<I", len(answer)) + answer))
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


def big_answer(body: bytes) -> bytes:
    """The stand-in's answer to a frame `send` + size (4 bytes, little-endian): that many
    bytes of a pattern the test can rebuild."""
    size = int.from_bytes(body[4:8], "little")
    seed = hashlib.sha256(body[:8]).digest()
    return (seed * (size // 32 + 1))[:size]


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        piece = conn.recv(size - len(data))
        if not piece:
            raise OSError("closed")
        data += piece
    return data


def hold_port(port: int) -> socket.socket:
    """Take a port the moment it is free (a killed proxy's restart waits a second)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return socket.create_server(("127.0.0.1", port))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Capture:
    """The bytes Telethon's codec framed, before the obfuscation: what a data centre
    must receive."""

    def __init__(self):
        self.sent = bytearray()
        self.bodies: list[bytes] = []

    def wrap(self, codec) -> None:
        encode = codec.encode_packet

        def encode_and_keep(data: bytes) -> bytes:
            framed = encode(data)
            self.sent += framed
            self.bodies.append(framed[4:])
            return framed

        codec.encode_packet = encode_and_keep


async def telethon_connect(port: int, secret: str, dc: int = 2):
    """Telethon's dd-secret MTProxy connection to our proxy, connected, with a Capture."""
    conn = ConnectionTcpMTProxyRandomizedIntermediate(
        "149.154.167.51", 443, dc, loggers=LOGGERS, proxy=("127.0.0.1", port, secret)
    )
    await conn.connect(timeout=10)
    capture = Capture()
    capture.wrap(conn._codec)
    return conn, capture


async def telethon_round(conn, capture: Capture, payload: bytes) -> bytes:
    """Send one packet and wait for the stand-in's answer to it."""
    await conn.send(payload)
    return await asyncio.wait_for(conn.recv(), 10)


def telethon_exchange(port: int, secret: str, payloads: list[bytes]) -> tuple[Capture, list]:
    """Connect, send each payload, read each answer, disconnect."""

    async def run():
        conn, capture = await telethon_connect(port, secret)
        try:
            answers = [await telethon_round(conn, capture, p) for p in payloads]
        finally:
            await conn.disconnect()
        return capture, answers

    return asyncio.run(run())


def client_hello(key: bytes, domain: str, now: float) -> bytes:
    """A TLS ClientHello record as a Telegram app signs it for a fake-TLS secret."""
    name = domain.encode()
    sni = struct.pack(">HHHBH", 0, len(name) + 5, len(name) + 3, 0, len(name)) + name
    extensions = sni + b"\x00\x2b\x00\x03\x02\x03\x04"
    body = (
        b"\x03\x03" + bytes(32) + b"\x20" + os.urandom(32)
        + b"\x00\x02\x13\x01" + b"\x01\x00"
        + struct.pack(">H", len(extensions)) + extensions
    )  # fmt: skip
    handshake = b"\x01" + len(body).to_bytes(3, "big") + body
    record = b"\x16\x03\x01" + struct.pack(">H", len(handshake)) + handshake
    mac = bytearray(hmac.new(key, record, hashlib.sha256).digest())
    stamp = int(now).to_bytes(4, "little")
    for i in range(4):
        mac[28 + i] ^= stamp[i]
    return record[:11] + bytes(mac) + record[43:]


class FakeTlsClient:
    """An app's side of a fake-TLS ("ee") secret: the signed ClientHello, the check of the
    proxy's signed answer, then Telethon's obfuscation and framing in TLS records."""

    def __init__(self, port: int, link_secret: str, dc: int = 2, clock=time.time):
        assert link_secret.startswith("ee")
        self.key = bytes.fromhex(link_secret[2:34])
        self.domain = bytes.fromhex(link_secret[34:]).decode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""
        self.frames = b""
        hello = client_hello(self.key, self.domain, clock())
        self.sock.sendall(hello)
        self._check_answer(hello[11:43])
        header, self.encrypt, self.decrypt = MTProxyIO.init_header(
            b"\xdd" + self.key, dc, RandomizedIntermediatePacketCodec
        )
        self.sent = bytearray()
        self._records(bytes(header))

    def _check_answer(self, client_random: bytes) -> None:
        answer = b""
        for kind in (0x16, 0x14, 0x17):
            header = self._take(5)
            assert header[0] == kind, f"record {header[0]:#x} where {kind:#x} was due"
            answer += header + self._take(struct.unpack(">H", header[3:5])[0])
        blank = answer[:11] + bytes(32) + answer[43:]
        mac = hmac.new(self.key, client_random + blank, hashlib.sha256).digest()
        assert answer[11:43] == mac, "the proxy's ServerHello is not signed with the secret"

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            piece = self.sock.recv(65536)
            if not piece:
                raise ConnectionError("the proxy closed the connection")
            self.buffer += piece
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def _records(self, data: bytes) -> None:
        for at in range(0, len(data), 16384):
            piece = data[at : at + 16384]
            self.sock.sendall(b"\x17\x03\x03" + struct.pack(">H", len(piece)) + piece)

    def send(self, payload: bytes) -> None:
        framed = RandomizedIntermediatePacketCodec(None).encode_packet(payload)
        self.sent += framed
        self._records(self.encrypt.encrypt(framed))

    def recv(self) -> bytes:
        """The next frame's body; a record may hold the end of one frame and the start of
        the next, which is kept for the next call."""
        plain = self.frames
        while len(plain) < 4 or len(plain) < 4 + struct.unpack("<I", plain[:4])[0]:
            header = self._take(5)
            plain += self.decrypt.encrypt(self._take(struct.unpack(">H", header[3:5])[0]))
        size = struct.unpack("<I", plain[:4])[0]
        self.frames = plain[4 + size :]
        return plain[4 : 4 + size]

    def close(self) -> None:
        self.sock.close()
