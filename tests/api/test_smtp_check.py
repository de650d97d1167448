"""setting/testSmtp against real SMTP servers (aiosmtpd) on loopback.

The panel runs with `SSL_CERT_FILE` naming this module's self-signed certificate, so its
TLS verification is real: it trusts that server and no other. Each case saves the SMTP
settings through the API, asks for a test mail and checks the answer's stage and message,
and, on success, the mail the server received.
"""

from __future__ import annotations

import ipaddress
import ssl
from email import message_from_bytes

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from helpers import free_port, ok, self_signed_certificate, write_certificate, write_key
from panels import start_panel

TEST_SMTP = "/panel/api/setting/testSmtp"
SETTINGS = "/panel/api/setting/update"
USER, PASSWORD = "mailer", "s3cret-pass"
SENDER = "panel@example.org"
REFUSED_RECIPIENT = "nobody@example.org"


class Mailbox:
    """aiosmtpd handler: keeps what arrives, refuses one recipient."""

    def __init__(self):
        self.messages: list[tuple[str, list[str], bytes]] = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address == REFUSED_RECIPIENT:
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 Message accepted"


def authenticator(server, session, envelope, mechanism, auth_data):
    valid = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login == USER.encode()
        and auth_data.password == PASSWORD.encode()
    )
    return AuthResult(success=valid, handled=False)


def certificate_files(directory, name: str) -> tuple[str, str]:
    key, certificate = self_signed_certificate(
        name, x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    )
    return (
        write_certificate(directory / f"{name}.pem", certificate),
        write_key(directory / f"{name}.key", key),
    )


def tls_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context


class MailServers:
    """Four servers: plain, STARTTLS, implicit TLS, and STARTTLS with a certificate the
    panel does not trust."""

    def __init__(self, directory):
        trusted = certificate_files(directory, "trusted")
        untrusted = certificate_files(directory, "untrusted")
        self.ca_file = trusted[0]
        self.mailbox = Mailbox()
        common = {"authenticator": authenticator, "auth_require_tls": False}
        self.controllers = {
            "plain": Controller(self.mailbox, "127.0.0.1", free_port(), **common),
            "starttls": Controller(
                self.mailbox,
                "127.0.0.1",
                free_port(),
                tls_context=tls_context(*trusted),
                **common,
            ),
            "tls": Controller(
                self.mailbox,
                "127.0.0.1",
                free_port(),
                ssl_context=tls_context(*trusted),
                **common,
            ),
            "untrusted": Controller(
                self.mailbox,
                "127.0.0.1",
                free_port(),
                tls_context=tls_context(*untrusted),
                **common,
            ),
        }
        for controller in self.controllers.values():
            controller.start()

    def port(self, name: str) -> int:
        return self.controllers[name].port

    def stop(self) -> None:
        for controller in self.controllers.values():
            controller.stop()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    mail = MailServers(tmp_path_factory.mktemp("smtp"))
    yield mail
    mail.stop()


@pytest.fixture(scope="module")
def smtp_api(tmp_path_factory, servers):
    panel = start_panel(
        tmp_path_factory.mktemp("smtp-panel"), env={"SSL_CERT_FILE": servers.ca_file}
    )
    yield panel.client()
    panel.stop()


def configure(api, **values) -> None:
    settings = {
        "smtpHost": "127.0.0.1",
        # The test's mail servers run on loopback: opted in, as an admin would.
        "allowPrivateDestinations": "smtpHost",
        "smtpUsername": USER,
        "smtpPassword": PASSWORD,
        "smtpFrom": SENDER,
        **values,
    }
    ok(api.post(SETTINGS, settings))


def ask_for_test_mail(api) -> dict:
    reply = api.post(TEST_SMTP)
    assert set(reply) == {"success", "stage", "msg", "obj"}, reply
    assert reply["obj"] is None
    assert PASSWORD not in reply["msg"]
    return reply


def failed_at(reply: dict, stage: str, *words: str) -> None:
    assert reply["success"] is False, reply
    assert reply["stage"] == stage, reply
    for word in words:
        assert word in reply["msg"], (word, reply["msg"])


@pytest.mark.parametrize("security", ["none", "starttls", "tls"])
def test_a_test_mail_arrives(smtp_api, servers, security):
    server = {"none": "plain", "starttls": "starttls", "tls": "tls"}[security]
    configure(smtp_api, smtpPort=servers.port(server), smtpSecurity=security)
    before = len(servers.mailbox.messages)
    reply = ask_for_test_mail(smtp_api)
    assert reply["success"] is True, reply
    assert reply["stage"] == "send"
    assert SENDER in reply["msg"]
    assert len(servers.mailbox.messages) == before + 1
    mail_from, recipients, content = servers.mailbox.messages[-1]
    assert mail_from == SENDER
    assert recipients == [SENDER]
    assert message_from_bytes(content)["Subject"] == "Panel SMTP test"


def test_without_a_username_there_is_no_auth(smtp_api, servers):
    configure(smtp_api, smtpPort=servers.port("plain"), smtpSecurity="none", smtpUsername="")
    assert ask_for_test_mail(smtp_api)["success"] is True


def test_connect_fails_on_a_closed_port(smtp_api):
    configure(smtp_api, smtpPort=free_port(), smtpSecurity="none")
    failed_at(ask_for_test_mail(smtp_api), "connect", "cannot talk to 127.0.0.1", "refused")


def test_connect_fails_when_starttls_is_not_offered(smtp_api, servers):
    configure(smtp_api, smtpPort=servers.port("plain"), smtpSecurity="starttls")
    failed_at(ask_for_test_mail(smtp_api), "connect", "does not offer STARTTLS")


def test_connect_fails_on_an_untrusted_certificate(smtp_api, servers):
    configure(smtp_api, smtpPort=servers.port("untrusted"), smtpSecurity="starttls")
    failed_at(ask_for_test_mail(smtp_api), "connect", "not trusted")


def test_connect_fails_when_tls_meets_a_plain_server(smtp_api, servers):
    configure(smtp_api, smtpPort=servers.port("plain"), smtpSecurity="tls")
    failed_at(ask_for_test_mail(smtp_api), "connect", "cannot talk to")


def test_connect_fails_without_a_host(smtp_api):
    configure(smtp_api, smtpHost="")
    failed_at(ask_for_test_mail(smtp_api), "connect", "smtpHost is empty")


def test_auth_fails_on_a_wrong_password(smtp_api, servers):
    configure(
        smtp_api, smtpPort=servers.port("starttls"), smtpSecurity="starttls", smtpPassword="nope"
    )
    failed_at(ask_for_test_mail(smtp_api), "auth", "refused the username 'mailer'", "535")


def test_send_fails_when_the_recipient_is_refused(smtp_api, servers):
    configure(
        smtp_api, smtpPort=servers.port("plain"), smtpSecurity="none", smtpFrom=REFUSED_RECIPIENT
    )
    before = len(servers.mailbox.messages)
    failed_at(ask_for_test_mail(smtp_api), "send", "refused the recipient", "550")
    assert len(servers.mailbox.messages) == before


def test_send_fails_without_a_sender(smtp_api, servers):
    configure(smtp_api, smtpPort=servers.port("plain"), smtpSecurity="none", smtpFrom="")
    failed_at(ask_for_test_mail(smtp_api), "send", "smtpFrom is empty")
