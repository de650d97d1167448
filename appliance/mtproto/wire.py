"""The bytes of a Telegram proxy: the obfuscated2 handshake and the fake-TLS wrapping.

Telegram apps reach a proxy in one of two disguises, both keyed by a 16-byte secret the
proxy shares with its users:

- **Padded ("dd" secrets).** The app opens with 64 random-looking bytes. Two AES-256-CTR
  keys are derived from them and the secret (SHA-256 of 32 of those bytes followed by the
  secret; the other direction reads the same 48 bytes reversed); decrypted, bytes 56-60
  name the transport (`dddddddd`: padded intermediate, the one a "dd" secret promises)
  and bytes 60-62 the data centre. The proxy finds the secret by trying each it holds:
  only the right one decrypts to a known transport tag.
- **Fake TLS ("ee" secrets, with a domain).** The app sends a TLS 1.3 ClientHello whose
  32-byte random is an HMAC-SHA256, keyed by the secret, of the whole hello (random
  zeroed), XOR a timestamp in its last four bytes; its SNI names the domain. The proxy
  answers with a ServerHello whose random is the HMAC of the client's random and the
  whole answer, then both sides carry the padded obfuscated2 stream inside TLS
  application-data records.

Towards the data centre the proxy opens its own obfuscated2 stream without a secret, so
the data centre receives exactly what the app framed.

Everything here is pure (bytes in, bytes and cipher objects out) so the handshake is
tested without sockets; AES-CTR comes from `cryptography`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

INIT_SIZE = 64
KEY_SIZE = 16
PADDED_TAG = b"\xdd\xdd\xdd\xdd"
INTERMEDIATE_TAG = b"\xee\xee\xee\xee"
ABRIDGED_TAG = b"\xef\xef\xef\xef"
# What no obfuscated2 opening may look like, so that a DPI box sees no known protocol.
RESERVED_STARTS = (b"HEAD", b"POST", b"GET ", b"OPTI", b"\x16\x03\x01\x02", PADDED_TAG)
RESERVED_STARTS += (INTERMEDIATE_TAG,)

TLS_HANDSHAKE = 0x16
TLS_CHANGE_CIPHER = 0x14
TLS_APPLICATION_DATA = 0x17
TLS_HELLO_START = b"\x16\x03\x01"
TLS_RANDOM_AT = 11
TLS_RECORD_MAX = 16384
CHANGE_CIPHER_RECORD = b"\x14\x03\x03\x00\x01\x01"
# A ClientHello's timestamp may be this far from the proxy's clock (phones drift).
TLS_CLOCK_SKEW = 3600


class Stream(NamedTuple):
    """An obfuscated2 stream's two directions, seen from the side that holds it."""

    decrypt: object
    encrypt: object


class ClientOpening(NamedTuple):
    name: str
    transport: bytes
    dc: int
    stream: Stream


def aes_ctr(key: bytes, iv: bytes):
    """An AES-256-CTR cipher context; CTR encrypts and decrypts alike."""
    return Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor()


def secret_key(text: str) -> bytes:
    """The 16 key bytes of a secret written as 32 hex digits, or as a link's secret
    (`dd` + key, `ee` + key + domain hex)."""
    text = text.strip().lower()
    if len(text) > 2 * KEY_SIZE and text[:2] in ("dd", "ee"):
        text = text[2 : 2 + 2 * KEY_SIZE]
    key = bytes.fromhex(text)
    if len(key) != KEY_SIZE:
        raise ValueError("an MTProto secret is 16 bytes (32 hexadecimal characters)")
    return key


class SeenOpenings:
    """Openings already used, so a recorded handshake cannot be replayed to probe the
    proxy (a censor that replays an app's first bytes would learn it is one). Bounded:
    the oldest are forgotten first."""

    def __init__(self, size: int = 100_000):
        self.size = size
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def first_time(self, opening: bytes) -> bool:
        if opening in self._seen:
            return False
        self._seen[opening] = None
        if len(self._seen) > self.size:
            self._seen.popitem(last=False)
        return True


def accept_opening(
    init: bytes, secrets: Iterable[tuple[str, bytes]], transports: tuple[bytes, ...]
) -> ClientOpening | None:
    """Which secret opened this 64-byte obfuscated2 opening, with the app's stream; None
    when none of `secrets` decrypts it to one of `transports`."""
    prekey, iv = init[8:40], init[40:56]
    reverse = init[8:56][::-1]
    for name, key in secrets:
        decrypt = aes_ctr(hashlib.sha256(prekey + key).digest(), iv)
        plain = decrypt.update(init)
        transport = plain[56:60]
        if transport not in transports:
            continue
        dc = int.from_bytes(plain[60:62], "little", signed=True)
        encrypt = aes_ctr(hashlib.sha256(reverse[:32] + key).digest(), reverse[32:48])
        return ClientOpening(name, transport, dc, Stream(decrypt, encrypt))
    return None


def data_centre_opening(transport: bytes, dc: int) -> tuple[bytes, Stream]:
    """The proxy's own opening towards a data centre (no secret) and its stream."""
    while True:
        raw = bytearray(os.urandom(INIT_SIZE))
        if raw[0] != 0xEF and bytes(raw[:4]) not in RESERVED_STARTS and raw[4:8] != bytes(4):
            break
    raw[56:60] = transport
    raw[60:62] = dc.to_bytes(2, "little", signed=True)
    reverse = bytes(raw[8:56][::-1])
    encrypt = aes_ctr(bytes(raw[8:40]), bytes(raw[40:56]))
    decrypt = aes_ctr(reverse[:32], reverse[32:48])
    sealed = encrypt.update(bytes(raw))
    return bytes(raw[:56]) + sealed[56:64], Stream(decrypt, encrypt)


# ---- fake TLS ---------------------------------------------------------------------------


def tls_record_length(header: bytes) -> int:
    return struct.unpack(">H", header[3:5])[0]


def accept_client_hello(
    hello: bytes, secrets: Iterable[tuple[str, bytes]], domain: str, now: float
) -> tuple[str, bytes] | None:
    """(secret name, key) whose HMAC signs this ClientHello record for `domain` at about
    `now`; None when no secret does, the SNI is another name or the clock is off."""
    if len(hello) < 44 + 32 or hello[:3] != TLS_HELLO_START:
        return None
    if server_name(hello) != domain:
        return None
    digest = hello[TLS_RANDOM_AT : TLS_RANDOM_AT + 32]
    blank = hello[:TLS_RANDOM_AT] + bytes(32) + hello[TLS_RANDOM_AT + 32 :]
    for name, key in secrets:
        mac = hmac.new(key, blank, hashlib.sha256).digest()
        xored = bytes(a ^ b for a, b in zip(digest, mac, strict=True))
        if xored[:28] != bytes(28):
            continue
        stamp = int.from_bytes(xored[28:32], "little")
        if abs(stamp - now) > TLS_CLOCK_SKEW:
            return None
        return name, key
    return None


def server_name(hello: bytes) -> str | None:
    """The SNI host name of a ClientHello record, or None when it has none or is cut."""
    try:
        at = 43
        at += 1 + hello[at]  # session id
        at += 2 + struct.unpack(">H", hello[at : at + 2])[0]  # cipher suites
        at += 1 + hello[at]  # compression methods
        end = at + 2 + struct.unpack(">H", hello[at : at + 2])[0]
        at += 2
        while at + 4 <= end:
            kind, size = struct.unpack(">HH", hello[at : at + 4])
            at += 4
            if kind == 0:
                name_size = struct.unpack(">H", hello[at + 3 : at + 5])[0]
                return hello[at + 5 : at + 5 + name_size].decode("ascii")
            at += size
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return None


def server_hello(hello: bytes, key: bytes) -> bytes:
    """The proxy's answer to a ClientHello it accepted: ServerHello, ChangeCipherSpec and
    one application-data record of noise, its random signed as the app checks it."""
    session = hello[44 : 44 + hello[43]]
    extensions = (
        b"\x00\x33\x00\x24\x00\x1d\x00\x20" + os.urandom(32)  # key share, x25519
        + b"\x00\x2b\x00\x02\x03\x04"  # supported version: TLS 1.3
    )  # fmt: skip
    body = (
        b"\x03\x03" + bytes(32) + bytes([len(session)]) + session
        + b"\x13\x01\x00" + struct.pack(">H", len(extensions)) + extensions
    )  # fmt: skip
    handshake = b"\x02" + len(body).to_bytes(3, "big") + body
    noise = os.urandom(1024 + os.urandom(1)[0] * 4)
    answer = (
        b"\x16\x03\x03" + struct.pack(">H", len(handshake)) + handshake
        + CHANGE_CIPHER_RECORD
        + b"\x17\x03\x03" + struct.pack(">H", len(noise)) + noise
    )  # fmt: skip
    client_random = hello[TLS_RANDOM_AT : TLS_RANDOM_AT + 32]
    mac = hmac.new(key, client_random + answer, hashlib.sha256).digest()
    return answer[:TLS_RANDOM_AT] + mac + answer[TLS_RANDOM_AT + 32 :]


def tls_records(data: bytes) -> bytes:
    """`data` as TLS application-data records."""
    out = bytearray()
    for at in range(0, len(data), TLS_RECORD_MAX):
        piece = data[at : at + TLS_RECORD_MAX]
        out += b"\x17\x03\x03" + struct.pack(">H", len(piece)) + piece
    return bytes(out)
