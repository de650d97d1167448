"""Trust between panels, against real panels on loopback.

The node serves its panel port over TLS with a self-signed certificate from its own
certificate folder. The central panel reads the certificate's fingerprint without
verifying it, reaches the node pinned to it, and is refused with a sentence (and sends
nothing) when the pin is wrong, when the pinned certificate has expired and when only the
system's CA store is asked. With mTLS the central panel mints a CA whose client
certificate it presents; once the node trusts that CA (after a restart), a call with a
node token must come with that certificate. A third panel plays a second managing panel
without it, and then a node of the node, for the tree `server/descendants` lists. How
node tokens are kept at rest is tests/nodes/test_node_tokens_api.py.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import os
import stat
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from helpers import (
    certs_dir,
    free_port,
    ok,
    refused,
    self_signed_certificate,
    write_key,
)
from node_panels import NODES, add_node, connection
from panels import ApiClient, PanelServer, backend, start_panel, stop_and_drop

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

SERVER = "/panel/api/server"
SETTINGS = "/panel/api/setting"
RESTART_WAIT = 40
TREE_WAIT = 30


def certificate(
    days_from: int, days_to: int, issuer: tuple | None = None
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate for 127.0.0.1, valid between the two day offsets: self-signed, or
    signed by `issuer` (a key and its CA certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    signer, issuer_name = (key, name) if issuer is None else (issuer[0], issuer[1].subject)
    built = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=days_from))
        .not_valid_after(now + datetime.timedelta(days=days_to))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(signer, hashes.SHA256())
    )
    return key, built


def authority_certificate() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A CA of the tests' own, which one panel is started trusting (SSL_CERT_FILE)."""
    return self_signed_certificate("test CA", ca=True)


def fingerprint_of(cert: x509.Certificate) -> str:
    return base64.b64encode(
        hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()
    ).decode()


def tls_client(server: PanelServer, login: bool = True) -> ApiClient:
    """A signed-in session to a panel whose certificate is self-signed (not verified)."""
    client = ApiClient(server.url)
    client.http.trust_env = False
    client.http.verify = False
    if login:
        client.sign_in(server.username, server.password)
    return client


def tls_token(node: PanelServer, name: str, scope: str = "node") -> str:
    """An API token created on the TLS node."""
    body = {"name": name, "scope": scope}
    return ok(tls_client(node).post(f"{SETTINGS}/apiTokens/create", body))["token"]


def serve_certificate(
    node: PanelServer, days_from: int = -1, days_to: int = 30, issuer: tuple | None = None
) -> x509.Certificate:
    """Write a fresh certificate into the node's certificate folder, have its panel port
    use it and restart the node; returns the certificate."""
    key, cert = certificate(days_from, days_to, issuer)
    folder = certs_dir(node)
    cert_file = folder / "panel.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file = write_key(folder / "panel.key", key)
    admin = tls_client(node) if node.url.startswith("https") else node.client()
    ok(admin.post(f"{SETTINGS}/update", {"webCertFile": str(cert_file), "webKeyFile": key_file}))
    restart(node, admin)
    assert node.url.startswith("https://")
    return cert


def restart(server: PanelServer, admin: ApiClient) -> None:
    mark = len(server.lines)
    ok(admin.post(f"{SETTINGS}/restartPanel"))
    server.wait_listening(mark, timeout=RESTART_WAIT)


def node_status(node: PanelServer) -> dict:
    return ok(tls_client(node).get(f"{SERVER}/status"))


@pytest.fixture(scope="module")
def panels(tmp_path_factory):
    """The TLS node (on a fixed port, kept across its restarts), the central panel and a
    third panel."""
    node = start_panel(tmp_path_factory.mktemp("node"), "--port", str(free_port()))
    central = start_panel(tmp_path_factory.mktemp("central"))
    authority = authority_certificate()
    store = tmp_path_factory.mktemp("store") / "ca.pem"
    store.write_bytes(authority[1].public_bytes(serialization.Encoding.PEM))
    third = start_panel(tmp_path_factory.mktemp("third"), env={"SSL_CERT_FILE": str(store)})
    state = {"cert": serve_certificate(node), "authority": authority}
    yield central, node, third, state
    for server in (central, node, third):
        stop_and_drop(server)


def test_the_fingerprint_is_read_without_verification_and_saves_nothing(panels):
    central, node, _, state = panels
    api = central.client()
    token = tls_token(node, "fingerprint")
    seen = ok(api.post(f"{NODES}/certFingerprint", connection(node, token)))
    assert seen == fingerprint_of(state["cert"])
    assert ok(api.get(f"{NODES}/list")) == []
    # Reading the certificate called no route of the node: it knows no managing panel yet.
    assert node_status(node)["parentGuid"] == ""


def test_a_wrong_pin_is_refused_before_anything_is_sent_and_the_right_one_works(panels):
    central, node, _, state = panels
    api = central.client()
    _, other = certificate(-1, 30)
    wrong = fingerprint_of(other)
    token = tls_token(node, "central")
    added = add_node(api, node, "tls", token, tlsVerifyMode="pin", certFingerprint=wrong)
    assert added["status"] == "error", added
    assert f"not the pinned {wrong}" in added["lastError"]
    assert "nothing was sent" in added["lastError"]
    assert node_status(node)["parentGuid"] == ""
    state["id"] = added["id"]
    body = {**connection(node, ""), "name": "tls", "tlsVerifyMode": "pin"}
    right = fingerprint_of(state["cert"])
    updated = ok(api.post(f"{NODES}/update/{added['id']}", {**body, "certFingerprint": right}))
    assert updated["status"] == "online", updated
    assert updated["certFingerprint"] == right
    central_guid = ok(api.get(f"{SERVER}/status"))["guid"]
    assert node_status(node)["parentGuid"] == central_guid


def test_the_system_store_refuses_a_self_signed_certificate(panels):
    central, node, _, _ = panels
    api = central.client()
    token = tls_token(node, "system")
    snapshot = ok(api.post(f"{NODES}/test", connection(node, token, tlsVerifyMode="system")))
    assert snapshot["status"] == "error"
    assert "does not trust" in snapshot["lastError"]
    assert "tlsVerifyMode pin" in snapshot["lastError"]


def test_web_cert_is_read_from_the_node(panels):
    central, node, _, state = panels
    api = central.client()
    paths = ok(api.get(f"{NODES}/webCert/{state['id']}"))
    assert paths == ok(tls_client(node).get(f"{SERVER}/getWebCertFiles"))
    assert paths["webCertFile"] == str(certs_dir(node) / "panel.pem")
    refused(api.get(f"{NODES}/webCert/99999"), "node 99999 not found")
    refused(api.get(f"{NODES}/webCert/x"), "node id")


def test_an_expired_pinned_certificate_is_refused(panels):
    central, node, _, state = panels
    api = central.client()
    expired = serve_certificate(node, days_from=-60, days_to=-1)
    try:
        pin = ok(api.post(f"{NODES}/certFingerprint", connection(node, "apl_unused")))
        assert pin == fingerprint_of(expired)
        body = {**connection(node, ""), "name": "tls", "tlsVerifyMode": "pin"}
        updated = ok(api.post(f"{NODES}/update/{state['id']}", {**body, "certFingerprint": pin}))
        assert updated["status"] == "error"
        assert "expired on" in updated["lastError"] and "nothing was sent" in updated["lastError"]
    finally:
        state["cert"] = serve_certificate(node)
    body = {**connection(node, ""), "name": "tls", "tlsVerifyMode": "pin"}
    pin = fingerprint_of(state["cert"])
    assert (
        ok(api.post(f"{NODES}/update/{state['id']}", {**body, "certFingerprint": pin}))["status"]
        == "online"
    )


def test_the_mtls_ca_is_minted_once_and_kept_private(panels):
    central, _, _, state = panels
    api = central.client()
    pem = ok(api.post(f"{NODES}/mtls/ca"))["caCert"]
    assert pem.startswith("-----BEGIN CERTIFICATE-----")
    assert ok(api.post(f"{NODES}/mtls/ca"))["caCert"] == pem
    folder = Path(central.data_dir) / "mtls"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for key in ("ca.key", "client.key"):
        assert stat.S_IMODE((folder / key).stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate(pem.encode())
    client = x509.load_pem_x509_certificate((folder / "client.pem").read_bytes())
    client.verify_directly_issued_by(ca)
    assert not any("ca.key" in name for name in os.listdir(central.data_dir))
    state["ca"] = pem
    # A CA that cannot be read is never replaced behind the nodes' back. On a networked
    # database the CA is the one its instances share, and the copy is made whole from it.
    key_bytes = (folder / "ca.key").read_bytes()
    (folder / "ca.key").write_bytes(b"damaged")
    try:
        if backend["kind"] == "sqlite":
            refused(api.post(f"{NODES}/mtls/ca"), "cannot be read", "not replaced")
        else:
            assert ok(api.post(f"{NODES}/mtls/ca"))["caCert"] == pem
            assert (folder / "ca.key").read_bytes() == key_bytes
        assert (folder / "ca.pem").read_text() == pem
    finally:
        (folder / "ca.key").write_bytes(key_bytes)
    assert ok(api.post(f"{NODES}/mtls/ca"))["caCert"] == pem


@pytest.mark.parametrize(
    ("ca_cert", "words"),
    [
        ("not a certificate", ("not a PEM certificate",)),
        (42, ("caCert must be a string",)),
        ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----", ("cannot be read",)),
        ("PRIVATE", ("private key",)),
        ("LEAF", ("not a CA certificate",)),
    ],
)
def test_trust_ca_refuses_what_is_not_a_ca_certificate(panels, ca_cert, words):
    _, node, _, _ = panels
    if ca_cert == "PRIVATE":
        key, _ = certificate(-1, 1)
        ca_cert = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
    elif ca_cert == "LEAF":
        ca_cert = (certs_dir(node) / "panel.pem").read_text()
    refused(tls_client(node).post(f"{NODES}/mtls/trustCA", {"caCert": ca_cert}), *words)
    assert not (Path(node.data_dir) / "mtls" / "trusted-ca.pem").exists()


def test_trust_ca_on_a_plain_http_panel_says_node_tokens_will_be_refused(panels):
    central, _, third, _ = panels
    ca_cert = ok(central.client().post(f"{NODES}/mtls/ca"))["caCert"]
    admin = third.client()
    reply = admin.post(f"{NODES}/mtls/trustCA", {"caCert": ca_cert})
    assert reply["success"] is True and "plain HTTP" in reply["msg"], reply
    emptied = admin.post(f"{NODES}/mtls/trustCA", {"caCert": ""})
    assert emptied["success"] is True and "plain HTTP" not in emptied["msg"]
    assert not (Path(third.data_dir) / "mtls" / "trusted-ca.pem").exists()


def test_with_mtls_a_node_token_needs_the_managing_panels_client_certificate(panels):
    central, node, third, state = panels
    api = central.client()
    admin = tls_client(node)
    reply = admin.post(f"{NODES}/mtls/trustCA", {"caCert": state["ca"]})
    assert reply["success"] and "restarts" in reply["msg"]
    # Stored, not yet applied: a panel without a client certificate still gets through.
    token = tls_token(node, "second-manager")
    pin = fingerprint_of(state["cert"])
    pinned = connection(node, token, tlsVerifyMode="pin", certFingerprint=pin)
    third_api = third.client()
    assert ok(third_api.post(f"{NODES}/test", pinned))["status"] == "online"
    restart(node, admin)
    refusal = ok(api.post(f"{NODES}/probe/{state['id']}"))
    assert refusal["status"] == "error"
    assert "client certificate" in refusal["lastError"], refusal
    body = {**connection(node, ""), "name": "tls", "tlsVerifyMode": "mtls", "certFingerprint": pin}
    assert ok(api.post(f"{NODES}/update/{state['id']}", body))["status"] == "online"
    # A second managing panel: without a client certificate the node says what it wants;
    # with one its own CA signed, the node ends the handshake.
    without = ok(third_api.post(f"{NODES}/test", pinned))
    assert without["status"] == "error" and "client certificate" in without["lastError"]
    foreign = ok(third_api.post(f"{NODES}/test", {**pinned, "tlsVerifyMode": "mtls"}))
    assert foreign["status"] == "error"
    assert "refused the TLS connection" in foreign["lastError"], foreign
    # Browsers and admin tokens need no client certificate.
    assert ok(tls_client(node).get(f"{SERVER}/status"))["guid"]
    admin_token = tls_token(node, "admin-token", scope="admin")
    reply = tls_client(node, login=False).get(
        f"{SERVER}/status", headers={"Authorization": f"Bearer {admin_token}"}
    )
    assert reply["success"] is True
    # Emptied, and restarted: the node no longer asks.
    ok(admin.post(f"{NODES}/mtls/trustCA", {"caCert": ""}))
    assert not (Path(node.data_dir) / "mtls" / "trusted-ca.pem").exists()
    restart(node, admin)
    assert ok(third_api.post(f"{NODES}/test", pinned))["status"] == "online"
    assert ok(api.post(f"{NODES}/probe/{state['id']}"))["status"] == "online"


def test_descendants_list_the_whole_tree(panels):
    central, node, third, state = panels
    api = central.client()
    node_api = tls_client(node)
    child = add_node(node_api, third, "child")
    assert child["status"] == "online", child
    guids = {
        name: ok(client.get(f"{SERVER}/status"))["guid"]
        for name, client in (("central", api), ("node", node_api), ("child", third.client()))
    }
    assert ok(third.client().get(f"{SERVER}/descendants")) == []
    own = ok(node_api.get(f"{SERVER}/descendants"))
    assert [(e["guid"], e["parentGuid"], e["name"]) for e in own] == [
        (guids["child"], guids["node"], "child")
    ]

    # The child is listed as soon as the node stores it, before the node's first probe of
    # it has filled in its guid and status: wait for both entries online.
    def whole(tree: list[dict]) -> bool:
        return len(tree) == 2 and all(e["guid"] and e["status"] == "online" for e in tree)

    tree = eventually(api, whole)
    assert [(e["guid"], e["parentGuid"], e["name"], e["status"]) for e in tree] == [
        (guids["node"], guids["central"], "tls", "online"),
        (guids["child"], guids["node"], "child", "online"),
    ]
    assert tree[0]["address"] == "127.0.0.1"
    version = ok(api.get(f"{SERVER}/status"))["panelVersion"]
    assert tree[1]["versions"]["panel"] == version
    assert tree[0]["versions"]["panel"] == version
    state["guids"] = guids


def eventually(api: ApiClient, done) -> list[dict]:
    """The central panel's descendants once `done` says so (the tree is refreshed beside
    the heartbeat), or as they are when the wait ends."""
    deadline = time.monotonic() + TREE_WAIT
    while True:
        tree = ok(api.get(f"{SERVER}/descendants"))
        if done(tree) or time.monotonic() > deadline:
            return tree
        time.sleep(0.5)


def test_two_panels_managing_each_other_list_each_panel_once(panels):
    central, node, _, state = panels
    api = central.client()
    guids = state["guids"]
    node_api = tls_client(node)
    loop = add_node(node_api, central, "back-to-central")
    try:
        node_tree = ok(node_api.get(f"{SERVER}/descendants"))
        assert [e["guid"] for e in node_tree][:2] == [guids["child"], guids["central"]]
        time.sleep(12)  # two rounds of refreshes on both panels
        for _ in range(2):
            tree = ok(api.get(f"{SERVER}/descendants"))
            assert [e["guid"] for e in tree] == [guids["node"], guids["child"]], tree
            time.sleep(5)
    finally:
        ok(node_api.post(f"{NODES}/del/{loop['id']}"))


def test_a_disabled_node_takes_its_subtree_out_of_the_list(panels):
    central, _, _, state = panels
    api = central.client()
    ok(api.post(f"{NODES}/setEnable/{state['id']}", {"enable": False}))
    try:
        wanted = [(state["guids"]["node"], "disabled")]
        tree = eventually(api, lambda tree: [(e["guid"], e["status"]) for e in tree] == wanted)
        assert [(e["guid"], e["status"]) for e in tree] == wanted
    finally:
        enabled = ok(api.post(f"{NODES}/setEnable/{state['id']}", {"enable": True}))
    assert enabled["status"] == "online"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, ("ids",)),
        ({"ids": []}, ("ids",)),
        ({"ids": ["1"]}, ("positive integers",)),
        ({"ids": [True]}, ("positive integers",)),
        ({"ids": 3}, ("ids",)),
    ],
)
def test_update_panel_refuses_bad_ids(panels, body, words):
    central, _, _, _ = panels
    refused(central.client().post(f"{NODES}/updatePanel", body), *words)


def test_update_panel_asks_each_online_node_and_reports_per_item(panels):
    central, _, third, state = panels
    api = central.client()
    nowhere = connection(third, "apl_" + "1" * 43, port=free_port())
    disabled = ok(api.post(f"{NODES}/add", {"name": "paused", **nowhere}))
    ok(api.post(f"{NODES}/setEnable/{disabled['id']}", {"enable": False}))
    offline = ok(api.post(f"{NODES}/add", {"name": "gone", **nowhere}))
    assert offline["status"] == "offline"
    ids = [state["id"], disabled["id"], offline["id"], 99999, state["id"]]
    items = ok(api.post(f"{NODES}/updatePanel", {"ids": ids}))
    assert [(i["id"], i["name"], i["ok"]) for i in items] == [
        (state["id"], "tls", False),
        (disabled["id"], "paused", False),
        (offline["id"], "gone", False),
        (99999, "", False),
    ]
    # The node was asked through its own update route, and said why it cannot update.
    assert "upgrade it with pip" in items[0]["error"], items[0]
    assert items[1]["error"].startswith("node offline")
    assert items[2]["error"].startswith("node offline")
    assert items[3]["error"] == "node 99999 not found"


def test_a_node_certificate_of_a_trusted_ca_passes_system_and_mtls_without_a_pin(panels):
    """The third panel's system store holds the tests' CA, which signed the node's new
    certificate: verified by the store, with and without this panel's client certificate."""
    _, node, third, state = panels
    serve_certificate(node, issuer=state["authority"])
    admin = tls_client(node)
    third_api = third.client()
    verified = connection(node, tls_token(node, "system-ca"), tlsVerifyMode="system")
    assert ok(third_api.post(f"{NODES}/test", verified))["status"] == "online"
    ok(
        admin.post(
            f"{NODES}/mtls/trustCA", {"caCert": ok(third_api.post(f"{NODES}/mtls/ca"))["caCert"]}
        )
    )
    restart(node, admin)
    without = ok(third_api.post(f"{NODES}/test", verified))
    assert without["status"] == "error" and "client certificate" in without["lastError"]
    mutual = {**verified, "tlsVerifyMode": "mtls"}
    assert ok(third_api.post(f"{NODES}/test", mutual))["status"] == "online"
