"""Sign-in end to end: the session routes, password storage, the sign-in throttle,
two-factor codes, the admin account, the session cookie and CSRF, over real HTTP.

Tests that change the admin account, two-factor or the throttle run on a panel of their
own (`fresh_panel`); the rest share the module's panel and leave its sign-in state as
they found it. Two-factor tests compute codes for explicit steps (pyotp `for_time`) and
first make sure enough of the current 30-second step is left, so the server sees the
same step the test planned for.
"""

from __future__ import annotations

import json
import os
import re
import time

import pyotp
import pytest
import requests
from core_panel import wait_until
from helpers import certs_dir, database_bytes, db_rows, write_self_signed
from panels import ApiClient

STATUS = "/panel/api/server/status"
UPDATE = "/panel/api/setting/update"
UPDATE_USER = "/panel/api/setting/updateUser"
STEP = 30
NEW_PASSWORD = "Correct-Horse-41"


# ---- helpers ----------------------------------------------------------------------------


def login(
    server, username, password, code=None, *, forwarded_for=None, form=False, origin=None
) -> requests.Response:
    payload = {"username": username, "password": password}
    if code is not None:
        payload["twoFactorCode"] = code
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    if origin is not None:
        headers["Origin"] = origin
    body = {"data": payload} if form else {"json": payload}
    return requests.post(server.url + "/login", headers=headers, timeout=10, **body)


def signed_in(server, username=None, password=None, code=None) -> ApiClient:
    client = ApiClient(server.url)
    reply = client.sign_in(username or server.username, password or server.password, code)
    assert reply["success"] is True, reply
    return client


def refused(response: requests.Response, status: int, fragment: str) -> None:
    """The response is an envelope error with this HTTP status and a message saying so."""
    assert response.status_code == status, response.text
    reply = response.json()
    assert reply["success"] is False
    assert fragment in reply["msg"]


def two_factor_enabled(server) -> bool:
    reply = requests.post(server.url + "/getTwoFactorEnable", timeout=10).json()
    assert reply["success"] is True
    return reply["obj"]


def current_step(margin: float = 8) -> int:
    """The TOTP step now, after sleeping into the next one if fewer than `margin`
    seconds of it are left."""
    left = STEP - time.time() % STEP
    if left < margin:
        time.sleep(left + 0.3)
    return int(time.time()) // STEP


def wait_for_step(step: int) -> None:
    time.sleep(max(0.0, step * STEP - time.time()) + 0.3)


def code_at(secret: str, step: int) -> str:
    return pyotp.TOTP(secret).at(for_time=step * STEP)


def enable_two_factor(client: ApiClient, secret: str, code: str) -> dict:
    return client.post(
        UPDATE, json={"twoFactorEnable": True, "twoFactorToken": secret, "twoFactorCode": code}
    )


def cookie_attributes(
    response: requests.Response, name: str = "appliance_session"
) -> tuple[str, dict[str, str]]:
    """A cookie's name=value and its attributes, names lower-cased (the session cookie's
    unless named)."""
    [header] = [
        value
        for value in response.raw.headers.getlist("Set-Cookie")
        if value.startswith(f"{name}=")
    ]
    name_value, *attributes = [part.strip() for part in header.split(";")]
    parsed = {}
    for attribute in attributes:
        key, _, value = attribute.partition("=")
        parsed[key.lower()] = value
    return name_value, parsed


def admin_row(server) -> tuple[str, str]:
    return db_rows(server, "SELECT username, password_hash FROM admin")[0]


def change_user(client: ApiClient, server, new_username, new_password, **extra) -> dict:
    return client.post(
        UPDATE_USER,
        json={
            "oldUsername": server.username,
            "oldPassword": server.password,
            "newUsername": new_username,
            "newPassword": new_password,
            **extra,
        },
    )


# ---- the session routes ------------------------------------------------------------------


def test_login_sets_a_working_cookie_with_no_store_answers(panel):
    response = login(panel, panel.username, panel.password)
    assert response.status_code == 200
    assert response.json() == {"success": True, "msg": "signed in", "obj": None}
    cookie = response.cookies.get("appliance_session")
    assert cookie
    status = requests.get(panel.url + STATUS, cookies={"appliance_session": cookie}, timeout=10)
    assert status.status_code == 200
    assert status.json()["success"] is True
    for answer in (response, status):
        assert answer.headers["Cache-Control"] == "no-store"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "body, content_type",
    [
        ("form", "application/x-www-form-urlencoded"),
        ("multipart", "multipart/form-data"),
        ("text", "text/plain"),
        ("bare", "no Content-Type"),
    ],
)
def test_login_takes_only_json_so_no_other_site_can_post_it(panel, body, content_type):
    """A page elsewhere can post these kinds without asking; even the right credentials
    sent so get no session."""
    fields = {"username": panel.username, "password": panel.password}
    if body == "form":
        response = login(panel, panel.username, panel.password, form=True)
    elif body == "multipart":
        files = {name: (None, value) for name, value in fields.items()}
        response = requests.post(panel.url + "/login", files=files, timeout=10)
    else:
        headers = {"Content-Type": "text/plain"} if body == "text" else {}
        data = json.dumps(fields).encode()
        response = requests.post(panel.url + "/login", data=data, headers=headers, timeout=10)
        if body == "bare":
            assert "Content-Type" not in response.request.headers
    refused(response, 415, f"Content-Type: application/json (got {content_type}")
    assert "appliance_session" not in response.cookies


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://127.0.0.1:1", "null", "file://", "not a url"]
)
def test_login_from_another_sites_page_is_refused(panel, origin):
    response = login(panel, panel.username, panel.password, origin=origin)
    refused(response, 403, "sign-in from a page of another site is refused")
    assert "appliance_session" not in response.cookies


def test_login_from_the_panels_own_page_is_accepted(panel):
    origin = panel.url.split("/", 3)[:3]
    response = login(panel, panel.username, panel.password, origin="/".join(origin))
    assert response.json() == {"success": True, "msg": "signed in", "obj": None}
    assert response.cookies.get("appliance_session")


@pytest.mark.parametrize(
    "payload, msg",
    [
        ({"username": "nobody-1", "password": "whatever-1"}, "wrong username or password"),
        ({"password": "whatever-2"}, "username and password are required strings"),
        ({"username": "nobody-3"}, "username and password are required strings"),
        ({"username": 5, "password": "x"}, "username and password are required strings"),
        (
            {"username": "nobody-4", "password": "x", "twoFactorCode": [1]},
            "twoFactorCode must be a string of digits",
        ),
        ([1, 2], "send username and password as a JSON object"),
    ],
)
def test_login_refusals_are_envelopes_without_a_cookie(panel, payload, msg):
    response = requests.post(panel.url + "/login", json=payload, timeout=10)
    assert response.status_code == 200
    assert response.json() == {"success": False, "msg": msg, "obj": None}
    assert "appliance_session" not in response.cookies


def test_login_with_the_admin_username_and_a_wrong_password_is_refused(panel):
    refused(login(panel, panel.username, "not-the-password"), 200, "wrong username or password")


def test_login_with_an_unpaired_surrogate_username_is_an_envelope_error(panel):
    response = requests.post(
        panel.url + "/login",
        data='{"username": "\\ud800", "password": "x"}',
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    refused(response, 200, "not valid Unicode")


def test_logout_ends_the_session_on_the_server(panel):
    client = signed_in(panel)
    cookie = client.http.cookies["appliance_session"]
    assert client.post("/logout") == {"success": True, "msg": "signed out", "obj": None}
    again = requests.get(panel.url + STATUS, cookies={"appliance_session": cookie}, timeout=10)
    refused(again, 401, "sign in first")
    assert "appliance_session" not in client.http.cookies


def test_logout_without_a_session_succeeds(panel):
    reply = requests.post(panel.url + "/logout", timeout=10).json()
    assert reply == {"success": True, "msg": "signed out", "obj": None}


def test_csrf_token_needs_a_session(panel):
    refused(requests.get(panel.url + "/csrf-token", timeout=10), 401, "sign in first")
    client = signed_in(panel)
    reply = client.get("/csrf-token")
    assert reply["success"] is True
    assert isinstance(reply["obj"], str) and len(reply["obj"]) >= 32
    assert signed_in(panel).get("/csrf-token")["obj"] != reply["obj"]


def test_get_two_factor_enable_answers_without_a_session(panel):
    response = requests.post(panel.url + "/getTwoFactorEnable", timeout=10)
    assert response.status_code == 200
    assert response.json() == {"success": True, "msg": "", "obj": False}


# ---- password storage --------------------------------------------------------------------


def test_admin_password_is_a_scrypt_hash_and_never_stored_in_plaintext(panel):
    username, password_hash = admin_row(panel)
    assert username == panel.username
    assert password_hash.startswith("scrypt$")
    assert panel.password not in password_hash
    assert panel.password.encode() not in database_bytes(panel)


# ---- the sign-in throttle ----------------------------------------------------------------


def test_five_failures_block_the_address_and_username_for_fifteen_minutes(fresh_panel):
    for _ in range(5):
        refused(login(fresh_panel, fresh_panel.username, "wrong-guess"), 200, "wrong username")
    blocked = login(fresh_panel, fresh_panel.username, fresh_panel.password)
    refused(blocked, 429, "try again in 15 minutes")
    assert "appliance_session" not in blocked.cookies
    assert 840 < int(blocked.headers["Retry-After"]) <= 900
    # X-Forwarded-For from an untrusted peer is ignored: it cannot escape the block.
    spoofed = login(
        fresh_panel, fresh_panel.username, fresh_panel.password, forwarded_for="198.51.100.9"
    )
    refused(spoofed, 429, "try again in 15 minutes")
    # The same address with another username is not blocked.
    refused(login(fresh_panel, "someone-else", "wrong-guess"), 200, "wrong username or password")


def test_a_block_outlasts_a_restart_of_the_panel(fresh_panel):
    for _ in range(5):
        refused(login(fresh_panel, fresh_panel.username, "wrong-guess"), 200, "wrong username")
    before = int(login(fresh_panel, fresh_panel.username, "x").headers["Retry-After"])
    fresh_panel.stop()
    fresh_panel.start()
    blocked = login(fresh_panel, fresh_panel.username, fresh_panel.password)
    refused(blocked, 429, "try again in")
    assert 0 < int(blocked.headers["Retry-After"]) <= before
    assert "appliance_session" not in blocked.cookies
    refused(login(fresh_panel, "someone-else", "wrong-guess"), 200, "wrong username or password")
    # Stored by a digest of the pair, with its end in wall-clock seconds.
    [(pair_hash, until)] = db_rows(fresh_panel, "SELECT pair_hash, blocked_until FROM login_block")
    assert len(pair_hash) == 64 and fresh_panel.username not in pair_hash
    assert 0 < until - time.time() <= 900


def test_a_stored_block_never_outlasts_its_length_when_the_clock_moved(fresh_panel):
    """A row written before the clock was set back a day ends a day later by the new
    clock; read back at start it still blocks for fifteen minutes at most."""
    for _ in range(5):
        refused(login(fresh_panel, fresh_panel.username, "wrong-guess"), 200, "wrong username")
    fresh_panel.stop()
    db_rows(fresh_panel, "UPDATE login_block SET blocked_until = ?", (int(time.time()) + 86400,))
    fresh_panel.start()
    blocked = login(fresh_panel, fresh_panel.username, fresh_panel.password)
    refused(blocked, 429, "try again in 15 minutes")
    assert 0 < int(blocked.headers["Retry-After"]) <= 900


def test_forwarded_for_from_a_trusted_proxy_tells_clients_apart(fresh_panel):
    admin = signed_in(fresh_panel)
    reply = admin.post(UPDATE, json={"trustedProxies": "127.0.0.1"})
    assert reply["success"] is True, reply
    user, password = fresh_panel.username, fresh_panel.password
    for _ in range(5):
        refused(login(fresh_panel, user, "bad", forwarded_for="203.0.113.5"), 200, "wrong")
    refused(login(fresh_panel, user, password, forwarded_for="203.0.113.5"), 429, "try again in")
    # Hops left of the proxy's own entry are the client's to write: they change nothing.
    chained = login(fresh_panel, user, password, forwarded_for="192.0.2.1, 203.0.113.5")
    refused(chained, 429, "try again in")
    refused(login(fresh_panel, "other-user", "bad", forwarded_for="203.0.113.5"), 200, "wrong")
    # The client is the last hop that is not a trusted proxy.
    for address in ("203.0.113.6", "203.0.113.7, 127.0.0.1"):
        other = login(fresh_panel, user, password, forwarded_for=address)
        assert other.json()["success"] is True, other.text
    # The panel logs before it answers, but its output reaches us through a reader thread.
    for address in ("203.0.113.6", "203.0.113.7"):
        line = f"admin signed in from {address}"
        wait_until(lambda line=line: line in fresh_panel.output(), f"the log line {line!r}")
    assert admin.get(STATUS)["success"] is True


# ---- two-factor ----------------------------------------------------------------------------


def test_enabling_two_factor_needs_the_current_code_of_the_new_secret(fresh_panel):
    admin = signed_in(fresh_panel)
    secret, other_secret = pyotp.random_base32(), pyotp.random_base32()
    step = current_step()
    attempts = [
        ({"twoFactorToken": secret}, "twoFactorCode must be the current code of the new secret"),
        ({"twoFactorToken": secret, "twoFactorCode": "000000"}, "twoFactorCode must be"),
        ({"twoFactorToken": secret, "twoFactorCode": code_at(other_secret, step)}, "must be"),
        ({"twoFactorToken": secret, "twoFactorCode": code_at(secret, step - 2)}, "must be"),
        ({"twoFactorToken": "not base32!", "twoFactorCode": "1"}, "base32 secret of 16 to 64"),
        ({"twoFactorToken": "A" * 72, "twoFactorCode": "1"}, "base32 secret of 16 to 64"),
        ({"twoFactorToken": ""}, "twoFactorToken is required"),
    ]
    for fields, msg in attempts:
        reply = admin.post(UPDATE, json={"twoFactorEnable": True, "sessionMaxAge": 7, **fields})
        assert reply["success"] is False and msg in reply["msg"], (fields, reply)
    assert two_factor_enabled(fresh_panel) is False
    settings = admin.post("/panel/api/setting/all")["obj"]
    assert settings["twoFactorEnable"] is False
    assert settings["sessionMaxAge"] == 360
    assert login(fresh_panel, fresh_panel.username, fresh_panel.password).json()["success"]


def test_two_factor_sign_in_needs_a_fresh_code(fresh_panel):
    admin, other = signed_in(fresh_panel), signed_in(fresh_panel)
    secret = pyotp.random_base32()
    step = current_step()
    # A code of the previous step is accepted (one step of drift).
    reply = enable_two_factor(admin, secret, code_at(secret, step - 1))
    assert reply == {"success": True, "msg": "settings saved", "obj": ["twoFactorEnable"]}
    assert two_factor_enabled(fresh_panel) is True
    assert admin.post("/panel/api/setting/all")["obj"]["twoFactorEnable"] is True
    refused(other.raw("GET", STATUS), 401, "sign in first")
    assert admin.get(STATUS)["success"] is True

    user, password = fresh_panel.username, fresh_panel.password
    missing = "wrong username, password or two-factor code"
    refused(login(fresh_panel, user, password), 200, missing)
    refused(login(fresh_panel, user, password, "123456"), 200, missing)
    refused(login(fresh_panel, user, password, code_at(secret, step - 1)), 200, missing)
    refused(login(fresh_panel, user, password, "١٢٣٤٥٦"), 200, missing)
    current = code_at(secret, step)
    signed = login(fresh_panel, user, password, current)
    assert signed.json()["success"] is True
    assert signed.cookies.get("appliance_session")
    refused(login(fresh_panel, user, password, current), 200, missing)


def test_with_two_factor_on_a_refusal_never_tells_whether_the_password_was_right(fresh_panel):
    admin = signed_in(fresh_panel)
    secret = pyotp.random_base32()
    step = current_step(margin=15)
    assert enable_two_factor(admin, secret, code_at(secret, step - 1))["success"] is True
    user, password, code = fresh_panel.username, fresh_panel.password, code_at(secret, step)
    answers = [
        login(fresh_panel, user, "wrong-password", code),
        login(fresh_panel, user, "wrong-password"),
        login(fresh_panel, user, password),
        login(fresh_panel, user, password, "000000" if code != "000000" else "111111"),
    ]
    for answer in answers:
        assert (answer.status_code, answer.json()) == (
            200,
            {"success": False, "msg": "wrong username, password or two-factor code", "obj": None},
        )
        assert "appliance_session" not in answer.cookies
    # The code sent with a wrong password was not used up.
    assert login(fresh_panel, user, password, code).json()["success"] is True


def test_a_code_of_the_previous_step_is_accepted_once(fresh_panel):
    admin = signed_in(fresh_panel)
    secret = pyotp.random_base32()
    step = current_step()
    assert enable_two_factor(admin, secret, code_at(secret, step - 1))["success"] is True
    wait_for_step(step + 1)
    user, password = fresh_panel.username, fresh_panel.password
    previous = pyotp.TOTP(secret).at(for_time=time.time() - STEP)
    assert previous == code_at(secret, step)
    assert login(fresh_panel, user, password, previous).json()["success"] is True
    refused(login(fresh_panel, user, password, previous), 200, "two-factor code")


def test_disabling_two_factor_needs_the_current_code(fresh_panel):
    admin = signed_in(fresh_panel)
    secret = pyotp.random_base32()
    step = current_step()
    assert enable_two_factor(admin, secret, code_at(secret, step - 1))["success"] is True
    for code in (None, "000000", code_at(pyotp.random_base32(), step)):
        body = {"twoFactorEnable": False}
        if code is not None:
            body["twoFactorCode"] = code
        reply = admin.post(UPDATE, json=body)
        assert reply["success"] is False
        assert "current two-factor code is missing or wrong" in reply["msg"]
    assert two_factor_enabled(fresh_panel) is True
    reply = admin.post(
        UPDATE, json={"twoFactorEnable": False, "twoFactorCode": code_at(secret, step)}
    )
    assert reply["success"] is True, reply
    assert two_factor_enabled(fresh_panel) is False
    assert login(fresh_panel, fresh_panel.username, fresh_panel.password).json()["success"]


def test_changing_the_secret_needs_the_current_code_and_ends_other_sessions(fresh_panel):
    admin = signed_in(fresh_panel)
    old, new = pyotp.random_base32(), pyotp.random_base32()
    step = current_step()
    assert enable_two_factor(admin, old, code_at(old, step - 1))["success"] is True
    other = signed_in(fresh_panel, code=code_at(old, step))
    # A code of the new secret does not prove who is asking; the current one does.
    for code in ("", code_at(new, step + 1)):
        reply = enable_two_factor(admin, new, code)
        assert reply["success"] is False
        assert "current two-factor code is missing or wrong" in reply["msg"]
    assert other.get(STATUS)["success"] is True
    assert enable_two_factor(admin, new, code_at(old, step + 1))["success"] is True
    refused(other.raw("GET", STATUS), 401, "sign in first")
    assert admin.get(STATUS)["success"] is True
    # The new secret is the one that counts from now on. Every step up to step + 1 is
    # used, and the server allows one step of drift, so this waits for the next step.
    wait_for_step(step + 1)
    user, password = fresh_panel.username, fresh_panel.password
    refused(login(fresh_panel, user, password, code_at(old, step + 2)), 200, "two-factor code")
    assert login(fresh_panel, user, password, code_at(new, step + 2)).json()["success"]


# ---- the admin account ------------------------------------------------------------------


def test_update_user_refuses_a_wrong_old_password(fresh_panel):
    admin = signed_in(fresh_panel)
    reply = admin.post(
        UPDATE_USER,
        json={
            "oldUsername": fresh_panel.username,
            "oldPassword": "not-the-password",
            "newUsername": "boss",
            "newPassword": NEW_PASSWORD,
        },
    )
    assert reply == {
        "success": False,
        "msg": "the current username or password is wrong",
        "obj": None,
    }
    refused(login(fresh_panel, "boss", NEW_PASSWORD), 200, "wrong username or password")
    assert login(fresh_panel, fresh_panel.username, fresh_panel.password).json()["success"]


@pytest.mark.parametrize(
    "username, password, msg",
    [
        ("boss", "admin", "at least 12 characters"),
        ("boss", "Sh0rt!x-Pw9", "at least 12 characters"),
        ("boss", "password1234", "too easy to guess"),
        ("boss", "123456789012", "too easy to guess"),
        ("boss-1234-boss", "boss-1234-boss", "too easy to guess"),
        ("", NEW_PASSWORD, "newUsername is required"),
        (" boss", NEW_PASSWORD, "without surrounding spaces"),
        ("bo\u0000ss", NEW_PASSWORD, "control or invisible characters"),
        ("x" * 65, NEW_PASSWORD, "1-64 characters"),
    ],
)
def test_update_user_refuses_bad_new_credentials_and_changes_nothing(
    panel, api, username, password, msg
):
    reply = change_user(api, panel, username, password)
    assert reply["success"] is False
    assert msg in reply["msg"]
    assert admin_row(panel)[0] == panel.username
    assert login(panel, panel.username, panel.password).json()["success"] is True


@pytest.mark.parametrize(
    "fields, msg",
    [
        ('"newUsername": "\\ud800", "newPassword": "Correct-Horse-41"', "not valid Unicode"),
        ('"newUsername": "boss", "newPassword": "Correct-Horse-\\ud800"', "not valid Unicode"),
    ],
)
def test_update_user_with_unpaired_surrogates_is_an_envelope_error(panel, api, fields, msg):
    body = f'{{"oldUsername": "{panel.username}", "oldPassword": "{panel.password}", {fields}}}'
    response = api.raw("POST", UPDATE_USER, data=body, headers={"Content-Type": "application/json"})
    refused(response, 200, msg)
    assert admin_row(panel)[0] == panel.username


def test_update_user_changes_the_credentials_and_ends_other_sessions(fresh_panel):
    admin, other = signed_in(fresh_panel), signed_in(fresh_panel)
    reply = change_user(admin, fresh_panel, "boss", NEW_PASSWORD)
    assert reply["success"] is True, reply
    refused(other.raw("GET", STATUS), 401, "sign in first")
    assert admin.get(STATUS)["success"] is True
    refused(login(fresh_panel, fresh_panel.username, fresh_panel.password), 200, "wrong username")
    assert login(fresh_panel, "boss", NEW_PASSWORD).json()["success"] is True
    username, password_hash = admin_row(fresh_panel)
    assert username == "boss"
    assert password_hash.startswith("scrypt$")
    assert NEW_PASSWORD.encode() not in database_bytes(fresh_panel)


def test_update_user_with_two_factor_on_needs_the_code(fresh_panel):
    admin = signed_in(fresh_panel)
    secret = pyotp.random_base32()
    step = current_step()
    assert enable_two_factor(admin, secret, code_at(secret, step - 1))["success"] is True
    for code in ({}, {"twoFactorCode": "000000"}):
        reply = change_user(admin, fresh_panel, "boss", NEW_PASSWORD, **code)
        assert reply["success"] is False
        assert "current two-factor code is missing or wrong" in reply["msg"]
    assert admin_row(fresh_panel)[0] == fresh_panel.username
    code = {"twoFactorCode": code_at(secret, step)}
    assert change_user(admin, fresh_panel, "boss", NEW_PASSWORD, **code)["success"] is True
    assert admin_row(fresh_panel)[0] == "boss"


# ---- the session cookie ------------------------------------------------------------------


def test_session_cookie_attributes(panel):
    response = login(panel, panel.username, panel.password)
    name_value, attributes = cookie_attributes(response)
    assert name_value.startswith("appliance_session=")
    assert "httponly" in attributes
    assert attributes["samesite"].lower() == "lax"
    assert attributes["path"] == "/"
    assert attributes["max-age"] == str(360 * 60)
    assert "secure" not in attributes  # plain HTTP here; see the TLS test


def test_session_max_age_follows_the_setting(panel, api):
    assert api.post(UPDATE, json={"sessionMaxAge": 5})["success"] is True
    try:
        _, attributes = cookie_attributes(login(panel, panel.username, panel.password))
        assert attributes["max-age"] == "300"
    finally:
        assert api.post(UPDATE, json={"sessionMaxAge": 360})["success"] is True
    _, attributes = cookie_attributes(login(panel, panel.username, panel.password))
    assert attributes["max-age"] == "21600"


def test_a_cookie_changed_in_one_character_is_refused(panel):
    cookie = login(panel, panel.username, panel.password).cookies["appliance_session"]
    session_id = cookie.split(".")[0]
    for position in (0, len(session_id) // 2, len(session_id) + 1, len(cookie) - 1):
        replacement = "A" if cookie[position] != "A" else "B"
        tampered = cookie[:position] + replacement + cookie[position + 1 :]
        response = requests.get(
            panel.url + STATUS, cookies={"appliance_session": tampered}, timeout=10
        )
        refused(response, 401, "sign in first")
    intact = requests.get(panel.url + STATUS, cookies={"appliance_session": cookie}, timeout=10)
    assert intact.status_code == 200


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_cookie_is_secure_over_tls_and_scoped_to_the_base_path(fresh_panel):
    cert_file, key_file = write_self_signed(certs_dir(fresh_panel), "127.0.0.1")
    admin = signed_in(fresh_panel)
    reply = admin.post(
        UPDATE, json={"webCertFile": cert_file, "webKeyFile": key_file, "webBasePath": "/secret/"}
    )
    assert reply["success"] is True, reply
    mark = len(fresh_panel.lines)
    assert admin.post("/panel/api/setting/restartPanel")["success"] is True
    fresh_panel.wait_listening(mark)
    assert fresh_panel.url.startswith("https://") and fresh_panel.url.endswith("/secret")
    response = requests.post(
        fresh_panel.url + "/login",
        json={"username": fresh_panel.username, "password": fresh_panel.password},
        verify=False,
        timeout=10,
    )
    assert response.json()["success"] is True
    _, attributes = cookie_attributes(response)
    assert "secure" in attributes
    assert attributes["path"] == "/secret/"
    assert "httponly" in attributes


# ---- CSRF -------------------------------------------------------------------------------------


def test_unsafe_requests_of_a_cookie_session_need_the_csrf_token(panel, api):
    token = api.http.headers.pop("X-CSRF-Token")
    create = "/panel/api/setting/apiTokens/create"
    for headers in ({}, {"X-CSRF-Token": token[:-1] + ("x" if token[-1] != "x" else "y")}):
        response = api.raw("POST", create, json={"name": "csrf-probe"}, headers=headers)
        refused(response, 403, "X-CSRF-Token")
    refused(api.raw("POST", create, headers={"X-CSRF-Token": b"\xff\xfe"}), 403, "X-CSRF-Token")
    listing = api.get("/panel/api/setting/apiTokens")
    assert listing["success"] is True
    assert "csrf-probe" not in [row["name"] for row in listing["obj"]]
    assert api.get(STATUS)["success"] is True
    reply = api.raw("POST", "/panel/api/setting/all", headers={"X-CSRF-Token": token}).json()
    assert reply["success"] is True


def test_bearer_requests_skip_the_csrf_check(panel, api):
    token = api.post("/panel/api/setting/apiTokens/create", json={"name": "csrf-bearer"})
    response = requests.post(
        panel.url + "/panel/api/setting/all",
        headers={"Authorization": f"Bearer {token['obj']['token']}"},
        timeout=10,
    )
    assert response.status_code == 200
    assert response.json()["success"] is True


# ---- every API route needs credentials -------------------------------------------------


def test_every_panel_api_route_refuses_unauthenticated_calls(panel, api):
    document = api.http.get(panel.url + "/panel/api/openapi.json", timeout=10).json()
    calls = [
        (method.upper(), re.sub(r"\{[^}]+\}", "1", path))
        for path, operations in document["paths"].items()
        if path.startswith("/panel/api/")
        for method in operations
    ]
    assert ("POST", "/panel/api/setting/apiTokens/delete/1") in calls
    assert len(calls) > 30
    for method, path in calls:
        response = requests.request(method, panel.url + path, timeout=10)
        assert response.status_code == 401, (method, path, response.text)
        reply = response.json()
        assert reply["success"] is False, (method, path)
        assert reply["msg"], (method, path)
    refused(requests.get(panel.url + "/panel/api/openapi.json", timeout=10), 401, "sign in")


# ---- secrets stay out of the log ----------------------------------------------------------


def test_nothing_secret_is_logged(fresh_panel):
    admin = signed_in(fresh_panel)
    assert change_user(admin, fresh_panel, "boss", NEW_PASSWORD)["success"] is True
    wrong = "Wrong-Guess-77"
    refused(login(fresh_panel, "boss", wrong), 200, "wrong username or password")
    refused(login(fresh_panel, "boss", wrong, form=True), 415, "Content-Type: application/json")
    client = signed_in(fresh_panel, "boss", NEW_PASSWORD)
    cookie = client.http.cookies["appliance_session"]
    csrf = client.http.headers["X-CSRF-Token"]
    token = client.post("/panel/api/setting/apiTokens/create", json={"name": "log-probe"})
    value = token["obj"]["token"]
    requests.get(fresh_panel.url + STATUS, headers={"Authorization": f"Bearer {value}"}, timeout=10)
    requests.get(
        fresh_panel.url + STATUS, headers={"Authorization": f"Bearer {value}x"}, timeout=10
    )
    log_file = os.path.join(fresh_panel.data_dir, "logs", "panel.log")
    with open(log_file, encoding="utf-8") as fh:
        logged = fh.read()
    output = fresh_panel.output()
    assert "admin signed in from 127.0.0.1" in output
    assert "admin signed in from 127.0.0.1" in logged
    for secret in (NEW_PASSWORD, wrong, cookie, cookie.split(".")[0], csrf, value, value[4:]):
        assert secret not in output
        assert secret not in logged
    # The first-run password is printed once, on stdout only, never into the log.
    assert output.count(fresh_panel.password) == 1
    assert fresh_panel.password not in logged
