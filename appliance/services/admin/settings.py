"""Panel settings: typed keys with defaults, validated as a whole before any write.

Settings live as key/value rows; only keys that differ from the default are stored, so
a new release can change a default without a migration. Values are cached in memory
(one process owns the database) and every read goes through `get()`.

Secrets (chat-bot token, SMTP password) never leave through `all()`: they come back as
`REDACTED`, and an update that sends `REDACTED` back keeps the stored value.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import zoneinfo
from typing import Any
from urllib.parse import urlsplit

from pony.orm import db_session, select

from appliance.core.template import default_template
from appliance.domain.parse import load_json
from appliance.errors import ServiceError
from appliance.runtime.egress import ALLOW_SETTING, parse_allowed
from appliance.runtime.file_paths import FilePlaces, check_paths
from appliance.services.admin.tgbot import parse_schedule

REDACTED = "********"

DEFAULTS: dict[str, Any] = {
    "webListen": "",
    "webDomain": "",
    # Host names the panel answers to, comma-separated; "*" for any. Empty: only webDomain
    # when it is set, any otherwise. Loopback and the listen address always work.
    "webAllowedHosts": "",
    "webPort": 2053,
    "webCertFile": "",
    "webKeyFile": "",
    "webBasePath": "/",
    "sessionMaxAge": 360,
    "trustedProxies": "",
    "pageSize": 25,
    "expireDiff": 3,  # days before expiry a client counts as "expiring"
    "trafficDiff": 1,  # GB of quota left below which a client counts as "expiring"
    "remarkModel": "-ieo",
    "timeLocation": "Local",
    "tgBotEnable": False,
    "tgBotToken": "",
    "tgBotChatId": "",
    "tgBotBackup": False,
    "tgRunTime": "@daily",
    "tgBotAPIServer": "",
    "ipLimitEnable": False,
    "smtpEnable": False,
    "smtpHost": "",
    "smtpPort": 587,
    "smtpUsername": "",
    "smtpPassword": "",
    "smtpFrom": "",
    "smtpSecurity": "starttls",
    "subEnable": True,
    "subListen": "",
    "subPort": 10882,
    "subPath": "/sub/",
    "subDomain": "",
    "subCertFile": "",
    "subKeyFile": "",
    "subUpdates": 12,
    "subTitle": "",
    "subSupportUrl": "",
    "subProfileUrl": "",
    "subAnnounce": "",
    "subEnableRouting": False,
    "subRoutingRules": "",
    "subJsonEnable": False,
    "subJsonPath": "/json/",
    "subYamlEnable": False,
    "subYamlPath": "/yaml/",
    "coreTemplate": "",
    "trafficInterval": 10,  # seconds between traffic ticks
    "auditRetentionDays": 90,  # audit log entries older than this are removed
    "outboundTestUrl": "https://www.google.com/generate_204",
    # Where installCore lists core releases (GitHub's releases API shape) and where
    # updateGeofile gets the geo files Xray's own release bundles.
    "coreReleaseUrl": "https://api.github.com/repos/XTLS/Xray-core/releases",
    "geoipUrl": "https://github.com/v2fly/geoip/releases/latest/download/geoip.dat",
    "geositeUrl": "https://github.com/v2fly/domain-list-community/releases/latest/download/dlc.dat",
    # Where getPanelUpdateInfo and updatePanel read the panel's own releases (GitHub's
    # releases API shape: a list, or one release); empty: updates are not offered.
    "panelUpdateUrl": "",
    # The settings (comma-separated; getRemoteCertHash too) whose own host may be a
    # loopback, private or link-local address: a mirror, Bot API server or mail relay on
    # this machine or the LAN. Empty: the panel connects to public addresses only.
    "allowPrivateDestinations": "",
}
SECRET_KEYS = frozenset({"tgBotToken", "smtpPassword"})
# Stored alongside settings but never part of the settings API.
INTERNAL_KEYS = frozenset({"sessionSecret", "panelGuid"})
PORT_KEYS = ("webPort", "subPort", "smtpPort")
PATH_KEYS = ("webBasePath", "subPath", "subJsonPath", "subYamlPath")
CERT_PAIRS = (("webCertFile", "webKeyFile"), ("subCertFile", "subKeyFile"))
CHOICES = {"smtpSecurity": ("none", "starttls", "tls")}
RANGES = {
    "sessionMaxAge": (1, 525_600),
    "pageSize": (1, 200),
    "expireDiff": (0, 3650),
    "trafficDiff": (0, 1_000_000),
    "subUpdates": (1, 8760),
    "trafficInterval": (1, 3600),
    "auditRetentionDays": (1, 3650),
}
PATH_SHAPE = re.compile(r"^/(?:[A-Za-z0-9._~-]+/)*$")
# Links handed to client apps, which open them: web addresses only.
WEB_URL_KEYS = ("subSupportUrl", "subProfileUrl")


class Settings:
    """Typed access to panel settings with an in-memory cache."""

    def __init__(self, store, places: FilePlaces):
        self.store = store
        # Where the certificate files and core logs the settings name may be.
        self.places = places
        self._values: dict[str, Any] = {}

    def load(self) -> None:
        with db_session:
            rows = select((s.key, s.value) for s in self.store.Setting)[:]
        self._values = {}
        for key, raw in rows:
            if key in DEFAULTS:
                self._values[key] = _decode(key, raw)
            elif key in INTERNAL_KEYS:
                self._values[key] = raw

    def get(self, key: str) -> Any:
        if key in self._values:
            return self._values[key]
        return DEFAULTS[key]

    def all(self) -> dict[str, Any]:
        """Every setting, secrets redacted, as `setting/all` returns it."""
        values = {key: self.get(key) for key in DEFAULTS}
        for key in SECRET_KEYS:
            if values[key]:
                values[key] = REDACTED
        return values

    def check(self, changes: Any) -> dict[str, Any]:
        """Validate `changes` against the whole resulting set; returns only the keys
        whose value changes, normalised. Writes nothing."""
        if not isinstance(changes, dict):
            raise ServiceError("settings must be a JSON object of setting names to values")
        candidate = {key: self.get(key) for key in DEFAULTS}
        for key, value in changes.items():
            if key not in DEFAULTS:
                raise ServiceError(f"unknown setting '{key}'")
            if key in SECRET_KEYS and value == REDACTED:
                continue
            candidate[key] = _coerce(key, value)
        validate(candidate, self.places)
        return {key: candidate[key] for key in DEFAULTS if candidate[key] != self.get(key)}

    def set_internal(self, key: str, value: str) -> None:
        if key not in INTERNAL_KEYS:
            raise KeyError(key)
        self.write({key: value})

    def internal(self, key: str) -> str:
        return self._values.get(key, "")

    def write(self, values: dict[str, Any]) -> None:
        """Store values that `check` returned (or internal ones)."""
        Setting = self.store.Setting
        with db_session:
            for key, value in values.items():
                raw = value if key in INTERNAL_KEYS else _encode(value)
                row = Setting.get(key=key)
                if key in DEFAULTS and value == DEFAULTS[key]:
                    if row:
                        row.delete()
                elif row:
                    row.value = raw
                else:
                    Setting(key=key, value=raw)
        self._values.update(values)


def core_template(settings: Settings) -> dict:
    """The stored core template, or the built-in one when none is stored."""
    raw = settings.get("coreTemplate")
    return json.loads(raw) if raw else default_template()


def _encode(value: Any) -> str:
    return json.dumps(value)


def _decode(key: str, raw: str) -> Any:
    try:
        value = json.loads(raw)
    except ValueError:
        return DEFAULTS[key]
    return value if type(value) is type(DEFAULTS[key]) else DEFAULTS[key]


def _coerce(key: str, value: Any) -> Any:
    default = DEFAULTS[key]
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise ServiceError(f"{key} must be true or false (got {json.dumps(value)})")
    if isinstance(default, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ServiceError(f"{key} must be an integer (got {json.dumps(value)})")
        return value
    if not isinstance(value, str):
        raise ServiceError(f"{key} must be a string (got {json.dumps(value)})")
    return value.strip() if key not in SECRET_KEYS else value


def validate(values: dict[str, Any], places: FilePlaces) -> None:
    """Every rule that spans keys or touches the filesystem, checked before any write."""
    for key in PORT_KEYS:
        if not 1 <= values[key] <= 65535:
            raise ServiceError(f"{key} must be from 1 to 65535 (got {values[key]})")
    if values["webPort"] == values["subPort"] and _same_listen(
        values["webListen"], values["subListen"]
    ):
        raise ServiceError(
            f"webPort and subPort are both {values['webPort']}; the panel and the "
            "subscription server need different ports"
        )
    for key, (low, high) in RANGES.items():
        if not low <= values[key] <= high:
            raise ServiceError(f"{key} must be from {low} to {high} (got {values[key]})")
    for key, allowed in CHOICES.items():
        if values[key] not in allowed:
            raise ServiceError(f"{key} must be one of {', '.join(allowed)} (got '{values[key]}')")
    for key in PATH_KEYS:
        values[key] = normalise_path(key, values[key])
    for key in ("webListen", "subListen"):
        if values[key]:
            try:
                ipaddress.ip_address(values[key])
            except ValueError:
                raise ServiceError(
                    f"{key} must be empty (all addresses) or an IP address (got '{values[key]}')"
                ) from None
    for key in WEB_URL_KEYS:
        if values[key]:
            check_web_url(key, values[key])
    parse_trusted_proxies(values["trustedProxies"])
    values[ALLOW_SETTING] = ",".join(parse_allowed(values[ALLOW_SETTING]))
    values["webAllowedHosts"] = ", ".join(parse_host_names(values["webAllowedHosts"]))
    parse_schedule(values["tgRunTime"])
    check_time_location(values["timeLocation"])
    for cert_key, key_key in CERT_PAIRS:
        check_cert_pair(cert_key, values[cert_key], key_key, values[key_key], places)
    if values["coreTemplate"]:
        template = load_json(values["coreTemplate"], "coreTemplate")
        if not isinstance(template, dict):
            raise ServiceError("coreTemplate must be a JSON object")
        check_paths(template, places)
        _check_template_tags(template)


# The core counts traffic per tag as "outbound>>>TAG>>>traffic>>>downlink", a name the
# panel keeps in a column of 255 characters (outbound tags also in one of their own).
TEMPLATE_TAG_MAX = 255 - len("outbound>>>>>>traffic>>>downlink")


def _check_template_tags(template: dict) -> None:
    for section in ("inbounds", "outbounds"):
        entries = template.get(section)
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            tag = entry.get("tag") if isinstance(entry, dict) else None
            if isinstance(tag, str) and len(tag) > TEMPLATE_TAG_MAX:
                raise ServiceError(
                    f"coreTemplate {section}[{index}].tag must be at most {TEMPLATE_TAG_MAX} "
                    f"characters (got {len(tag)} characters)"
                )


def normalise_path(key: str, path: str) -> str:
    """Paths are served as prefixes: give them one leading and one trailing slash."""
    path = path.strip() or "/"
    if not path.startswith("/"):
        path = "/" + path
    if not path.endswith("/"):
        path += "/"
    if not PATH_SHAPE.match(path) or "/../" in path or "/./" in path:
        raise ServiceError(
            f"{key} may hold only letters, digits and . _ ~ - between slashes, "
            f"like /panel/ (got '{path}')"
        )
    return path


def check_web_url(key: str, url: str) -> None:
    """An http(s) URL with a host, in one piece: no spaces or control characters, which
    could split the header it is sent in or hide what it points at."""
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise ServiceError(
            f"{key} may not contain spaces, line breaks or control characters "
            f"(got {json.dumps(url)})"
        )
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname
    except ValueError:  # an unclosed [ or a port out of range
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:
        raise ServiceError(
            f"{key} must be an http:// or https:// URL with a host name, like "
            f"https://support.example.com/ (got {json.dumps(url)})"
        )


HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$"
)


def parse_host_names(raw: str) -> list[str]:
    """webAllowedHosts as a list: lower-case host names and IP addresses, or `["*"]`."""
    names = []
    for item in filter(None, (part.strip().lower() for part in raw.split(","))):
        address = item[1:-1] if item.startswith("[") and item.endswith("]") else item
        if item == "*" or HOST_NAME.match(item):
            names.append(item.rstrip("."))
            continue
        try:
            names.append(str(ipaddress.ip_address(address)))
        except ValueError:
            raise ServiceError(
                "webAllowedHosts must be a comma-separated list of host names or IP "
                f"addresses without ports, or * for any (got {json.dumps(item)})"
            ) from None
    if "*" in names and len(names) > 1:
        raise ServiceError("webAllowedHosts: * allows every host; list no other name with it")
    return names


def allowed_host_names(allowed_hosts: str, web_domain: str) -> frozenset[str] | None:
    """The host names the panel answers to by its settings, None for any: the
    webAllowedHosts list, or webDomain alone when that list is empty."""
    names = parse_host_names(allowed_hosts)
    if names == ["*"]:
        return None
    if not names:
        domain = web_domain.strip().lower().rstrip(".")
        if not domain:
            return None
        names = [domain]
    return frozenset(names)


def parse_trusted_proxies(raw: str) -> list:
    networks = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ServiceError(
                f"trustedProxies must be a comma-separated list of IP addresses or networks "
                f"(got '{item}')"
            ) from None
    return networks


def check_time_location(name: str) -> None:
    """`Local` (the host's zone) or a zone name of the IANA database, never a path."""
    if name != "Local" and name not in zoneinfo.available_timezones():
        shown = name if len(name) <= 100 else name[:100] + "..."
        raise ServiceError(
            f"timeLocation must be Local or an IANA time zone name like Europe/Berlin "
            f"(got '{shown}')"
        )


def check_cert_pair(
    cert_key: str, cert_file: str, key_key: str, key_file: str, places: FilePlaces
) -> None:
    """Both empty, or both readable files in the certificate directories holding a
    certificate and its private key."""
    if not cert_file and not key_file:
        return
    # Imported here: `cryptography` costs 8 MB of an idle panel's memory, and only a
    # certificate pair needs it.
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if not cert_file or not key_file:
        missing = cert_key if not cert_file else key_key
        raise ServiceError(f"{cert_key} and {key_key} go together; {missing} is empty")
    for key, path in ((cert_key, cert_file), (key_key, key_file)):
        places.certificate(path, key)
        if not os.path.isfile(path):
            raise ServiceError(f"{key}: no such file '{path}'")
    try:
        with open(cert_file, "rb") as fh:
            cert = x509.load_pem_x509_certificates(fh.read())[0]
    except (OSError, ValueError):
        raise ServiceError(f"{cert_key}: '{cert_file}' is not a PEM certificate") from None
    try:
        with open(key_file, "rb") as fh:
            key = serialization.load_pem_private_key(fh.read(), password=None)
    except (OSError, ValueError, TypeError):
        raise ServiceError(
            f"{key_key}: '{key_file}' is not an unencrypted PEM private key"
        ) from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if key.public_key().public_bytes(encoding, public) != cert.public_key().public_bytes(
        encoding, public
    ):
        raise ServiceError(f"{key_key} does not belong to the certificate in {cert_key}")


def _same_listen(a: str, b: str) -> bool:
    return a == b or not a or not b or a in ("0.0.0.0", "::") or b in ("0.0.0.0", "::")
