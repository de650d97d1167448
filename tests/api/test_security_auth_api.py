"""Sign-in cases of the release checklist (docs/security-cases.md) that no other module
proves: credentials scanners try force a change, passwords stored as plain text or bcrypt
still sign in, every kind of bad token gets one answer, guesses spread over many
addresses are throttled per username while the admin's known browser still signs in, a
forwarded hop that is no address counts as the proxy, common and short new passwords are
refused, two-factor codes are good within 30 seconds of drift and no further, and an
emptied session secret is replaced.

Tests that change the admin row put it back afterwards, so they share one panel; the
ones that restart the panel or turn on two-factor get their own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid

import bcrypt
import pyotp
import pytest
import requests
from helpers import db_rows, leaving_from, ok, setting_rows
from panels import ApiClient
from test_auth_api import (
    code_at,
    cookie_attributes,
    current_step,
    enable_two_factor,
    login,
    refused,
    signed_in,
)

STATUS = "/panel/api/server/status"
GET_DB = "/panel/api/server/getDb"
INBOUNDS = "/panel/api/inbounds/list"
UPDATE_USER = "/panel/api/setting/updateUser"
TOKENS = "/panel/api/setting/apiTokens"
SETTINGS = "/panel/api/setting/update"
AUDIT = "/panel/api/audit/list"
STRONG = "Correct-Horse-Battery-7"
MUST_CHANGE = "among the first ones scanners try; change them first"


@pytest.fixture
def stored_admin(panel):
    """Lets a test store the admin's username and password hash as another tool would;
    the panel's own credentials are put back afterwards."""
    [(admin_id, username, password_hash)] = db_rows(
        panel, "SELECT id, username, password_hash FROM admin"
    )

    def store(new_username: str, new_hash: str) -> None:
        db_rows(
            panel,
            "UPDATE admin SET username = ?, password_hash = ? WHERE id = ?",
            (new_username, new_hash, admin_id),
        )

    yield store
    store(username, password_hash)


def stored_hash(panel) -> str:
    return db_rows(panel, "SELECT password_hash FROM admin")[0][0]


def bcrypt_hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


# ---- case 3: credentials scanners try force a change -------------------------------------


@pytest.mark.parametrize("form", ["plain text", "bcrypt"])
def test_admin_admin_signs_in_but_must_change_the_credentials_first(panel, stored_admin, form):
    stored_admin("admin", "admin" if form == "plain text" else bcrypt_hash("admin"))
    client = signed_in(panel, "admin", "admin")
    for path in (STATUS, INBOUNDS, "/panel/api/setting/all", TOKENS):
        response = client.raw("POST" if path.endswith("all") else "GET", path)
        assert response.status_code == 403, (path, response.text)
        assert MUST_CHANGE in response.json()["msg"]
    # Nothing else was let through: an inbound add is refused the same way.
    response = client.raw("POST", "/panel/api/inbounds/add", json={"protocol": "vless"})
    assert response.status_code == 403 and MUST_CHANGE in response.json()["msg"]
    # The weak password is still refused as a new one; a strong one is taken.
    weak = {"oldUsername": "admin", "oldPassword": "admin", "newUsername": "admin"}
    reply = client.post(UPDATE_USER, json={**weak, "newPassword": "admin"})
    assert reply["success"] is False and "at least 12 characters" in reply["msg"]
    reply = client.post(UPDATE_USER, json={**weak, "newUsername": "owner", "newPassword": STRONG})
    assert reply["success"] is True, reply
    assert stored_hash(panel).startswith("scrypt$")
    assert ok(client.get(STATUS))
    assert login(panel, "admin", "admin").json()["success"] is False


# ---- case 17: passwords stored as plain text or bcrypt ---------------------------------


@pytest.mark.parametrize("form", ["plain text", "bcrypt $2b$", "bcrypt $2y$"])
def test_a_password_stored_by_another_tool_still_signs_in_and_becomes_scrypt(
    panel, stored_admin, form
):
    stored = {
        "plain text": STRONG,
        "bcrypt $2b$": bcrypt_hash(STRONG),
        "bcrypt $2y$": "$2y$" + bcrypt_hash(STRONG)[4:],
    }[form]
    username = f"legacy-{uuid.uuid4().hex[:8]}"  # the failed try counts for this name only
    stored_admin(username, stored)
    assert login(panel, username, STRONG + "x").json()["success"] is False
    client = signed_in(panel, username, STRONG)
    assert ok(client.get(STATUS))
    upgraded = stored_hash(panel)
    assert upgraded.startswith("scrypt$") and STRONG not in upgraded
    assert login(panel, username, STRONG).json()["success"] is True


@pytest.mark.parametrize(
    "stored",
    [
        "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo",
        "$2b$04$truncated",
        "scrypt$broken",
    ],
)
def test_a_hash_the_panel_cannot_read_never_signs_in_with_its_own_text(panel, stored_admin, stored):
    username = f"unreadable-{uuid.uuid4().hex[:8]}"
    stored_admin(username, stored)
    reply = login(panel, username, stored).json()
    assert reply == {"success": False, "msg": "wrong username or password", "obj": None}
    assert stored_hash(panel) == stored


# ---- case 4: every bad token gets the same answer --------------------------------------


def test_wrong_prefix_disabled_deleted_expired_and_out_of_scope_tokens_get_the_same_answer(
    panel, api
):
    kept = ok(api.post(f"{TOKENS}/create", json={"name": "security kept"}))
    disabled = ok(api.post(f"{TOKENS}/create", json={"name": "security disabled"}))
    deleted = ok(api.post(f"{TOKENS}/create", json={"name": "security deleted"}))
    later = int(time.time() * 1000) + 3_600_000
    expired = ok(
        api.post(f"{TOKENS}/create", json={"name": "security expired", "expiresAt": later})
    )
    reader = ok(api.post(f"{TOKENS}/create", json={"name": "security reader", "scope": "read"}))
    ok(api.post(f"{TOKENS}/setEnabled/{disabled['id']}", json={"enabled": False}))
    ok(api.post(f"{TOKENS}/delete/{deleted['id']}"))
    past = int(time.time() * 1000) - 1
    db_rows(panel, "UPDATE api_token SET expires_at = ? WHERE id = ?", (past, expired["id"]))
    good = kept["token"]
    bad = {
        "wrong": "apl_" + "0" * (len(good) - 4),
        "prefix": good[: len(good) // 2],
        "one character short": good[:-1],
        "one character more": good + "0",
        "disabled": disabled["token"],
        "deleted": deleted["token"],
        "expired": expired["token"],
        "read-only, asked for the database": reader["token"],
    }
    answers = {}
    for kind, token in bad.items():
        response = requests.get(
            panel.url + GET_DB, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        answers[kind] = (response.status_code, response.content)
    assert len(set(answers.values())) == 1, answers
    status, body = answers["wrong"]
    assert status == 401 and b'"success": false' in body
    for token in (good, reader["token"]):
        response = requests.get(
            panel.url + STATUS, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert response.status_code == 200
    response = requests.get(
        panel.url + GET_DB, headers={"Authorization": f"Bearer {good}"}, timeout=10
    )
    assert response.status_code == 200 and response.content[:6] == b"SQLite"


# ---- case 41: guesses at one username from many addresses -----------------------------

DEVICE = "appliance_device"
UNKNOWN_BROWSERS = "for this username from browsers that have not signed in to it before"
THIS_BROWSER = "for this username from this browser; try again in"
USERNAME_BUDGET = 10


def browser(server, address: str = "127.0.0.1") -> ApiClient:
    client = ApiClient(server.url)
    leaving_from(client.http, address)
    return client


def sign_in_from(client: ApiClient, username: str, password: str) -> requests.Response:
    return client.http.post(
        client.url + "/login", json={"username": username, "password": password}, timeout=10
    )


def known_browser(server, username: str, password: str) -> ApiClient:
    """A browser that signed in once and kept only its device cookie."""
    client = browser(server)
    answer = sign_in_from(client, username, password)
    assert answer.json()["success"] is True
    _, attributes = cookie_attributes(answer, DEVICE)
    assert "httponly" in attributes and attributes["samesite"].lower() == "lax"
    client.http.cookies.pop("appliance_session")
    assert client.http.cookies.get(DEVICE)
    return client


def spend_the_username_budget(server, username: str, guesses: int, addresses: int) -> list:
    """`guesses` wrong passwords for `username`, spread over as many source addresses;
    the answers in order."""
    guessers = [browser(server, f"127.0.0.{n}") for n in range(2, 2 + addresses)]
    return [
        sign_in_from(guessers[n % addresses], username, f"guess-{n}-{uuid.uuid4().hex[:6]}")
        for n in range(guesses)
    ]


def test_guesses_from_many_addresses_are_throttled_but_a_known_browser_signs_in(fresh_panel):
    """SECURITY-CASES 41: 100 guesses from 20 addresses. Each address stays within its own
    limit (five), so only the username's budget stops them; the admin's browser that
    signed in before keeps signing in, after a kill -9 too."""
    user, password = fresh_panel.username, fresh_panel.password
    known = known_browser(fresh_panel, user, password)
    answers = spend_the_username_budget(fresh_panel, user, guesses=100, addresses=20)
    judged = [answer for answer in answers if answer.status_code == 200]
    throttled = [answer for answer in answers if answer.status_code == 429]
    assert len(judged) == USERNAME_BUDGET and len(throttled) == 100 - USERNAME_BUDGET
    assert all(answer.json()["msg"] == "wrong username or password" for answer in judged)
    assert all(UNKNOWN_BROWSERS in answer.json()["msg"] for answer in throttled)
    # The right password from a browser never seen is refused while the block lasts.
    newcomer = sign_in_from(browser(fresh_panel, "127.0.0.99"), user, password)
    refused(newcomer, 429, UNKNOWN_BROWSERS)
    assert 840 < int(newcomer.headers["Retry-After"]) <= 900
    assert "appliance_session" not in newcomer.cookies
    fresh_panel.process.kill()
    fresh_panel.process.wait()
    fresh_panel.start()
    refused(sign_in_from(browser(fresh_panel, "127.0.0.98"), user, password), 429, UNKNOWN_BROWSERS)
    known.url = fresh_panel.url
    signed = sign_in_from(known, user, password)
    assert signed.json() == {"success": True, "msg": "signed in", "obj": None}
    assert ok(known.get(STATUS))


def test_a_forged_or_another_users_device_cookie_does_not_pass_the_throttle(fresh_panel):
    user, password = fresh_panel.username, fresh_panel.password
    known = known_browser(fresh_panel, user, password)
    old_cookie = known.http.cookies[DEVICE]
    # The account is renamed: the cookie was made for the old name, not this one.
    admin = signed_in(fresh_panel)
    renamed = {
        "oldUsername": user,
        "oldPassword": password,
        "newUsername": "owner-renamed",
        "newPassword": STRONG,
    }
    ok(admin.post(UPDATE_USER, json=renamed))
    renamed_browser = known_browser(fresh_panel, "owner-renamed", STRONG)
    spend_the_username_budget(fresh_panel, "owner-renamed", guesses=USERNAME_BUDGET, addresses=2)
    nonce, mac = old_cookie.split(".")
    forged = {
        "another user's": old_cookie,
        "a changed signature": f"{nonce}.{mac[::-1]}",
        "made up": f"{uuid.uuid4().hex}.{base64.urlsafe_b64encode(b'x' * 32).decode()}",
        "not a cookie of ours": "garbage",
    }
    for kind, value in forged.items():
        holder = browser(fresh_panel)
        holder.http.cookies.set(DEVICE, value)
        answer = sign_in_from(holder, "owner-renamed", STRONG)
        assert answer.status_code == 429 and UNKNOWN_BROWSERS in answer.json()["msg"], kind
    # The browser that signed in under the new name passes.
    assert sign_in_from(renamed_browser, "owner-renamed", STRONG).json()["success"] is True


def test_wrong_passwords_with_a_valid_device_cookie_spend_that_device_alone(fresh_panel):
    """A stolen device cookie gives its thief five guesses, not a way around the limit;
    the admin's other known browsers are unaffected."""
    user, password = fresh_panel.username, fresh_panel.password
    stolen, other = (
        known_browser(fresh_panel, user, password),
        known_browser(fresh_panel, user, password),
    )
    assert stolen.http.cookies[DEVICE] != other.http.cookies[DEVICE]
    for n in range(5):
        refused(sign_in_from(stolen, user, f"wrong-{n}"), 200, "wrong username or password")
    blocked = sign_in_from(stolen, user, password)
    refused(blocked, 429, THIS_BROWSER)
    assert 840 < int(blocked.headers["Retry-After"]) <= 900
    assert sign_in_from(other, user, password).json()["success"] is True
    # The device's block is stored like the others: a restart does not lift it.
    fresh_panel.stop()
    fresh_panel.start()
    stolen.url = other.url = fresh_panel.url
    refused(sign_in_from(stolen, user, password), 429, THIS_BROWSER)
    assert sign_in_from(other, user, password).json()["success"] is True


# ---- case 42: a forwarded hop that is no address -------------------------------------------


def test_a_forwarded_hop_that_is_no_address_counts_as_the_proxy_itself(fresh_panel):
    """Behind a trusted proxy, made-up `X-Forwarded-For` hops are not clients of their
    own: each failure counts for the proxy's address, which the block, the audit log
    and the panel log name."""
    admin = signed_in(fresh_panel)
    ok(admin.post(SETTINGS, json={"trustedProxies": "127.0.0.1"}))
    user, password = fresh_panel.username, fresh_panel.password
    for n in range(5):
        refused(login(fresh_panel, user, "bad", forwarded_for=f"garbage{n}"), 200, "wrong")
    for hops in ("garbage6", "203.0.113.9, garbage6", "1.2.3.4:80", None):
        blocked = login(fresh_panel, user, password, forwarded_for=hops)
        refused(blocked, 429, "for this username from 127.0.0.1; try again in")
    # A real address behind the proxy is its own client, written in one spelling.
    other = login(fresh_panel, user, password, forwarded_for="2001:DB8::1")
    assert other.json()["success"] is True, other.text
    sign_ins = ok(admin.get(AUDIT, params={"route": "/login", "pageSize": 50}))["items"]
    assert {entry["address"] for entry in sign_ins} == {"127.0.0.1", "2001:db8::1"}
    assert "garbage" not in fresh_panel.output()


# ---- case 47: a common or short password ------------------------------------------------


@pytest.mark.parametrize(
    "password, words",
    [
        ("admin123", "the password must be at least 12 characters long"),
        ("admin1234", "the password must be at least 12 characters long"),
        ("admin1234567", "too easy to guess: This is similar to a commonly used password."),
        ("password1234", "too easy to guess: This is a very common password."),
        ("qwertyuiop12", "too easy to guess: "),
        ("aaaaaaaaaaaaaaaa", 'too easy to guess: Repeats like "aaa" are easy to guess.'),
        ("owner-of-the-panel", "too easy to guess: "),
    ],
    ids=["admin123", "admin1234", "admin1234567", "password1234", "keyboard", "repeats", "name"],
)
def test_a_common_or_short_new_password_is_refused_with_advice(fresh_panel, password, words):
    """zxcvbn judges every new password; its own warning or suggestion is the advice, and
    the username counts as guessable (`owner-of-the-panel` is the username here)."""
    client = signed_in(fresh_panel)
    change = {
        "oldUsername": fresh_panel.username,
        "oldPassword": fresh_panel.password,
        "newUsername": "owner-of-the-panel",
        "newPassword": password,
    }
    reply = client.post(UPDATE_USER, json=change)
    assert reply["success"] is False and words in reply["msg"], reply
    assert reply["msg"] != "the password is too easy to guess: ", reply
    assert db_rows(fresh_panel, "SELECT username FROM admin") == [(fresh_panel.username,)]
    assert login(fresh_panel, fresh_panel.username, fresh_panel.password).json()["success"]


# ---- case 6: two-factor drift ------------------------------------------------------------


def test_two_factor_codes_30_seconds_off_pass_and_90_seconds_off_fail(fresh_panel):
    admin = signed_in(fresh_panel)
    secret = pyotp.random_base32()
    step = current_step(margin=12)
    assert enable_two_factor(admin, secret, code_at(secret, step))["success"] is True
    user, password = fresh_panel.username, fresh_panel.password
    near = {code_at(secret, s) for s in (step - 1, step, step + 1)}

    def forget_used_codes() -> None:
        db_rows(fresh_panel, "UPDATE admin SET totp_last_step = 0")

    forget_used_codes()
    for far in (step - 3, step + 3):
        code = code_at(secret, far)
        if code not in near:  # one in a million: the far code equals a near one
            refused(login(fresh_panel, user, password, code), 200, "two-factor code")
    for skew in (step + 1, step - 1):
        forget_used_codes()
        signed = login(fresh_panel, user, password, code_at(secret, skew))
        assert signed.json()["success"] is True, skew
        # Replayed, the same code is refused.
        refused(login(fresh_panel, user, password, code_at(secret, skew)), 200, "two-factor")


# ---- case 8: an empty session secret is replaced by a random one -----------------------


def forged_cookie(cookie: str, key: bytes) -> str:
    session_id = cookie.split(".")[0]
    mac = hmac.new(key, session_id.encode(), hashlib.sha256).digest()
    return f"{session_id}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_an_empty_session_secret_row_is_replaced_by_a_random_key(fresh_panel):
    client = signed_in(fresh_panel)
    cookie = client.http.cookies["appliance_session"]
    before = setting_rows(fresh_panel)["sessionSecret"]
    fresh_panel.stop()
    db_rows(fresh_panel, "UPDATE setting SET value = '' WHERE key = 'sessionSecret'")
    fresh_panel.start()
    secret = setting_rows(fresh_panel)["sessionSecret"]
    assert len(secret) >= 32 and secret != before
    # Neither the cookie signed with the old key nor one signed with an empty key opens
    # the panel: every cookie is signed with the new random key.
    for value in (cookie, forged_cookie(cookie, b"")):
        response = requests.get(
            fresh_panel.url + STATUS, cookies={"appliance_session": value}, timeout=10
        )
        assert response.status_code == 401, response.text
    assert ok(signed_in(fresh_panel).get(STATUS))
