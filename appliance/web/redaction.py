"""What a `read`-scope API token gets instead of the panel's secrets.

A read token is a monitoring credential: it must see every record the panel keeps, in
the shape an admin sees it, but none of the values that would let its holder connect as
a client or impersonate the panel. Rather than each read route choosing what to leave
out (and the next route forgetting), the API plugin passes every answer to a read token
through `redact` once: values under the names the panel keeps secrets under are
replaced by `REDACTED`, and so is every share link wherever it appears, since a link
carries its client's credentials. Keys stay, types of records stay (an integer id is an
id, a string `id` beside an email is a client's UUID), empty values stay empty, so
monitoring tools parse the answer as before and still tell "set" from "unset".

JSON that a service hands over already encoded (a cached page, a streamed export, a
config template kept as text) is decoded, redacted and encoded again: the cost falls on
read tokens only.
"""

from __future__ import annotations

import json
import re
from typing import Any

REDACTED = "<redacted>"
# Field names under which the panel keeps secrets: client credentials (password, auth,
# subId, MTProto secret), share links and subscription URLs that embed them, REALITY,
# WireGuard, ECH and VLESS-encryption server keys, inline TLS keys, Shadowsocks and
# SOCKS/HTTP passwords, node and provider tokens, licences, subscription URLs of
# outbound sources (they usually carry the account's token), and the panel's own.
SECRET_FIELDS = frozenset(
    {
        "password",
        "pass",
        "auth",
        "auths",
        "secret",
        "secrets",
        "subId",
        "subUrl",
        "link",
        "links",
        "externalLinks",
        "url",
        "privateKey",
        "secretKey",
        "preSharedKey",
        "seed",
        "mldsa65Seed",
        "echServerKeys",
        "echKeySet",
        "serverKey",
        "decryption",
        "key",
        "token",
        "apiToken",
        "accessToken",
        "apiKey",
        "license",
        "licenseKey",
        "tgBotToken",
        "smtpPassword",
        "sessionSecret",
        "uuid",
    }
)
# Values that name no secret: an unset field, and VLESS without encryption.
NOT_SECRET = frozenset({"", "none"})
# A share link: its scheme names a proxy protocol (or MTProto's tg://), or it is a URL
# with credentials before its host.
SHARE_LINK = re.compile(
    r"^(?:(?:vless|vmess|trojan|ss|ssr|hy2|hysteria2?|tuic|wireguard|wg|anytls|socks5?|tg)"
    r"://|[a-z][a-z0-9+.-]*://[^/?#\s]*@)",
    re.IGNORECASE,
)


def redact(value: Any) -> Any:
    """`value` (decoded JSON) with every secret in it replaced by `REDACTED`."""
    if isinstance(value, dict):
        is_client = "email" in value
        return {
            key: _hidden(item)
            if key in SECRET_FIELDS or (key == "id" and is_client and isinstance(item, str))
            else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        if SHARE_LINK.match(value):
            return REDACTED
        return _redacted_json_text(value)
    return value


def redact_text(text: str) -> str:
    """Encoded JSON, redacted and encoded again."""
    return json.dumps(redact(json.loads(text)), ensure_ascii=False)


def _hidden(value: Any) -> Any:
    """A secret field's value with every text in it replaced; numbers, booleans, null
    and empty texts stay what they are."""
    if isinstance(value, str):
        return value if value in NOT_SECRET else REDACTED
    if isinstance(value, list):
        return [_hidden(item) for item in value]
    if isinstance(value, dict):
        return {key: _hidden(item) for key, item in value.items()}
    return value


def _redacted_json_text(text: str) -> str:
    """A text that holds a JSON object or array (a config template kept as text),
    redacted inside; any other text as it is."""
    if not text.startswith(("{", "[")):
        return text
    try:
        decoded = json.loads(text)
    except ValueError:
        return text
    cleaned = redact(decoded)
    if cleaned == decoded:
        return text
    return json.dumps(cleaned, ensure_ascii=False, indent=2)
