"""SHA-256 fingerprints of certificates, behind `server/getCertHash` and
`server/getRemoteCertHash`.

Why this module exists: a client that pins the server's certificate (Xray's
`pinnedPeerCertSha256`) needs its SHA-256, in hex, over the DER encoding. The owner either
points at a certificate the panel can read, pastes one, or names a live server whose
certificate should be pinned.

Reading a file by a path a caller sends is a way to probe the disk, so only files inside
the panel's certificate directories are read (`FilePlaces.certificate`, the one rule
every certificate path of the panel follows): the path is resolved first, so a symbolic
link inside them that points elsewhere is refused like the place it points to, with the
same words whether the place exists or not. Only regular files up to 1 MB are read, and
one that holds no certificate says so rather than hashing whatever it holds.

A file or pasted text may be PEM (a chain gives one hash per certificate, in file order)
or DER; pasted DER comes as base64 text, since a form field carries text. The remote
hash comes from a TLS handshake that verifies nothing (the point is to learn what the
server presents, trusted or not), bounded by a connect and handshake timeout. The
connection goes through the egress guard as `getRemoteCertHash`, so the route cannot
probe the panel's own machine or network unless the admin allowed that.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import socket
import ssl

from appliance.domain.protocols import is_host, is_ip
from appliance.errors import ServiceError
from appliance.runtime.egress import for_host
from appliance.runtime.file_paths import FilePlaces

CERT_FILE_LIMIT = 1 << 20
REMOTE_TIMEOUT = 10  # seconds for the TCP connect and again for the TLS handshake
DEFAULT_TLS_PORT = 443


def cert_hashes(cert_file: object, cert_content: object, places: FilePlaces) -> list[str]:
    """Hex SHA-256 of each certificate in `cert_file` (a path in the certificate
    directories of `places`; wins when given) or in `cert_content` (PEM text or base64
    DER)."""
    if isinstance(cert_file, str) and cert_file.strip():
        return _hashes(_read_cert_file(cert_file.strip(), places), f"'{cert_file.strip()}'")
    if isinstance(cert_content, str) and cert_content.strip():
        return _hashes(_pasted(cert_content.strip()), "certContent")
    if cert_file not in (None, "") or cert_content not in (None, ""):
        raise ServiceError("certFile must be a path and certContent a text")
    raise ServiceError(
        "send certFile (the path of a certificate the panel can read) or certContent "
        "(a PEM certificate, or DER as base64)"
    )


def remote_cert_hashes(server: object, settings, timeout: float = REMOTE_TIMEOUT) -> list[str]:
    """Hex SHA-256 of the leaf certificate `server` (`host` or `host:port`) presents;
    `settings` say whether it may be an internal address."""
    host, port = parse_server(server)
    egress = for_host(settings, "getRemoteCertHash", host, port)
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with egress.connect(host, port, timeout) as sock:
            sock.settimeout(timeout)
            sni = None if is_ip(host) else host
            with context.wrap_socket(sock, server_hostname=sni) as tls:
                leaf = tls.getpeercert(binary_form=True)
    except socket.gaierror:
        raise ServiceError(f"cannot resolve the host name {host}") from None
    except TimeoutError:
        raise ServiceError(
            f"{where} did not complete a TLS handshake within {timeout:g} s"
        ) from None
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc) or type(exc).__name__
        raise ServiceError(f"the TLS handshake with {where} failed: {reason}") from None
    except OSError as exc:
        raise ServiceError(f"cannot connect to {where}: {exc.strerror or exc}") from None
    if not leaf:
        raise ServiceError(f"{where} presented no certificate")
    return [hashlib.sha256(leaf).hexdigest()]


def parse_server(server: object) -> tuple[str, int]:
    """`domain`, `domain:port`, an IP address, `[IPv6]:port`; the port defaults to 443."""
    if not isinstance(server, str) or not server.strip():
        raise ServiceError("server is required: a domain or domain:port, like example.com:443")
    text = server.strip()
    if "/" in text:
        raise ServiceError(
            f"server must be a domain or an IP address, optionally with :port, not a URL "
            f"(got {text[:100]!r})"
        )
    host, port_text = text, ""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")) or ":" not in host:
            raise ServiceError(f"server {text[:100]!r} is not [IPv6 address]:port")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    port = DEFAULT_TLS_PORT
    if port_text or text.endswith(":"):
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ServiceError(f"the port in server {text[:100]!r} must be from 1 to 65535")
        port = int(port_text)
    if not is_host(host):
        raise ServiceError(
            f"server must be a domain or an IP address, optionally with :port (got {text[:100]!r})"
        )
    return host.rstrip("."), port


def _read_cert_file(path: str, places: FilePlaces) -> bytes:
    try:
        places.certificate(path, "certFile")
    except ServiceError as exc:
        raise ServiceError(f"{exc.msg}, or paste the certificate as certContent") from None
    real = os.path.realpath(path)
    if not os.path.exists(real):
        raise ServiceError(f"no such file '{path}'")
    if os.path.isdir(real):
        raise ServiceError(f"'{path}' is a directory; name the certificate file in it")
    if not os.path.isfile(real):
        raise ServiceError(f"'{path}' is not a regular file")
    try:
        with open(real, "rb") as fh:
            data = fh.read(CERT_FILE_LIMIT + 1)
    except OSError as exc:
        raise ServiceError(f"'{path}' cannot be read: {exc.strerror}") from None
    if len(data) > CERT_FILE_LIMIT:
        raise ServiceError(f"'{path}' is larger than {CERT_FILE_LIMIT >> 20} MB: not a certificate")
    return data


def _pasted(text: str) -> bytes:
    if "-----BEGIN" in text:
        return text.encode("utf-8")
    with contextlib.suppress(binascii.Error, ValueError):
        return base64.b64decode("".join(text.split()), validate=True)
    raise ServiceError("certContent must be a PEM certificate or a DER certificate as base64")


def _hashes(data: bytes, source: str) -> list[str]:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    try:
        if b"-----BEGIN" in data:
            certificates = x509.load_pem_x509_certificates(data)
        else:
            certificates = [x509.load_der_x509_certificate(data)]
    except ValueError:
        raise ServiceError(f"{source} holds no certificate (PEM or DER)") from None
    return [hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest() for cert in certificates]
