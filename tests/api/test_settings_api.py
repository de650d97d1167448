"""/panel/api/setting: reading, validating and saving panel settings, restarting the
panel, and the base path that a restart puts into effect.

What an update stored is read back twice: through `setting/all` and straight from the
`setting` table of the panel's SQLite file, so a redacted secret or a rejected update
cannot look right through the API while the database says otherwise.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
from pathlib import Path

import pyotp
import pytest
import requests
import websocket
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from helpers import (
    free_port,
    self_signed_certificate,
    setting_rows,
    write_certificate,
    write_key,
)
from panels import ApiClient

from appliance.services.admin.settings_table import SETTINGS

ALL = "/panel/api/setting/all"
UPDATE = "/panel/api/setting/update"
DEFAULTS = "/panel/api/setting/defaultSettings"
RESTART = "/panel/api/setting/restartPanel"
TEMPLATE = "/panel/api/setting/getDefaultJsonConfig"
REDACTED = "********"
RESTART_WAIT = 30


def cookie_header(client: ApiClient) -> str:
    return "; ".join(f"{name}={value}" for name, value in client.http.cookies.items())


def assert_refused(api: ApiClient, server, body, message: str) -> None:
    """The update fails with `message` and neither the API nor the table changed."""
    before_rows, before_all = setting_rows(server), api.post(ALL)["obj"]
    reply = api.post(UPDATE, body)
    assert reply["success"] is False, reply
    assert message in reply["msg"], reply["msg"]
    assert reply["obj"] is None
    assert setting_rows(server) == before_rows
    assert api.post(ALL)["obj"] == before_all


def saved(api: ApiClient, body: dict) -> dict:
    reply = api.post(UPDATE, body)
    assert reply["success"] is True, reply
    return api.post(ALL)["obj"]


# ---- certificates ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(panel) -> dict[str, str]:
    """A self-signed certificate with its key, plus files that must be refused, in the
    certificate folder of the module's panel (no other folder is accepted)."""
    folder = Path(panel.data_dir) / "certs"
    folder.mkdir(exist_ok=True)
    key, cert = self_signed_certificate(
        "127.0.0.1", x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    )
    (folder / "garbage.pem").write_text("this is not PEM at all\n")
    (folder / "encrypted.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return {
        "cert": write_certificate(folder / "cert.pem", cert),
        "key": write_key(folder / "key.pem", key),
        "other_key": write_key(folder / "other.pem", ec.generate_private_key(ec.SECP256R1())),
        "garbage": str(folder / "garbage.pem"),
        "encrypted": str(folder / "encrypted.pem"),
        "missing": str(folder / "missing.pem"),
        "folder": str(folder),
    }


# ---- reading -------------------------------------------------------------------------------


def test_all_returns_every_setting_with_its_default(api):
    settings = api.post(ALL)["obj"]
    defaults = api.post(DEFAULTS)["obj"]
    assert set(settings) == set(defaults) | {"twoFactorEnable", "twoFactorToken"}
    for key, value in {
        "webPort": 2053,
        "subPort": 10882,
        "subPath": "/sub/",
        "webBasePath": "/",
        "tgBotEnable": False,
        "ipLimitEnable": False,
        "expireDiff": 3,
        "trafficDiff": 1,
        "twoFactorEnable": False,
    }.items():
        assert settings[key] == value, key


def test_all_and_defaults_answer_exactly_the_declared_settings(panel, api):
    """The API's names are the table's, each value of its declared type, and every
    declared secret leaves redacted once it is set."""
    declared = {setting.name: setting for setting in SETTINGS}
    defaults = api.post(DEFAULTS)["obj"]
    assert set(defaults) == set(declared)
    for name, setting in declared.items():
        if name not in ("webDomain", "subDomain"):
            assert defaults[name] == setting.default, name
    secrets = {name: f"{name}-value" for name, setting in declared.items() if setting.secret}
    try:
        settings = saved(api, secrets)
        assert set(settings) == set(declared) | {"twoFactorEnable", "twoFactorToken"}
        for name, setting in declared.items():
            assert type(settings[name]) is setting.kind, name
            assert settings[name] == (REDACTED if setting.secret else setting.default), name
        for value in secrets.values():
            assert value not in json.dumps(settings)
            assert json.dumps(value) in setting_rows(panel).values()
    finally:
        saved(api, dict.fromkeys(secrets, ""))


def test_default_settings_take_domains_from_the_request_and_ignore_stored_values(panel, api):
    saved(api, {"pageSize": 40})
    try:
        reply = api.post(DEFAULTS)
        assert reply["success"] is True
        assert reply["obj"]["pageSize"] == 25
        assert reply["obj"]["webDomain"] == reply["obj"]["subDomain"] == "127.0.0.1"
        # requests matches cookies against a Host header, so send the cookie by hand.
        headers = {"Host": "panel.example.com:2053", "Cookie": cookie_header(api)}
        named = api.post(DEFAULTS, headers=headers)["obj"]
        assert named["webDomain"] == named["subDomain"] == "panel.example.com"
    finally:
        saved(api, {"pageSize": 25})


def test_default_json_config_is_a_core_config(api):
    reply = api.get(TEMPLATE)
    assert reply["success"] is True
    config = reply["obj"]
    assert isinstance(config, dict)
    assert {"inbounds", "outbounds", "routing", "policy", "api"} <= set(config)
    assert isinstance(config["inbounds"], list) and isinstance(config["outbounds"], list)
    assert config["api"]["tag"]
    assert api.raw("POST", TEMPLATE).status_code == 405


@pytest.mark.parametrize("path", [ALL, UPDATE, DEFAULTS, RESTART, TEMPLATE])
def test_settings_need_a_signed_in_caller(panel, path):
    method = "GET" if path == TEMPLATE else "POST"
    reply = requests.request(method, panel.url + path, json={"pageSize": 99}, timeout=10)
    assert reply.status_code == 401
    assert reply.json()["success"] is False
    assert "pageSize" not in setting_rows(panel)


def test_update_without_the_csrf_header_is_refused(panel, api):
    reply = api.http.post(
        panel.url + UPDATE, json={"pageSize": 99}, headers={"X-CSRF-Token": ""}, timeout=10
    )
    assert reply.status_code == 403
    assert reply.json()["success"] is False
    assert api.post(ALL)["obj"]["pageSize"] != 99


def test_update_with_an_api_token_needs_no_csrf_header(panel, api):
    token = api.post("/panel/api/setting/apiTokens/create", {"name": "settings-test"})["obj"]
    bearer = {"Authorization": f"Bearer {token['token']}"}
    reply = requests.post(panel.url + UPDATE, json={"subTitle": "via token"}, headers=bearer)
    assert reply.json()["success"] is True, reply.text
    assert api.post(ALL)["obj"]["subTitle"] == "via token"
    saved(api, {"subTitle": ""})


# ---- saving --------------------------------------------------------------------------------


def test_update_saves_only_what_changed_and_reports_it(panel, api):
    reply = api.post(UPDATE, {"pageSize": 50, "subTitle": "My VPN", "expireDiff": 3})
    assert reply == {"success": True, "msg": "settings saved", "obj": ["pageSize", "subTitle"]}
    rows = setting_rows(panel)
    assert json.loads(rows["pageSize"]) == 50
    assert json.loads(rows["subTitle"]) == "My VPN"
    assert "expireDiff" not in rows
    assert api.post(UPDATE, {"pageSize": 50}) == {
        "success": True,
        "msg": "nothing changed",
        "obj": None,
    }
    saved(api, {"pageSize": 25, "subTitle": ""})
    rows = setting_rows(panel)
    assert "pageSize" not in rows and "subTitle" not in rows


def test_a_save_names_what_waits_for_a_restart_and_where_the_panel_will_be(panel, api):
    """The running panel keeps its listener until it restarts: the answer says which saved
    settings wait for that, and the address it will answer at (a --port flag keeps its
    port, as it does over the restart)."""
    port = int(panel.url.rsplit(":", 1)[1].split("/")[0])
    reply = api.post(UPDATE, {"webBasePath": "/moved/", "subTitle": "Moved"})
    assert reply == {
        "success": True,
        "msg": "settings saved; restart the panel to apply webBasePath",
        "obj": ["webBasePath", "subTitle"],
        "restartNeeded": ["webBasePath"],
        "panelAfterRestart": {"scheme": "http", "port": port, "basePath": "/moved/"},
    }
    # Nothing moved yet: the panel still answers where it was.
    assert api.post(ALL)["obj"]["webBasePath"] == "/moved/"
    back = api.post(UPDATE, {"webBasePath": "/", "subTitle": ""})
    assert back["restartNeeded"] == ["webBasePath"]
    assert back["panelAfterRestart"]["basePath"] == "/"


def test_the_whole_object_from_all_can_be_sent_back_unchanged(panel, api):
    saved(api, {"tgBotToken": "123:round-trip", "smtpPassword": "smtp secret"})
    before = setting_rows(panel)
    everything = api.post(ALL)["obj"]
    assert api.post(UPDATE, everything) == {"success": True, "msg": "nothing changed", "obj": None}
    assert setting_rows(panel) == before
    saved(api, {"tgBotToken": "", "smtpPassword": ""})


def test_numbers_and_booleans_sent_as_strings_are_stored_typed(panel, api):
    settings = saved(api, {"pageSize": "30", "tgBotBackup": "true"})
    assert settings["pageSize"] == 30 and settings["tgBotBackup"] is True
    assert setting_rows(panel)["pageSize"] == "30"
    saved(api, {"pageSize": 25, "tgBotBackup": False})


def test_update_accepts_a_form_body(panel, api):
    reply = api.raw("POST", UPDATE, data={"pageSize": "60", "ipLimitEnable": "true"}).json()
    assert reply["success"] is True, reply
    settings = api.post(ALL)["obj"]
    assert settings["pageSize"] == 60 and settings["ipLimitEnable"] is True
    saved(api, {"pageSize": 25, "ipLimitEnable": False})


# ---- secrets -------------------------------------------------------------------------------


def test_secrets_are_redacted_and_the_redacted_value_keeps_them(panel, api):
    assert api.post(ALL)["obj"]["tgBotToken"] == ""
    settings = saved(api, {"tgBotToken": "123456:ABC-def", "smtpPassword": "hunter2 hunter2"})
    assert settings["tgBotToken"] == REDACTED and settings["smtpPassword"] == REDACTED
    assert "123456:ABC-def" not in json.dumps(api.post(ALL))

    reply = api.post(UPDATE, {"tgBotToken": REDACTED, "smtpPassword": REDACTED, "pageSize": 33})
    assert reply["obj"] == ["pageSize"]
    rows = setting_rows(panel)
    assert json.loads(rows["tgBotToken"]) == "123456:ABC-def"
    assert json.loads(rows["smtpPassword"]) == "hunter2 hunter2"

    saved(api, {"tgBotToken": "999:new"})
    assert json.loads(setting_rows(panel)["tgBotToken"]) == "999:new"

    settings = saved(api, {"tgBotToken": "", "smtpPassword": "", "pageSize": 25})
    assert settings["tgBotToken"] == "" and settings["smtpPassword"] == ""
    rows = setting_rows(panel)
    assert "tgBotToken" not in rows and "smtpPassword" not in rows


def test_a_redacted_value_never_becomes_the_secret(panel, api):
    assert api.post(UPDATE, {"tgBotToken": REDACTED})["msg"] == "nothing changed"
    assert "tgBotToken" not in setting_rows(panel)
    assert api.post(ALL)["obj"]["tgBotToken"] == ""


def test_the_session_secret_is_not_a_setting(panel, api):
    secret = setting_rows(panel)["sessionSecret"]
    assert "sessionSecret" not in api.post(ALL)["obj"]
    assert_refused(api, panel, {"sessionSecret": "mine"}, "unknown setting 'sessionSecret'")
    assert setting_rows(panel)["sessionSecret"] == secret


# ---- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"webPort": 0}, "webPort must be from 1 to 65535 (got 0)"),
        ({"webPort": 65536}, "webPort must be from 1 to 65535 (got 65536)"),
        ({"subPort": -1}, "subPort must be from 1 to 65535 (got -1)"),
        ({"smtpPort": 70000}, "smtpPort must be from 1 to 65535"),
        ({"webPort": 2053, "subPort": 2053}, "webPort and subPort are both 2053"),
        ({"subPort": 2053}, "webPort and subPort are both 2053"),
    ],
)
def test_bad_ports_are_refused(panel, api, body, message):
    assert_refused(api, panel, body, message)


def test_port_boundaries_are_accepted(panel, api):
    assert saved(api, {"webPort": 65535, "subPort": 1})["webPort"] == 65535
    saved(api, {"webPort": 2053, "subPort": 10882})


def test_the_same_port_on_different_addresses_is_allowed(panel, api):
    body = {"webListen": "127.0.0.1", "subListen": "127.0.0.2", "subPort": 2053}
    assert saved(api, body)["subPort"] == 2053
    assert_refused(api, panel, {"subListen": ""}, "webPort and subPort are both 2053")
    saved(api, {"webListen": "", "subListen": "", "subPort": 10882})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"webPort": "abc"}, 'webPort must be an integer (got "abc")'),
        ({"webPort": 80.5}, "webPort must be an integer (got 80.5)"),
        ({"webPort": True}, "webPort must be an integer (got true)"),
        ({"webPort": None}, "webPort must be an integer (got null)"),
        ({"pageSize": [30]}, "pageSize must be an integer (got [30])"),
        ({"tgBotEnable": 1}, "tgBotEnable must be true or false (got 1)"),
        ({"tgBotEnable": "yes"}, 'tgBotEnable must be true or false (got "yes")'),
        ({"tgBotEnable": None}, "tgBotEnable must be true or false (got null)"),
        ({"subTitle": 5}, "subTitle must be a string (got 5)"),
        ({"webBasePath": None}, "webBasePath must be a string (got null)"),
        ({"tgBotToken": {"a": 1}}, "tgBotToken must be a string"),
    ],
)
def test_wrong_types_are_refused(panel, api, body, message):
    assert_refused(api, panel, body, message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"pageSize": 0}, "pageSize must be from 1 to 200 (got 0)"),
        ({"pageSize": 201}, "pageSize must be from 1 to 200 (got 201)"),
        ({"sessionMaxAge": 0}, "sessionMaxAge must be from 1 to"),
        ({"expireDiff": -1}, "expireDiff must be from 0 to"),
        ({"smtpSecurity": "ssl"}, "smtpSecurity must be one of none, starttls, tls (got 'ssl')"),
        ({"webListen": "localhost"}, "webListen must be empty (all addresses) or an IP address"),
        ({"trustedProxies": "10.0.0.0/8, nope"}, "trustedProxies must be a comma-separated"),
        ({"coreTemplate": "{not json"}, "coreTemplate is not valid JSON"),
        ({"coreTemplate": "[1, 2]"}, "coreTemplate must be a JSON object"),
    ],
)
def test_values_out_of_range_are_refused(panel, api, body, message):
    assert_refused(api, panel, body, message)


@pytest.mark.parametrize("key", ["subSupportUrl", "subProfileUrl"])
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("javascript:alert(1)", "must be an http:// or https:// URL"),
        ("data:text/html,<script>alert(1)</script>", "must be an http:// or https:// URL"),
        ("JavaScript://example.com/%0aalert(1)", "must be an http:// or https:// URL"),
        ("https://example.com/\r\nSet-Cookie: a=b", "may not contain spaces, line breaks"),
        ("https://example.com/a b", "may not contain spaces"),
        ("https://exa\tmple.com/", "may not contain spaces, line breaks or control characters"),
        ("https://example.com/a\u2028b", "may not contain spaces"),
        ("https:///path-only", "must be an http:// or https:// URL with a host name"),
        ("https://[::1/", "must be an http:// or https:// URL with a host name"),
        ("ftp://example.com/", "must be an http:// or https:// URL"),
        ("example.com/support", "must be an http:// or https:// URL"),
    ],
)
def test_subscription_urls_must_be_web_addresses(panel, api, key, url, message):
    assert_refused(api, panel, {key: url}, f"{key} {message}")


def test_subscription_urls_accept_web_addresses(panel, api):
    urls = {
        "subSupportUrl": "https://t.me/support",
        "subProfileUrl": "http://example.com:8080/p?q=1",
    }
    try:
        stored = saved(api, urls)
        assert {key: stored[key] for key in urls} == urls
    finally:
        saved(api, {"subSupportUrl": "", "subProfileUrl": ""})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"noSuchSetting": 1}, "unknown setting 'noSuchSetting'"),
        ({"pageSize": 30, "webport": 8080}, "unknown setting 'webport'"),
        ({"twoFactorSecret": "x"}, "unknown setting 'twoFactorSecret'"),
    ],
)
def test_unknown_keys_are_refused(panel, api, body, message):
    assert_refused(api, panel, body, message)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[1, 2]", "the request body must be a JSON object"),
        ('"pageSize"', "the request body must be a JSON object"),
        ("{not json", "the request body is not valid JSON"),
    ],
)
def test_bodies_that_are_not_an_object_are_refused(panel, api, raw, message):
    before = setting_rows(panel)
    reply = api.raw("POST", UPDATE, data=raw, headers={"Content-Type": "application/json"})
    assert reply.status_code == 200
    assert reply.json()["success"] is False and message in reply.json()["msg"]
    assert setting_rows(panel) == before


def test_a_rejected_update_changes_nothing_not_even_its_valid_keys(panel, api):
    valid = {"pageSize": 77, "subTitle": "not saved", "tgBotToken": "1:not-saved"}
    for bad in (
        {"webPort": 0},
        {"unknownKey": True},
        {"webCertFile": "/nonexistent/cert.pem", "webKeyFile": "/nonexistent/key.pem"},
        {"webBasePath": "/a b/"},
        {"subEnable": "maybe"},
    ):
        assert_refused(api, panel, {**valid, **bad}, "")
    settings = api.post(ALL)["obj"]
    assert settings["pageSize"] != 77 and settings["subTitle"] != "not saved"
    assert settings["tgBotToken"] == ""


# ---- base paths ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("secret", "/secret/"),
        ("/secret", "/secret/"),
        ("secret/", "/secret/"),
        ("/a/b", "/a/b/"),
        ("  /spaced/  ", "/spaced/"),
        ("/with-dash_under.dot~/", "/with-dash_under.dot~/"),
        ("", "/"),
        ("/", "/"),
    ],
)
def test_base_paths_are_normalised(panel, api, sent, stored):
    assert saved(api, {"webBasePath": sent, "subPath": sent})["webBasePath"] == stored
    assert api.post(ALL)["obj"]["subPath"] == stored
    expected = None if stored == "/" else json.dumps(stored)
    assert setting_rows(panel).get("webBasePath") == expected
    saved(api, {"webBasePath": "/", "subPath": "/sub/"})


@pytest.mark.parametrize(
    "path",
    [
        "/a b/",
        "/../",
        "/a/../b/",
        "/./",
        "//",
        "/a//b/",
        "/a?b/",
        "/%2e%2e/",
        "/ü/",
        "\\",
        "/a\\b/",
    ],
)
def test_bad_base_paths_are_refused(panel, api, path):
    assert_refused(
        api,
        panel,
        {"webBasePath": path},
        "webBasePath may hold only letters, digits and . _ ~ - between slashes",
    )


def test_bad_subscription_paths_are_refused(panel, api):
    assert_refused(api, panel, {"subJsonPath": "/j s/"}, "subJsonPath may hold only letters")


# ---- certificates ----------------------------------------------------------------------------


def test_a_matching_certificate_pair_is_saved(panel, api, certs):
    for prefix in ("web", "sub"):
        body = {f"{prefix}CertFile": certs["cert"], f"{prefix}KeyFile": certs["key"]}
        settings = saved(api, body)
        assert settings[f"{prefix}CertFile"] == certs["cert"]
        assert json.loads(setting_rows(panel)[f"{prefix}KeyFile"]) == certs["key"]
        saved(api, {f"{prefix}CertFile": "", f"{prefix}KeyFile": ""})


@pytest.mark.parametrize("prefix", ["web", "sub"])
@pytest.mark.parametrize(
    ("cert", "key", "message"),
    [
        ("cert", "other_key", "{p}KeyFile does not belong to the certificate in {p}CertFile"),
        ("missing", "key", "{p}CertFile: no such file"),
        ("cert", "missing", "{p}KeyFile: no such file"),
        ("garbage", "key", "{p}CertFile: '{garbage}' is not a PEM certificate"),
        ("key", "key", "{p}CertFile: '{key}' is not a PEM certificate"),
        ("cert", "garbage", "{p}KeyFile: '{garbage}' is not an unencrypted PEM private key"),
        ("cert", "cert", "is not an unencrypted PEM private key"),
        ("cert", "encrypted", "is not an unencrypted PEM private key"),
        ("folder", "key", "{p}CertFile: no such file"),
        ("cert", None, "{p}CertFile and {p}KeyFile go together; {p}KeyFile is empty"),
        (None, "key", "{p}CertFile and {p}KeyFile go together; {p}CertFile is empty"),
    ],
)
def test_bad_certificate_pairs_are_refused(panel, api, certs, prefix, cert, key, message):
    body = {}
    if cert:
        body[f"{prefix}CertFile"] = certs[cert]
    if key:
        body[f"{prefix}KeyFile"] = certs[key]
    assert_refused(api, panel, body, message.format(p=prefix, **certs))


def test_clearing_half_of_a_stored_pair_is_refused(panel, api, certs):
    saved(api, {"webCertFile": certs["cert"], "webKeyFile": certs["key"]})
    assert_refused(api, panel, {"webKeyFile": ""}, "webKeyFile is empty")
    saved(api, {"webCertFile": "", "webKeyFile": ""})


# ---- ports held by inbounds ------------------------------------------------------------------


def test_a_port_an_inbound_listens_on_is_refused(panel, api):
    port = free_port()
    inbound = api.post(
        "/panel/api/inbounds/add",
        {"remark": "busy", "protocol": "socks", "port": port, "settings": {"auth": "noauth"}},
    )
    assert inbound["success"] is True, inbound
    try:
        for key in ("webPort", "subPort"):
            assert_refused(
                api,
                panel,
                {key: port, "pageSize": 44},
                f"{key} {port} is already used by inbound {inbound['obj']['id']} (busy)",
            )
    finally:
        assert api.post(f"/panel/api/inbounds/del/{inbound['obj']['id']}")["success"] is True
    assert saved(api, {"webPort": port})["webPort"] == port
    saved(api, {"webPort": 2053})


# ---- two-factor settings travel with the rest ------------------------------------------------


def test_two_factor_and_a_rejected_setting_change_nothing(fresh_panel):
    api = fresh_panel.client()
    secret = pyotp.random_base32()
    code = pyotp.TOTP(secret).now()
    body = {"twoFactorEnable": True, "twoFactorToken": secret, "twoFactorCode": code}
    assert_refused(api, fresh_panel, {**body, "webPort": 0}, "webPort must be from 1 to 65535")
    assert api.post("/getTwoFactorEnable")["obj"] is False
    assert_refused(
        api,
        fresh_panel,
        {**body, "twoFactorCode": "000000" if code != "000000" else "111111", "pageSize": 70},
        "twoFactorCode must be the current code of the new secret",
    )
    assert api.post("/getTwoFactorEnable")["obj"] is False
    reply = api.post(UPDATE, {**body, "pageSize": 70})
    assert reply["success"] is True, reply
    assert set(reply["obj"]) == {"pageSize", "twoFactorEnable"}
    assert api.post("/getTwoFactorEnable")["obj"] is True
    assert api.post(ALL)["obj"]["twoFactorToken"] == ""


# ---- restart and the base path -----------------------------------------------------------------


def restart_panel(server, api: ApiClient) -> None:
    """Ask for a restart and wait for the new "panel listening" line."""
    mark = len(server.lines)
    reply = api.post(RESTART)
    assert reply == {"success": True, "msg": "the panel restarts in 3 seconds", "obj": None}
    server.wait_listening(mark, timeout=RESTART_WAIT)


def origin(server) -> str:
    scheme, rest = server.url.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def test_restart_reexecs_and_applies_the_base_path(fresh_panel):
    api = fresh_panel.client()
    pid = fresh_panel.process.pid
    assert saved(api, {"webBasePath": "secret"})["webBasePath"] == "/secret/"
    # Saving alone changes nothing served: the base path applies at restart.
    assert api.post(ALL)["success"] is True

    ws = websocket.create_connection(
        fresh_panel.url.replace("http", "ws", 1) + "/ws",
        timeout=10,
        cookie=cookie_header(api),
    )
    # The first push (a status) shows the socket is subscribed: the handshake's answer
    # comes before the panel adds the socket to those it pushes to.
    assert json.loads(ws.recv())["type"] == "status"
    restart_panel(fresh_panel, api)
    notices = []
    try:
        while frame := ws.recv():
            message = json.loads(frame)
            if message["type"] == "notification":
                notices.append(message)
    except (websocket.WebSocketException, OSError):
        pass
    assert notices and notices[0]["title"] == "Panel restart"

    assert fresh_panel.process.pid == pid and fresh_panel.process.poll() is None
    assert fresh_panel.output().count("panel listening on") == 2
    assert "restarting the panel process" in fresh_panel.output()
    assert fresh_panel.url.endswith("/secret")

    root = origin(fresh_panel)
    client = fresh_panel.client()
    assert client.post(ALL)["success"] is True
    assert client.raw("GET", "/csrf-token").json()["success"] is True

    login = requests.post(
        root + "/secret/login",
        json={"username": fresh_panel.username, "password": fresh_panel.password},
        timeout=10,
    )
    assert login.json()["success"] is True
    assert "Path=/secret/" in login.headers["Set-Cookie"]

    for method, path in (
        ("POST", "/login"),
        ("GET", "/csrf-token"),
        ("POST", "/panel/api/setting/all"),
        ("GET", "/ws"),
        ("GET", "/"),
        ("GET", "/secretive/login"),
    ):
        reply = client.http.request(method, root + path, timeout=10)
        assert reply.status_code == 404, path
        assert reply.json() == {
            "success": False,
            "msg": f"no such route: {method} {path}",
            "obj": None,
        }

    redirect = requests.get(root + "/secret?x=1", allow_redirects=False, timeout=10)
    assert redirect.status_code == 301
    assert redirect.headers["Location"] == "/secret/?x=1"

    ws = websocket.create_connection(
        fresh_panel.url.replace("http", "ws", 1) + "/ws",
        timeout=10,
        cookie=cookie_header(client),
    )
    try:
        assert json.loads(ws.recv())["type"] == "status"
    finally:
        ws.close()


def copied_pair(server, certs) -> tuple[Path, Path]:
    """The module's certificate pair copied into the certificate folder of `server`."""
    cert, key = (
        Path(server.data_dir) / "certs" / "cert.pem",
        Path(server.data_dir) / "certs" / "key.pem",
    )
    shutil.copy(certs["cert"], cert)
    shutil.copy(certs["key"], key)
    return cert, key


def test_restart_applies_the_certificate_pair(fresh_panel, certs):
    api = fresh_panel.client()
    cert, key = copied_pair(fresh_panel, certs)
    saved(api, {"webCertFile": str(cert), "webKeyFile": str(key)})
    restart_panel(fresh_panel, api)
    assert fresh_panel.url.startswith("https://")
    client = ApiClient(fresh_panel.url)
    # The panel must present exactly the stored certificate; the environment's CA bundle
    # would take precedence over `verify` unless the session ignores the environment.
    client.http.trust_env = False
    client.http.verify = str(cert)
    assert client.sign_in(fresh_panel.username, fresh_panel.password)["success"] is True
    assert client.post(ALL)["obj"]["webCertFile"] == str(cert)
    assert all(cookie.secure for cookie in client.http.cookies)
    plain = fresh_panel.url.replace("https://", "http://", 1)
    with pytest.raises(requests.ConnectionError):
        requests.post(plain + "/login", json={}, timeout=10)
    assert client.post(ALL)["success"] is True
    assert "Traceback" not in fresh_panel.output()


def test_restart_with_unusable_certificate_files_serves_plain_http(fresh_panel, certs):
    """The files were fine when saved and broke on disk before the restart: the panel
    stays reachable (only it can change the setting) and says why in its log."""
    cert, key = copied_pair(fresh_panel, certs)
    api = fresh_panel.client()
    saved(api, {"webCertFile": str(cert), "webKeyFile": str(key)})
    key.unlink()
    restart_panel(fresh_panel, api)
    assert fresh_panel.url.startswith("http://")
    assert f"webCertFile {cert} and webKeyFile {key} cannot be used" in fresh_panel.output()
    client = fresh_panel.client()
    assert client.post(ALL)["obj"]["webKeyFile"] == str(key)
    assert "Traceback" not in fresh_panel.output()


def test_a_session_survives_the_restart(fresh_panel):
    api = fresh_panel.client()
    restart_panel(fresh_panel, api)
    api.url = fresh_panel.url
    assert api.post(ALL)["success"] is True
