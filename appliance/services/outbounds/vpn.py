"""The VPN provider: a commercial VPN's WireGuard servers as outbounds.

Why this module exists: users who pay for a VPN want its servers as exits of their own.
The provider's API follows NordVPN's public one (base URL: the `vpnApiUrl` setting):
`GET /servers/countries` lists countries (`id`, `name`, `code`, `serverCount`);
`GET /servers/recommendations?filters[country_id]=<id>&filters[servers_technologies]
[identifier]=wireguard_udp&limit=<n>` lists a country's servers (`id`, `name`,
`hostname`, `station` = its address, `load`, `technologies[]` whose `wireguard_udp`
entry carries the server's `public_key` in `metadata`); and `GET /users/services/
credentials`, with HTTP basic authentication `token:<the user's access token>`, answers
the account's `nordlynx_private_key`. Every server of that provider gives its clients the
interface address 10.5.0.2 and listens on WireGuard's port 51820.

Actions of `core/vpn/:action`: countries, servers (form countryId), reg (form token: the
private key is fetched and stored; the token is not kept), setKey (form key: store a
private key the admin has), data (whether a key is stored, and its public half), del.
Each server listed carries the WireGuard outbound the admin can add to the template,
once a key is stored.
"""

from __future__ import annotations

import json
import re
from typing import Any

from appliance.domain.parse import parse_id
from appliance.errors import ServiceError
from appliance.services.outbounds.remote import basic_auth, call_json, field
from appliance.services.outbounds.wireguard import key_bytes, public_key_of, wireguard_outbound

SETTING = "vpnApiUrl"
ACCOUNT_KEY = "vpnAccount"
SERVICE = "the VPN provider"
ACTIONS = ("countries", "servers", "reg", "setKey", "data", "del")
TECHNOLOGY = "wireguard_udp"
INTERFACE_ADDRESS = "10.5.0.2/32"
PORT = 51820
SERVER_LIMIT = 20
TOKEN = re.compile(r"[A-Za-z0-9_-]{8,200}")


class VpnProvider:
    def __init__(self, settings):
        self.settings = settings

    def act(self, action: str, form: Any) -> Any:
        if action not in ACTIONS:
            raise ServiceError(f"'{action[:40]}' is not a VPN action; use {', '.join(ACTIONS)}")
        form = form if isinstance(form, dict) else {}
        if action == "countries":
            return self.countries()
        if action == "servers":
            return self.servers(form.get("countryId"))
        if action == "reg":
            return self.register(form.get("token"))
        if action == "setKey":
            return self.set_key(form.get("key"))
        if action == "del":
            self.settings.set_internal(ACCOUNT_KEY, "")
            return None
        key = self._private_key()
        return {"publicKey": public_key_of(key)} if key else None

    def countries(self) -> list[dict]:
        reply = call_json(self.settings, SETTING, SERVICE, "GET", "/servers/countries")
        if not isinstance(reply, list):
            raise ServiceError(f"{SERVICE}'s country list is not a list")
        return [
            {
                "id": field(country, SERVICE, "id"),
                "name": str(field(country, SERVICE, "name")),
                "code": str(country.get("code") or ""),
                "serverCount": country.get("serverCount") or 0,
            }
            for country in reply
            if isinstance(country, dict)
        ]

    def servers(self, country_id: Any) -> list[dict]:
        country_id = parse_id(country_id, "countryId")
        query = (
            f"?filters[country_id]={country_id}"
            f"&filters[servers_technologies][identifier]={TECHNOLOGY}&limit={SERVER_LIMIT}"
        )
        reply = call_json(
            self.settings, SETTING, SERVICE, "GET", f"/servers/recommendations{query}"
        )
        if not isinstance(reply, list):
            raise ServiceError(f"{SERVICE}'s server list is not a list")
        key = self._private_key()
        found = []
        for server in reply:
            peer_key = _peer_key(server)
            if not peer_key:
                continue
            hostname = str(field(server, SERVICE, "hostname"))
            station = str(server.get("station") or hostname)
            entry = {
                "id": server.get("id"),
                "name": str(server.get("name") or hostname),
                "hostname": hostname,
                "station": station,
                "load": server.get("load") or 0,
                "publicKey": peer_key,
                "outbound": None,
            }
            if key:
                tag = "vpn-" + hostname.split(".")[0]
                entry["outbound"] = wireguard_outbound(
                    tag, key, [INTERFACE_ADDRESS], peer_key, f"{station}:{PORT}"
                )
            found.append(entry)
        return found

    def register(self, token: Any) -> dict:
        if not isinstance(token, str) or not TOKEN.fullmatch(token.strip()):
            raise ServiceError("token must be the access token of the VPN account")
        reply = call_json(
            self.settings,
            SETTING,
            SERVICE,
            "GET",
            "/users/services/credentials",
            headers=basic_auth("token", token.strip()),
        )
        key = field(reply, SERVICE, "nordlynx_private_key")
        return self.set_key(key)

    def set_key(self, key: Any) -> dict:
        key_bytes(key, "key")
        self.settings.set_internal(ACCOUNT_KEY, json.dumps({"privateKey": key.strip()}))
        return {"publicKey": public_key_of(key.strip())}

    def _private_key(self) -> str:
        text = self.settings.internal(ACCOUNT_KEY)
        try:
            account = json.loads(text) if text else {}
        except ValueError:
            return ""
        return str(account.get("privateKey") or "") if isinstance(account, dict) else ""


def _peer_key(server: Any) -> str:
    """The WireGuard public key of a server, from its `wireguard_udp` technology."""
    technologies = server.get("technologies") if isinstance(server, dict) else None
    for technology in technologies if isinstance(technologies, list) else []:
        if not isinstance(technology, dict) or technology.get("identifier") != TECHNOLOGY:
            continue
        for item in technology.get("metadata") or []:
            if isinstance(item, dict) and item.get("name") == "public_key":
                return str(item.get("value") or "")
    return ""
