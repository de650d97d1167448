"""HPACK (RFC 7541), the header compression of HTTP/2, as the core API client needs it.

The client sends its few request headers as literals, which every HTTP/2 server must
accept, so encoding is one function. The server's header blocks are compressed however
its encoder likes (Go's indexes and Huffman-codes most of them), so decoding is the
whole format: the static and dynamic tables, the integer and string codings and the
Huffman code. The Huffman code of RFC 7541 Appendix B is canonical: the code lengths
alone define it, which keeps the table to its 257 lengths.
"""

from __future__ import annotations

from collections import deque

# RFC 7541 Appendix A.
STATIC_TABLE = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)
_STATIC = tuple((name.encode(), value.encode()) for name, value in STATIC_TABLE)

# RFC 7541 Appendix B: the code length of each symbol 0..255 and of EOS (256).
HUFFMAN_LENGTHS = (
    *(13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28),
    *(28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28),
    *(6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6),
    *(5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10),
    *(13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7),
    *(7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6),
    *(15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5),
    *(6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28),
    *(20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23),
    *(24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24),
    *(22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23),
    *(21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23),
    *(26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25),
    *(19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27),
    *(20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23),
    *(26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26),
    *(30,),
)
EOS = 256
# An entry's size counts 32 octets of overhead besides its name and value (4.1).
ENTRY_OVERHEAD = 32
DEFAULT_TABLE_SIZE = 4096


class HpackError(ValueError):
    """A header block that is not valid HPACK."""


def _huffman_symbols() -> dict[int, int]:
    """{code with a leading 1 bit: symbol}: codes of a canonical Huffman code are
    consecutive within a length, in symbol order, and shorter lengths come first."""
    symbols = {}
    code = 0
    previous = 0
    for number, symbol in enumerate(sorted(range(EOS + 1), key=lambda s: HUFFMAN_LENGTHS[s])):
        length = HUFFMAN_LENGTHS[symbol]
        if number:
            code = (code + 1) << (length - previous)
        previous = length
        symbols[1 << length | code] = symbol
    return symbols


_HUFFMAN = _huffman_symbols()


def huffman_decode(data: bytes) -> bytes:
    """Huffman-coded octets (5.2); the padding must be fewer than 8 one bits."""
    out = bytearray()
    code = 1
    for byte in data:
        for shift in range(7, -1, -1):
            code = code << 1 | (byte >> shift) & 1
            symbol = _HUFFMAN.get(code)
            if symbol is None:
                if code >> 30:
                    raise HpackError("invalid Huffman code")
                continue
            if symbol == EOS:
                raise HpackError("EOS inside a Huffman-coded string")
            out.append(symbol)
            code = 1
    if code >= 1 << 8 or code & (code + 1):
        raise HpackError("invalid padding of a Huffman-coded string")
    return bytes(out)


def encode_integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An integer with an N-bit prefix (5.1); `first` holds the bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_literals(headers: list[tuple[str, str]]) -> bytes:
    """A header block of literal fields without indexing and with new names (6.2.2),
    strings not Huffman-coded: what a decoder must always accept, and no table state."""
    out = bytearray()
    for name, value in headers:
        out.append(0)
        for text in (name.encode(), value.encode()):
            out += encode_integer(len(text), 7) + text
    return bytes(out)


class Decoder:
    """The decoding side of one HTTP/2 connection: its dynamic table lives as long as the
    connection, so every header block received on it goes through the same decoder."""

    def __init__(self, max_size: int = DEFAULT_TABLE_SIZE):
        self.limit = max_size  # what the client's SETTINGS allow (the default)
        self.max_size = max_size
        self.size = 0
        self.table: deque[tuple[bytes, bytes]] = deque()

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        headers = []
        pos = 0
        while pos < len(block):
            byte = block[pos]
            if byte & 0x80:  # indexed field (6.1)
                index, pos = self._integer(block, pos, 7)
                headers.append(self._entry(index))
            elif byte & 0x40:  # literal with incremental indexing (6.2.1)
                index, pos = self._integer(block, pos, 6)
                name, value, pos = self._literal(block, pos, index)
                self._add(name, value)
                headers.append((name, value))
            elif byte & 0x20:  # dynamic table size update (6.3)
                size, pos = self._integer(block, pos, 5)
                if size > self.limit:
                    raise HpackError(f"table size {size} above the allowed {self.limit}")
                self.max_size = size
                self._evict(0)
            else:  # literal without indexing or never indexed (6.2.2, 6.2.3)
                index, pos = self._integer(block, pos, 4)
                name, value, pos = self._literal(block, pos, index)
                headers.append((name, value))
        return [
            (name.decode(errors="replace"), value.decode(errors="replace"))
            for name, value in headers
        ]

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= len(_STATIC):
            return _STATIC[index - 1]
        if len(_STATIC) < index <= len(_STATIC) + len(self.table):
            return self.table[index - len(_STATIC) - 1]
        raise HpackError(f"header index {index} is not in the table")

    def _literal(self, block: bytes, pos: int, index: int) -> tuple[bytes, bytes, int]:
        if index:
            name = self._entry(index)[0]
        else:
            name, pos = self._string(block, pos)
        value, pos = self._string(block, pos)
        return name, value, pos

    def _string(self, block: bytes, pos: int) -> tuple[bytes, int]:
        if pos >= len(block):
            raise HpackError("truncated header block")
        huffman = block[pos] & 0x80
        length, pos = self._integer(block, pos, 7)
        if pos + length > len(block):
            raise HpackError("a header string runs past its block")
        text = block[pos : pos + length]
        return (huffman_decode(text) if huffman else bytes(text)), pos + length

    @staticmethod
    def _integer(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
        limit = (1 << prefix_bits) - 1
        value = block[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            if pos >= len(block):
                raise HpackError("truncated integer")
            byte = block[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
            shift += 7
            if shift > 28:
                raise HpackError("integer too large")

    def _add(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + ENTRY_OVERHEAD
        self._evict(size)
        if size <= self.max_size:
            self.table.appendleft((name, value))
            self.size += size

    def _evict(self, room: int) -> None:
        """Drop the oldest entries until `room` more octets fit (4.4); an entry larger
        than the table empties it and is not added."""
        while self.table and self.size + room > self.max_size:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + ENTRY_OVERHEAD
