"""The WARP tunnel: a Cloudflare WARP device registered by the panel, as a WireGuard
outbound that gives the server a clean exit address.

Why this module exists: WARP hands out WireGuard peers through its client API, and users
of proxy panels use it as an exit. The API (base URL: the `warpApiUrl` setting) answers
`POST /reg` with the device's `id`, its `token` (a bearer token for the calls about that
device), `account` (`license`, `account_type`) and `config` (`client_id`, whose first
three bytes WARP expects as WireGuard's reserved bytes; `interface.addresses` v4 and v6;
`peers[0]` with `public_key` and `endpoint.host`); `GET /reg/<id>` answers the same
shape, `PUT /reg/<id>/account` with `{license}` applies a WARP+ key, and `DELETE
/reg/<id>` removes the device. The key pair is made here unless the admin brings one;
only its public half is sent.

Actions of `core/tunnel/:action`: data (the stored account, null before `reg`), reg,
config (fetch the device's config again and store it), license, del. Each answer that
has a device carries the WireGuard outbound (tag `warp`) the admin can add to the
template.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any

from appliance.errors import ServiceError
from appliance.services.outbounds.remote import call_json, field
from appliance.services.outbounds.wireguard import (
    key_bytes,
    new_key_pair,
    public_key_of,
    wireguard_outbound,
)

SETTING = "warpApiUrl"
ACCOUNT_KEY = "warpAccount"
SERVICE = "the WARP service"
TAG = "warp"
ACTIONS = ("data", "del", "config", "reg", "license")
TOS = "2024-01-01T00:00:00.000Z"
LICENSE_LENGTH = 64


class WarpTunnel:
    def __init__(self, settings, clock=time.time):
        self.settings = settings
        self.clock = clock

    def act(self, action: str, form: Any) -> Any:
        if action not in ACTIONS:
            raise ServiceError(f"'{action[:40]}' is not a tunnel action; use {', '.join(ACTIONS)}")
        form = form if isinstance(form, dict) else {}
        if action == "data":
            account = self._account()
            return _view(account) if account else None
        if action == "reg":
            return self.register(form.get("privateKey"), form.get("publicKey"))
        account = self._account()
        if not account:
            raise ServiceError("no WARP device is registered yet: register one first (reg)")
        if action == "config":
            reply = call_json(
                self.settings,
                SETTING,
                SERVICE,
                "GET",
                f"/reg/{account['deviceId']}",
                headers=_bearer(account),
            )
            account["config"] = _config(reply)
            self._store(account)
            return _view(account)
        if action == "license":
            return self.apply_license(account, form.get("license"))
        # The device is forgotten here whatever WARP answers: an account deleted there
        # already, or a service out of reach, must not keep it stored.
        self.settings.set_internal(ACCOUNT_KEY, "")
        try:
            call_json(
                self.settings,
                SETTING,
                SERVICE,
                "DELETE",
                f"/reg/{account['deviceId']}",
                headers=_bearer(account),
            )
        except ServiceError as exc:
            return {"remoteError": exc.msg}
        return {"remoteError": ""}

    def register(self, private_key: Any, public_key: Any) -> dict:
        if private_key in (None, ""):
            pair = new_key_pair()
        else:
            key_bytes(private_key, "privateKey")
            derived = public_key_of(private_key)
            if public_key not in (None, "") and public_key != derived:
                raise ServiceError("publicKey is not the public half of privateKey")
            pair = {"privateKey": private_key.strip(), "publicKey": derived}
        body = {
            "key": pair["publicKey"],
            "install_id": "",
            "fcm_token": "",
            "tos": TOS,
            "type": "PC",
            "model": "appliance",
            "locale": "en_US",
        }
        reply = call_json(self.settings, SETTING, SERVICE, "POST", "/reg", body=body)
        account = {
            "deviceId": str(field(reply, SERVICE, "id")),
            "accessToken": str(field(reply, SERVICE, "token")),
            **pair,
            "licenseKey": str(_optional(reply, "account", "license")),
            "accountType": str(_optional(reply, "account", "account_type")),
            "created": int(self.clock()),
            "config": _config(reply),
        }
        self._store(account)
        return _view(account)

    def apply_license(self, account: dict, license_key: Any) -> dict:
        if not isinstance(license_key, str) or not 1 <= len(license_key.strip()) <= LICENSE_LENGTH:
            raise ServiceError(f"license must be a WARP+ key of 1 to {LICENSE_LENGTH} characters")
        reply = call_json(
            self.settings,
            SETTING,
            SERVICE,
            "PUT",
            f"/reg/{account['deviceId']}/account",
            body={"license": license_key.strip()},
            headers=_bearer(account),
        )
        account["licenseKey"] = license_key.strip()
        if isinstance(reply, dict) and reply.get("account_type"):
            account["accountType"] = str(reply["account_type"])
        self._store(account)
        return _view(account)

    def _account(self) -> dict | None:
        text = self.settings.internal(ACCOUNT_KEY)
        try:
            account = json.loads(text) if text else None
        except ValueError:
            return None
        return account if isinstance(account, dict) else None

    def _store(self, account: dict) -> None:
        self.settings.set_internal(ACCOUNT_KEY, json.dumps(account))


def _config(reply: Any) -> dict:
    """What the outbound needs from a `config` object of the WARP API."""
    config = field(reply, SERVICE, "config")
    peer = field(config, SERVICE, "peers", 0)
    addresses = field(config, SERVICE, "interface", "addresses")
    return {
        "clientId": str(config.get("client_id") or "") if isinstance(config, dict) else "",
        "peerPublicKey": str(field(peer, SERVICE, "public_key")),
        "endpoint": str(field(peer, SERVICE, "endpoint", "host")),
        "v4": str(addresses.get("v4") or "") if isinstance(addresses, dict) else "",
        "v6": str(addresses.get("v6") or "") if isinstance(addresses, dict) else "",
    }


def outbound(account: dict) -> dict:
    """The WireGuard outbound of a stored account."""
    config = account["config"]
    addresses = [f"{config['v4']}/32"] if config.get("v4") else []
    if config.get("v6"):
        addresses.append(f"{config['v6']}/128")
    return wireguard_outbound(
        TAG,
        account["privateKey"],
        addresses,
        config["peerPublicKey"],
        config["endpoint"],
        reserved=_reserved(config.get("clientId", "")),
    )


def _reserved(client_id: str) -> list[int] | None:
    try:
        raw = base64.b64decode(client_id, validate=True)
    except (binascii.Error, ValueError):
        return None
    return list(raw[:3]) if len(raw) >= 3 else None


def _view(account: dict) -> dict:
    """The account as the API shows it: everything but the bearer token."""
    return {
        "deviceId": account["deviceId"],
        "privateKey": account["privateKey"],
        "publicKey": account["publicKey"],
        "licenseKey": account.get("licenseKey", ""),
        "accountType": account.get("accountType", ""),
        "created": account.get("created", 0),
        "config": account["config"],
        "outbound": outbound(account),
    }


def _bearer(account: dict) -> dict[str, str]:
    return {"Authorization": f"Bearer {account['accessToken']}"}


def _optional(reply: Any, *path: str) -> Any:
    value = reply
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value or ""
