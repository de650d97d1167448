"""Calls to a node's panel API: the one way this panel talks to the panels it manages.

A node is another panel of this kind, reached over HTTP(S) with its API token. Every
call goes through the egress guard (`runtime/egress.py`): the node's host is resolved
once, an internal address is refused unless the node record allows one
(`allowPrivateAddress`), and the connection goes to the address that was checked.

How the node's certificate is trusted is the record's `tlsVerifyMode`:
- `system`: the system's CA store (and the Mozilla bundle), host name checked;
- `pin`: the SHA-256 of the node's leaf certificate must equal `certFingerprint`, and the
  certificate must be inside its validity dates; chain and name are not checked, which
  is what lets a self-signed node certificate be trusted on the admin's word;
- `mtls`: this panel presents the client certificate its own CA signed
  (`nodes/mtls/ca`); the node's certificate is checked as `pin` when a fingerprint is
  set and against the system store otherwise.
Nothing is ever downgraded: a wrong pin, an expired certificate or a failed handshake
ends the call with a sentence that says which.

Every call carries this panel's guid (`X-Panel-Guid`), so a node can tell which panel
manages it. Answers are the panel envelope, read by the bounded reader
(`runtime/reader.py`); a node's own failure message is passed on (bounded), anything that
is not an envelope is reported as such with the reader's reason, never echoed.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.errors import ServiceError
from appliance.runtime.egress import (
    CertificateRefused,
    DestinationRefused,
    Egress,
    FetchFailed,
    Reply,
    TlsRefused,
    host_key,
)
from appliance.runtime.reader import Unreadable, parse_json
from appliance.services.nodes.sealing import is_sealed, unopened

GUID_HEADER = "X-Panel-Guid"
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 15
MAX_ANSWER = 64 << 20
MAX_MESSAGE = 300
MODES = ("system", "pin", "mtls")
HEX_PIN = re.compile(r"^[0-9A-Fa-f]{64}$")


class NodeError(ServiceError):
    """A node call that did not succeed; `reached` tells a node that answered (and
    refused) from one that could not be reached."""

    def __init__(self, msg: str, reached: bool = False):
        super().__init__(msg)
        self.reached = reached


class NodeAnswerUnreadable(NodeError):
    """A node answered with something that is not the panel API's answer: whatever is
    at that address, it is not a panel this one can manage."""

    def __init__(self, msg: str):
        super().__init__(msg, reached=True)


@dataclass(frozen=True)
class Details:
    """What it takes to reach a node: the connection fields of its record."""

    name: str
    scheme: str
    address: str
    port: int
    base_path: str
    api_token: str
    allow_private_address: bool = False
    tls_verify_mode: str = "system"
    cert_fingerprint: str = ""

    @property
    def where(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{host}:{self.port}{self.base_path.rstrip('/')}"

    @property
    def label(self) -> str:
        return f"node {self.name!r}" if self.name else f"the node at {self.where}"


@dataclass(frozen=True)
class Identity:
    """What this panel presents to its nodes: its guid, and the files of the client
    certificate its CA signed (for `mtls`), made on first use."""

    guid: str
    client_certificate: Callable[[], tuple[str, str]] | None = None


def normalize_pin(value: str) -> str:
    """A leaf SHA-256 as base64 (what `nodes/certFingerprint` gives), from base64 or hex
    (with or without colons); "" stays ""."""
    text = value.strip().replace(":", "")
    if not text:
        return ""
    if HEX_PIN.match(text):
        return base64.b64encode(bytes.fromhex(text)).decode()
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ServiceError(
            "certFingerprint must be the SHA-256 of the node's certificate, as base64 "
            "(what certFingerprint answers) or 64 hex digits"
        )
    return base64.b64encode(raw).decode()


def leaf_fingerprint(der: bytes) -> str:
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


class NodeLink:
    """Calls to one node."""

    def __init__(self, details: Details, identity: Identity):
        self.details = details
        self.identity = identity

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float = READ_TIMEOUT,
        limit: int = MAX_ANSWER,
    ) -> Any:
        """The `obj` of the node's answer to `method path` (a path under the panel's base,
        such as `/panel/api/server/status`); `NodeError` when it fails, saying why."""
        if is_sealed(self.details.api_token):
            raise NodeError(unopened(self.details.label))
        headers = {
            "Authorization": f"Bearer {self.details.api_token}",
            GUID_HEADER: self.identity.guid,
            "Accept": "application/json",
        }
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        url = self.details.where + path
        try:
            with self._egress().request(
                url,
                method=method,
                body=data,
                headers=headers,
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=timeout,
                total_timeout=max(timeout * 4, 60),
                **self._tls(),
            ) as reply:
                status, text = reply.status, self._body(reply, path, limit)
        except DestinationRefused as exc:
            raise NodeError(exc.msg) from None
        except TlsRefused as exc:
            raise self._tls_refused(exc) from None
        except FetchFailed as exc:
            raise NodeError(f"{self.details.label} cannot be reached: {exc.msg}") from None
        except NodeError:
            raise
        except ServiceError as exc:
            raise NodeError(exc.msg) from None
        return self._answer(path, status, text)

    def fingerprint(self) -> str:
        """The base64 SHA-256 of the certificate the node presents, read without any
        verification (for the admin to confirm before pinning it)."""
        if self.details.scheme != "https":
            raise NodeError(f"{self.details.label} is reached over http: it has no certificate")
        found: list[str] = []

        def keep(sock: ssl.SSLSocket) -> None:
            der = sock.getpeercert(binary_form=True)
            if not der:
                raise NodeError(f"{self.details.label} presented no certificate", reached=True)
            found.append(leaf_fingerprint(der))
            raise _Seen

        context = _unverified()
        try:
            with self._egress().request(
                self.details.where + "/",
                method="HEAD",
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=CONNECT_TIMEOUT,
                tls=context,
                check_peer=keep,
            ):
                pass
        except _Seen:
            return found[0]
        except DestinationRefused as exc:
            raise NodeError(exc.msg) from None
        except FetchFailed as exc:
            raise NodeError(f"{self.details.label} cannot be reached: {exc.msg}") from None
        raise NodeError(f"{self.details.label} presented no certificate")

    # ---- the pieces ------------------------------------------------------------------

    def _egress(self) -> Egress:
        details = self.details
        return Egress(
            f"{details.label}",
            (host_key(details.address), details.port),
            details.allow_private_address,
            opt_in=(
                "a node on such an address is reached only when its record sets allowPrivateAddress"
            ),
        )

    def _tls(self) -> dict:
        details = self.details
        if details.scheme != "https":
            return {}
        mode = details.tls_verify_mode
        pinned = mode == "pin" or (mode == "mtls" and bool(details.cert_fingerprint))
        if mode != "mtls":
            return {"tls": _unverified(), "check_peer": self._check_pin} if pinned else {}
        if self.identity.client_certificate is None:
            raise NodeError("this panel has no client certificate for mTLS")
        cert_file, key_file = self.identity.client_certificate()
        context = _unverified() if pinned else _system_context()
        context.load_cert_chain(cert_file, key_file)
        return {"tls": context, "check_peer": self._check_pin} if pinned else {"tls": context}

    def _tls_refused(self, exc: TlsRefused) -> NodeError:
        """Why no TLS connection came about, with what the admin can do about it."""
        label = self.details.label
        if isinstance(exc, CertificateRefused):
            return NodeError(
                f"{label} presented a certificate that this panel does not trust: {exc.msg}; "
                "nothing was sent. A self-signed certificate is trusted by pinning it: "
                "tlsVerifyMode pin with the fingerprint nodes/certFingerprint shows",
                reached=True,
            )
        hint = ""
        if self.details.tls_verify_mode == "mtls":
            hint = (
                "; with tlsVerifyMode mtls the node must trust this panel's CA "
                "(nodes/mtls/trustCA on the node, then a restart of the node)"
            )
        return NodeError(f"{label} refused the TLS connection: {exc.msg}{hint}", reached=True)

    def _check_pin(self, sock: ssl.SSLSocket) -> None:
        details = self.details
        der = sock.getpeercert(binary_form=True)
        if not der:
            raise NodeError(f"{details.label} presented no certificate", reached=True)
        seen = leaf_fingerprint(der)
        if seen != details.cert_fingerprint:
            raise NodeError(
                f"{details.label} presented a certificate whose SHA-256 is {seen}, not the "
                f"pinned {details.cert_fingerprint}; nothing was sent. If the node's "
                "certificate was renewed, fetch its fingerprint again and confirm it",
                reached=True,
            )
        from cryptography import x509

        certificate = x509.load_der_x509_certificate(der)
        now = datetime.datetime.now(datetime.UTC)
        if certificate.not_valid_after_utc < now:
            raise NodeError(
                f"{details.label} presented its pinned certificate, but it expired on "
                f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; nothing was sent",
                reached=True,
            )
        if certificate.not_valid_before_utc > now:
            raise NodeError(
                f"{details.label} presented its pinned certificate, but it is valid only from "
                f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC; nothing was sent",
                reached=True,
            )

    def _body(self, reply: Reply, path: str, limit: int) -> bytes:
        """The body of an answer that arrived: one too large or too slow to read whole is
        the node's doing, not a failure to reach it."""
        try:
            return reply.read(limit)
        except FetchFailed as exc:
            raise NodeAnswerUnreadable(
                f"{self.details.label} answered {path} with HTTP {reply.status}, but the "
                f"answer could not be read: {exc.msg}"
            ) from None

    def _answer(self, path: str, status: int, text: bytes) -> Any:
        label = self.details.label
        if status == 401:
            raise NodeError(f"{label} refused the API token (401)", reached=True)
        if status == 403:
            reason = _envelope_message(text)
            raise NodeError(
                f"{label} does not let this token call {path} (403)"
                + (f": {reason}" if reason else ""),
                reached=True,
            )
        if status == 404:
            raise NodeError(
                f"{label} has no {path} (404): check the address, port and basePath, and "
                "that the node runs this panel",
                reached=True,
            )
        try:
            answer = parse_json(text, MAX_ANSWER, dict)
        except Unreadable as exc:
            raise NodeAnswerUnreadable(
                f"{label} answered {path} with HTTP {status} and something that is not the "
                f"panel API's answer ({exc.msg}): check the address, port and basePath"
            ) from None
        if not isinstance(answer.get("success"), bool):
            raise NodeAnswerUnreadable(
                f"{label} answered {path} with HTTP {status} and something that is not the "
                "panel API's answer (an object without success): check the address, port "
                "and basePath"
            )
        if not answer["success"]:
            message = answer.get("msg")
            message = _bounded(message) if isinstance(message, str) else "no reason given"
            raise NodeError(f"{label}: {message}", reached=True)
        return answer.get("obj")


class _Seen(Exception):
    """Ends a fingerprint fetch once the certificate is in hand."""


def _unverified() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _system_context() -> ssl.SSLContext:
    """The system store, in a context of its own: the shared one (`tls_context`) must
    never carry a client certificate."""
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=_bundle())
    return context


def _bundle() -> str:
    import certifi

    return certifi.where()


def _envelope_message(text: bytes) -> str:
    """The `msg` of an envelope answer, bounded; "" when there is none."""
    try:
        answer = parse_json(text, MAX_ANSWER, dict)
    except Unreadable:
        return ""
    message = answer.get("msg")
    return _bounded(message) if isinstance(message, str) else ""


def _bounded(text: str) -> str:
    clean = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return clean[:MAX_MESSAGE] + ("…" if len(clean) > MAX_MESSAGE else "")
