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
import subprocess
import sys
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
# Chats that write to the bot without being admin chats: the bot may not answer them.
STRANGERS = {"333": {"id": 333, "type": "private", "first_name": "Stranger"}}
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
        # Messages the panel sent, and updates waiting for its getUpdates; kept apart
        # from `calls`, since sign-in notices and polls come at any time.
        self.messages: list[dict] = []
        self.updates: list[dict] = []
        self.polls: list[dict] = []
        self.lock = threading.Lock()

    def say(self, chat: dict, text: str) -> int:
        """A message to the bot from `chat`, as getUpdates hands it over."""
        with self.lock:
            update_id = 1000 + len(self.updates)
            message = {"message_id": update_id, "chat": chat, "text": text}
            self.updates.append({"update_id": update_id, "message": message})
        return update_id

    def sent(self, containing: str) -> list[dict]:
        with self.lock:
            return [m for m in self.messages if containing in m["text"]]

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
        if method == "getUpdates":
            return self.updates(fields)
        if method == "sendMessage" and str(fields.get("chat_id")) in CHATS | STRANGERS:
            with self.server.lock:
                self.server.messages.append(fields)
            return self.reply(200, {"ok": True, "result": {"message_id": 8}})
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

    def updates(self, fields: dict) -> None:
        """Long polling, shortened: waits up to a second for an update at `offset` or later."""
        offset = int(fields.get("offset") or 0)
        deadline = time.monotonic() + min(float(fields.get("timeout") or 0), 1.0)
        with self.server.lock:
            self.server.polls.append(fields)
        while True:
            with self.server.lock:
                waiting = [u for u in self.server.updates if u["update_id"] >= offset]
            if waiting or time.monotonic() >= deadline:
                return self.reply(200, {"ok": True, "result": waiting})
            time.sleep(0.05)

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
    with bot_api.lock:
        bot_api.messages.clear()
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
        "tgCpuAlert": 0,
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
            "port": free_port(),
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


# ---- notices and commands ---------------------------------------------------------------

HOSTILE = "<img src=x onerror=alert(1)>&amp;@x"
HOSTILE_SHOWN = "&lt;img src=x onerror=alert(1)&gt;&amp;amp;@x"


def sent_once(bot_api, containing: str, timeout: float = 30) -> dict:
    """The one message holding `containing`: it arrives in time, and a while later it is
    still the only one."""
    deadline = time.monotonic() + timeout
    while not bot_api.sent(containing) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    found = bot_api.sent(containing)
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def told(panel, api, bot):
    """The bot on, talking to chat 111 only; off again afterwards, and no notice from
    the sign-in before the test counts."""
    configure(api, bot, tgBotChatId="111", tgBotEnable=True)
    time.sleep(1)
    with bot.lock:
        bot.messages.clear()
    yield bot
    configure(api, bot)


def test_sign_ins_are_told_with_the_address_and_escaped(panel, told):
    visitor = panel.client(login=False)
    refused(visitor.sign_in("<b>root</b>&", "wrong password"), "wrong username or password")
    failed = sent_once(told, "Failed sign-in")
    assert failed == {
        "chat_id": "111",
        "text": "⚠️ Failed sign-in to the panel as <b>&lt;b&gt;root&lt;/b&gt;&amp;</b> "
        "from 127.0.0.1",
        "parse_mode": "HTML",
    }
    ok(visitor.sign_in(panel.username, panel.password))
    succeeded = sent_once(told, "signed in to the panel")
    assert (
        succeeded["text"]
        == f"✅ Admin <b>{panel.username}</b> signed in to the panel from 127.0.0.1"
    )
    assert len(told.messages) == 2


def test_clients_near_their_quota_or_expiry_are_told_once(panel, api, told):
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": free_port(),
            "remark": "notices",
            "settings": {"decryption": "none"},
            "streamSettings": WS,
        },
    )
    soon = int((time.time() + 86_400 + 3600) * 1000)
    clients = [
        {"email": HOSTILE, "totalGB": 100 * 1024**2},
        {"email": "expires-soon@x", "expiryTime": soon},
        {"email": "far-from-limits@x", "totalGB": 100 * 1024**3},
    ]
    for client in clients:
        ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    ok(api.post(f"/panel/api/clients/updateTraffic/{HOSTILE}", {"upload": 30 * 1024**2}))
    quota = sent_once(told, "left of 100.00 MiB")
    assert f"📉 Client <b>{HOSTILE_SHOWN}</b> has 70.00 MiB left of 100.00 MiB" in quota["text"]
    expiry = sent_once(told, "expires-soon@x")
    assert "⏳ Client <b>expires-soon@x</b> expires in 1 day (" in expiry["text"]
    # Further rounds of the check (every trafficInterval, 10 s) tell nothing new.
    time.sleep(12)
    assert len(told.sent("left of 100.00 MiB")) == 1
    assert len(told.sent("expires-soon@x")) == 1
    assert told.sent("far-from-limits@x") == []


def test_high_cpu_is_told_once_while_it_lasts(panel, api, told):
    configure(api, told, tgBotChatId="111", tgBotEnable=True, tgCpuAlert=1)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        alert = sent_once(told, "CPU usage is")
        assert alert["text"].endswith("at or above the alert threshold of 1%")
        time.sleep(6)  # three more status samples, each still above 1%
        assert len(told.sent("CPU usage is")) == 1
    finally:
        busy.kill()
        busy.wait()


def test_cpu_alert_is_a_percent(panel, api):
    before = ok(api.post("/panel/api/setting/all"))["tgCpuAlert"]
    refused(api.post(UPDATE, {"tgCpuAlert": 101}), "tgCpuAlert must be from 0 to 100")
    assert ok(api.post("/panel/api/setting/all"))["tgCpuAlert"] == before


def test_usage_is_answered_in_admin_chats_only(panel, api, told):
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": free_port(),
            "remark": "usage",
            "settings": {"decryption": "none"},
            "streamSettings": WS,
        },
    )
    email = f"usage-{uuid.uuid4().hex[:8]}@x"
    for address in (email, f"q{HOSTILE}"):
        client = {"email": address, "totalGB": 10 * 1024**3}
        ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    traffic = {"upload": 3 * 1024**2, "download": 5 * 1024**3}
    ok(api.post(f"/panel/api/clients/updateTraffic/{email}", traffic))

    told.say(CHATS["111"], f"/usage {email}")
    answer = sent_once(told, "Usage of")
    assert answer == {
        "chat_id": "111",
        "parse_mode": "HTML",
        "text": f"📊 Usage of <b>{email}</b>\n"
        "Uploaded: 3.00 MiB\n"
        "Downloaded: 5.00 GiB\n"
        "Used: 5.00 GiB of 10.00 GiB\n"
        "Expires: never\n"
        "Enabled: yes",
    }
    told.say(CHATS["111"], f"/usage q{HOSTILE}")
    hostile = sent_once(told, f"Usage of <b>q{HOSTILE_SHOWN}</b>")
    assert HOSTILE not in hostile["text"]
    told.say(CHATS["111"], "/usage nobody@x")
    assert sent_once(told, "no client with email")["text"] == "no client with email 'nobody@x'"

    # The same question from a chat that is not an admin chat: read, and not answered.
    before = len(told.messages)
    asked = told.say(STRANGERS["333"], f"/usage {email}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
        int(poll.get("offset", 0)) > asked for poll in told.polls
    ):
        time.sleep(0.1)
    assert any(int(poll.get("offset", 0)) > asked for poll in told.polls)
    time.sleep(1)
    assert len(told.messages) == before
    assert [m for m in told.messages if m["chat_id"] == "333"] == []


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
