"""What a sing-box client app makes of our links, and sing-box servers for stored inbounds.

`outbound_of` turns a `LinkPlan` (read back from one of our share links, Mihomo proxies
or, by `plan_of_json`, JSON configs) into the sing-box outbound a sing-box based app
(Hiddify, Karing, SFA/SFI) would build from it, field by field; what sing-box cannot
express raises. `server_inbound` goes the other way for the server: the sing-box inbound
that serves what the panel stored (its port, users, keys, certificate, transport), for
the protocols the v2fly stand-in core cannot serve. `tls_site` is the real TLS site a
REALITY server borrows its handshake from, and the certificates are signed by a CA made
here, which a client trusts the way an app trusts the system's CAs.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import socket
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from core_helpers import LOOPBACK, serving
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.x509.oid import NameOID

from appliance.links import transport as tr
from appliance.links.import_links import decode_base64
from appliance.links.plan import LinkPlan, Security

SERVER_NAME = "proven.test"

# ---------------------------------------------------------------------------------------
# Certificates: a CA of the test's own and a server certificate for SERVER_NAME
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    ca_pem: str
    cert_pem: str
    key_pem: str


def make_certificates(extra_names: int = 0) -> Certificates:
    """A CA and a server certificate for SERVER_NAME signed by it; `extra_names` more
    names make the certificate longer (a REALITY target must have room for ML-DSA-65)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "proven test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [SERVER_NAME, *(f"host-{n}.{SERVER_NAME}" for n in range(extra_names))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([*map(x509.DNSName, names)]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Certificates(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM).decode(),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    )


CERTS = make_certificates()


def reality_key_pair() -> tuple[str, str]:
    """(private, public) X25519 keys as URL-safe base64 without padding."""
    private = x25519.X25519PrivateKey.generate()

    def encode(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    raw_private = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    raw_public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return encode(raw_private), encode(raw_public)


REALITY_PRIVATE, REALITY_PUBLIC = reality_key_pair()
_, OTHER_PUBLIC = reality_key_pair()


# ---------------------------------------------------------------------------------------
# Client side: what a sing-box app makes of our link or proxy
# ---------------------------------------------------------------------------------------


def outbound_of(plan: LinkPlan, *, trusts_ca: bool = True) -> dict:
    """The sing-box outbound of a plan read from our link or Mihomo proxy, field by field
    as the sing-box apps import them."""
    server = {"server": plan.address, "server_port": plan.port}
    if plan.protocol == "hysteria2":
        outbound = {"type": "hysteria2", **server, "password": plan.password}
        hop = tr.hop_ports(plan.transport)
        if hop:
            outbound["server_ports"] = [hop.replace("-", ":")]
        outbound["tls"] = tls_of(plan, trusts_ca)
        return outbound
    if plan.protocol == "shadowsocks":
        if plan.network != "tcp" or plan.security.kind != "none":
            raise AssertionError("sing-box's Shadowsocks has no transports")
        return {
            "type": "shadowsocks",
            **server,
            "method": plan.ss_method,
            "password": plan.password,
        }
    if plan.protocol == "vless":
        outbound = {"type": "vless", **server, "uuid": plan.user_id}
        if plan.flow:
            outbound["flow"] = plan.flow
    elif plan.protocol == "vmess":
        outbound = {
            "type": "vmess",
            **server,
            "uuid": plan.user_id,
            "security": plan.vmess_security,
            "alter_id": 0,
        }
    elif plan.protocol == "trojan":
        outbound = {"type": "trojan", **server, "password": plan.password}
    else:
        raise AssertionError(f"no sing-box outbound for {plan.protocol}")
    if plan.security.kind != "none":
        outbound["tls"] = tls_of(plan, trusts_ca)
    transport = transport_of(plan)
    if transport:
        outbound["transport"] = transport
    return outbound


def tls_of(plan: LinkPlan, trusts_ca: bool) -> dict:
    security = plan.security
    options: dict = {"enabled": True, "server_name": security.sni or plan.address}
    if security.allow_insecure:
        options["insecure"] = True
    if security.alpn:
        options["alpn"] = list(security.alpn)
    if security.fingerprint:
        options["utls"] = {"enabled": True, "fingerprint": security.fingerprint}
    if security.kind == "reality":
        options["reality"] = {
            "enabled": True,
            "public_key": security.public_key,
            "short_id": security.short_id,
        }
    elif trusts_ca:
        # The test CA, as an app trusts the system's CAs.
        options["certificate"] = CERTS.ca_pem
    return options


def transport_of(plan: LinkPlan) -> dict | None:
    transport = plan.transport
    if plan.network == "tcp":
        if tr.header_type(transport) == "http":
            raise AssertionError("sing-box has no TCP HTTP obfuscation")
        return None
    if plan.network == "ws":
        options: dict = {"type": "ws", "path": tr.path(transport) or "/"}
        if tr.host(transport):
            options["headers"] = {"Host": tr.host(transport)}
        return options
    if plan.network == "httpupgrade":
        options = {"type": "httpupgrade", "path": tr.path(transport) or "/"}
        if tr.host(transport):
            options["host"] = tr.host(transport)
        return options
    if plan.network == "grpc":
        return {"type": "grpc", "service_name": tr.grpc_service_name(transport)}
    raise AssertionError(f"sing-box has no {plan.network} transport")


def plan_of_json(outbound: dict) -> LinkPlan:
    """The plan a `/json/` config's "proxy" outbound describes, read field by field from
    the core's outbound schema (the inverse of `json_config.proxy_outbound`)."""
    settings = outbound["settings"]
    stream_settings = outbound["streamSettings"]
    network = stream_settings["network"]
    kind = stream_settings["security"]
    if kind == "tls":
        tls_settings = stream_settings["tlsSettings"]
        security = Security(
            "tls",
            sni=tls_settings.get("serverName", ""),
            alpn=tuple(tls_settings.get("alpn", ())),
            fingerprint=tls_settings.get("fingerprint", ""),
            allow_insecure=tls_settings["allowInsecure"],
        )
    elif kind == "reality":
        reality_settings = stream_settings["realitySettings"]
        security = Security(
            "reality",
            sni=reality_settings["serverName"],
            fingerprint=reality_settings["fingerprint"],
            public_key=reality_settings["publicKey"],
            short_id=reality_settings["shortId"],
        )
    else:
        security = Security("none")
    transport = stream_settings.get(f"{network}Settings", {})
    common = {"remark": "", "network": network, "security": security, "transport": transport}
    protocol = outbound["protocol"]
    if protocol == "hysteria":
        auth = stream_settings["hysteriaSettings"]["auth"]
        server = {"address": settings["address"], "port": settings["port"]}
        return LinkPlan(protocol="hysteria2", **server, **common, password=auth)
    if protocol in ("vless", "vmess"):
        server = settings["vnext"][0]
        user = server["users"][0]
        return LinkPlan(
            protocol=protocol,
            address=server["address"],
            port=server["port"],
            **common,
            user_id=user["id"],
            flow=user.get("flow", ""),
            vmess_security=user.get("security", "auto"),
        )
    server = settings["servers"][0]
    return LinkPlan(
        protocol=protocol,
        address=server["address"],
        port=server["port"],
        **common,
        password=server["password"],
        ss_method=server.get("method", ""),
    )


def mutate(link: str, old: str, new: str) -> str:
    """`link` with `old` replaced by `new`, also inside the base64 of a VMess link or a
    legacy Shadowsocks user part."""
    if old in link:
        return link.replace(old, new)
    if link.startswith("vmess://"):
        text = decode_base64(link[len("vmess://") :])
        assert old in text, f"{old!r} is not in the VMess link"
        return "vmess://" + base64.b64encode(text.replace(old, new).encode()).decode()
    if link.startswith("ss://"):
        userinfo, _, rest = link[len("ss://") :].partition("@")
        text = decode_base64(userinfo)
        assert old in text, f"{old!r} is not in the Shadowsocks link"
        encoded = base64.urlsafe_b64encode(text.replace(old, new).encode()).rstrip(b"=")
        return f"ss://{encoded.decode()}@{rest}"
    raise AssertionError(f"{old!r} is not in the link")


# ---------------------------------------------------------------------------------------
# Server side: a sing-box server from the inbound the panel stored
# ---------------------------------------------------------------------------------------


def certificate_of(certificate: dict) -> dict:
    """sing-box's certificate and key fields for one stored certificate: inline, or the
    files an admin named."""
    if certificate.get("certificateFile"):
        return {
            "certificate_path": certificate["certificateFile"],
            "key_path": certificate["keyFile"],
        }
    return {
        "certificate": "\n".join(certificate["certificate"]),
        "key": "\n".join(certificate["key"]),
    }


def server_inbound(record: dict) -> dict:
    """The sing-box inbound serving what the panel stored in `record` (from inbounds/get):
    its port, users, keys, certificate and transport."""
    protocol = record["protocol"]
    settings = record["settings"]
    stream_settings = record["streamSettings"]
    clients = settings["clients"]
    inbound: dict = {"tag": "in", "listen": LOOPBACK, "listen_port": record["port"]}
    if protocol == "vless":
        users = [{"uuid": c["id"], "flow": c.get("flow", "")} for c in clients]
        inbound.update(type="vless", users=users)
    elif protocol == "vmess":
        inbound.update(type="vmess", users=[{"uuid": c["id"], "alterId": 0} for c in clients])
    elif protocol == "trojan":
        inbound.update(type="trojan", users=[{"password": c["password"]} for c in clients])
    elif protocol == "shadowsocks":
        inbound.update(
            type="shadowsocks",
            method=settings["method"],
            password=settings["password"],
            users=[{"name": c["email"], "password": c["password"]} for c in clients],
        )
    elif protocol == "hysteria2":
        inbound.update(type="hysteria2", users=[{"password": c["auth"]} for c in clients])
    security = stream_settings.get("security", "none")
    if security == "tls":
        certificate = stream_settings["tlsSettings"]["certificates"][0]
        inbound["tls"] = {
            "enabled": True,
            "server_name": stream_settings["tlsSettings"]["serverName"],
            **certificate_of(certificate),
        }
        alpn = stream_settings["tlsSettings"].get("alpn")
        if alpn or protocol == "hysteria2":
            inbound["tls"]["alpn"] = alpn or ["h3"]
    elif security == "reality":
        stored = stream_settings["realitySettings"]
        host, _, port = stored["target"].rpartition(":")
        inbound["tls"] = {
            "enabled": True,
            "server_name": stored["serverNames"][0],
            "reality": {
                "enabled": True,
                "handshake": {"server": host, "server_port": int(port)},
                "private_key": stored["privateKey"],
                "short_id": stored["shortIds"],
            },
        }
    network = stream_settings.get("network", "tcp")
    if network == "ws":
        inbound["transport"] = {"type": "ws", "path": stream_settings["wsSettings"]["path"]}
    elif network == "grpc":
        service = stream_settings["grpcSettings"]["serviceName"]
        inbound["transport"] = {"type": "grpc", "service_name": service}
    elif network == "httpupgrade":
        inbound["transport"] = {
            "type": "httpupgrade",
            "path": stream_settings["httpupgradeSettings"]["path"],
        }
    return inbound


@contextlib.contextmanager
def tls_site(certificates: Certificates = CERTS) -> Iterator[int]:
    """A TLS 1.3 server on loopback: the site a REALITY server borrows its handshake from
    (what `realitySettings.target` names); yields its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    with tempfile.NamedTemporaryFile("w", suffix=".pem") as handle:
        handle.write(certificates.cert_pem + certificates.key_pem)
        handle.flush()
        context.load_cert_chain(handle.name)

    def serve(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), context.wrap_socket(conn, server_side=True) as tls:
            while tls.recv(65536):
                pass

    with serving(serve, timeout=10) as port:
        yield port
