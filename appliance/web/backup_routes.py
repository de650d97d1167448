"""Routes of database backup and restore: getDb, getMigration, importDB, backuptotgbot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bottle import HTTPResponse, request

from appliance.services.admin.backups import MAX_UPLOAD_BYTES, BackupFile
from appliance.web.http import Reply, raw_content_type
from appliance.web.routes import EGRESS, RouteTable
from appliance.web.upload import save_file_field

# The upload route checks the size itself, with a message that speaks of the database.
UPLOAD_ROUTE_MAX_BODY = 1 << 62

if TYPE_CHECKING:
    from appliance.services.admin.backups import Backups
    from appliance.services.admin.tgbot import ChatBot


@dataclass(frozen=True)
class BackupRouteNeeds:
    backups: Backups
    chat_bot: ChatBot  # sends a backup to the admin chats


def backup_routes(needs: BackupRouteNeeds) -> RouteTable:
    table = RouteTable("/panel/api/server", "backup")

    @table.get(
        "/getDb",
        "A consistent snapshot of the database as a SQLite file (any backend)",
        raw=True,
    )
    def get_db():
        return _attachment(needs.backups.database_file())

    @table.get(
        "/getMigration",
        "SQL text dump (SQLite database) or a portable SQLite file (networked database)",
        raw=True,
    )
    def get_migration():
        return _attachment(needs.backups.migration_file())

    @table.post(
        "/importDB",
        "Replace every record with an uploaded SQLite file or SQL dump (multipart field "
        "db); settings a route would refuse are reset (obj.reset names each); the previous "
        "data is kept in the backups folder; the panel restarts",
        resource=("settings", "inbounds", "clients"),
        max_body=UPLOAD_ROUTE_MAX_BODY,
    )
    def import_db():
        path = needs.backups.scratch_path(".upload")
        save_file_field(
            request.environ.get("wsgi.input"),
            raw_content_type(),
            request.content_length,
            "db",
            path,
            MAX_UPLOAD_BYTES,
        )
        message, reset = needs.backups.restore(path)
        return Reply(message, {"reset": reset})

    bot = RouteTable("/panel/api", "backup")

    @bot.post(
        "/backuptotgbot",
        "Send a fresh database backup to every chat-bot admin chat",
        effect=EGRESS,
    )
    def backup_to_bot():
        return Reply(needs.chat_bot.send_backup())

    table.routes.extend(bot.routes)
    return table


def _attachment(backup: BackupFile) -> HTTPResponse:
    return HTTPResponse(
        backup.stream,
        headers={
            "Content-Type": backup.content_type,
            "Content-Length": str(backup.size),
            "Content-Disposition": f'attachment; filename="{backup.filename}"',
            "Cache-Control": "no-store",
        },
    )
