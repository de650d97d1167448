"""The chat bot's Bot API client and its backup duty: send a fresh database backup to the
admins' chats. What else it tells the admins, and the commands it answers, live in
tgnotices.

The bot speaks the Telegram Bot API (`{server}/bot{token}/{method}`), with the server
configurable (`tgBotAPIServer`, for a self-hosted Bot API server or a test). Requests go
through the egress guard on behalf of `tgBotAPIServer` (over the standard library's
http.client, which logs no URLs: the URL holds the token, and the token must never reach
a log line or an error message). Messages are built from the method name, the HTTP status
and the fields of a Bot API reply (its `description`, the bot's and chats' names), never
from whatever else a server sends: an answer that is not a Bot API reply is named as
such (with the bounded reader's reason: `runtime/reader.py`), not quoted.

Scheduled backups (`tgBotEnable` and `tgBotBackup`, at `tgRunTime`) run as a job that
checks every second whether the next run is due; the first run comes one period after the
panel starts or the schedule changes, never at start-up.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from appliance.errors import ServiceError
from appliance.runtime.egress import Egress, FetchFailed, for_url
from appliance.runtime.reader import Unreadable, parse_json

log = logging.getLogger(__name__)

DEFAULT_API_SERVER = "https://api.telegram.org"
REQUEST_TIMEOUT_SECONDS = 30
CONNECT_TIMEOUT_SECONDS = 10
REPLY_LIMIT = 1 << 20
UPLOAD_TIMEOUT_SECONDS = 300
SCHEDULE_CHECK_SECONDS = 1
UPDATES_LIMIT = 20
UPLOAD_CHUNK_BYTES = 256 * 1024
TOKEN_SHAPE = re.compile(r"^\d{1,20}:[A-Za-z0-9_-]{1,200}$")
CHAT_SHAPE = re.compile(r"^-?\d{1,20}$|^@[A-Za-z][A-Za-z0-9_]{3,64}$")
USERNAME_SHAPE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
NAME_LIMIT = 64
EVERY = re.compile(r"^@every\s+(\d{1,6})\s*([hms])$")
UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}


@dataclass(frozen=True)
class Schedule:
    """When scheduled backups run: "daily" (local midnight), "hourly" (the full hour),
    or every `seconds`."""

    kind: str
    seconds: int = 0

    def next_run(self, after: float) -> float:
        if self.kind == "every":
            return after + self.seconds
        moment = datetime.datetime.fromtimestamp(after).astimezone()
        if self.kind == "hourly":
            start = moment.replace(minute=0, second=0, microsecond=0)
            return (start + datetime.timedelta(hours=1)).timestamp()
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        return (start + datetime.timedelta(days=1)).timestamp()


def parse_schedule(text: str) -> Schedule:
    """`@daily`, `@hourly`, or `@every N` with h, m or s (`@every 6h`, `@every 30m`)."""
    value = (text or "").strip().lower()
    if value in ("@daily", "@midnight"):
        return Schedule("daily")
    if value == "@hourly":
        return Schedule("hourly")
    match = EVERY.match(value)
    if match and int(match.group(1)) > 0:
        return Schedule("every", int(match.group(1)) * UNIT_SECONDS[match.group(2)])
    raise ServiceError(
        f"tgRunTime must be @daily, @hourly or @every N followed by h, m or s "
        f"(e.g. @every 6h); got '{text}'"
    )


def parse_chat_ids(text: str) -> list[str]:
    """The admin chats of `tgBotChatId`: numeric ids or @channel names, comma-separated."""
    chats = [part.strip() for part in (text or "").split(",") if part.strip()]
    if not chats:
        raise ServiceError("set tgBotChatId to the admin chat ids, separated by commas")
    bad = [chat for chat in chats if not CHAT_SHAPE.match(chat)]
    if bad:
        raise ServiceError(
            f"tgBotChatId holds '{bad[0]}', which is neither a numeric chat id nor an @channel name"
        )
    return chats


class ChatBot:
    def __init__(self, settings, backups, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.backups = backups
        self.clock = clock
        self._schedule_text: str | None = None
        self._next_run: float | None = None
        self._reported = ""

    # ---- actions ------------------------------------------------------------------------------

    def test(self) -> str:
        """Check the token (getMe) and every admin chat (getChat); returns a summary."""
        api = self.api()
        chats = parse_chat_ids(self.settings.get("tgBotChatId"))
        me = api.call("getMe")
        reached = []
        for chat in chats:
            info = api.call("getChat", {"chat_id": chat})
            reached.append(_chat_label(chat, info))
        username = me.get("username")
        shown = username if isinstance(username, str) and USERNAME_SHAPE.match(username) else "?"
        return f"the bot @{shown} reaches {', '.join(reached)}"

    def send_backup(self) -> str:
        """Send a fresh backup to every admin chat; returns a summary, raises when a
        chat did not get it."""
        api = self.api()
        chats = parse_chat_ids(self.settings.get("tgBotChatId"))
        path = self.backups.scratch_path(".db")
        try:
            self.backups.snapshot_to(path)
            stamp = time.gmtime(self.clock())
            filename = time.strftime("appliance-%Y%m%d-%H%M%S.db", stamp)
            caption = time.strftime("Panel database backup, %Y-%m-%d %H:%M UTC", stamp)
            failures = []
            for chat in chats:
                try:
                    api.send_document(chat, path, filename, caption)
                except ServiceError as exc:
                    failures.append(f"chat {chat}: {exc.msg}")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        if failures:
            sent = len(chats) - len(failures)
            raise ServiceError(
                f"the backup reached {sent} of {len(chats)} chats; " + "; ".join(failures)
            )
        return f"backup sent to {len(chats)} chat{'s' if len(chats) != 1 else ''}"

    def notify(self, text: str) -> None:
        """Send `text` (Bot API HTML, escaped by the caller) to every admin chat; raises
        naming the chats it did not reach."""
        api = self.api()
        chats = parse_chat_ids(self.settings.get("tgBotChatId"))
        failures = []
        for chat in chats:
            try:
                api.send_message(chat, text)
            except ServiceError as exc:
                failures.append(f"chat {chat}: {exc.msg}")
        if failures:
            raise ServiceError("a chat-bot message was not delivered; " + "; ".join(failures))

    # ---- the scheduled job ------------------------------------------------------------------

    def scheduled(self) -> None:
        """One tick of the job: send a backup when one is due."""
        settings = self.settings
        if not (settings.get("tgBotEnable") and settings.get("tgBotBackup")):
            self._schedule_text = self._next_run = None
            return
        text = settings.get("tgRunTime")
        try:
            schedule = parse_schedule(text)
        except ServiceError as exc:
            self._report_once(exc.msg)
            return
        now = self.clock()
        if text != self._schedule_text or self._next_run is None:
            self._schedule_text, self._next_run = text, schedule.next_run(now)
            return
        if now < self._next_run:
            return
        self._next_run = schedule.next_run(now)
        try:
            log.info("scheduled backup: %s", self.send_backup())
            self._reported = ""
        except ServiceError as exc:
            self._report_once(f"scheduled backup to the chat bot failed: {exc.msg}")

    def _report_once(self, message: str) -> None:
        if message != self._reported:
            log.error("%s", message)
            self._reported = message

    def api(self) -> BotApi:
        """The Bot API of the settings, or a ServiceError naming the setting to fix."""
        token = self.settings.get("tgBotToken")
        if not token:
            raise ServiceError("set tgBotToken first: the token the bot got from @BotFather")
        if not TOKEN_SHAPE.match(token):
            raise ServiceError(
                "tgBotToken does not look like a bot token (digits, a colon, then letters, "
                "digits, - and _)"
            )
        server = (self.settings.get("tgBotAPIServer") or DEFAULT_API_SERVER).strip().rstrip("/")
        if not re.match(r"^https?://[^\s/]+", server):
            raise ServiceError(
                f"tgBotAPIServer must be an http:// or https:// address (got '{server}')"
            )
        return BotApi(server, token, for_url(self.settings, "tgBotAPIServer", server))


class BotApi:
    """The few Bot API methods the bot uses: its checks, backups, messages and commands."""

    def __init__(self, server: str, token: str, egress: Egress):
        self.server = server
        self._token = token
        self._egress = egress

    def call(self, method: str, fields: dict | None = None) -> dict:
        result = self._post_json(method, fields or {}, REQUEST_TIMEOUT_SECONDS)
        return result if isinstance(result, dict) else {}

    def send_message(self, chat: str, text: str) -> None:
        """`text` is Bot API HTML: the caller escapes whatever it put in."""
        self.call("sendMessage", {"chat_id": chat, "text": text, "parse_mode": "HTML"})

    def get_updates(self, offset: int, wait: int) -> list:
        """New messages to the bot, waiting up to `wait` seconds for one (long polling)."""
        fields = {
            "offset": offset,
            "timeout": wait,
            "limit": UPDATES_LIMIT,
            "allowed_updates": ["message"],
        }
        updates = self._post_json("getUpdates", fields, wait + REQUEST_TIMEOUT_SECONDS)
        return updates if isinstance(updates, list) else []

    def _post_json(self, method: str, fields: dict, timeout: float) -> object:
        body = json.dumps(fields).encode()
        return self._send(method, body, {"Content-Type": "application/json"}, timeout)

    def send_document(self, chat: str, path: str, filename: str, caption: str) -> None:
        boundary = "appliance-" + secrets.token_hex(12)
        head = (
            _form_fields(boundary, {"chat_id": chat, "caption": caption})
            + (
                f"--{boundary}\r\n"
                f'Content-Disposition: form-data; name="document"; filename="{filename}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
        )
        tail = f"\r\n--{boundary}--\r\n".encode()
        size = len(head) + os.path.getsize(path) + len(tail)
        headers = {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(size),
        }
        body = _multipart_body(head, path, tail)
        self._send("sendDocument", body, headers, UPLOAD_TIMEOUT_SECONDS)

    def _url(self, method: str) -> str:
        return f"{self.server}/bot{self._token}/{method}"

    def _send(
        self, method: str, body: bytes | Iterable[bytes], headers: dict, timeout: float
    ) -> object:
        """The `result` of a Bot API reply (None when it has none)."""
        try:
            with self._egress.request(
                self._url(method),
                method="POST",
                body=body,
                headers=headers,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                read_timeout=timeout,
                total_timeout=timeout,
            ) as answer:
                status = answer.status
                try:
                    raw = answer.read(REPLY_LIMIT)
                except FetchFailed as exc:
                    raise ServiceError(f"{method} failed: {self._clean(exc.msg)}") from None
        except FetchFailed as exc:
            raise ServiceError(
                f"cannot reach the chat-bot API at {self.server}: {self._clean(exc.msg)}"
            ) from None
        try:
            reply = parse_json(raw, REPLY_LIMIT, dict)
        except Unreadable as exc:
            raise ServiceError(
                f"{method} answered HTTP {status} with something that is not a Bot API reply "
                f"({exc.msg}); is tgBotAPIServer a Bot API server?"
            ) from None
        if not isinstance(reply.get("ok"), bool):
            raise ServiceError(
                f"{method} answered HTTP {status} with something that is not a Bot API reply "
                '(a JSON object with "ok"); is tgBotAPIServer a Bot API server?'
            )
        if reply["ok"] is not True:
            description = reply.get("description")
            if isinstance(description, str) and description.strip():
                raise ServiceError(f"{method} failed: {self._clean(_printable(description))}")
            raise ServiceError(f"{method} failed: HTTP {status}")
        return reply.get("result")

    def _clean(self, text: str) -> str:
        return text.replace(self._token, "<token>")[:300]


def _form_fields(boundary: str, fields: dict[str, str]) -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields.items()
    ]
    return "".join(parts).encode()


def _multipart_body(head: bytes, path: str, tail: bytes) -> Iterator[bytes]:
    yield head
    with open(path, "rb") as fh:
        while chunk := fh.read(UPLOAD_CHUNK_BYTES):
            yield chunk
    yield tail


def _chat_label(chat: str, info: dict) -> str:
    name = info.get("title") or info.get("username") or info.get("first_name") or ""
    name = _printable(name)[:NAME_LIMIT] if isinstance(name, str) else ""
    return f"chat {chat} ({name})" if name else f"chat {chat}"


def _printable(text: str) -> str:
    """`text` without control characters, as one line."""
    return "".join(ch if ch.isprintable() else " " for ch in text).strip()
