"""TLS of the panel's two doors at start: the certificate pairs of the settings and the
CA a managing panel asked this one to trust.

Each falls back to something that keeps the way in open rather than refusing to start:
only the panel itself can change these settings, so a start that failed on them would
lock its owner out for good.
"""

from __future__ import annotations

import logging
import ssl

from appliance.errors import ServiceError
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.nodes.trust import MutualTls
from appliance.web.server import ask_client_certificates, tls_context

log = logging.getLogger(__name__)


def door_tls(settings: Settings, places: FilePlaces, door: str) -> ssl.SSLContext | None:
    """The TLS context of the `web` (panel) or `sub` (subscription) port from its
    certificate pair in the settings, or None for plain HTTP.

    A stored pair was valid when saved, but the files can change on disk before the
    next start (a renewal gone wrong, a deleted key), and a pair stored by an older
    release or an imported backup may lie outside the certificate directories, which
    is not read (services.file_paths). Serving plain HTTP with an error in the log keeps
    the way in open, as peer panels do."""
    cert_key, key_key = f"{door}CertFile", f"{door}KeyFile"
    certfile, keyfile = settings.get(cert_key), settings.get(key_key)
    if not certfile or not keyfile:
        return None
    try:
        for key, path in ((cert_key, certfile), (key_key, keyfile)):
            places.certificate(path, key)
        return tls_context(certfile, keyfile)
    except ServiceError as exc:
        log.error("%s; serving plain HTTP on that port until it is fixed", exc.msg)
        return None
    except OSError as exc:
        log.error(
            "%s %s and %s %s cannot be used (%s); serving plain HTTP on that port "
            "until they are fixed in the panel settings",
            cert_key,
            certfile,
            key_key,
            keyfile,
            exc,
        )
        return None


def trusted_ca(mtls: MutualTls) -> tuple[str, bool]:
    """The CA node-token callers must be signed by in this run ("" for none), and whether
    they must bring a certificate. One stored but unreadable still counts: such calls are
    refused (the log says why), never let through without the certificate the admin
    asked for."""
    try:
        trusted = mtls.trusted()
    except (OSError, ServiceError) as exc:
        log.error(
            "the managing panel's CA stored by nodes/mtls/trustCA cannot be read (%s); "
            "calls with a node token are refused until it is stored again",
            getattr(exc, "msg", None) or exc,
        )
        return "", True
    return trusted, bool(trusted)


def ask_for_node_certificates(context: ssl.SSLContext, ca_pem: str) -> None:
    """Have the panel port ask for client certificates signed by `ca_pem`; a CA that
    cannot be used leaves node-token calls refused, as the log says."""
    try:
        ask_client_certificates(context, ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        log.error(
            "the managing panel's CA stored by nodes/mtls/trustCA cannot be used (%s); "
            "calls with a node token are refused until it is stored again",
            exc,
        )
        return
    log.info("the panel port asks for client certificates signed by the managing panel's CA")
