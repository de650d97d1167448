"""Admins, sign-in, sessions and two-factor codes.

Sessions are rows, not self-contained cookies: logging out, changing the password or
turning on two-factor ends sessions at once, which a signed-only cookie cannot do. The
cookie carries a random session id plus an HMAC of it under the panel's session secret;
the database keeps only the id's SHA-256, so a leaked database holds no usable cookie.

Whoever holds something open under a session (the WebSocket) hears of sessions ended
here through the change notice (`Change("sessions", ids)`), and asks `live_sessions` from
time to time for the ones ended elsewhere (expiry, `admin reset` run offline, another
process).

Failed sign-ins are limited per address and username, per username, and per browser that
signed in before (`throttle`): a guesser cannot lock the owner's known browser out. The
budgets are counted in the database too, so instances sharing one judge a guesser
together.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyotp
from pony.orm import db_session, select

from appliance.errors import ServiceError, TooManyRequests
from appliance.runtime.changes import Change, ChangeNotice
from appliance.services.accounts import passwords
from appliance.services.accounts.throttle import (
    DEVICE,
    DEVICE_COOKIE,
    DEVICE_COOKIE_SECONDS,
    LONGEST_WINDOW,
    PAIR,
    USERNAME,
    LoginThrottle,
    device_key,
    device_of,
    new_device_cookie,
    pair_key,
    username_key,
)
from appliance.services.webhooks.outbox import Outbox
from appliance.store import sign_in_sql

COOKIE_NAME = "appliance_session"
TOTP_STEP = 30
TOTP_SECRET_LENGTHS = (16, 64)  # 80 to 320 bits; the upper bound is the column's size


@dataclass(frozen=True)
class SessionInfo:
    id: int
    admin_id: int
    username: str
    csrf_token: str
    # Signed in with credentials scanners try first: nothing but changing them is allowed.
    must_change_credentials: bool = False


@dataclass(frozen=True)
class SignedIn:
    session: str  # the session cookie's value
    device: str  # the device cookie's value: this browser signed in as this user


class Auth:
    cookie_name = COOKIE_NAME
    device_cookie_name = DEVICE_COOKIE
    device_cookie_lifetime = DEVICE_COOKIE_SECONDS

    def __init__(
        self,
        store,
        settings,
        notice: ChangeNotice,
        on_sign_in: Callable[[str, str, bool], None],
        outbox: Outbox,
        clock=time.time,
    ):
        self.store = store
        self.settings = settings
        self.notice = notice
        # (username, address, whether it succeeded) of every sign-in, for the chat bot.
        self.on_sign_in = on_sign_in
        # Webhook events: admin.login_failed.
        self.outbox = outbox
        self.clock = clock
        self.throttle = LoginThrottle()

    def _ended(self, session_ids: set[int]) -> None:
        """After a commit: the sessions of `session_ids` ended."""
        if session_ids:
            self.notice.publish(Change("sessions", session_ids))

    # ---- first run and offline administration -------------------------------------

    def bootstrap(self) -> tuple[str, str] | None:
        """On an empty database: a session secret and a random admin. Returns the
        credentials when it created them, so the caller can print them once."""
        if not self.settings.internal("sessionSecret"):
            self.settings.set_internal("sessionSecret", secrets.token_urlsafe(32))
        with db_session:
            if self.store.entities.Admin.select().exists():
                return None
            username = passwords.random_username()
            password = passwords.random_password(username)
            self.store.entities.Admin(
                username=username,
                password_hash=passwords.hash_password(password),
                updated_at=int(self.clock()),
            )
        return username, password

    def show_admin(self) -> dict:
        with db_session:
            admin = self._first_admin()
            return {"username": admin.username, "twoFactor": admin.totp_enabled}

    def reset_admin(self, username: str | None = None, password: str | None = None):
        """Set the given credentials or generate new ones; ends every session."""
        username = username if username is not None else passwords.random_username()
        generated = password is None
        password = passwords.random_password(username) if generated else password
        check_username(username)
        try:
            passwords.check_new_password(username, password)
        except ValueError as exc:
            raise ServiceError(str(exc)) from None
        with db_session:
            admin = self._first_admin()
            admin.username = username
            admin.password_hash = passwords.hash_password(password)
            admin.updated_at = int(self.clock())
            ended = self._end_other_sessions(admin, None)
        self._ended(ended)
        return username, password

    def disable_two_factor(self) -> None:
        with db_session:
            admin = self._first_admin()
            admin.totp_enabled = False
            admin.totp_secret = ""

    def _first_admin(self):
        admin = select(a for a in self.store.entities.Admin).order_by(lambda a: a.id).first()
        if admin is None:
            raise ServiceError("no admin account exists yet; start the panel once to create it")
        return admin

    # ---- sign-in ----------------------------------------------------------------------

    def two_factor_enabled(self) -> bool:
        with db_session:
            return select(a for a in self.store.entities.Admin if a.totp_enabled).exists()

    def login(
        self, username, password, code, address: str, device_cookie: str | None = None
    ) -> SignedIn:
        """Check credentials; returns the session cookie and the device cookie to set.
        `device_cookie` is what the browser sent, if anything."""
        if not isinstance(username, str) or not isinstance(password, str):
            raise ServiceError("username and password are required strings")
        if not _is_unicode(username):
            raise ServiceError("the username is not valid Unicode text")
        if code is not None and not isinstance(code, str | int):
            raise ServiceError("twoFactorCode must be a string of digits")
        secret = self.settings.internal("sessionSecret")
        device = device_of(secret, device_cookie, username)
        self._check_throttle(address, username, device)
        with db_session:
            admin = self.store.entities.Admin.get(username=username)
            stored = admin.password_hash if admin else passwords.dummy_hash()
            ok = passwords.verify_password(password, stored) and admin is not None
            # The code is checked only after the password: a wrong password must not use
            # up a good code. Either failure gets the same answer, so the answer never
            # tells whether the password alone was right.
            if ok and (not admin.totp_enabled or self._consume_code(admin, code)):
                key = device_key(device) if device else pair_key(address, username)
                self.throttle.succeeded(key)
                sign_in_sql.forget_failures(
                    self.store, [key], self._now_ms() - LONGEST_WINDOW * 1000
                )
                self._upgrade_stored_password(admin, password)
                cookie = self._new_session(admin, address)
                self.on_sign_in(username, address, True)
                kept = device_cookie if device else new_device_cookie(secret, username)
                return SignedIn(cookie, kept)
            two_factor = select(a for a in self.store.entities.Admin if a.totp_enabled).exists()
            refused = {"username": username[:255], "address": address, "at": int(self.clock())}
            self.outbox.raise_event("admin.login_failed", [(f"admin:{username[:200]}", refused)])
        self._record_failure(address, username, device)
        self.on_sign_in(username, address, False)
        if two_factor:
            raise ServiceError("wrong username, password or two-factor code")
        raise ServiceError("wrong username or password")

    def _check_throttle(self, address: str, username: str, device: str | None) -> None:
        """Refuse an attempt whose budget is spent: a known browser's own, else its
        address's with this username and the username's."""
        if device:
            checks = [(device_key(device), "from this browser", "")]
        else:
            checks = [
                (pair_key(address, username), f"from {address}", ""),
                (
                    username_key(username),
                    "from browsers that have not signed in to it before",
                    ", or sign in from a browser that has",
                ),
            ]
        self._restore_shared_blocks([key for key, _, _ in checks])
        for key, where, otherwise in checks:
            left = self.throttle.seconds_left(key)
            if left:
                minutes = max(1, round(left / 60))
                raise TooManyRequests(
                    f"too many failed sign-ins for this username {where}; try again in "
                    f"{minutes} minute{'s' if minutes != 1 else ''}{otherwise}",
                    retry_after=math.ceil(left),
                )

    def _upgrade_stored_password(self, admin, password: str) -> None:
        """A password kept as plain text or bcrypt is stored as scrypt from now on, unless
        it must be changed anyway: then it stays recognisable as such."""
        stored = admin.password_hash
        if passwords.needs_rehash(stored) and not passwords.must_change_credentials(
            admin.username, stored
        ):
            admin.password_hash = passwords.hash_password(password)

    def _restore_shared_blocks(self, keys: list[str]) -> None:
        """Blocks another instance on this database started (or this one, before a
        restart) join this one's: a guesser who moves to another instance is still
        blocked."""
        now = int(self.clock())
        with db_session:
            found = sign_in_sql.blocks(self.store, keys, now)
        for key, until in found.items():
            if not self.throttle.seconds_left(key):
                self.throttle.restore(key, until - now)

    def _record_failure(self, address: str, username: str, device: str | None) -> None:
        """Counted twice: in memory, on the monotonic clock (a clock set back cannot stretch
        a window), and in the database, where every instance on it counts into the same
        budget. A budget either count finds spent blocks its key on every instance."""
        if device:
            spent = [(device_key(device), DEVICE)]
        else:
            spent = [(pair_key(address, username), PAIR), (username_key(username), USERNAME)]
        blocked = [key for key, budget in spent if self.throttle.failed(key, budget)]
        now_ms = self._now_ms()
        with db_session:
            counts = sign_in_sql.count_failures(
                self.store, [(key, budget.window) for key, budget in spent], now_ms
            )
            for (key, budget), count in zip(spent, counts, strict=True):
                if count >= budget.failures and key not in blocked:
                    self.throttle.restore(key, self.throttle.block)
                    blocked.append(key)
            if blocked:
                sign_in_sql.forget_failures(self.store, blocked, now_ms - LONGEST_WINDOW * 1000)
        if not blocked:
            return
        now = int(self.clock())
        with db_session:
            LoginBlock = self.store.entities.LoginBlock
            select(b for b in LoginBlock if b.blocked_until <= now).delete(bulk=True)
            for key in blocked:
                row = LoginBlock.get(pair_hash=key)
                if row is None:
                    LoginBlock(pair_hash=key, blocked_until=now + self.throttle.block)
                else:
                    row.blocked_until = now + self.throttle.block

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def restore_blocks(self) -> None:
        """At start: the sign-in blocks a previous run left that have not run out."""
        now = int(self.clock())
        with db_session:
            LoginBlock = self.store.entities.LoginBlock
            select(b for b in LoginBlock if b.blocked_until <= now).delete(bulk=True)
            for row in LoginBlock.select():
                self.throttle.restore(row.pair_hash, row.blocked_until - now)

    def _new_session(self, admin, address: str) -> str:
        session_id = secrets.token_urlsafe(32)
        now = int(self.clock())
        self.store.entities.Session(
            token_hash=passwords.digest(session_id),
            admin=admin,
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + self.settings.get("sessionMaxAge") * 60,
            remote_addr=address[:64],
        )
        self._purge_expired(now)
        return f"{session_id}.{self._sign(session_id)}"

    def _purge_expired(self, now: int) -> None:
        select(s for s in self.store.entities.Session if s.expires_at < now).delete(bulk=True)

    def session(self, cookie: str | None) -> SessionInfo | None:
        """The live session a cookie names, or None."""
        session_id = self._verify_cookie(cookie)
        if session_id is None:
            return None
        with db_session:
            row = self.store.entities.Session.get(token_hash=passwords.digest(session_id))
            if row is None or row.expires_at < self.clock():
                return None
            admin = row.admin
            return SessionInfo(
                row.id,
                admin.id,
                admin.username,
                row.csrf_token,
                passwords.must_change_credentials(admin.username, admin.password_hash),
            )

    def live_sessions(self, ids: Iterable[int]) -> set[int]:
        """Those of these session ids whose sessions still exist and have not expired."""
        ids = list(ids)
        if not ids:
            return set()
        now = self.clock()
        with db_session:
            return set(
                select(
                    s.id for s in self.store.entities.Session if s.id in ids and s.expires_at >= now
                )
            )

    def logout(self, cookie: str | None) -> None:
        session_id = self._verify_cookie(cookie)
        if session_id is None:
            return
        with db_session:
            row = self.store.entities.Session.get(token_hash=passwords.digest(session_id))
            if row is None:
                return
            ended = {row.id}
            row.delete()
        self._ended(ended)

    def session_lifetime(self) -> int:
        return self.settings.get("sessionMaxAge") * 60

    def _sign(self, session_id: str) -> str:
        key = self.settings.internal("sessionSecret").encode()
        mac = hmac.new(key, session_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def _verify_cookie(self, cookie: str | None) -> str | None:
        if not cookie or cookie.count(".") != 1:
            return None
        session_id, signature = cookie.split(".")
        if not hmac.compare_digest(signature.encode(), self._sign(session_id).encode()):
            return None
        return session_id

    # ---- changes that need the current credentials ---------------------------------

    def update_user(self, current: SessionInfo | None, body: dict) -> None:
        """Change username and password; ends every other session (every session, when
        the caller signed in with an API token)."""
        fields = ("oldUsername", "oldPassword", "newUsername", "newPassword")
        values = [body.get(name) for name in fields]
        for name, value in zip(fields, values, strict=True):
            if not isinstance(value, str) or not value:
                raise ServiceError(f"{name} is required")
        old_username, old_password, new_username, new_password = values
        check_username(new_username)
        try:
            passwords.check_new_password(new_username, new_password)
        except ValueError as exc:
            raise ServiceError(str(exc)) from None
        with db_session:
            admin = self._admin_of(current)
            if admin.username != old_username or not passwords.verify_password(
                old_password, admin.password_hash
            ):
                raise ServiceError("the current username or password is wrong")
            self._require_current_code(admin, body.get("twoFactorCode"))
            if new_username != admin.username and self.store.entities.Admin.get(
                username=new_username
            ):
                raise ServiceError(f"username '{new_username}' is taken")
            admin.username = new_username
            admin.password_hash = passwords.hash_password(new_password)
            admin.updated_at = int(self.clock())
            ended = self._end_other_sessions(admin, current)
        self._ended(ended)

    def update_two_factor(self, current: SessionInfo | None, enable, secret, code) -> bool:
        """Turn two-factor on, off or to a new secret. Returns True when it changed.

        Turning it on proves the authenticator works: `code` must come from the new
        secret. Changing or turning it off needs a code from the current secret."""
        if not isinstance(enable, bool):
            raise ServiceError("twoFactorEnable must be true or false")
        if not isinstance(secret, str):
            raise ServiceError("twoFactorToken must be a base32 string")
        with db_session:
            admin = self._admin_of(current)
            if not enable:
                if not admin.totp_enabled:
                    return False
                self._require_current_code(admin, code)
                admin.totp_enabled, admin.totp_secret = False, ""
            else:
                secret = secret.strip().upper().replace(" ", "")
                if not secret or (admin.totp_enabled and secret == admin.totp_secret):
                    if not admin.totp_enabled:
                        raise ServiceError("twoFactorToken is required to enable two-factor")
                    return False
                low, high = TOTP_SECRET_LENGTHS
                if not low <= len(secret) <= high or not _is_base32(secret):
                    raise ServiceError(
                        f"twoFactorToken must be a base32 secret of {low} to {high} characters"
                    )
                if admin.totp_enabled:
                    self._require_current_code(admin, code)
                else:
                    admin.totp_secret, admin.totp_last_step = secret, 0
                    if not self._consume_code(admin, code):
                        raise ServiceError(
                            "twoFactorCode must be the current code of the new secret, "
                            "to prove the authenticator is set up"
                        )
                admin.totp_secret, admin.totp_enabled = secret, True
            admin.updated_at = int(self.clock())
            ended = self._end_other_sessions(admin, current)
        self._ended(ended)
        return True

    def _require_current_code(self, admin, code) -> None:
        if admin.totp_enabled and not self._consume_code(admin, code):
            raise ServiceError("twoFactorCode: the current two-factor code is missing or wrong")

    def _consume_code(self, admin, code) -> bool:
        """RFC 6238 with one step of drift either way; a code is good once."""
        if isinstance(code, int) and not isinstance(code, bool):
            code = f"{code:06d}"
        if not isinstance(code, str):
            return False
        code = code.strip()
        # ASCII only: str.isdigit() also accepts other scripts' digits, which
        # hmac.compare_digest refuses to compare.
        if not code.isascii() or not code.isdigit():
            return False
        totp = pyotp.TOTP(admin.totp_secret)
        now_step = int(self.clock()) // TOTP_STEP
        # A code is used once: its step must come after the last one used. A last step
        # ahead of the whole window means the clock was set back since; the codes of the
        # window were never used at this time, and refusing them would lock the admin
        # out until the clock caught up.
        last_step = admin.totp_last_step if admin.totp_last_step <= now_step + 1 else 0
        for step in (now_step - 1, now_step, now_step + 1):
            expected = totp.generate_otp(step)
            if hmac.compare_digest(code, expected) and step > last_step:
                admin.totp_last_step = step
                return True
        return False

    def _admin_of(self, current: SessionInfo | None):
        if current is None:
            return self._first_admin()
        return self.store.entities.Admin[current.admin_id]

    def _end_other_sessions(self, admin, current: SessionInfo | None) -> set[int]:
        """Delete the admin's sessions but `current`; returns the ids of those deleted."""
        keep = current.id if current is not None else 0
        Session = self.store.entities.Session
        ended = set(select(s.id for s in Session if s.admin == admin and s.id != keep))
        select(s for s in Session if s.admin == admin and s.id != keep).delete(bulk=True)
        return ended


def check_username(username) -> None:
    if (
        not isinstance(username, str)
        or not 1 <= len(username) <= 64
        or username != username.strip()
    ):
        raise ServiceError("the username must be 1-64 characters without surrounding spaces")
    if not username.isprintable():
        raise ServiceError("the username may not contain control or invisible characters")


def _is_unicode(text: str) -> bool:
    """False for strings with unpaired surrogates (JSON can carry them), which no
    database accepts."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _is_base32(secret: str) -> bool:
    try:
        base64.b32decode(secret + "=" * (-len(secret) % 8))
    except ValueError:
        return False
    return True
