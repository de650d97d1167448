"""The sign-in limiter: failure budgets, and the device cookies of browsers that signed in.

Failed sign-ins are counted against budgets, each a number of failures within a window
of time; a budget spent blocks its key for `BLOCK_SECONDS`. Which budgets an attempt
spends depends on what it carries, as OWASP's device cookies have it:

- An attempt without a valid device cookie spends the budget of its (client address,
  username) pair, five within five minutes, and the budget of the username, ten within
  fifteen minutes, shared by every browser that never signed in as that user. So a
  guesser who spreads guesses over many addresses (a client can pick its source
  address among the 127/8 loopback ones, or a whole IPv6 prefix) still gets ten.
- A browser that signed in once holds a device cookie: a random nonce and an HMAC of the
  username and the nonce under the panel's session secret, so it is good for that
  username only and cannot be made without the secret. An attempt carrying a valid one is
  judged by that device's own budget, five within five minutes, and by nothing else: a
  guesser who spent the username's budget does not lock the admin's known browser out.
  A stolen cookie gives its thief that one device's budget and no more.

Windows and blocks run on the monotonic clock, which no change of the system time moves.
A block is also written to the database (table `login_block`, by the key's digest) with
its end in wall-clock time, so restarting the panel does not lift it; read back at start,
its remainder is capped at the block's length, so a clock set back cannot stretch it.
Keys are SHA-256 digests of fixed size however long the username sent, and of distinct
shapes for the three kinds: no address starts with `#`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import defaultdict, deque
from dataclasses import dataclass

from appliance.services.accounts.passwords import digest

BLOCK_SECONDS = 900
DEVICE_COOKIE = "appliance_device"
DEVICE_COOKIE_SECONDS = 365 * 86400


@dataclass(frozen=True)
class Budget:
    failures: int
    window: int  # seconds


PAIR = Budget(5, 300)
USERNAME = Budget(10, 900)
DEVICE = Budget(5, 300)
LONGEST_WINDOW = max(budget.window for budget in (PAIR, USERNAME, DEVICE))


class LoginThrottle:
    """Counts failures per key against a budget; blocks a key whose budget is spent."""

    def __init__(self, block: int = BLOCK_SECONDS):
        self.block = block
        self.clock = time.monotonic
        self._failures: dict[str, deque] = defaultdict(deque)
        self._blocked_until: dict[str, float] = {}

    def seconds_left(self, key: str) -> float:
        """How long `key` stays blocked; 0 when it is not."""
        until = self._blocked_until.get(key, 0)
        now = self.clock()
        if until > now:
            return until - now
        if until:
            del self._blocked_until[key]
        return 0

    def failed(self, key: str, budget: Budget) -> bool:
        """Count a failure; True when it spends the budget and starts a block."""
        now = self.clock()
        failures = self._failures[key]
        failures.append(now)
        while failures and failures[0] <= now - budget.window:
            failures.popleft()
        blocked = len(failures) >= budget.failures
        if blocked:
            self._blocked_until[key] = now + self.block
            del self._failures[key]
        self._forget_old(now)
        return blocked

    def succeeded(self, key: str) -> None:
        self._failures.pop(key, None)

    def restore(self, key: str, seconds_left: float) -> None:
        """A block read back from the database, never longer than a block is."""
        if seconds_left > 0:
            self._blocked_until[key] = self.clock() + min(seconds_left, self.block)

    def _forget_old(self, now: float) -> None:
        """Keep memory bounded under a spray of usernames: blocks that ran out are
        dropped too, not only when their key signs in again."""
        if len(self._failures) + len(self._blocked_until) < 10_000:
            return
        for key in [k for k, v in self._failures.items() if not v or v[-1] <= now - LONGEST_WINDOW]:
            del self._failures[key]
        for key in [k for k, until in self._blocked_until.items() if until <= now]:
            del self._blocked_until[key]


def pair_key(address: str, username: str) -> str:
    return digest(f"{address}\0{username}")


def username_key(username: str) -> str:
    return digest(f"#username\0{username}")


def device_key(nonce: str) -> str:
    return digest(f"#device\0{nonce}")


def new_device_cookie(secret: str, username: str) -> str:
    nonce = secrets.token_urlsafe(16)
    return f"{nonce}.{_device_mac(secret, username, nonce)}"


def device_of(secret: str, cookie: str | None, username: str) -> str | None:
    """The nonce of a device cookie made for `username`, or None for a missing, forged or
    malformed one, or one made for another username."""
    if not cookie or cookie.count(".") != 1:
        return None
    nonce, mac = cookie.split(".")
    if not nonce or not hmac.compare_digest(
        mac.encode(), _device_mac(secret, username, nonce).encode()
    ):
        return None
    return nonce


def _device_mac(secret: str, username: str, nonce: str) -> str:
    message = f"device\0{username}\0{nonce}".encode()
    mac = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
