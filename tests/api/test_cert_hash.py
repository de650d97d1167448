"""server/getCertHash and server/getRemoteCertHash against real files and a real TLS server.

Certificates are made with `cryptography`, written into the panel's certificate
directories (or deliberately elsewhere), and the panel is asked over HTTP; the expected
hash is the SHA-256 of each certificate's DER bytes, computed here. The remote hash comes
from a TLS server this module runs on loopback with a self-signed certificate.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from helpers import (
    ok,
    refused,
    self_signed_certificate,
    write_certificate,
    write_key,
    write_self_signed,
)

from appliance.errors import ServiceError
from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.tools.cert_hash import remote_cert_hashes
from appliance.store import Store

SERVER = "/panel/api/server"
SETTINGS = "/panel/api/setting/update"


def der_hash(certificate: x509.Certificate) -> str:
    return hashlib.sha256(certificate.public_bytes(Encoding.DER)).hexdigest()


@pytest.fixture(scope="module")
def certs_dir(panel) -> Path:
    """The `certs` folder of the panel's data directory."""
    path = Path(panel.data_dir) / "certs"
    path.mkdir(exist_ok=True)
    return path


# ---- files ---------------------------------------------------------------------------------


def test_pem_file_in_the_data_certs_folder(api, certs_dir):
    _, certificate = self_signed_certificate("one.example")
    path = write_certificate(certs_dir / "one.pem", certificate)
    assert ok(api.post(f"{SERVER}/getCertHash", data={"certFile": path})) == [der_hash(certificate)]


def test_a_chain_gives_one_hash_per_certificate_in_file_order(api, certs_dir):
    certificates = [self_signed_certificate(f"c{n}.example")[1] for n in range(3)]
    path = certs_dir / "chain.pem"
    path.write_bytes(b"".join(cert.public_bytes(Encoding.PEM) for cert in certificates))
    hashes = ok(api.post(f"{SERVER}/getCertHash", json={"certFile": str(path)}))
    assert hashes == [der_hash(cert) for cert in certificates]


def test_der_file(api, certs_dir):
    _, certificate = self_signed_certificate("der.example")
    path = certs_dir / "cert.der"
    path.write_bytes(certificate.public_bytes(Encoding.DER))
    assert ok(api.post(f"{SERVER}/getCertHash", data={"certFile": str(path)})) == [
        der_hash(certificate)
    ]


def test_pem_file_with_its_key_hashes_only_the_certificate(api, certs_dir):
    key, certificate = self_signed_certificate("bundle.example")
    write_key(certs_dir / "bundle.key", key)
    bundle = certs_dir / "bundle.pem"
    bundle.write_bytes(
        (certs_dir / "bundle.key").read_bytes() + certificate.public_bytes(Encoding.PEM)
    )
    assert ok(api.post(f"{SERVER}/getCertHash", data={"certFile": str(bundle)})) == [
        der_hash(certificate)
    ]


def test_inline_pem_and_base64_der(api):
    _, first = self_signed_certificate("inline.example")
    _, second = self_signed_certificate("inline2.example")
    pem = (first.public_bytes(Encoding.PEM) + second.public_bytes(Encoding.PEM)).decode()
    assert ok(api.post(f"{SERVER}/getCertHash", data={"certContent": pem})) == [
        der_hash(first),
        der_hash(second),
    ]
    der_text = base64.b64encode(first.public_bytes(Encoding.DER)).decode()
    assert ok(api.post(f"{SERVER}/getCertHash", json={"certContent": der_text})) == [
        der_hash(first)
    ]


def test_cert_file_takes_precedence_over_cert_content(api, certs_dir):
    _, on_disk = self_signed_certificate("disk.example")
    _, pasted = self_signed_certificate("pasted.example")
    path = write_certificate(certs_dir / "precedence.pem", on_disk)
    body = {"certFile": path, "certContent": pasted.public_bytes(Encoding.PEM).decode()}
    assert ok(api.post(f"{SERVER}/getCertHash", data=body)) == [der_hash(on_disk)]


def test_the_web_certificate_setting_does_not_widen_the_folders(api, tmp_path):
    web_dir = tmp_path / "web-tls"
    web_dir.mkdir()
    cert_path, key_path = write_self_signed(web_dir, "panel.example")
    other = web_dir / "other.pem"
    _, other_certificate = self_signed_certificate("other.example")
    write_certificate(other, other_certificate)
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": str(other)}), "outside")
    update = {"webCertFile": cert_path, "webKeyFile": key_path}
    refused(api.post("/panel/api/setting/update", update), "webCertFile", "outside")
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": str(other)}), "outside")


@pytest.mark.filterwarnings("ignore::cryptography.utils.CryptographyDeprecationWarning")
def test_a_system_certificate_bundle(api):
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    if not os.path.isfile(bundle):
        pytest.skip("this machine has no CA bundle in /etc/ssl")
    expected = [
        der_hash(cert) for cert in x509.load_pem_x509_certificates(Path(bundle).read_bytes())
    ]
    assert ok(api.post(f"{SERVER}/getCertHash", data={"certFile": bundle})) == expected


def test_a_path_outside_the_certificate_folders_is_refused(api, tmp_path):
    _, certificate = self_signed_certificate("outside.example")
    path = write_certificate(tmp_path / "outside.pem", certificate)
    reply = api.post(f"{SERVER}/getCertHash", data={"certFile": path})
    refused(reply, "outside the directories allowed", "/etc/letsencrypt", "/etc/ssl", "certContent")
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": "/etc/passwd"}), "outside")


def test_dot_dot_cannot_climb_out(api, certs_dir):
    path = str(certs_dir) + "/../appliance.db"
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": path}), "may not contain '..'")


def test_a_symlink_escaping_the_folders_is_refused(api, certs_dir, tmp_path):
    _, certificate = self_signed_certificate("escape.example")
    target = write_certificate(tmp_path / "escape.pem", certificate)
    link = certs_dir / "escape.pem"
    link.symlink_to(target)
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": str(link)}), "outside")


def test_a_symlink_within_the_folders_is_followed(api, certs_dir):
    _, certificate = self_signed_certificate("inside.example")
    target = write_certificate(certs_dir / "inside-target.pem", certificate)
    link = certs_dir / "inside-link.pem"
    link.symlink_to(target)
    assert ok(api.post(f"{SERVER}/getCertHash", data={"certFile": str(link)})) == [
        der_hash(certificate)
    ]


def test_directory_missing_file_and_non_certificates_are_refused(api, certs_dir):
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": str(certs_dir)}), "directory")
    missing = str(certs_dir / "missing.pem")
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": missing}), "no such file")
    key, _ = self_signed_certificate("key-only.example")
    key_path = write_key(certs_dir / "only.key", key)
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": key_path}), "no certificate")
    text = certs_dir / "notes.txt"
    text.write_text("not a certificate\n")
    refused(api.post(f"{SERVER}/getCertHash", data={"certFile": str(text)}), "no certificate")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, ["send certFile"]),
        ({"certFile": "", "certContent": ""}, ["send certFile"]),
        ({"certContent": "not base64 !!"}, ["PEM certificate or a DER"]),
        ({"certContent": base64.b64encode(b"random bytes").decode()}, ["no certificate"]),
        ({"certContent": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"}, []),
        ({"certFile": ["/etc/ssl"]}, ["certFile must be a path"]),
        ({"certContent": 5}, ["certContent a text"]),
    ],
)
def test_bad_inline_input_is_refused(api, body, words):
    refused(api.post(f"{SERVER}/getCertHash", json=body), *words)


# ---- a live server -------------------------------------------------------------------------


class TlsServer:
    """Accepts connections on loopback and completes a TLS handshake with `cert_path`,
    or, with no certificate, answers in plain text and hangs up."""

    def __init__(self, cert_path: str | None = None, key_path: str | None = None):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.context = None
        if cert_path:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(cert_path, key_path)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(5)
                try:
                    if self.context is None:
                        conn.sendall(b"220 this is not TLS\r\n")
                        continue
                    with self.context.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                except OSError:
                    continue

    def close(self) -> None:
        """Wake the accepting thread before closing: left blocked in accept() on a
        closed socket, it reset connections of the tests that ran after this module."""
        self.listener.shutdown(socket.SHUT_RDWR)
        self.thread.join(5)
        self.listener.close()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    key, certificate = self_signed_certificate("localhost", x509.DNSName("localhost"))
    server = TlsServer(
        write_certificate(directory / "cert.pem", certificate),
        write_key(directory / "key.pem", key),
    )
    server.certificate = certificate
    yield server
    server.close()


@pytest.fixture
def remote_api(api):
    """The panel allowed to read certificates of servers on this machine, where the test
    servers run, as an admin would allow it."""
    ok(api.post(SETTINGS, {"allowPrivateDestinations": "getRemoteCertHash"}))
    yield api
    ok(api.post(SETTINGS, {"allowPrivateDestinations": ""}))


def test_remote_hash_of_a_live_self_signed_server(remote_api, tls_server):
    expected = [der_hash(tls_server.certificate)]
    for server in (f"127.0.0.1:{tls_server.port}", f"localhost:{tls_server.port}"):
        reply = remote_api.post(f"{SERVER}/getRemoteCertHash", data={"server": server})
        assert ok(reply) == expected


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "2130706433", "127.1", "0.0.0.0"]
)
def test_remote_hash_of_this_machine_is_refused_without_the_opt_in(api, tls_server, host):
    before = tls_server.connections
    reply = api.post(f"{SERVER}/getRemoteCertHash", data={"server": f"{host}:{tls_server.port}"})
    refused(reply, "getRemoteCertHash", "loopback", "allowPrivateDestinations")
    assert tls_server.connections == before


def test_remote_hash_over_ipv6_brackets(remote_api, tmp_path):
    api = remote_api
    try:
        listener = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    listener.close()
    key, certificate = self_signed_certificate("v6.example")
    cert_path = write_certificate(tmp_path / "c.pem", certificate)
    key_path = write_key(tmp_path / "k.pem", key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    server = socket.create_server(("::1", 0), family=socket.AF_INET6)

    def serve_once():
        conn, _ = server.accept()
        with conn, context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(1)

    threading.Thread(target=serve_once, daemon=True).start()
    port = server.getsockname()[1]
    try:
        reply = api.post(f"{SERVER}/getRemoteCertHash", data={"server": f"[::1]:{port}"})
        assert ok(reply) == [der_hash(certificate)]
    finally:
        server.close()


def test_remote_refusals_name_the_problem(remote_api):
    api = remote_api
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    refused(
        api.post(f"{SERVER}/getRemoteCertHash", data={"server": f"127.0.0.1:{port}"}),
        "cannot connect",
    )
    plain = TlsServer()
    try:
        refused(
            api.post(f"{SERVER}/getRemoteCertHash", data={"server": f"127.0.0.1:{plain.port}"}),
            "TLS handshake",
        )
    finally:
        plain.close()


@pytest.mark.parametrize(
    ("server", "words"),
    [
        ("", ["server is required"]),
        ("example.com:0", ["port"]),
        ("example.com:70000", ["port"]),
        ("example.com:http", ["port"]),
        ("https://example.com/", ["domain or an IP"]),
        ("bad host", ["domain or an IP"]),
        ("[::1", ["[IPv6 address]:port"]),
        ("[example.com]:443", ["[IPv6 address]:port"]),
        ("[::1]x", ["[IPv6 address]:port"]),
    ],
)
def test_remote_bad_server_values(api, server, words):
    refused(api.post(f"{SERVER}/getRemoteCertHash", data={"server": server}), *words)


def test_remote_server_must_be_text(api):
    refused(api.post(f"{SERVER}/getRemoteCertHash", json={"server": 443}), "server is required")


def test_a_silent_server_times_out(tmp_path):
    store = Store(str(tmp_path / "panel.db"))
    store.open()
    settings = Settings(store, FilePlaces(str(tmp_path)), ChangeNotice())
    settings.load()
    settings.write(settings.check({"allowPrivateDestinations": "getRemoteCertHash"}))
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(ServiceError, match=r"did not complete a TLS handshake within 0\.5 s"):
            remote_cert_hashes(f"127.0.0.1:{silent.getsockname()[1]}", settings, timeout=0.5)
    finally:
        silent.close()
        store.close()
