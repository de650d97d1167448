"""One file field of a multipart/form-data upload, streamed to disk.

`http.body()` reads a whole body into memory, which suits JSON and forms of a few
kilobytes; a database upload can be hundreds of megabytes. Here the body is read in
chunks, the named field's bytes go straight into a file, and the size limit is checked
before anything is read (declared length) and again as bytes arrive (chunked uploads), so
an oversized upload is refused without being held anywhere.
"""

from __future__ import annotations

import contextlib
import os
from email.message import Message
from typing import BinaryIO

from appliance.errors import ServiceError
from appliance.web.http import BodyTooLarge

CHUNK_BYTES = 256 * 1024
MAX_HEADER_BYTES = 16 * 1024
MAX_PREAMBLE_BYTES = 64 * 1024
# Room for the boundaries and part headers around the file itself.
MULTIPART_SLACK_BYTES = 64 * 1024


def save_file_field(
    stream: BinaryIO | None,
    content_type: str,
    content_length: int,
    field: str,
    dest_path: str,
    limit: int,
) -> int:
    """Write the multipart field `field` to `dest_path`; returns its size in bytes.

    Refuses a body announced or found to be larger than `limit` (plus the multipart
    framing), a body that is not multipart, and one without the field."""
    if content_length > limit + MULTIPART_SLACK_BYTES:
        raise BodyTooLarge(f"the upload is {_mib(content_length)}; {_limit_text(limit)}")
    boundary = _boundary(content_type, field)
    if stream is None:
        raise ServiceError(f"the request has no body; send the file as the form field {field}")
    reader = _Parts(stream, b"--" + boundary, limit)
    try:
        while reader.next_part():
            name = reader.part_name()
            if name != field:
                reader.copy_part(None, 0)
                continue
            with open(dest_path, "wb") as out:
                size = reader.copy_part(out, limit)
            if size == 0:
                raise ServiceError(f"the form field {field} is empty")
            return size
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(dest_path)
        raise
    raise ServiceError(f"the form has no field {field}; send the file as the form field {field}")


def _boundary(content_type: str, field: str) -> bytes:
    header = Message()
    header["Content-Type"] = content_type or ""
    if header.get_content_type() != "multipart/form-data":
        raise ServiceError(
            f"send the file as multipart/form-data with the field {field} "
            f"(got {header.get_content_type() if content_type else 'no Content-Type'})"
        )
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not boundary or len(boundary) > 200:
        raise ServiceError("the multipart Content-Type has no usable boundary parameter")
    return boundary.encode("latin-1", "replace")


class _Parts:
    """Walks the parts of a multipart body with a bounded buffer."""

    def __init__(self, stream: BinaryIO, delimiter: bytes, limit: int):
        self.stream = stream
        self.delimiter = delimiter
        self.limit = limit
        self.received = 0
        self.buffer = bytearray()
        self.headers = b""
        self.started = False

    def _fill(self) -> bool:
        try:
            chunk = self.stream.read(CHUNK_BYTES)
        except (OSError, ValueError) as exc:
            raise ServiceError(f"the upload could not be read: {exc}") from None
        self.received += len(chunk)
        if self.received > self.limit + MULTIPART_SLACK_BYTES:
            raise BodyTooLarge(f"the upload is larger than allowed; {_limit_text(self.limit)}")
        self.buffer += chunk
        return bool(chunk)

    def _find(self, needle: bytes, limit: int, what: str) -> int:
        start = 0
        while (index := self.buffer.find(needle, start)) < 0:
            if len(self.buffer) > limit:
                raise ServiceError(f"the multipart body has {what} longer than {limit} bytes")
            start = max(0, len(self.buffer) - len(needle) + 1)
            if not self._fill():
                raise ServiceError(f"the upload ended inside {what}: it was cut off")
        return index

    def next_part(self) -> bool:
        """Move past the next delimiter; False at the closing one."""
        if not self.started:
            index = self._find(self.delimiter, MAX_PREAMBLE_BYTES, "the preamble")
            del self.buffer[: index + len(self.delimiter)]
            self.started = True
        while len(self.buffer) < 2 and self._fill():
            pass
        if self.buffer[:2] == b"--":
            return False
        end = self._find(b"\r\n\r\n", MAX_HEADER_BYTES, "a part's headers")
        self.headers = bytes(self.buffer[:end])
        del self.buffer[: end + 4]
        return True

    def part_name(self) -> str | None:
        header = Message()
        for line in self.headers.decode("latin-1").split("\r\n"):
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() == "content-disposition":
                header["Content-Disposition"] = value.strip()
        name = header.get_param("name", header="content-disposition")
        return name if isinstance(name, str) else None

    def copy_part(self, out: BinaryIO | None, limit: int) -> int:
        """Copy the part's content to `out` (or skip it); returns its size."""
        separator = b"\r\n" + self.delimiter
        size = 0
        while True:
            index = self.buffer.find(separator)
            if index >= 0:
                size += self._emit(out, index, size, limit)
                del self.buffer[: index + len(separator)]
                return size
            keep = len(separator) - 1
            if len(self.buffer) > keep:
                size += self._emit(out, len(self.buffer) - keep, size, limit)
                del self.buffer[: len(self.buffer) - keep]
            if not self._fill():
                raise ServiceError("the upload ended before its closing boundary: it was cut off")

    def _emit(self, out: BinaryIO | None, count: int, written: int, limit: int) -> int:
        if out is None:
            return count
        if written + count > limit:
            raise BodyTooLarge(f"the uploaded file is larger than allowed; {_limit_text(limit)}")
        out.write(self.buffer[:count])
        return count


def _limit_text(limit: int) -> str:
    return f"a database upload may be at most {_mib(limit)}"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
