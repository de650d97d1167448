"""The system clock jumping a day forward or back under the panel.

Expiry and two-factor codes are wall-clock facts (an expiry date, the 30-second step of
an authenticator app), so the services take the wall clock as a parameter; here it is
one the test moves, on a real SQLite store. The sign-in limiter's windows are lengths of
time, on the monotonic clock, which no change of the system time moves.
"""

from __future__ import annotations

import time

import pyotp
import pytest
from access_log import ip_limited_store
from pony.orm import db_session

from appliance.errors import ServiceError
from appliance.runtime.changes import ChangeNotice
from appliance.services.accounts.auth import Auth, LoginThrottle
from appliance.services.clients.bulk import ClientBulk
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.webhooks.outbox import Outbox

DAY = 86_400
ADDRESS = "203.0.113.50"
WRONG = "wrong username, password or two-factor code"


@pytest.fixture
def world(tmp_path):
    """A store with one inbound; services on a wall clock the test sets."""
    store, settings, clients = ip_limited_store(tmp_path, {})
    wall = {"now": time.time()}
    clock = lambda: wall["now"]  # noqa: E731
    clients.clock = clock
    bulk = ClientBulk(clients, ClientQuery(store, settings, Presence(), clock=clock))
    auth = Auth(
        store,
        settings,
        ChangeNotice(),
        lambda username, address, ok: None,
        Outbox(store),
        clock=clock,
    )
    yield {"store": store, "clients": clients, "bulk": bulk, "auth": auth, "wall": wall}
    store.close()


def test_a_client_expiring_tomorrow_ends_when_the_clock_passes_tomorrow(world):
    now = world["wall"]["now"]
    with db_session:
        [(inbound_id,)] = world["store"].rows("SELECT id FROM inbound")
    tomorrow = int((now + DAY) * 1000)
    client = {"email": "tomorrow@x", "expiryTime": tomorrow}
    world["clients"].add({"client": client, "inboundIds": [inbound_id]})
    assert world["bulk"].disable_depleted() == []
    assert world["clients"].get("tomorrow@x")["client"]["enable"] is True
    world["wall"]["now"] = now + DAY + 1
    assert world["bulk"].disable_depleted() == ["tomorrow@x"]
    assert world["clients"].get("tomorrow@x")["client"]["enable"] is False


def two_factor_admin(world) -> tuple[str, str, pyotp.TOTP]:
    username, password = world["auth"].bootstrap()
    totp = pyotp.TOTP(pyotp.random_base32())
    now = world["wall"]["now"]
    assert world["auth"].update_two_factor(None, True, totp.secret, totp.at(now)) is True
    return username, password, totp


def sign_in(world, username: str, password: str, code: str) -> bool:
    try:
        world["auth"].login(username, password, code, ADDRESS)
    except ServiceError as exc:
        assert exc.msg == WRONG
        return False
    return True


def test_two_factor_codes_are_judged_by_the_clock_as_it_reads_after_a_jump(world):
    username, password, totp = two_factor_admin(world)
    start = world["wall"]["now"]
    # A day ahead: the code of the new time signs in, a code a day old does not.
    world["wall"]["now"] = start + DAY
    assert sign_in(world, username, password, totp.at(start + 30)) is False
    assert sign_in(world, username, password, totp.at(start + DAY)) is True
    assert sign_in(world, username, password, totp.at(start + DAY)) is False  # replayed
    # Set back a day (the jump corrected): the codes of that time sign in again, once
    # each, rather than every code being taken for a replay until the clock catches up.
    world["wall"]["now"] = start + 120
    assert sign_in(world, username, password, totp.at(start + DAY + 30)) is False
    assert sign_in(world, username, password, totp.at(start + 120)) is True
    assert sign_in(world, username, password, totp.at(start + 120)) is False  # replayed


def test_the_sign_in_limiter_counts_on_the_monotonic_clock(world):
    assert LoginThrottle().clock is time.monotonic
    assert world["auth"].throttle.clock is time.monotonic
