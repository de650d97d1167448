"""Per-protocol checks for the `settings` object of an inbound, and the field checkers
that `inbound_rules` shares.

Every protocol of the core has its own settings schema (see the core's inbound
documentation). This module holds one small function per protocol that type-checks the
keys the panel and the core rely on, fills the documented defaults and leaves unknown keys
alone, so an option added by a newer core survives a round trip through the panel.

The checkers below work in place on a private copy of the payload (see `read_object`):
each `take_*` helper reads one key, rejects a wrong type with a message that names the
full field path, writes back the normalized value (for example "443" becomes 443) and
drops keys whose value is null. That keeps each protocol function a flat list of rules.

Pure apart from `os.urandom`, used to create keys the user left out (the Shadowsocks 2022
server key and the WireGuard private key).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import math
import os
import re
from collections.abc import Callable
from typing import Any, NoReturn

from appliance.domain.parse import load_json
from appliance.errors import ServiceError

# Marks "no value given" (distinct from every JSON value, including null).
ABSENT: Any = object()

INT64_MAX = 2**63 - 1

# ---------------------------------------------------------------------------------------
# Field checkers shared with inbound_rules
# ---------------------------------------------------------------------------------------


def describe(value: object) -> str:
    """Show a rejected value briefly, the way the user wrote it in JSON."""
    if value is ABSENT:
        return "nothing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        # str() of an int with thousands of digits raises ValueError on Python 3.11+.
        return repr(value) if value.bit_length() <= 64 else "a very large integer"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def fail(path: str, expectation: str, value: object = ABSENT) -> NoReturn:
    raise ServiceError(f"{path} must be {expectation} (got {describe(value)})")


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def one_of(choices: tuple[str, ...]) -> str:
    return "one of " + ", ".join(choices)


def int_range(lo: int, hi: int) -> str:
    if hi >= INT64_MAX:
        return f"an integer of {lo} or more"
    return f"an integer from {lo} to {hi}"


_INT_TEXT = re.compile(r"\s*[+-]?[0-9]{1,19}\s*")


def to_int(value: object, path: str, lo: int, hi: int) -> int:
    """An integer in [lo, hi]. Numeric strings ("443") and integral floats (443.0, what
    some JSON encoders emit) are converted; booleans are refused although Python counts
    them as ints, because `true` as a port is a mistake, not the number 1."""
    integral_float = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    numeric_text = isinstance(value, str) and _INT_TEXT.fullmatch(value) is not None
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif integral_float or numeric_text:
        number = int(value)
    if number is None or not lo <= number <= hi:
        fail(path, int_range(lo, hi), value)
    return number


def to_bool(value: object, path: str) -> bool:
    """A boolean; the strings "true" and "false" are accepted for form-encoded clients."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    fail(path, "true or false", value)


def json_copy(value: object, path: str) -> Any:
    """A deep copy that is guaranteed to be plain JSON (what the database stores)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        raise ServiceError(f"{path} must contain only JSON values") from None


def read_object(value: object, path: str) -> dict:
    """A nested object or its JSON-encoded text (the legacy form); empty means {}."""
    if value is None or value is ABSENT or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        value = load_json(value, path)
    if not isinstance(value, dict):
        fail(path, "a JSON object", value)
    return json_copy(value, path)


def _given(obj: dict, key: str) -> Any:
    """The value of obj[key], or ABSENT when missing or null (null keys are dropped)."""
    value = obj.get(key)
    if value is None:
        obj.pop(key, None)
        return ABSENT
    return value


def _missing(obj: dict, key: str, path: str, default: Any, required: str | None) -> Any:
    if required is not None:
        fail(join(path, key), required)
    if default is not ABSENT:
        obj[key] = default
        return default
    return None


def take_str(
    obj: dict, key: str, path: str, *, default: Any = ABSENT, required: bool = False
) -> str | None:
    value = _given(obj, key)
    if value is ABSENT:
        return _missing(obj, key, path, default, "a string" if required else None)
    if not isinstance(value, str):
        fail(join(path, key), "a string", value)
    return value


def take_choice(
    obj: dict,
    key: str,
    path: str,
    choices: tuple[str, ...],
    *,
    default: Any = ABSENT,
    required: bool = False,
) -> str | None:
    value = _given(obj, key)
    if value is ABSENT:
        return _missing(obj, key, path, default, one_of(choices) if required else None)
    if not isinstance(value, str) or value not in choices:
        fail(join(path, key), one_of(choices), value)
    return value


def take_int(
    obj: dict,
    key: str,
    path: str,
    lo: int,
    hi: int = INT64_MAX,
    *,
    default: Any = ABSENT,
    required: bool = False,
) -> int | None:
    value = _given(obj, key)
    if value is ABSENT:
        return _missing(obj, key, path, default, int_range(lo, hi) if required else None)
    obj[key] = to_int(value, join(path, key), lo, hi)
    return obj[key]


def take_bool(obj: dict, key: str, path: str, *, default: Any = ABSENT) -> bool | None:
    value = _given(obj, key)
    if value is ABSENT:
        return _missing(obj, key, path, default, None)
    obj[key] = to_bool(value, join(path, key))
    return obj[key]


def take_object(obj: dict, key: str, path: str, *, default: Any = ABSENT) -> dict | None:
    value = _given(obj, key)
    if value is ABSENT:
        return _missing(obj, key, path, default, None)
    if not isinstance(value, dict):
        fail(join(path, key), "an object", value)
    return value


def take_list(
    obj: dict, key: str, path: str, *, default: Any = ABSENT, required: bool = False
) -> list | None:
    value = _given(obj, key)
    if value is ABSENT:
        return _missing(obj, key, path, default, "a list" if required else None)
    if not isinstance(value, list):
        fail(join(path, key), "a list", value)
    return value


def take_str_list(
    obj: dict,
    key: str,
    path: str,
    *,
    check: Callable[[str], bool] | None = None,
    expectation: str = "a string",
    default: Any = ABSENT,
    required: bool = False,
) -> list[str] | None:
    """A list of strings, each passing `check`; errors name the offending index."""
    values = take_list(obj, key, path, default=default, required=required)
    if values is None:
        return None
    for index, value in enumerate(values):
        if not isinstance(value, str) or (check is not None and not check(value)):
            fail(item(join(path, key), index), expectation, value)
    return values


def take_str_map(obj: dict, key: str, path: str) -> dict | None:
    """An object whose values are all strings (HTTP headers, port maps)."""
    mapping = take_object(obj, key, path)
    for name, value in (mapping or {}).items():
        if not isinstance(value, str):
            fail(join(join(path, key), name), "a string", value)
    return mapping


def take_path(obj: dict, key: str, path: str) -> str | None:
    """An HTTP path for a transport; the core sends it verbatim, so it must be absolute."""
    value = take_str(obj, key, path)
    if value is not None and not value.startswith("/"):
        fail(join(path, key), 'a path starting with "/"', value)
    return value


def is_ip(text: str) -> bool:
    candidate = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(candidate)
    except ValueError:
        return False
    return True


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def is_host(text: str) -> bool:
    """A domain name or an IP address (what the core accepts as an address)."""
    return is_ip(text) or is_host_name(text)


def is_host_name(text: str) -> bool:
    """A domain name, with or without its final dot: labels of letters, digits, `-` and
    `_` (which service names use), none starting or ending with `-`. The one rule for
    every host name the panel takes: addresses, server names, allowed hosts."""
    name = text[:-1] if text.endswith(".") else text
    if not name or len(name) > 253:
        return False
    return all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


def is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


_STD_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def b64_length(text: str) -> int | None:
    """Byte length of standard, padded base64 text; None when it is not base64."""
    if not _STD_BASE64.fullmatch(text) or len(text) % 4:
        return None
    try:
        return len(base64.b64decode(text, validate=True))
    except ValueError:
        return None


def take_l4_network(obj: dict, key: str, path: str, *, default: str) -> str:
    """A listener network as the core spells it: "tcp", "udp" or "tcp,udp"."""
    value = _given(obj, key)
    if value is ABSENT:
        obj[key] = default
        return default
    parts = {part.strip() for part in value.split(",")} if isinstance(value, str) else set()
    if not parts or not parts <= {"tcp", "udp"}:
        fail(join(path, key), 'one of tcp, udp, "tcp,udp"', value)
    obj[key] = ",".join(sorted(parts))
    return obj[key]


# ---------------------------------------------------------------------------------------
# Shadowsocks ciphers
# ---------------------------------------------------------------------------------------

SS2022_KEY_LENGTHS = {
    "2022-blake3-aes-128-gcm": 16,
    "2022-blake3-aes-256-gcm": 32,
    "2022-blake3-chacha20-poly1305": 32,
}

SS_METHODS: tuple[str, ...] = (
    "aes-128-gcm",
    "aes-256-gcm",
    "chacha20-poly1305",
    "chacha20-ietf-poly1305",
    "xchacha20-poly1305",
    "xchacha20-ietf-poly1305",
    *SS2022_KEY_LENGTHS,
    "none",
    "plain",
)


def is_ss2022(method: str) -> bool:
    """True for the Shadowsocks 2022 ciphers, whose keys are base64 of a fixed length."""
    return isinstance(method, str) and method in SS2022_KEY_LENGTHS


def ss2022_key_length(method: str) -> int:
    """Key length in bytes of a Shadowsocks 2022 cipher; 0 for any other method."""
    return SS2022_KEY_LENGTHS.get(method, 0) if isinstance(method, str) else 0


def new_ss2022_key(method: str) -> str:
    return base64.b64encode(os.urandom(ss2022_key_length(method))).decode()


# ---------------------------------------------------------------------------------------
# One function per protocol: check(settings, "settings") mutates the private copy.
# ---------------------------------------------------------------------------------------

VLESS_ENCRYPTION_PREFIX = "mlkem768x25519plus."


def _vless(settings: dict, path: str) -> None:
    """`decryption` is "none" or a VLESS Encryption server string (the core refuses an
    empty one). Fallbacks are removed by the caller: they live in their own table."""
    decryption = take_str(settings, "decryption", path, default="none")
    prefix = VLESS_ENCRYPTION_PREFIX
    if decryption != "none" and not (
        decryption.startswith(prefix) and len(decryption) > len(prefix)
    ):
        fail(
            join(path, "decryption"),
            f'"none" or a VLESS encryption string "{prefix}..."',
            decryption,
        )
    take_str(settings, "flow", path)


def _vmess(settings: dict, path: str) -> None:
    take_bool(settings, "disableInsecureEncryption", path)


def _trojan(settings: dict, path: str) -> None:
    """Trojan has no inbound-level field the panel needs; passwords belong to clients."""


def _shadowsocks(settings: dict, path: str) -> None:
    """The inbound-level cipher. For 2022 ciphers the server key (the `password`) must be
    base64 of exactly the cipher's key length; a missing or malformed one is replaced by a
    fresh key rather than rejected, as the spec asks, so a cipher switch never strands the
    inbound. Default network is "tcp" (spec: Inbound rule 3, the core's default too)."""
    method = take_choice(settings, "method", path, SS_METHODS, required=True)
    take_l4_network(settings, "network", path, default="tcp")
    password = take_str(settings, "password", path)
    if is_ss2022(method) and (
        password is None or b64_length(password) != ss2022_key_length(method)
    ):
        settings["password"] = new_ss2022_key(method)
    take_int(settings, "level", path, 0)
    take_str(settings, "email", path)
    take_bool(settings, "ivCheck", path)


def _accounts(settings: dict, path: str, *, required: bool) -> None:
    """`accounts` of socks/http/mixed: [{user, pass}] with non-empty strings."""
    accounts = take_list(settings, "accounts", path, default=[])
    accounts_path = join(path, "accounts")
    if required and not accounts:
        fail(accounts_path, 'a non-empty list of {user, pass} when auth is "password"', accounts)
    for index, account in enumerate(accounts):
        account_path = item(accounts_path, index)
        if not isinstance(account, dict):
            fail(account_path, "an object with user and pass", account)
        for key in ("user", "pass"):
            value = account.get(key, ABSENT)
            if not isinstance(value, str) or not value:
                fail(join(account_path, key), "a non-empty string", value)


def _socks(settings: dict, path: str) -> None:
    """SOCKS (and mixed): `auth` decides whether `accounts` is needed; `ip` is the address
    the core hands out for UDP ASSOCIATE, so it must be an IP when given."""
    auth = take_choice(settings, "auth", path, ("noauth", "password"), default="noauth")
    _accounts(settings, path, required=auth == "password")
    take_bool(settings, "udp", path, default=False)
    ip = take_str(settings, "ip", path)
    if ip and not is_ip(ip):
        fail(join(path, "ip"), "an IP address (the address announced for UDP)", ip)
    take_int(settings, "userLevel", path, 0)


def _http(settings: dict, path: str) -> None:
    _accounts(settings, path, required=False)
    take_bool(settings, "allowTransparent", path, default=False)
    take_int(settings, "userLevel", path, 0)


def _wireguard_key(text: str) -> bool:
    return b64_length(text) == 32


def new_wireguard_secret() -> str:
    """A random X25519 private key, clamped the way WireGuard clamps it."""
    key = bytearray(os.urandom(32))
    key[0] &= 248
    key[31] = (key[31] & 127) | 64
    return base64.b64encode(bytes(key)).decode()


def _wireguard(settings: dict, path: str) -> None:
    """`secretKey` is generated when left out (like `xray wg`); a given one must be a
    base64 32-byte key, because a typo would otherwise surface only as a core crash.
    `pubKey` (the server's public key) and a peer's `privateKey` are what the panel shows
    a peer in its config; the core never gets them (see `core.config`)."""
    secret = take_str(settings, "secretKey", path)
    if not secret:
        settings["secretKey"] = new_wireguard_secret()
        settings.pop("pubKey", None)
    elif not _wireguard_key(secret):
        fail(join(path, "secretKey"), "a base64 32-byte X25519 private key", secret)
    public = take_str(settings, "pubKey", path)
    if public and not _wireguard_key(public):
        fail(join(path, "pubKey"), "a base64 32-byte public key", public)
    peers = take_list(settings, "peers", path, default=[])
    for index, peer in enumerate(peers):
        peer_path = item(join(path, "peers"), index)
        if not isinstance(peer, dict):
            fail(peer_path, "an object with publicKey and allowedIPs", peer)
        public_key = take_str(peer, "publicKey", peer_path, required=True)
        if not _wireguard_key(public_key):
            fail(join(peer_path, "publicKey"), "a base64 32-byte public key", public_key)
        for key in ("preSharedKey", "privateKey"):
            value = take_str(peer, key, peer_path)
            if value and not _wireguard_key(value):
                fail(join(peer_path, key), "a base64 32-byte key", value)
        take_str_list(peer, "allowedIPs", peer_path, check=is_cidr, expectation="an IP or CIDR")
        take_int(peer, "keepAlive", peer_path, 0, 65535)
        take_int(peer, "level", peer_path, 0)
        take_str(peer, "email", peer_path)
    take_int(settings, "mtu", path, 576, 9000, default=1420)
    take_bool(settings, "noKernelTun", path)


def _forward_target(settings: dict, path: str, address_key: str, port_key: str) -> None:
    address = take_str(settings, address_key, path)
    if address and not is_host(address):
        fail(join(path, address_key), "a host name or IP address", address)
    take_int(settings, port_key, path, 0, 65535)


def _dokodemo(settings: dict, path: str) -> None:
    """Port forwarding (`dokodemo`, renamed `tunnel` in newer cores). The classic names
    address/port/network and the newer rewriteAddress/rewritePort/allowedNetwork are both
    checked; whichever the user sent is kept."""
    _forward_target(settings, path, "address", "port")
    _forward_target(settings, path, "rewriteAddress", "rewritePort")
    if "allowedNetwork" in settings and "network" not in settings:
        take_l4_network(settings, "allowedNetwork", path, default="tcp")
    else:
        take_l4_network(settings, "network", path, default="tcp")
    take_bool(settings, "followRedirect", path, default=False)
    take_str_map(settings, "portMap", path)
    take_int(settings, "timeout", path, 0)
    take_int(settings, "userLevel", path, 0)


def _hysteria(settings: dict, path: str) -> None:
    """The core implements Hysteria 2 only (`version` "must be 2" in its docs); both panel
    protocols map to it. Users come from client records, the rest is transport-level
    (streamSettings.hysteriaSettings)."""
    version = take_int(settings, "version", path, 0, INT64_MAX, default=2)
    if version != 2:
        fail(join(path, "version"), "2 (the only Hysteria version the core implements)", version)


MTPROTO_AD_TAG = re.compile(r"[0-9a-fA-F]{32}")


def _mtproto(settings: dict, path: str) -> None:
    """MTProto runs in its own process. Secrets are per client, so any inbound-level
    `secret` is dropped by the caller. `adTag` is the inbound-level advertising tag
    (exactly 32 hex characters, stored lower-case; clients may override it); `domain` is
    the fake-TLS domain."""
    ad_tag = take_str(settings, "adTag", path)
    if ad_tag is not None:
        if ad_tag and not MTPROTO_AD_TAG.fullmatch(ad_tag):
            fail(join(path, "adTag"), "exactly 32 hexadecimal characters", ad_tag)
        settings["adTag"] = ad_tag.lower()
    domain = take_str(settings, "domain", path)
    if domain and not is_host(domain):
        fail(join(path, "domain"), "a host name for fake TLS", domain)


def mtproto_link_secret(key: str, domain: str) -> str:
    """The secret as Telegram's links carry it: `ee` + key + the domain's bytes in hex for
    fake TLS, `dd` + key for the padded transport."""
    return "ee" + key + domain.encode("idna").hex() if domain else "dd" + key


PROTOCOL_CHECKS: dict[str, Callable[[dict, str], None]] = {
    "vless": _vless,
    "vmess": _vmess,
    "trojan": _trojan,
    "shadowsocks": _shadowsocks,
    "hysteria": _hysteria,
    "hysteria2": _hysteria,
    "socks": _socks,
    "http": _http,
    "mixed": _socks,
    "wireguard": _wireguard,
    "dokodemo": _dokodemo,
    "tunnel": _dokodemo,
    "mtproto": _mtproto,
}

CLIENT_PROTOCOLS = frozenset(
    {"shadowsocks", "vless", "vmess", "trojan", "hysteria", "hysteria2", "mtproto"}
)
FALLBACK_PROTOCOLS = frozenset({"vless", "trojan"})


def derived_keys(protocol: str) -> tuple[str, ...]:
    """Settings keys that are never stored because other records own them: the client
    list (any protocol, under its newer name `users` too for client-bearing ones),
    fallbacks (own API), MTProto secrets (per client)."""
    keys: tuple[str, ...] = ("clients",)
    if protocol in CLIENT_PROTOCOLS:
        keys += ("users",)
    if protocol in FALLBACK_PROTOCOLS:
        keys += ("fallbacks",)
    if protocol == "mtproto":
        keys += ("secret",)
    return keys


def normalize_settings(protocol: str, value: object) -> dict:
    """The protocol's settings object: parsed, copied, derived keys removed, checked."""
    settings = read_object(value, "settings")
    for key in derived_keys(protocol):
        settings.pop(key, None)
    PROTOCOL_CHECKS[protocol](settings, "settings")
    return settings
