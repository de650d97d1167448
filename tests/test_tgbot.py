"""The chat bot's backups over real HTTP: testTgBot, backuptotgbot and scheduled backups.

The panel talks to a small Bot API server started here on loopback (the panel's
`tgBotAPIServer` points at it). It answers getMe, getChat and sendDocument the way the
real API does and records what it received; a received document must open as a SQLite
database holding this test's data. The token must never appear in a reply or the log.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
import threading
import time
import uuid
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import create_inbound, free_port, ok, refused

from appliance.errors import ServiceError
from appliance.services.admin.tgbot import Schedule, parse_chat_ids, parse_schedule

TOKEN = "123456789:AAH-test_token-XYZ"
BOT = "backup_test_bot"
CHATS = {
    "111": {"id": 111, "type": "private", "first_name": "Admin"},
    "-100222": {"id": -100222, "type": "supergroup", "title": "Ops"},
}
UPDATE = "/panel/api/setting/update"
TEST = "/panel/api/setting/testTgBot"
SEND = "/panel/api/backuptotgbot"
WS = {"network": "ws", "security": "none", "wsSettings": {"path": "/ws"}}


class BotApi(ThreadingHTTPServer):
    """A Bot API server that knows one token and the chats in CHATS."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), BotHandler)
        self.calls: list[tuple[str, dict]] = []
        self.documents: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class BotHandler(BaseHTTPRequestHandler):
    server: BotApi

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        prefix, _, method = self.path.rpartition("/")
        if prefix != f"/bot{TOKEN}":
            return self.reply(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
        fields = self.fields(body)
        self.server.calls.append((method, {k: v for k, v in fields.items() if k != "document"}))
        if method == "getMe":
            return self.reply(200, {"ok": True, "result": {"id": 1, "username": BOT}})
        chat = str(fields.get("chat_id", ""))
        if chat not in CHATS:
            return self.reply(
                400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
            )
        if method == "getChat":
            return self.reply(200, {"ok": True, "result": CHATS[chat]})
        if method == "sendDocument":
            self.server.documents.append(fields)
            return self.reply(200, {"ok": True, "result": {"message_id": 7}})
        return self.reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})

    def fields(self, body: bytes) -> dict:
        content_type = self.headers.get("Content-Type", "")
        if content_type.startswith("application/json"):
            return json.loads(body or b"{}")
        message = BytesParser(policy=HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        fields = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if part.get_filename():
                fields[name] = payload
                fields["filename"] = part.get_filename()
            else:
                fields[name] = payload.decode()
        return fields

    def reply(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture(scope="module")
def bot_api():
    server = BotApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def bot(bot_api):
    bot_api.calls.clear()
    bot_api.documents.clear()
    return bot_api


def configure(api, bot_api, **changes) -> None:
    settings = {
        "tgBotToken": TOKEN,
        "tgBotChatId": "111, -100222",
        "tgBotAPIServer": bot_api.url,
        # The test's Bot API server runs on loopback: opted in, as an admin would.
        "allowPrivateDestinations": "tgBotAPIServer",
        "tgBotEnable": False,
        "tgBotBackup": False,
        **changes,
    }
    assert api.post(UPDATE, settings)["success"] is True


def no_token_anywhere(panel, *replies: dict) -> None:
    for reply in replies:
        assert TOKEN not in json.dumps(reply)
        assert TOKEN.split(":")[1] not in json.dumps(reply)
    assert TOKEN.split(":")[1] not in panel.output()


# ---- testTgBot ----------------------------------------------------------------------------


def test_test_tg_bot_names_the_bot_and_every_chat(panel, api, bot):
    configure(api, bot)
    reply = api.post(TEST)
    assert reply["success"] is True, reply
    assert reply["msg"] == f"the bot @{BOT} reaches chat 111 (Admin), chat -100222 (Ops)"
    assert bot.calls == [
        ("getMe", {}),
        ("getChat", {"chat_id": "111"}),
        ("getChat", {"chat_id": "-100222"}),
    ]
    no_token_anywhere(panel, reply)


def test_test_tg_bot_names_a_chat_the_bot_cannot_see(panel, api, bot):
    configure(api, bot, tgBotChatId="111,999")
    reply = api.post(TEST)
    refused(reply, "getChat failed: Bad Request: chat not found")
    no_token_anywhere(panel, reply)


def test_test_tg_bot_with_a_wrong_token_says_so_without_the_token(panel, api, bot):
    configure(api, bot, tgBotToken="42:wrong-token")
    reply = api.post(TEST)
    refused(reply, "getMe failed: Unauthorized")
    assert "wrong-token" not in reply["msg"]
    no_token_anywhere(panel, reply)


def test_test_tg_bot_with_an_unreachable_server(panel, api, bot):
    address = f"http://127.0.0.1:{free_port()}"
    configure(api, bot, tgBotAPIServer=address)
    reply = api.post(TEST)
    refused(reply, f"cannot reach the chat-bot API at {address}")
    no_token_anywhere(panel, reply)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"tgBotToken": ""}, "set tgBotToken first"),
        ({"tgBotToken": "not a token"}, "does not look like a bot token"),
        ({"tgBotChatId": " , "}, "set tgBotChatId"),
        ({"tgBotChatId": "111, chat room"}, "'chat room', which is neither"),
        ({"tgBotAPIServer": "ftp://example.com"}, "must be an http:// or https:// address"),
    ],
)
def test_incomplete_bot_settings_are_named(panel, api, bot, changes, words):
    configure(api, bot, **changes)
    for path in (TEST, SEND):
        refused(api.post(path), words)
    assert bot.calls == []


# ---- backuptotgbot ----------------------------------------------------------------------------


def opened(document: bytes, tmp_path) -> sqlite3.Connection:
    path = tmp_path / f"received-{uuid.uuid4().hex}.db"
    path.write_bytes(document)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    return conn


def test_backup_goes_to_every_admin_chat_as_a_sqlite_file(panel, api, bot, tmp_path):
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": 34950,
            "remark": "sent to the bot",
            "settings": {"decryption": "none"},
            "streamSettings": WS,
        },
    )
    email = f"bot-{uuid.uuid4().hex[:8]}"
    ok(
        api.post(
            "/panel/api/clients/add", {"client": {"email": email}, "inboundIds": [inbound["id"]]}
        )
    )
    configure(api, bot)
    reply = api.post(SEND)
    assert reply == {"success": True, "msg": "backup sent to 2 chats", "obj": None}
    assert [d["chat_id"] for d in bot.documents] == ["111", "-100222"]
    for document in bot.documents:
        assert document["filename"].startswith("appliance-")
        assert document["filename"].endswith(".db")
        assert document["caption"].startswith("Panel database backup, ")
        conn = opened(document["document"], tmp_path)
        assert conn.execute(
            "SELECT remark FROM inbound WHERE id = ?", (inbound["id"],)
        ).fetchall() == [("sent to the bot",)]
        assert conn.execute("SELECT COUNT(*) FROM client WHERE email = ?", (email,)).fetchone() == (
            1,
        )
        conn.close()
    no_token_anywhere(panel, reply)


def test_a_chat_that_fails_is_named_and_the_others_still_get_the_backup(panel, api, bot):
    configure(api, bot, tgBotChatId="999, 111")
    reply = api.post(SEND)
    refused(
        reply, "reached 1 of 2 chats", "chat 999: sendDocument failed: Bad Request: chat not found"
    )
    assert [d["chat_id"] for d in bot.documents] == ["111"]
    no_token_anywhere(panel, reply)


def test_scheduled_backups_run_while_enabled(panel, api, bot, tmp_path):
    configure(
        api, bot, tgBotChatId="111", tgBotEnable=True, tgBotBackup=True, tgRunTime="@every 2s"
    )
    deadline = time.monotonic() + 20
    while len(bot.documents) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(bot.documents) >= 2
    opened(bot.documents[-1]["document"], tmp_path).close()

    configure(api, bot, tgBotChatId="111", tgBotEnable=True, tgBotBackup=False)
    time.sleep(0.5)
    sent = len(bot.documents)
    time.sleep(4)
    assert len(bot.documents) == sent
    assert "Traceback" not in panel.output(), panel.output()


def test_an_unreadable_schedule_is_refused_when_saved(panel, api, bot):
    before = ok(api.post("/panel/api/setting/all"))["tgRunTime"]
    reply = api.post(UPDATE, {"tgBotBackup": True, "tgRunTime": "whenever"})
    refused(reply, "tgRunTime", "@daily", "whenever")
    after = ok(api.post("/panel/api/setting/all"))
    assert after["tgRunTime"] == before and after["tgBotBackup"] is False
    time.sleep(3)
    assert bot.documents == []


# ---- schedules and chat lists --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "schedule"),
    [
        ("@daily", Schedule("daily")),
        (" @DAILY ", Schedule("daily")),
        ("@hourly", Schedule("hourly")),
        ("@every 6h", Schedule("every", 6 * 3600)),
        ("@every 30m", Schedule("every", 1800)),
        ("@every 45s", Schedule("every", 45)),
    ],
)
def test_schedules_are_read(text, schedule):
    assert parse_schedule(text) == schedule


@pytest.mark.parametrize(
    "text", ["", "daily", "@weekly", "@every", "@every 0h", "@every 5d", "0 3 * * *"]
)
def test_unknown_schedules_are_refused(text):
    with pytest.raises(ServiceError, match="tgRunTime must be"):
        parse_schedule(text)


def test_the_next_run_falls_on_the_period_boundary():
    moment = datetime.datetime(2026, 3, 14, 15, 9, 26).astimezone()
    now = moment.timestamp()
    daily = datetime.datetime.fromtimestamp(Schedule("daily").next_run(now)).astimezone()
    assert (daily.day, daily.hour, daily.minute, daily.second) == (15, 0, 0, 0)
    hourly = datetime.datetime.fromtimestamp(Schedule("hourly").next_run(now)).astimezone()
    assert (hourly.day, hourly.hour, hourly.minute) == (14, 16, 0)
    assert Schedule("every", 600).next_run(now) == now + 600


def test_chat_ids_are_numbers_or_channel_names():
    assert parse_chat_ids("111, -100222 ,@my_channel,") == ["111", "-100222", "@my_channel"]
    with pytest.raises(ServiceError, match="'12a', which is neither"):
        parse_chat_ids("111,12a")
