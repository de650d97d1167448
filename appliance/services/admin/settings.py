"""Panel settings: typed values with defaults, validated before any write.

What the settings are (names, defaults, rules, help) is declared once, in
settings_table; this module stores and reads them. Settings live as key/value rows;
only keys that differ from the default are stored, so a new release can change a default
without a migration. Values are cached in memory and every read goes through `get()`;
the panels sharing one database read them again when another one changed them (the
change notice's `subscribe_arrived`, app/consumers.py).

Secrets (chat-bot token, SMTP password) never leave through `all()`: they come back as
`REDACTED`, and an update that sends `REDACTED` back keeps the stored value.

A committed write of settings publishes `Change("settings", keys)` on the change notice.
Internal values (`set_internal`: secrets, offsets, what the core leaves out) do not: the
few whose change matters elsewhere are published by the service that owns them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pony.orm import db_session, select

from appliance.core.template import default_template
from appliance.errors import ServiceError
from appliance.runtime.changes import Change, ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings_rules import parse_host_names
from appliance.services.admin.settings_table import (
    BY_NAME,
    DEFAULTS,
    SECRET_KEYS,
    check_listener_ports_free,
    validate,
)

REDACTED = "********"
# Stored alongside settings but never part of the settings API.
# nodeRetiredTags: {node id: {tag: new tag or ""}} of inbounds renamed, deleted or moved
# away here while their node could not be told (services.nodes.retired), renamed or
# deleted there at its next reconcile.
INTERNAL_KEYS = frozenset(
    {
        "sessionSecret",
        "panelGuid",
        "parentGuid",
        "nodeRetiredTags",
        "warpAccount",
        "vpnAccount",
        # Ids of the inbounds the running core cannot run (CoreService._fit), which the
        # subscription servers leave out.
        "coreUnfitInbounds",
    }
)


class Settings:
    """Typed access to panel settings with an in-memory cache."""

    def __init__(self, store, places: FilePlaces, notice: ChangeNotice):
        self.store = store
        self.notice = notice
        # Where the certificate files and core logs the settings name may be.
        self.places = places
        self._values: dict[str, Any] = {}

    def load(self) -> None:
        with db_session:
            rows = select((s.key, s.value) for s in self.store.entities.Setting)[:]
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

    def check(self, changes: Any, port_owner: Callable[[int], Any] | None = None) -> dict[str, Any]:
        """Validate `changes` by their rules and the whole-set checks they take part in;
        returns only the keys whose value changes, normalised. Writes nothing. A value
        sent as it is stored is not judged again, so a bad stored value (an older release
        wrote it) blocks no other save. With `port_owner` (the inbound on a port, or
        empty), a new webPort or subPort an inbound holds is refused."""
        if not isinstance(changes, dict):
            raise ServiceError("settings must be a JSON object of setting names to values")
        candidate = {key: self.get(key) for key in DEFAULTS}
        for key, value in changes.items():
            if key not in DEFAULTS:
                raise ServiceError(f"unknown setting '{key}'")
            if key in SECRET_KEYS and value == REDACTED:
                continue
            candidate[key] = _coerce(key, value)
        validate(candidate, self.places, [k for k in DEFAULTS if candidate[k] != self.get(k)])
        changed = {key: candidate[key] for key in DEFAULTS if candidate[key] != self.get(key)}
        if port_owner is not None:
            check_listener_ports_free(changed, port_owner)
        return changed

    def restart_notice(self, changed: list[str], overrides: dict[str, dict]) -> dict | None:
        """What a save of `changed` leaves for the next panel restart, or None: the saved
        settings the running panel does not use yet (`restartNeeded`) and where the panel
        answers once restarted (`panelAfterRestart`: scheme, port, base path), so a page
        can follow it there. `overrides` are the settings a flag of this run overrides,
        whose values the restarted process keeps."""
        # Two-factor keys change the admin account, not a setting of the table.
        pending = [key for key in changed if key in BY_NAME and BY_NAME[key].restart]
        if not pending:
            return None
        port = overrides.get("webPort", {}).get("value") or self.get("webPort")
        return {
            "restartNeeded": pending,
            "panelAfterRestart": {
                "scheme": "https" if self.get("webCertFile") else "http",
                "port": port,
                "basePath": self.get("webBasePath"),
            },
        }

    def set_internal(self, key: str, value: str) -> None:
        if key not in INTERNAL_KEYS:
            raise KeyError(key)
        self.write({key: value})

    def internal(self, key: str) -> str:
        return self._values.get(key, "")

    def write(self, values: dict[str, Any]) -> None:
        """Store values that `check` returned (or internal ones)."""
        Setting = self.store.entities.Setting
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
        changed = [key for key in values if key not in INTERNAL_KEYS]
        if changed:
            self.notice.publish(Change("settings", changed))


def core_template(settings: Settings) -> dict:
    """The stored core template, or the built-in one when none is stored."""
    raw = settings.get("coreTemplate")
    return json.loads(raw) if raw else default_template()


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


def _encode(value: Any) -> str:
    return json.dumps(value)


def _decode(key: str, raw: str) -> Any:
    try:
        value = json.loads(raw)
    except ValueError:
        return DEFAULTS[key]
    return value if type(value) is type(DEFAULTS[key]) else DEFAULTS[key]


def _coerce(key: str, value: Any) -> Any:
    """A value of the setting's type, from JSON or from the text a form or flag sends."""
    setting = BY_NAME[key]
    if setting.kind is bool:
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise ServiceError(f"{key} must be true or false (got {json.dumps(value)})")
    if setting.kind is int:
        if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ServiceError(f"{key} must be an integer (got {json.dumps(value)})")
        return value
    if not isinstance(value, str):
        raise ServiceError(f"{key} must be a string (got {json.dumps(value)})")
    return value if setting.secret else value.strip()
