"""Helpers that several test modules need in the same form: the success and failure
envelope checks, adding an inbound through the API, reading and writing the panel's
SQLite file, a clean environment and a free port for a command, the stream settings most
inbound samples use, and a self-signed certificate written to files.

They were once copied into each module that used them; one copy means a fix or a stricter
check reaches every test at once. Helpers particular to one module stay in that module.
"""

from __future__ import annotations

import base64
import datetime
import os
import socket
import sqlite3
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

INBOUNDS = "/panel/api/inbounds"

REALITY_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")
WG_PEER_KEY = base64.b64encode(bytes(range(32, 64))).decode()
TLS = {
    "network": "tcp",
    "security": "tls",
    "tlsSettings": {
        "certificates": [{"certificateFile": "/etc/ssl/a.crt", "keyFile": "/etc/ssl/a.key"}]
    },
}
REALITY = {
    "network": "tcp",
    "security": "reality",
    "realitySettings": {
        "target": "example.com:443",
        "serverNames": ["example.com"],
        "privateKey": REALITY_KEY,
        "shortIds": ["", "0123abcd"],
    },
}


# ---- processes ---------------------------------------------------------------------------


def clean_env(**extra: str) -> dict:
    """This process's environment without any APPLIANCE_ variable, plus `extra`: a command
    sees only the settings its test gives it."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    # No core unless a test names one: a panel left behind must not leave a core too.
    environment["APPLIANCE_CORE"] = "/nonexistent/core"
    environment.update(extra)
    return environment


def free_port() -> int:
    """A loopback port the kernel just handed out and released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- envelopes ----------------------------------------------------------------------------


def ok(reply: dict) -> object:
    """The `obj` of a success envelope."""
    assert reply["success"] is True, reply
    return reply["obj"]


def refused(reply: dict, *words: str) -> None:
    """A failure envelope whose message names every word given."""
    assert reply["success"] is False, reply
    assert reply["obj"] is None
    for word in words:
        assert word in reply["msg"], (word, reply["msg"])


def create_inbound(api, payload: dict) -> dict:
    """Adds an inbound through the API; the add must succeed. Returns the inbound as stored."""
    return ok(api.post(f"{INBOUNDS}/add", payload))


# ---- the panel's SQLite file --------------------------------------------------------------


def db_path(server) -> str:
    return os.path.join(server.data_dir, "appliance.db")


def db_rows(server, statement: str, params: tuple = ()) -> list[tuple]:
    """Runs one statement on the panel's SQLite file, commits it, and returns its rows."""
    db = sqlite3.connect(db_path(server))
    try:
        with db:
            return db.execute(statement, params).fetchall()
    finally:
        db.close()


def database_bytes(server) -> bytes:
    """The SQLite file and its write-ahead log as bytes: what a secret must never be in."""
    path = db_path(server)
    return b"".join(
        Path(name).read_bytes() for name in (path, path + "-wal") if os.path.exists(name)
    )


def setting_rows(server) -> dict[str, str]:
    """The `setting` table as the panel stored it."""
    return dict(db_rows(server, "SELECT key, value FROM setting"))


# ---- certificates -------------------------------------------------------------------------


def self_signed_certificate(
    common_name: str, *alt_names: x509.GeneralName
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A fresh P-256 key and a certificate it signed for itself, valid from yesterday for
    30 days; `alt_names`, when given, go into a subjectAltName extension."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
    )
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return key, builder.sign(key, hashes.SHA256())


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> str:
    """Writes `key` as unencrypted PKCS#8 PEM; returns the path."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(path)


def write_certificate(path: Path, certificate: x509.Certificate) -> str:
    """Writes `certificate` as PEM; returns the path."""
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return str(path)


def write_self_signed(
    directory: Path, common_name: str, *alt_names: x509.GeneralName
) -> tuple[str, str]:
    """A self-signed certificate and its key written into `directory` as cert.pem and
    key.pem; returns the certificate's path and the key's path."""
    key, certificate = self_signed_certificate(common_name, *alt_names)
    return (
        write_certificate(directory / "cert.pem", certificate),
        write_key(directory / "key.pem", key),
    )
