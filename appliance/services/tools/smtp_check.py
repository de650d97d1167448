"""`setting/testSmtp`: send one test mail with the saved SMTP settings and say where it
stopped.

Why this module exists: mail that never arrives gives its owner nothing to go on. The
test walks the same three stages a real notification takes and names the one that failed:
`connect` (TCP, the greeting, EHLO, and TLS: implicit for `smtpSecurity` tls, STARTTLS
for starttls, none for none), `auth` (LOGIN with smtpUsername and smtpPassword, skipped
when no username is set) and `send` (MAIL FROM smtpFrom, RCPT TO the same address, DATA).
Certificates are verified against the system's trust store (which `SSL_CERT_FILE`
extends): a test that passed over a forged certificate would be worse than none. The
connection goes through the egress guard on behalf of `smtpHost`: the mail server's name
is resolved and checked once and the connection made to that address, while TLS still
names the host.

The answer is `{success, stage, msg}` (the route adds the envelope's empty `obj`); on
success `stage` is `send`, the last one passed.
The password never appears in a message.
"""

from __future__ import annotations

import smtplib
import socket
import ssl
import time
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from appliance.runtime.egress import DestinationRefused, Egress, for_host

SMTP_TIMEOUT = 15


class StageFailed(Exception):
    def __init__(self, stage: str, msg: str):
        super().__init__(msg)
        self.stage = stage
        self.msg = msg


def check_smtp(settings, timeout: float = SMTP_TIMEOUT) -> dict:
    """Send a test mail with the saved settings; returns `{success, stage, msg}`."""
    host = settings.get("smtpHost").strip()
    port = settings.get("smtpPort")
    security = settings.get("smtpSecurity")
    if not host:
        return _result(False, "connect", "smtpHost is empty: set the mail server first")
    where = f"{host}:{port}"
    try:
        client = _connect(for_host(settings, "smtpHost", host, port), host, port, security, timeout)
        try:
            username = settings.get("smtpUsername")
            if username:
                _login(client, username, settings.get("smtpPassword"), where)
            sender = _sender(settings)
            _send(client, sender, where)
        finally:
            _close(client)
    except StageFailed as failure:
        return _result(False, failure.stage, failure.msg)
    security_text = {"tls": "over TLS", "starttls": "after STARTTLS", "none": "unencrypted"}
    return _result(
        True,
        "send",
        f"test mail sent through {where} ({security_text.get(security, security)}) to {sender}",
    )


class _CheckedSMTP(smtplib.SMTP):
    """SMTP whose connection goes to an address the egress guard checked."""

    def __init__(self, egress: Egress, host: str, port: int, **options):
        self.egress = egress
        super().__init__(host, port, **options)

    def _get_socket(self, host, port, timeout):
        return self.egress.connect(host, port, timeout)


class _CheckedSMTPSSL(smtplib.SMTP_SSL, _CheckedSMTP):
    """Implicit TLS over the checked connection; the certificate must name the host."""

    def __init__(self, egress: Egress, host: str, port: int, **options):
        # SMTP_SSL calls SMTP.__init__ by name, which connects: the guard comes first.
        self.egress = egress
        smtplib.SMTP_SSL.__init__(self, host, port, **options)


def _connect(egress: Egress, host: str, port: int, security: str, timeout: float) -> smtplib.SMTP:
    where = f"{host}:{port}"
    context = ssl.create_default_context()
    client: smtplib.SMTP | None = None
    try:
        if security == "tls":
            client = _CheckedSMTPSSL(egress, host, port, timeout=timeout, context=context)
        else:
            client = _CheckedSMTP(egress, host, port, timeout=timeout)
        client.ehlo()
        if security == "starttls":
            if not client.has_extn("starttls"):
                raise StageFailed(
                    "connect",
                    f"{where} does not offer STARTTLS; choose smtpSecurity tls or none to match it",
                )
            client.starttls(context=context)
            client.ehlo()
    except StageFailed:
        _close(client)
        raise
    except DestinationRefused as exc:
        raise StageFailed("connect", exc.msg) from None
    except ssl.SSLCertVerificationError as exc:
        _close(client)
        raise StageFailed(
            "connect", f"the certificate of {where} is not trusted: {exc.verify_message}"
        ) from None
    except (smtplib.SMTPException, OSError) as exc:
        _close(client)
        raise StageFailed("connect", f"cannot talk to {where}: {_reason(exc)}") from None
    return client


def _login(client: smtplib.SMTP, username: str, password: str, where: str) -> None:
    try:
        client.login(username, password)
    except smtplib.SMTPAuthenticationError as exc:
        raise StageFailed(
            "auth", f"{where} refused the username {username!r} or its password: {_reason(exc)}"
        ) from None
    except (smtplib.SMTPException, OSError) as exc:
        raise StageFailed("auth", f"signing in to {where} failed: {_reason(exc)}") from None


def _sender(settings) -> str:
    sender = settings.get("smtpFrom").strip()
    if not sender and "@" in settings.get("smtpUsername"):
        sender = settings.get("smtpUsername").strip()
    if not sender:
        raise StageFailed("send", "smtpFrom is empty: set the address mail is sent from")
    return sender


def _send(client: smtplib.SMTP, sender: str, where: str) -> None:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = sender
    message["Subject"] = "Panel SMTP test"
    message["Date"] = formatdate(localtime=True)
    message["Message-ID"] = make_msgid()
    message.set_content(
        "This message was sent by the panel's SMTP test at "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %z')}. Notifications will arrive this way.\n"
    )
    try:
        client.send_message(message)
    except smtplib.SMTPRecipientsRefused as exc:
        code, text = next(iter(exc.recipients.values()))
        raise StageFailed(
            "send", f"{where} refused the recipient {sender}: {code} {_decode(text)}"
        ) from None
    except smtplib.SMTPSenderRefused as exc:
        refusal = f"{exc.smtp_code} {_decode(exc.smtp_error)}"
        raise StageFailed("send", f"{where} refused the sender {sender}: {refusal}") from None
    except (smtplib.SMTPException, OSError) as exc:
        raise StageFailed("send", f"{where} did not take the message: {_reason(exc)}") from None


def _close(client: smtplib.SMTP | None) -> None:
    if client is None:
        return
    try:
        client.quit()
    except (smtplib.SMTPException, OSError):
        client.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{exc.smtp_code} {_decode(exc.smtp_error)}"
    if isinstance(exc, socket.gaierror):
        return "the host name does not resolve"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def _decode(text: bytes | str) -> str:
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def _result(success: bool, stage: str, msg: str) -> dict:
    return {"success": success, "stage": stage, "msg": msg}
