"""mTLS between panels: the CA this panel mints for the nodes it manages, and the CA a
node trusts for the panel that manages it.

Managing side: `nodes/mtls/ca` makes, on its first call, a CA and a client certificate
that CA signs for this panel (P-256 keys), kept as files in `<data dir>/mtls` (the
folder 0700, the keys 0600). On SQLite the keys stay out of the database on purpose, so
that no dump, backup or chat-bot copy carries them. Later calls hand out the same CA; a
node record whose `tlsVerifyMode` is `mtls` presents the client certificate, which is
made again from the same CA when it nears its end.

Instances sharing a networked database share one CA (`SharedCa`): the first to need it
stores it in the database, its key sealed like node tokens, and every instance keeps a
copy in its folder and signs its own client certificate with it. A node trusts that CA,
so whichever instance leads drives it: a leader change is not a takeover.

Node side: `nodes/mtls/trustCA` stores the managing panel's CA certificate in the same
folder (`trusted-ca.pem`); an empty one removes it. It is read when the panel starts:
the TLS panel port then asks every client for a certificate (optionally, so browsers keep
working) and verifies it against that CA, and a call with a node-scope API token that
did not come with a verified certificate is refused.

Every file is written beside its final name and moved over it, so a crash leaves the
old file or the new one, and the folder is checked to resolve inside the data
directory before anything in it is read or written.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable

from appliance.errors import ServiceError
from appliance.runtime.file_paths import confined
from appliance.services.nodes.sealing import is_sealed
from appliance.store import mtls_sql

log = logging.getLogger(__name__)

MTLS_DIR = "mtls"
CA_CERT, CA_KEY = "ca.pem", "ca.key"
CLIENT_CERT, CLIENT_KEY = "client.pem", "client.key"
TRUSTED_CA = "trusted-ca.pem"
REPLACED_SUFFIX = ".replaced"
CA_DAYS = 3650
CLIENT_DAYS = 825
RENEW_BEFORE = datetime.timedelta(days=30)
MAX_CA_TEXT = 64 << 10
PEM_LABEL = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")
CA_HINT = (
    "send the caCert that nodes/mtls/ca answers on the managing panel "
    "(-----BEGIN CERTIFICATE----- ...), or an empty caCert to stop requiring one"
)


class SharedCa:
    """The CA of the instances on one networked database, stored in it (store/mtls_sql.py)
    with its key sealed by the node-token seal (the same APPLIANCE_NODE_KEY on every
    host opens it)."""

    def __init__(self, store, seal):
        self.store = store
        self.seal = seal

    @classmethod
    def of(cls, store, seal) -> SharedCa | None:
        """The shared CA of a networked database's instances; None alone on SQLite."""
        return None if store.dialect == "sqlite" else cls(store, seal)

    def pair(self, local: Callable[[], tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of the shared CA. While none is stored, `local()`
        (this instance's own CA, minted if it has none) is offered; another instance's
        offer that came first is the one kept."""
        from pony.orm import db_session

        with db_session:
            value = mtls_sql.shared_ca(self.store)
        if value is None:
            cert, key = local()
            offer = json.dumps({"cert": cert.decode(), "key": self.seal.seal(key.decode())})
            with db_session:
                value = mtls_sql.offer_ca(self.store, offer)
        stored = json.loads(value)
        key = self.seal.open(stored["key"])
        if is_sealed(key):
            raise ServiceError(
                "the mTLS CA the instances on this database share is sealed with a key this "
                "instance does not have: set the same APPLIANCE_NODE_KEY on every host"
            )
        return stored["cert"].encode(), key.encode()


class MutualTls:
    def __init__(
        self,
        data_dir: str,
        guid: Callable[[], str],
        clock: Callable[[], float] = time.time,
        shared: SharedCa | None = None,
    ):
        self.data_dir = data_dir
        self.guid = guid
        self.clock = clock
        # The CA of the instances sharing a networked database; None alone on SQLite.
        self.shared = shared
        self._lock = threading.Lock()
        self._client: tuple[str, str, float] | None = None  # cert, key, renew after

    # ---- the managing side -------------------------------------------------------------

    def ca_certificate(self) -> str:
        """The PEM of this panel's CA, minted with its client certificate on first use."""
        with self._lock:
            try:
                self._ensure()
                with open(self._path(CA_CERT)) as fh:
                    return fh.read()
            except OSError as exc:
                raise _unwritable(exc) from None

    def client_certificate(self) -> tuple[str, str]:
        """The files of the client certificate this panel presents to `mtls` nodes."""
        client = self._client
        if client is None or self.clock() >= client[2]:
            with self._lock:
                try:
                    client = self._ensure()
                except OSError as exc:
                    raise _unwritable(exc) from None
        return client[0], client[1]

    # ---- the node side -----------------------------------------------------------------

    def trust(self, ca_text: object) -> str:
        """Store the CA whose client certificates calls with a node token must carry
        (empty: remove it); takes effect at the next start. Returns what was done."""
        pem = parse_ca(ca_text)
        try:
            self._store_trusted(pem)
        except OSError as exc:
            raise _unwritable(exc) from None
        if not pem:
            return (
                "the managing panel's CA is no longer trusted; calls with a node token need "
                "no client certificate once the panel restarts"
            )
        return (
            "CA stored; once the panel restarts, its HTTPS port asks for client certificates "
            "and calls with a node token must come with one this CA signed"
        )

    def trusted(self) -> str:
        """The stored CA PEM that node-token callers must be signed by; "" for none."""
        path = os.path.join(self.data_dir, MTLS_DIR, TRUSTED_CA)
        if not os.path.exists(path):
            return ""
        folder = self._folder()
        with open(os.path.join(folder, TRUSTED_CA)) as fh:
            return fh.read()

    # ---- the pieces --------------------------------------------------------------------

    def _store_trusted(self, pem: str) -> None:
        path = os.path.join(self._folder(), TRUSTED_CA)
        if pem:
            _write(path, pem.encode(), 0o644)
        elif os.path.exists(path):
            os.remove(path)

    def _folder(self) -> str:
        """`<data dir>/mtls`, made 0700 when missing, refused when it leads outside."""
        folder = os.path.join(self.data_dir, MTLS_DIR)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        confined(folder, [self.data_dir], "the mTLS folder", advice="remove the link")
        return folder

    def _path(self, name: str) -> str:
        return os.path.join(self._folder(), name)

    def _ensure(self) -> tuple[str, str, float]:
        """Make what is missing: the CA (and then a new client certificate), or a client
        certificate that is missing, unreadable or near its end. Returns the client
        certificate's files and when to renew it."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        if self.shared is not None:
            ca_cert, ca_key = self._shared_ca()
        elif os.path.exists(self._path(CA_CERT)):
            ca_cert, ca_key = self._stored_ca()
        else:
            ca_cert, ca_key = self._mint_ca()
        now = datetime.datetime.fromtimestamp(self.clock(), datetime.UTC)
        try:
            with open(self._path(CLIENT_CERT), "rb") as fh:
                client = x509.load_pem_x509_certificate(fh.read())
            with open(self._path(CLIENT_KEY), "rb") as fh:
                serialization.load_pem_private_key(fh.read(), None)
            usable = client.issuer == ca_cert.subject and client.not_valid_after_utc - now > (
                RENEW_BEFORE
            )
        except (OSError, ValueError):
            usable = False
        if not usable:
            client = self._mint_client(ca_cert, ca_key)
        renew = (client.not_valid_after_utc - RENEW_BEFORE).timestamp()
        self._client = (self._path(CLIENT_CERT), self._path(CLIENT_KEY), renew)
        return self._client

    def _shared_ca(self):
        """The CA the instances share, copied into this instance's folder. A CA of its own
        that differs (made before it joined them) is kept beside, as REPLACED_SUFFIX
        files: nodes that trusted it must be given the shared one."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        def local() -> tuple[bytes, bytes]:
            if os.path.exists(self._path(CA_CERT)):
                cert, key = self._stored_ca()
            else:
                cert, key = self._mint_ca()
            return _cert_bytes(cert), _key_bytes(key)

        cert_pem, key_pem = self.shared.pair(local)
        own_cert, own_key = self._file(CA_CERT), self._file(CA_KEY)
        if own_cert is not None and own_cert != cert_pem:
            for name in (CA_CERT, CA_KEY):
                if os.path.exists(self._path(name)):
                    os.replace(self._path(name), self._path(name + REPLACED_SUFFIX))
            log.warning(
                "this instance's own mTLS CA is replaced by the one the instances on its "
                "database share (the old one is kept as %s%s): nodes that trusted it must "
                "trust the shared one (nodes/mtls/ca on any instance)",
                CA_CERT,
                REPLACED_SUFFIX,
            )
            own_cert = own_key = None
        # A copy missing or damaged is made whole from the shared CA: the same CA.
        if own_key != key_pem:
            _write(self._path(CA_KEY), key_pem, 0o600)
        if own_cert != cert_pem:
            _write(self._path(CA_CERT), cert_pem, 0o644)
        return (
            x509.load_pem_x509_certificate(cert_pem),
            serialization.load_pem_private_key(key_pem, None),
        )

    def _file(self, name: str) -> bytes | None:
        try:
            with open(self._path(name), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def _stored_ca(self):
        """The CA as stored. One that cannot be read is not replaced: nodes trust it, and
        a new one would lock this panel out of every one of them without a word."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        try:
            with open(self._path(CA_CERT), "rb") as fh:
                ca_cert = x509.load_pem_x509_certificate(fh.read())
            with open(self._path(CA_KEY), "rb") as fh:
                ca_key = serialization.load_pem_private_key(fh.read(), None)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ServiceError(
                f"this panel's mTLS CA ({CA_CERT} and {CA_KEY} in the data directory's "
                f"{MTLS_DIR} folder) cannot be read ({reason[:200]}); it is not replaced, "
                "since nodes trust it: restore both files, or remove them to mint a new CA "
                "and have every node trust that one"
            ) from None
        return ca_cert, ca_key

    def _mint_ca(self):
        from cryptography import x509
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(f"appliance node CA {self.guid()}")
        builder = (
            _builder(name, name, key.public_key(), self.clock(), CA_DAYS)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        )
        certificate = _signed(builder, key)
        _write(self._path(CA_KEY), _key_bytes(key), 0o600)
        _write(self._path(CA_CERT), _cert_bytes(certificate), 0o644)
        return certificate, key

    def _mint_client(self, ca_cert, ca_key):
        from cryptography import x509
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(f"appliance managing panel {self.guid()}")
        builder = (
            _builder(name, ca_cert.subject, key.public_key(), self.clock(), CLIENT_DAYS)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
        )
        certificate = _signed(builder, ca_key)
        _write(self._path(CLIENT_KEY), _key_bytes(key), 0o600)
        _write(self._path(CLIENT_CERT), _cert_bytes(certificate), 0o644)
        return certificate


def _unwritable(exc: OSError) -> ServiceError:
    return ServiceError(
        f"the mTLS certificates in the data directory's {MTLS_DIR} folder cannot be made or "
        f"read: {(exc.strerror or str(exc)).lower()}"
    )


def parse_ca(value: object) -> str:
    """The CA certificate(s) of a trustCA body as PEM; "" for none; else ServiceError."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ServiceError(f"caCert must be a string: {CA_HINT}")
    text = value.strip()
    if not text:
        return ""
    if len(text) > MAX_CA_TEXT:
        raise ServiceError(f"caCert is larger than {MAX_CA_TEXT >> 10} kB: {CA_HINT}")
    labels = set(PEM_LABEL.findall(text))
    if any("PRIVATE KEY" in label for label in labels):
        raise ServiceError(
            "caCert holds a private key: send the CA certificate alone, and keep the key "
            "where it is"
        )
    if labels != {"CERTIFICATE"}:
        raise ServiceError(f"caCert is not a PEM certificate: {CA_HINT}")
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    try:
        certificates = x509.load_pem_x509_certificates(text.encode())
    except ValueError:
        raise ServiceError(
            f"caCert holds a certificate block that cannot be read (damaged or cut short): "
            f"{CA_HINT}"
        ) from None
    now = datetime.datetime.now(datetime.UTC)
    for certificate in certificates:
        subject = certificate.subject.rfc4514_string()[:100]
        try:
            constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
            is_ca = constraints.value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            raise ServiceError(
                f"caCert {subject!r} is not a CA certificate (it cannot sign others): {CA_HINT}"
            )
        if certificate.not_valid_after_utc < now:
            raise ServiceError(
                f"caCert {subject!r} expired on "
                f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: {CA_HINT}"
            )
    pem = "".join(c.public_bytes(Encoding.PEM).decode() for c in certificates)
    try:
        ssl.create_default_context(cadata=pem)
    except ssl.SSLError as exc:
        raise ServiceError(f"caCert cannot be used to verify certificates ({exc.reason})") from None
    return pem


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def _builder(subject, issuer, public_key, now: float, days: int):
    from cryptography import x509

    start = datetime.datetime.fromtimestamp(now, datetime.UTC) - datetime.timedelta(hours=1)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days))
    )


def _usage(ca: bool):
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _signed(builder, key):
    from cryptography.hazmat.primitives import hashes

    return builder.sign(key, hashes.SHA256())


def _key_bytes(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_bytes(certificate) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return certificate.public_bytes(Encoding.PEM)


def _write(path: str, data: bytes, mode: int) -> None:
    """`data` into `path` through a file beside it, created with `mode` (never wider)."""
    staged = f"{path}.{os.getpid()}.tmp"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(staged, mode)
        os.replace(staged, path)
    except BaseException:
        if os.path.exists(staged):
            os.remove(staged)
        raise
