"""One file field of a multipart/form-data upload, streamed to disk.

`http.body()` reads a whole body into memory, which suits JSON and forms of a few
kilobytes; a database upload can be hundreds of megabytes. Here the body is read in
chunks, the named field's bytes go straight into a file, and the size limit is checked
before anything is read (declared length) and again as bytes arrive (chunked uploads), so
an oversized upload is refused without being held anywhere.

The multipart framing itself is parsed by `multipart` (the Bottle author's streaming
parser, pure Python): browsers, curl and HTTP libraries each frame a form their own way
(boundaries of any length, preambles, part headers in any order), and a maintained parser
that the wider Python web world feeds every day reads them all, where a hand-written one
refused the uploads of the panel's own page.
"""

from __future__ import annotations

import contextlib
import os
from typing import BinaryIO

from multipart import MultipartError, MultipartSegment, PushMultipartParser, parse_options_header

from appliance.errors import ServiceError
from appliance.web.http import BodyTooLarge

CHUNK_BYTES = 256 * 1024
MAX_HEADER_BYTES = 16 * 1024
MAX_PARTS = 16
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
    try:
        size = _copy_field(_Counted(stream, limit), boundary, content_length, field, dest_path)
        if size is None:
            raise ServiceError(
                f"the form has no field {field}; send the file as the form field {field}"
            )
        if size == 0:
            raise ServiceError(f"the form field {field} is empty")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(dest_path)
        raise
    return size


def _boundary(content_type: str, field: str) -> str:
    kind, options = parse_options_header(content_type or "")
    if kind != "multipart/form-data":
        raise ServiceError(
            f"send the file as multipart/form-data with the field {field} "
            f"(got {kind if content_type else 'no Content-Type'})"
        )
    boundary = options.get("boundary", "")
    if not boundary or len(boundary) > 200:
        raise ServiceError("the multipart Content-Type has no usable boundary parameter")
    return boundary


def _copy_field(
    reader: _Counted, boundary: str, content_length: int, field: str, dest_path: str
) -> int | None:
    """The size of `field` written to `dest_path`, or None when the form has no such
    field; the other parts are read past and dropped."""
    size = None
    out = None
    parser = PushMultipartParser(
        boundary,
        content_length,
        max_header_size=MAX_HEADER_BYTES,
        max_segment_count=MAX_PARTS,
    )
    try:
        with parser:
            for event in parser.parse_blocking(reader.read, CHUNK_BYTES):
                if isinstance(event, MultipartSegment):
                    if event.name == field and size is None:
                        out = open(dest_path, "wb")  # noqa: SIM115 - closed at the part's end
                        size = 0
                elif event is None:
                    if out is not None:
                        out.close()
                        out = None
                elif out is not None:
                    size += len(event)
                    if size > reader.limit:
                        raise BodyTooLarge(
                            f"the uploaded file is larger than allowed; {_limit_text(reader.limit)}"
                        )
                    out.write(event)
    except MultipartError as exc:
        raise ServiceError(_parser_message(exc)) from None
    finally:
        if out is not None:
            out.close()
    return size


def _parser_message(exc: MultipartError) -> str:
    text = str(exc).rstrip(".")
    if "Unexpected end" in text or "incomplete" in text.lower():
        return "the upload ended before its closing boundary: it was cut off"
    return f"the upload is not a well-formed multipart form ({text}); send the file again"


class _Counted:
    """The request stream, read in chunks that are counted against the limit: a chunked
    upload announces no length, so only counting stops it."""

    def __init__(self, stream: BinaryIO, limit: int):
        self.stream = stream
        self.limit = limit
        self.received = 0

    def read(self, size: int) -> bytes:
        try:
            chunk = self.stream.read(size)
        except (OSError, ValueError) as exc:
            raise ServiceError(f"the upload could not be read: {exc}") from None
        self.received += len(chunk)
        if self.received > self.limit + MULTIPART_SLACK_BYTES:
            raise BodyTooLarge(f"the upload is larger than allowed; {_limit_text(self.limit)}")
        return chunk


def _limit_text(limit: int) -> str:
    return f"a database upload may be at most {_mib(limit)}"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
