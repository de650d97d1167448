"""Request and response helpers shared by every route: the envelope, bodies, addresses.

Bodies are read once, with a size limit checked before reading, and may be JSON or a
form (urlencoded or multipart): the panels whose clients we serve accept both, so a
script written for either keeps working. Every problem with a body becomes a sentence
in the envelope, never a traceback.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import gevent
from bottle import request, response
from multipart import MultipartError, MultipartSegment, PushMultipartParser, parse_options_header

from appliance.domain.parse import load_json
from appliance.errors import ServiceError
from appliance.runtime.wsgi import address_in, split_host
from appliance.runtime.wsgi import client_address as wsgi_client_address


@dataclass
class Reply:
    """What a handler returns when it has a message to say besides the payload; `extra`
    fields go into the envelope beside msg and obj, for answers that say more than their
    payload (a settings save that waits for a restart)."""

    msg: str = ""
    obj: Any = None
    extra: dict | None = None


def envelope(
    success: bool, msg: str = "", obj: Any = None, status: int = 200, extra: dict | None = None
) -> str:
    """The envelope as the body of the current response (whose cookies stay intact)."""
    response.status = status
    response.content_type = "application/json; charset=utf-8"
    return encode(success, msg, obj, extra)


@dataclass(frozen=True)
class JsonText:
    """A payload a service has already encoded (because it caches the text): it goes
    into the envelope as it is."""

    text: str


@dataclass(frozen=True)
class JsonStream:
    """A payload too large to hold as one text: JSON pieces sent as they are made, in
    the envelope of a success (a failure after the first piece can only cut the reply
    short, which no JSON parser accepts as complete)."""

    pieces: Iterator[str]

    def envelope(self) -> Iterator[bytes]:
        response.content_type = "application/json; charset=utf-8"
        yield b'{"success": true, "msg": "", "obj": '
        for piece in self.pieces:
            yield piece.encode()
        yield b"}"


def encode(success: bool, msg: str = "", obj: Any = None, extra: dict | None = None) -> str:
    if isinstance(obj, JsonText):
        head = json.dumps({"success": success, "msg": msg, **(extra or {})}, ensure_ascii=False)
        return f'{head[:-1]}, "obj": {obj.text}}}'
    return json.dumps(
        {"success": success, "msg": msg, "obj": obj, **(extra or {})}, ensure_ascii=False
    )


def fail(msg: str, status: int = 200) -> str:
    return envelope(False, msg, None, status)


class BodyTooLarge(ServiceError):
    status = 413


def body(max_bytes: int) -> Any:
    """The request body as JSON or as a form dict; `{}` when there is none."""
    cached = request.environ.get("appliance.body", _MISSING)
    if cached is not _MISSING:
        return cached
    value = _read_body(max_bytes)
    request.environ["appliance.body"] = value
    # Handlers may take fields out of the object they get; `body_read` gives them as sent.
    request.environ[SENT_KEY] = dict(value) if isinstance(value, dict) else value
    return value


def body_read() -> Any:
    """The body a handler read, with its top-level fields as they were sent, or None when
    no handler read one: for the audit log, which keeps its field names and must never
    read a body itself."""
    return request.environ.get(SENT_KEY)


def json_object(max_bytes: int) -> dict:
    data = body(max_bytes)
    if not isinstance(data, dict):
        raise ServiceError("the request body must be a JSON object")
    return data


_MISSING = object()
SENT_KEY = "appliance.body.sent"
JSON_TYPES = ("", "application/json", "text/json")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
READ_CHUNK = 64 * 1024
# A JSON body this large is checked and parsed in a thread of gevent's pool: a bulk body
# of 10,000 items takes tens of milliseconds, in which the hub would answer nobody. The
# parser calls back into Python for every number, where the interpreter hands the GIL
# over to the hub's thread every few milliseconds.
THREAD_PARSE_BYTES = 64 * 1024
# Half of a surrogate pair can only be written as an escape in UTF-8 JSON text (the bytes
# were decoded strictly); without one that could be it, there is nothing to check.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


class UnsupportedMediaType(ServiceError):
    status = 415


def _read_body(max_bytes: int) -> Any:
    content_type = (request.content_type or "").split(";")[0].strip().lower()
    raw = _read_raw(max_bytes)
    if not raw.strip():
        return {}
    if content_type == "application/x-www-form-urlencoded":
        return refuse_nul(_urlencoded_form(raw), "the request body")
    if content_type == "multipart/form-data":
        return refuse_nul(_multipart_form(raw), "the request body")
    if content_type not in JSON_TYPES and not content_type.endswith("+json"):
        raise UnsupportedMediaType(
            f"a body of type {content_type} is not accepted here; send application/json "
            "(or a form: application/x-www-form-urlencoded or multipart/form-data)"
        )
    value = _json(raw)
    # In UTF-8 JSON text a NUL can only be written as the escape \u0000 (a raw control
    # character is not JSON): without either in the bytes, the walk over every string,
    # tens of milliseconds for a bulk body of 10,000 items, has nothing to find.
    if b"\x00" not in raw and b"\\u0000" not in raw:
        return value
    return refuse_nul(value, "the request body")


def refuse_nul(value: Any, where: str) -> Any:
    """`value` unchanged, unless a text in it holds a NUL character: no field of the panel
    takes one, and PostgreSQL cannot store one (it would fail the request deep in the
    database instead of saying what is wrong). The refusal names the field as the
    fields' own checks do, or `where` for a bare value. Uploaded files are bytes, never
    checked."""
    pending: list[tuple[str, Any]] = [(where, value)]
    while pending:
        name, item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise ServiceError(f"{name} may not contain control or invisible characters")
        elif isinstance(item, dict):
            for key, inner in item.items():
                pending.append((f"a field name in {name}", key))
                pending.append((str(key), inner))
        elif isinstance(item, list | tuple):
            pending.extend((f"{name}[{index}]", inner) for index, inner in enumerate(item))
    return value


def _read_raw(max_bytes: int) -> bytes:
    """The body bytes, at most `max_bytes` of them, read straight from the server's input.

    The server has already undone chunked transfer encoding, so the limit holds whether or
    not the client announced a Content-Length; the declared length is checked first so a
    large upload is refused before any of it is read.
    """
    length = request.content_length
    if length > max_bytes:
        raise BodyTooLarge(f"the request body is {length} bytes; the limit here is {max_bytes}")
    stream = request.environ.get("wsgi.input")
    if stream is None:
        return b""
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= max_bytes:
            chunk = stream.read(min(READ_CHUNK, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except (OSError, ValueError) as exc:
        raise ServiceError(f"the request body could not be read: {exc}") from None
    if size > max_bytes:
        raise BodyTooLarge(f"the request body is larger than the limit of {max_bytes} bytes")
    return b"".join(chunks)


def _json(raw: bytes) -> Any:
    if len(raw) < THREAD_PARSE_BYTES:
        return _parse_json(raw)
    value, refusal = gevent.get_hub().threadpool.apply(_parse_json_or_refusal, (raw,))
    if refusal is not None:
        raise refusal
    return value


def _parse_json_or_refusal(raw: bytes) -> tuple[Any, ServiceError | None]:
    """`_parse_json` for a thread of the pool, which would print the traceback of an
    exception it raised: the refusal comes back as a value, to be raised here."""
    try:
        return _parse_json(raw), None
    except ServiceError as exc:
        return None, exc


def _parse_json(raw: bytes) -> Any:
    value = load_json(raw, "the request body")
    if json.detect_encoding(raw) != "utf-8" or SURROGATE_ESCAPE.search(raw):
        _check_unicode(value)
    return value


def _check_unicode(value: Any) -> None:
    """JSON may escape half of a surrogate pair (`"\\ud800"`), which no database column and
    no UTF-8 response can hold; refuse such a body here rather than fail deep inside."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ServiceError("the request body holds text that is not valid Unicode") from None


def _urlencoded_form(raw: bytes) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ServiceError("the form body is not UTF-8 text") from None
    try:
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise ServiceError("the form body has a %-escape that is not UTF-8 text") from None
    return dict(pairs)


def _multipart_form(raw: bytes) -> dict:
    """The text fields of a multipart form; file parts count as fields only when their
    content is UTF-8 text, since every field here is a string."""
    boundary = parse_options_header(raw_content_type())[1].get("boundary", "")
    if not boundary:
        raise ServiceError(
            "the multipart body does not match its Content-Type: a boundary parameter "
            "and parts separated by it are needed"
        )
    parts: dict[str, bytearray] = {}
    current = bytearray()
    try:
        with PushMultipartParser(boundary, len(raw)) as parser:
            for event in parser.parse(raw):
                if isinstance(event, MultipartSegment):
                    if not event.name:
                        raise ServiceError(
                            "a part of the multipart body has no Content-Disposition name"
                        )
                    current = parts.setdefault(event.name, bytearray())
                    current.clear()
                elif event is not None:
                    current += event
    except MultipartError as exc:
        raise ServiceError(
            f"the multipart body is not well formed ({str(exc).rstrip('.')}); "
            "parts separated by the boundary of its Content-Type are needed"
        ) from None
    fields = {}
    for name, content in parts.items():
        try:
            fields[name] = bytes(content).decode("utf-8")
        except UnicodeDecodeError:
            raise ServiceError(f"the form field {name} is not UTF-8 text") from None
    return fields


def raw_content_type() -> str:
    """The Content-Type header as sent. Bottle's `request.content_type` lowercases all of
    it, the multipart boundary included, and browsers write boundaries in mixed case
    (`----WebKitFormBoundaryAbC...`): parsed with the lowercased one, their forms seemed
    to have no parts at all."""
    return request.environ.get("CONTENT_TYPE", "") or ""


def raw_header(name: str) -> str:
    """A header as the WSGI server passed it (latin-1 text). Bottle's `request.headers`
    decodes UTF-8 and raises on other bytes; the headers read here are ASCII when sound, so
    anything else simply fails to match instead of becoming a 500."""
    return request.environ.get("HTTP_" + name.upper().replace("-", "_"), "")


def client_address(trusted: list) -> str:
    """The caller's address (`runtime.wsgi.client_address`); `X-Forwarded-For` counts
    only when a trusted proxy sent it."""
    return wsgi_client_address(request.environ, trusted)


def is_tls(trusted: list) -> bool:
    return _scheme(request.environ, trusted) == "https"


def _scheme(environ: dict, trusted: list) -> str:
    """The scheme the browser used: the connection's, or a trusted proxy's word for it."""
    if environ.get("wsgi.url_scheme") == "https":
        return "https"
    remote = environ.get("REMOTE_ADDR", "")
    forwarded = environ.get("HTTP_X_FORWARDED_PROTO", "").lower()
    return "https" if trusted and address_in(remote, trusted) and forwarded == "https" else "http"


DEFAULT_PORTS = {"http": 80, "https": 443}


def is_panel_origin(origin: str, environ: dict, trusted: list, names: frozenset[str]) -> bool:
    """Whether `origin` (an `Origin` header) is the panel's own: the host and port of this
    request's `Host` header, or one of the panel's configured `names` (its domain and
    allowed hosts) on their default port or the port the panel listens on.

    Browsers share cookies between every port of a host, so a page served on another port
    of the same machine carries the admin's cookie; only the origin tells them apart. A
    missing port counts as the Origin's scheme's default on both sides. The scheme itself
    is compared only when the panel knows the browser used https (TLS here, or a trusted
    proxy's word): a TLS proxy in front that nobody declared still works, and no other
    site can serve a page of another scheme on the panel's own host and port."""
    theirs = _origin(origin)
    if theirs is None:
        return False
    scheme, host, port = theirs
    if _scheme(environ, trusted) == "https" and scheme != "https":
        return False
    own = split_host(environ.get("HTTP_HOST", ""))
    if own is not None and (own[0], int(own[1]) if own[1] else DEFAULT_PORTS[scheme]) == (
        host,
        port,
    ):
        return True
    listening = environ.get("SERVER_PORT", "")
    return host in names and port in (
        DEFAULT_PORTS[scheme],
        int(listening) if listening.isdigit() else None,
    )


def _origin(text: str) -> tuple[str, str, int] | None:
    parts = _split_origin(text)
    if parts is None:
        return None
    scheme, host, port = parts
    return scheme, host, DEFAULT_PORTS[scheme] if port is None else port


def _split_origin(text: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port or None) of an http(s) origin; None for anything else
    (`null`, a path, credentials, a bad port)."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if (
        scheme not in DEFAULT_PORTS
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        return None
    return scheme, parts.hostname.lower(), port


def host_allowed(environ: dict, names: frozenset[str] | None) -> bool:
    """Whether the request's Host is one the panel answers to: any when `names` is None,
    else one of `names`, `localhost` or a loopback address (which no other site's page
    can make a browser send, since it can resolve no name of its own to them)."""
    if names is None:
        return True
    parsed = split_host(environ.get("HTTP_HOST", ""))
    if parsed is None:
        return False
    name = parsed[0]
    if name in names or name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_loopback or str(address) in names
