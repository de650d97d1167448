"""Routes of /panel/api/setting: panel settings, the admin account, API tokens."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from bottle import request, response

from appliance.services.admin.settings import DEFAULTS
from appliance.services.tools.smtp_check import check_smtp
from appliance.web.api import current_session
from appliance.web.http import Reply, json_object
from appliance.web.routes import EGRESS, READ, RouteTable

BOOL_BODY = {"enabled": "boolean"}

if TYPE_CHECKING:
    from appliance.services.accounts.auth import Auth, SessionInfo
    from appliance.services.accounts.tokens import Tokens
    from appliance.services.admin.settings import Settings
    from appliance.services.admin.tgbot import ChatBot


class SettingsUpdate(Protocol):
    """Validates every key, then saves; returns the keys that changed. Two-factor keys
    change the admin account of `session`."""

    def __call__(self, body: dict, session: SessionInfo | None) -> list[str]: ...


@dataclass(frozen=True)
class SettingRouteNeeds:
    settings: Settings
    two_factor_view: Callable[[], dict]  # the two-factor keys as the settings show them
    update_settings: SettingsUpdate
    auth: Auth
    restart_later: Callable[[float], None]  # restarts the panel after that many seconds
    chat_bot: ChatBot
    default_core_template: Callable[[], dict]
    tokens: Tokens
    # Settings a flag or environment variable overrides for this run, with its value.
    overrides: Callable[[], dict[str, dict]]


def setting_routes(needs: SettingRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/setting", "settings")

    @table.post("/all", "Every panel setting; secrets redacted", effect=READ)
    def all_settings():
        return {**needs.settings.all(), **needs.two_factor_view()}

    @table.get(
        "/overrides",
        "Settings a command-line flag or environment variable overrides for this run: "
        "{setting: {flag, env, value}}",
    )
    def overrides():
        return needs.overrides()

    @table.post(
        "/defaultSettings", "Default settings, with domains taken from this request", effect=READ
    )
    def default_settings():
        host = request.urlparts.hostname or ""
        return {**DEFAULTS, "webDomain": host, "subDomain": host}

    @table.post(
        "/update",
        "Validate and save settings (obj: the keys that changed); web listener changes "
        "apply on restart: restartNeeded names them and panelAfterRestart gives the "
        "scheme, port and basePath the panel answers at once restarted",
        resource="settings",
        body={"<setting>": "value"},
    )
    def update():
        changed = needs.update_settings(json_object(1 << 20), current_session())
        if not changed:
            return Reply("nothing changed")
        notice = needs.settings.restart_notice(changed, needs.overrides())
        if notice is None:
            return Reply("settings saved", changed)
        waiting = ", ".join(notice["restartNeeded"])
        return Reply(f"settings saved; restart the panel to apply {waiting}", changed, notice)

    @table.post(
        "/updateUser",
        "Change the admin username and password; ends other sessions",
        resource="settings",
        body={
            "oldUsername": "string",
            "oldPassword": "string",
            "newUsername": "string",
            "newPassword": "string",
            "twoFactorCode": "string",
        },
    )
    def update_user():
        needs.auth.update_user(current_session(), json_object(8192))
        return Reply("username and password changed; other sessions were signed out")

    @table.post("/restartPanel", "Restart the panel process after a 3 s grace")
    def restart_panel():
        needs.restart_later(3)
        return Reply("the panel restarts in 3 seconds")

    @table.post(
        "/testSmtp",
        "Send a test mail with the saved SMTP settings: {success, stage, msg}",
        raw=True,
        effect=EGRESS,
    )
    def test_smtp():
        # The envelope plus `stage`, which names where a failure happened.
        response.content_type = "application/json; charset=utf-8"
        return json.dumps({"obj": None, **check_smtp(needs.settings)}, ensure_ascii=False)

    @table.post(
        "/testTgBot",
        "Check the chat-bot token (getMe) and every admin chat (getChat)",
        effect=EGRESS,
    )
    def test_chat_bot():
        return Reply(needs.chat_bot.test())

    @table.get("/getDefaultJsonConfig", "The built-in core config template")
    def default_json_config():
        return needs.default_core_template()

    tokens = RouteTable("/panel/api/setting/apiTokens", "api tokens")

    @tokens.get("", "API tokens with their scope and expiry (never their values)")
    def list_tokens():
        return needs.tokens.list()

    @tokens.post(
        "/create",
        "Create a token (scope admin, read or node; expiresAt in Unix ms, 0 for never); "
        "its value is shown only in this response",
        resource="apiTokens",
        body={"name": "string", "scope": "string", "expiresAt": "integer"},
    )
    def create_token():
        data = json_object(8192)
        return Reply(
            "API token created; copy it now, it is not shown again",
            needs.tokens.create(data.get("name"), data.get("scope"), data.get("expiresAt")),
        )

    @tokens.post(
        "/delete/<id>", "Delete a token; callers using it are refused at once", resource="apiTokens"
    )
    def delete_token(id):
        needs.tokens.delete(id)
        return Reply("API token deleted")

    @tokens.post(
        "/setEnabled/<id>", "Enable or disable a token", resource="apiTokens", body=BOOL_BODY
    )
    def set_token_enabled(id):
        needs.tokens.set_enabled(id, json_object(8192).get("enabled"))
        return Reply("API token updated")

    table.routes.extend(tokens.routes)
    return table
