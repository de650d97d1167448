"""What the chat bot tells the admin chats by itself, and the one question it answers.

Notices, while `tgBotEnable` is on: every admin sign-in, successful or not, with the address
it came from; a client that comes within `trafficDiff` GB of its quota or `expireDiff` days
of its expiry (the clients list's "expiring"); the CPU at or above `tgCpuAlert` percent.
Each is sent once per crossing. What was told is remembered in memory only: a client is
forgotten when it leaves the expiring set (so it is told again when it comes back), the
CPU when it falls below the threshold; after a restart the clients still near a limit are
told once more. Sign-in notices are capped per hour, so a password spray cannot flood the
chats; a burst of clients crossing at once is told as a few names and a count.

Commands: the bot long-polls getUpdates (each request waits at most `POLL_SECONDS`, and goes
through the egress guard like every Bot API call) and answers `/usage <email>` with that
client's traffic, quota and expiry, in the admin chats of `tgBotChatId` only. A message
from any other chat gets no answer at all.

Messages use the Bot API's HTML parse mode: everything put into one (emails, usernames,
addresses, the panel's own messages) is stripped of control characters and HTML-escaped.
"""

from __future__ import annotations

import html
import logging
import time
from collections import deque
from collections.abc import Callable

import gevent

from appliance.domain.units import human_bytes
from appliance.errors import ServiceError
from appliance.services.admin.tgbot import ChatBot, parse_chat_ids

log = logging.getLogger(__name__)

POLL_SECONDS = 25
POLL_RETRY_SECONDS = 15
SIGN_IN_NOTICES_PER_HOUR = 30
CPU_QUIET_SECONDS = 600
CLIENTS_NAMED = 10
SHOWN_LIMIT = 200
HELP = "Send /usage followed by a client's email, like /usage alice@example.com"


class BotNotices:
    def __init__(
        self,
        settings,
        chat_bot: ChatBot,
        nearing_limits: Callable[[], list[dict]],
        client_usage: Callable[[str], dict],
        clock: Callable[[], float] = time.time,
    ):
        self.settings = settings
        self.chat_bot = chat_bot
        self.nearing_limits = nearing_limits
        self.client_usage = client_usage
        self.clock = clock
        self._told: set[tuple[str, str]] = set()
        self._cpu_high = False
        self._cpu_quiet_until = 0.0
        self._sign_ins: deque[float] = deque()
        self._offset = 0
        self._reported = ""

    def enabled(self) -> bool:
        return bool(self.settings.get("tgBotEnable"))

    # ---- notices ------------------------------------------------------------------------------

    def sign_in(self, username: str, address: str, succeeded: bool) -> None:
        """Tell the admin chats of a sign-in; sent in the background, the sign-in never
        waits for the chat-bot API."""
        if not self.enabled():
            return
        now = time.monotonic()
        while self._sign_ins and self._sign_ins[0] <= now - 3600:
            self._sign_ins.popleft()
        if len(self._sign_ins) >= SIGN_IN_NOTICES_PER_HOUR:
            return
        self._sign_ins.append(now)
        who, where = shown(username, 64), shown(address, 64)
        if succeeded:
            text = f"✅ Admin <b>{who}</b> signed in to the panel from {where}"
        else:
            text = f"⚠️ Failed sign-in to the panel as <b>{who}</b> from {where}"
        gevent.spawn(self._send, text)

    def cpu(self, percent: float) -> None:
        """One status sample: tell the admin chats when the CPU crosses tgCpuAlert."""
        threshold = self.settings.get("tgCpuAlert")
        if not threshold or not self.enabled() or percent < threshold:
            self._cpu_high = False
            return
        now = time.monotonic()
        if self._cpu_high or now < self._cpu_quiet_until:
            return
        self._cpu_high = True
        self._cpu_quiet_until = now + CPU_QUIET_SECONDS
        gevent.spawn(
            self._send,
            f"🔥 CPU usage is {percent:.0f}%, at or above the alert threshold of {threshold}%",
        )

    def check_clients(self) -> None:
        """One round of the job: tell the admin chats of clients that came near a limit
        since the last round."""
        if not self.enabled():
            return
        nearing = self.nearing_limits()
        current = {(c["key"], kind) for c in nearing for kind in ("quota", "expiry") if c[kind]}
        told = self._told & current
        new = [(c, kind) for c in nearing for kind in ("quota", "expiry") if c[kind]]
        new = [(c, kind) for c, kind in new if (c["key"], kind) not in told]
        if new:
            lines = [near_limit_line(c, kind, self.clock()) for c, kind in new[:CLIENTS_NAMED]]
            if len(new) > CLIENTS_NAMED:
                lines.append(
                    f"… and {len(new) - CLIENTS_NAMED} more: see the expiring clients in the panel"
                )
            if self._send("\n".join(lines)):
                told |= {(c["key"], kind) for c, kind in new}
        self._told = told

    def _send(self, text: str) -> bool:
        try:
            self.chat_bot.notify(text)
        except ServiceError as exc:
            self._report_once(f"a chat-bot notice was not sent: {exc.msg}")
            return False
        self._reported = ""
        return True

    # ---- commands ------------------------------------------------------------------------------

    def poll_commands(self) -> None:
        """One long poll for messages to the bot, answering those from admin chats."""
        if not self.enabled():
            return
        try:
            api = self.chat_bot.api()
            updates = api.get_updates(self._offset, POLL_SECONDS)
        except ServiceError as exc:
            self._report_once(f"the chat bot cannot read its messages: {exc.msg}")
            gevent.sleep(POLL_RETRY_SECONDS)
            return
        # The settings may have changed during the wait: answer by the current ones.
        if not self.enabled():
            return
        try:
            admins = parse_chat_ids(self.settings.get("tgBotChatId"))
        except ServiceError:
            admins = []
        for update in updates:
            if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
                continue
            self._offset = max(self._offset, update["update_id"] + 1)
            message = update.get("message")
            chat = message.get("chat") if isinstance(message, dict) else None
            if not isinstance(chat, dict) or not is_admin_chat(chat, admins):
                continue
            answer = self.answer(message.get("text"))
            if answer is None:
                continue
            try:
                api.send_message(str(chat["id"]), answer)
            except ServiceError as exc:
                self._report_once(f"the chat bot could not answer a command: {exc.msg}")

    def answer(self, text: object) -> str | None:
        """The reply to a command from an admin chat; None for anything else."""
        if not isinstance(text, str):
            return None
        command, _, rest = text.strip().partition(" ")
        command = command.split("@", 1)[0].lower()
        if command in ("/start", "/help"):
            return HELP
        if command != "/usage":
            return None
        email = rest.strip()
        if not email:
            return HELP
        try:
            return usage_text(self.client_usage(email), self.clock())
        except ServiceError as exc:
            return shown(exc.msg, SHOWN_LIMIT * 2)

    def _report_once(self, message: str) -> None:
        if message != self._reported:
            log.error("%s", message)
            self._reported = message


def is_admin_chat(chat: dict, admins: list[str]) -> bool:
    """A chat named in tgBotChatId, by its numeric id or its @name."""
    chat_id = chat.get("id")
    if not isinstance(chat_id, int) or isinstance(chat_id, bool):
        return False
    if str(chat_id) in admins:
        return True
    username = chat.get("username")
    names = {admin.lower() for admin in admins if admin.startswith("@")}
    return isinstance(username, str) and f"@{username}".lower() in names


def near_limit_line(client: dict, kind: str, now: float) -> str:
    email = f"<b>{shown(client['email'], SHOWN_LIMIT)}</b>"
    if kind == "quota":
        left = max(client["total"] - client["used"], 0)
        return f"📉 Client {email} has {human_bytes(left)} left of {human_bytes(client['total'])}"
    return f"⏳ Client {email} expires {time_left(client['expiryTime'], now)}"


def usage_text(usage: dict, now: float) -> str:
    used = usage["up"] + usage["down"]
    total = usage["total"]
    expiry = usage["expiryTime"]
    if expiry > 0:
        expires = time_left(expiry, now)
    elif expiry < 0:
        expires = f"{-expiry // 86_400_000} days after first use"
    else:
        expires = "never"
    lines = [
        f"📊 Usage of <b>{shown(usage['email'], SHOWN_LIMIT)}</b>",
        f"Uploaded: {human_bytes(usage['up'])}",
        f"Downloaded: {human_bytes(usage['down'])}",
        f"Used: {human_bytes(used)} of {human_bytes(total) if total else 'unlimited'}",
        f"Expires: {expires}",
        f"Enabled: {'yes' if usage['enable'] else 'no'}",
    ]
    return "\n".join(lines)


def time_left(expiry_ms: int, now: float) -> str:
    moment = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expiry_ms / 1000))
    seconds = expiry_ms / 1000 - now
    if seconds <= 0:
        return f"on {moment} (passed)"
    if seconds >= 86_400:
        days = int(seconds // 86_400)
        return f"in {days} day{'s' if days != 1 else ''} ({moment})"
    hours = int(seconds // 3600)
    if hours:
        return f"in {hours} hour{'s' if hours != 1 else ''} ({moment})"
    return f"in less than an hour ({moment})"


def shown(text: str, limit: int) -> str:
    """`text` fit for an HTML message: printable, at most `limit` characters, escaped."""
    printable = "".join(ch if ch.isprintable() else " " for ch in str(text)).strip()
    if len(printable) > limit:
        printable = printable[: limit - 1] + "…"
    return html.escape(printable, quote=False)
