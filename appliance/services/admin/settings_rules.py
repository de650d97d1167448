"""What one setting's value may be: the rules the settings table names per setting.

A rule is a function `(name, value) -> value`: it returns the value to store (some
normalise it, like paths that get their slashes) or raises a ServiceError that says what
is wrong. `Range` and `OneOf` are rules that also describe themselves, so the settings
reference shows the allowed values from the same object that enforces them.

The checks that need more than one value or the filesystem (a certificate with its key,
the core template's file paths) are here too, as plain functions; the settings table
calls them from its whole-set checks.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import os
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from appliance.domain.parse import load_json
from appliance.domain.protocols import is_host_name
from appliance.domain.sub_formats import parse_rules
from appliance.errors import ServiceError
from appliance.links.templates import check_output, compile_template, sample_values
from appliance.runtime.egress import Egress, Resolver, host_key, parse_allowed, system_resolve
from appliance.runtime.file_paths import FilePlaces, check_paths
from appliance.services.admin.tgbot import parse_schedule

Rule = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Range:
    """An integer from `low` to `high`, both included."""

    low: int
    high: int

    def __call__(self, name: str, value: int) -> int:
        if not self.low <= value <= self.high:
            raise ServiceError(f"{name} must be from {self.low} to {self.high} (got {value})")
        return value

    def __str__(self) -> str:
        return f"{self.low} to {self.high}"


@dataclass(frozen=True)
class OneOf:
    """One of a few words."""

    allowed: tuple[str, ...]

    def __call__(self, name: str, value: str) -> str:
        if value not in self.allowed:
            raise ServiceError(f"{name} must be one of {', '.join(self.allowed)} (got '{value}')")
        return value

    def __str__(self) -> str:
        return ", ".join(self.allowed)


PORT = Range(1, 65535)

# The most characters of an announcement a client app is sent in a header.
ANNOUNCE_MAX = 1000


def announce_text(name: str, value: str) -> str:
    """Text sent in a response header: bounded, one line or several, no other control
    characters (the header carries it base64-encoded, but an app shows it as written)."""
    if len(value) > ANNOUNCE_MAX:
        raise ServiceError(
            f"{name} must be at most {ANNOUNCE_MAX} characters (got {len(value)} characters)"
        )
    if any(not c.isprintable() and c != "\n" for c in value):
        raise ServiceError(f"{name} may contain line breaks but no other control characters")
    return value


def parse_percents(text: str, name: str = "webhookUsagePercents") -> list[int]:
    """Whole percents from 1 to 100, comma-separated, as a list highest first."""
    try:
        values = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise ServiceError(f"{name}: write whole percents, comma-separated (80,90)") from None
    if any(not 1 <= value <= 100 for value in values):
        raise ServiceError(f"{name}: each percent must be from 1 to 100")
    return sorted(values, reverse=True)


def percents(name: str, value: str) -> str:
    return ",".join(str(p) for p in sorted(parse_percents(value, name)))


DATA_CENTRES = "mtprotoDataCenters"


def data_centres(name: str, value: str) -> str:
    """Telegram data-centre addresses for the MTProto proxies: "host:port" for DC 1, 2, ...
    separated by commas."""
    parts = [part.strip() for part in value.split(",")]
    data_centre_addresses(",".join(parts), name)
    return ",".join(parts)


def data_centre_addresses(value: str, name: str = DATA_CENTRES) -> list[tuple[str, int]]:
    """(host, port) of each data centre in `value`, DC 1 first."""
    found = []
    for n, part in enumerate((part.strip() for part in value.split(",")), 1):
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ServiceError(
                f"{name} must list host:port addresses separated by commas (entry {n} is {part!r})"
            )
        found.append((host.strip("[]"), int(port)))
    return found


def check_data_centres(value: str, allowed: str, resolve: Resolver = system_resolve) -> None:
    """Every data centre is an address the egress guard lets the proxies reach: public, or
    internal with mtprotoDataCenters listed in allowPrivateDestinations (the metadata
    address never); raises DestinationRefused naming the address and its kind. A name
    that does not resolve now passes: each proxy resolves and checks it again when it
    connects."""
    private_ok = DATA_CENTRES in parse_allowed(allowed)
    for host, port in data_centre_addresses(value):
        guard = Egress(DATA_CENTRES, (host_key(host), port), private_ok, resolve)
        with contextlib.suppress(OSError, UnicodeError):
            guard.addresses(host, port)


def listen_address(name: str, value: str) -> str:
    if value:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ServiceError(
                f"{name} must be empty (all addresses) or an IP address (got '{value}')"
            ) from None
    return value


PATH_SHAPE = re.compile(r"^/(?:[A-Za-z0-9._~-]+/)*$")


def url_path(name: str, path: str) -> str:
    """Paths are served as prefixes: give them one leading and one trailing slash."""
    path = path.strip() or "/"
    if not path.startswith("/"):
        path = "/" + path
    if not path.endswith("/"):
        path += "/"
    if not PATH_SHAPE.match(path) or "/../" in path or "/./" in path:
        raise ServiceError(
            f"{name} may hold only letters, digits and . _ ~ - between slashes, "
            f"like /panel/ (got '{path}')"
        )
    return path


def web_url(name: str, url: str) -> str:
    """Empty, or an http(s) URL with a host, in one piece: no spaces or control
    characters, which could split the header it is sent in or hide what it points at."""
    if not url:
        return url
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise ServiceError(
            f"{name} may not contain spaces, line breaks or control characters "
            f"(got {json.dumps(url)})"
        )
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname
    except ValueError:  # an unclosed [ or a port out of range
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:
        raise ServiceError(
            f"{name} must be an http:// or https:// URL with a host name, like "
            f"https://support.example.com/ (got {json.dumps(url)})"
        )
    return url


def parse_host_names(raw: str) -> list[str]:
    """webAllowedHosts as a list: lower-case host names and IP addresses, or `["*"]`."""
    names = []
    for item in filter(None, (part.strip().lower() for part in raw.split(","))):
        address = item[1:-1] if item.startswith("[") and item.endswith("]") else item
        if item == "*" or is_host_name(item):
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


def host_names(name: str, value: str) -> str:
    return ", ".join(parse_host_names(value))


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


@functools.lru_cache(maxsize=8)
def trusted_networks(raw: str) -> tuple:
    """`parse_trusted_proxies` of a stored value, parsed once: the subscription server
    asks on every request, and the value rarely changes."""
    return tuple(parse_trusted_proxies(raw))


def trusted_proxies(name: str, value: str) -> str:
    parse_trusted_proxies(value)
    return value


def sub_format_rules(name: str, value: str) -> str:
    """The User-Agent rules of the subscription formats (appliance.domain.sub_formats)."""
    try:
        parse_rules(value)
    except ValueError as exc:
        raise ServiceError(f"{name}: {exc}") from None
    return value


def private_destinations(name: str, value: str) -> str:
    return ",".join(parse_allowed(value))


def backup_schedule(name: str, value: str) -> str:
    parse_schedule(value)
    return value


def time_location(name: str, value: str) -> str:
    """`Local` (the host's zone) or a zone name of the IANA database, never a path."""
    if value != "Local" and value not in zoneinfo.available_timezones():
        shown = value if len(value) <= 100 else value[:100] + "..."
        raise ServiceError(
            f"timeLocation must be Local or an IANA time zone name like Europe/Berlin "
            f"(got '{shown}')"
        )
    return value


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


# The core counts traffic per tag as "outbound>>>TAG>>>traffic>>>downlink", a name the
# panel keeps in a column of 255 characters (outbound tags also in one of their own).
TEMPLATE_TAG_MAX = 255 - len("outbound>>>>>>traffic>>>downlink")


def check_core_template(raw: str, places: FilePlaces) -> None:
    """Empty (the built-in template), or a JSON object whose file paths stay in their
    places and whose tags fit the traffic counters' names."""
    if not raw:
        return
    template = load_json(raw, "coreTemplate")
    if not isinstance(template, dict):
        raise ServiceError("coreTemplate must be a JSON object")
    check_paths(template, places)
    for section in ("inbounds", "outbounds"):
        entries = template.get(section)
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            tag = entry.get("tag") if isinstance(entry, dict) else None
            if isinstance(tag, str) and len(tag) > TEMPLATE_TAG_MAX:
                raise ServiceError(
                    f"coreTemplate {section}[{index}].tag must be at most {TEMPLATE_TAG_MAX} "
                    f"characters (got {len(tag)} characters)"
                )


def sub_template(kind: str) -> Rule:
    """The rule of a subscription template setting: empty (the built-in format), or a
    template the sandbox compiles whose render for a sample client parses for its app
    (appliance.links.templates)."""

    def rule(name: str, value: Any) -> str:
        if not value:
            return ""
        compiled = compile_template(kind, value)
        check_output(kind, compiled.render(sample_values(kind)))
        return value

    return rule
