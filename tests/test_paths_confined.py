"""File paths an admin types stay in their place, over real HTTP (SECURITY-CASES 13).

The core runs as the panel's user and writes or reads whatever file its config names, and
`server/corelogs` serves the core's logs back: a log path outside the panel's own files
was a way to read any file of the host and to create files anywhere. Each test names a
file outside the allowed folders, one with a secret line in it, and checks what a user
sees: a refusal that reads the same whether the file exists or not, nothing stored, and
no line of the file in any answer. Stored data from before the rules (written straight
into the database here, as an older release or an import would leave it) must not stop
the panel: the path is left out of the core config and reported in the panel's log.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import start_panel
from helpers import (
    TLS,
    certs_dir,
    create_inbound,
    db_rows,
    free_port,
    ok,
    refused,
    setting_rows,
    write_self_signed,
)

CORE = "/panel/api/core"
SERVER = "/panel/api/server"
INBOUNDS = "/panel/api/inbounds"
SETTINGS = "/panel/api/setting"
SECRET = "2026/11/22 01:00:00 127.0.0.1:1 accepted tcp:secret.example:443 [direct] SECRET-LINE"
SHOW_ALL = {"showDirect": "true", "showBlocked": "true", "showProxy": "true"}


@pytest.fixture
def secret_file(tmp_path) -> Path:
    """A file outside every allowed folder, whose one line looks like an access line."""
    path = tmp_path / "outside" / "secret.log"
    path.parent.mkdir()
    path.write_text(SECRET + "\n")
    return path


def template_with_log(api, **log: str) -> str:
    template = ok(api.get(f"{CORE}/getDefaultJsonConfig"))
    template["log"].update(log)
    return json.dumps(template)


def core_logs(api, text: str = "SECRET") -> str:
    return ok(api.post(f"{SERVER}/corelogs/100", {"filter": text, **SHOW_ALL}))


def same_words(first: str, second: str, *paths: str) -> bool:
    """Whether two messages read the same once the paths the caller typed are blanked."""
    for path in paths:
        first, second = first.replace(path, "<path>"), second.replace(path, "<path>")
    return first == second


# ---- core logs ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["access", "error"])
def test_a_core_log_outside_the_core_folder_is_refused_and_never_read(panel, api, secret_file, key):
    """The repro: log.access (or log.error) naming another file, then corelogs."""
    before = setting_rows(panel)
    reply = api.post(
        f"{CORE}/update", {"coreSetting": template_with_log(api, **{key: str(secret_file)})}
    )
    wanted = os.path.join(panel.data_dir, "core", f"{key}.log")
    refused(reply, f"log.{key} may be none, empty or {wanted}", str(secret_file))
    changes = {"coreTemplate": template_with_log(api, **{key: str(secret_file)})}
    refused(api.post(f"{SETTINGS}/update", changes), f"log.{key}")
    assert setting_rows(panel) == before
    assert "SECRET-LINE" not in core_logs(api)
    assert ok(api.get(f"{SERVER}/getConfigJson"))["log"].get(key) != str(secret_file)


@pytest.mark.parametrize(
    "value",
    [
        "../../../etc/cron.d/x",
        "/etc/cron.d/x",
        "other.log",
        "bin/access.log",
        "config.json",
    ],
)
def test_only_the_panels_own_log_file_may_be_named(panel, api, value):
    reply = api.post(f"{CORE}/update", {"coreSetting": template_with_log(api, access=value)})
    refused(reply, "log.access may be none, empty or")


def test_the_panels_own_log_files_are_accepted_and_written_as_full_paths(panel, api):
    core_dir = os.path.join(panel.data_dir, "core")
    for access, error in (("access.log", "./error.log"), ("none", "")):
        template = template_with_log(api, access=access, error=error)
        ok(api.post(f"{CORE}/update", {"coreSetting": template}))
        log = ok(api.get(f"{SERVER}/getConfigJson"))["log"]
        assert log["access"] == os.path.join(core_dir, "access.log")
        assert log["error"] == (os.path.join(core_dir, "error.log") if error else "")


def test_a_link_in_the_core_folder_leading_out_is_refused(panel, api, secret_file):
    link = Path(panel.data_dir) / "core" / "error.log"
    link.symlink_to(secret_file)
    try:
        reply = api.post(f"{CORE}/update", {"coreSetting": template_with_log(api, error=str(link))})
        refused(reply, "log.error may be none, empty or")
        assert "SECRET-LINE" not in core_logs(api)
    finally:
        link.unlink()


def test_a_stored_log_path_from_before_is_left_out_and_never_served(tmp_path, secret_file):
    """A template stored by an older release (or an import) that names files outside:
    the panel starts, the core config writes the panel's own files, corelogs shows
    nothing of the outside file, and the panel's log says what was left out."""
    server = start_panel(tmp_path)
    try:
        api = server.client()
        template = template_with_log(api, access=str(secret_file), error="/etc/cron.d/x")
        server.stop()
        db_rows(server, "DELETE FROM setting WHERE key = 'coreTemplate'")
        db_rows(
            server,
            "INSERT INTO setting (key, value) VALUES ('coreTemplate', ?)",
            (json.dumps(template),),
        )
        server.start()
        api = server.client()
        assert "SECRET-LINE" not in core_logs(api)
        log = ok(api.get(f"{SERVER}/getConfigJson"))["log"]
        assert log["access"] == os.path.join(server.data_dir, "core", "access.log")
        assert "error" not in log
        output = server.output()
        assert "left out of the core config: log.access may be none" in output
        assert f"(got '{secret_file}')" in output
        assert "left out of the core config: log.error may be none" in output
        assert "(got '/etc/cron.d/x')" in output
        assert "Traceback" not in output
    finally:
        server.stop()


# ---- inbound certificates -------------------------------------------------------------------


def tls_inbound(certificate_file: str, key_file: str) -> dict:
    tls = {"certificates": [{"certificateFile": certificate_file, "keyFile": key_file}]}
    return {
        "protocol": "vless",
        "port": free_port(),
        "settings": {"decryption": "none"},
        "streamSettings": {**TLS, "tlsSettings": tls},
    }


def inbound_count(api) -> int:
    return len(ok(api.get(f"{INBOUNDS}/list")))


def test_an_inbound_certificate_outside_the_certificate_folders_is_refused(api, panel):
    key = str(certs_dir(panel) / "key.pem")
    count = inbound_count(api)
    refused(
        api.post(f"{INBOUNDS}/add", tls_inbound("/etc/shadow", key)),
        "streamSettings.tlsSettings.certificates[0].certificateFile '/etc/shadow' is outside",
        "/etc/ssl",
    )
    dotted = str(certs_dir(panel)) + "/../appliance.db"
    refused(api.post(f"{INBOUNDS}/add", tls_inbound(dotted, key)), "may not contain '..'")
    refused(api.post(f"{INBOUNDS}/add", tls_inbound("certs/a.pem", key)), "absolute path")
    assert inbound_count(api) == count


def test_a_link_in_the_certificate_folder_leading_out_is_refused(api, panel, secret_file):
    link = certs_dir(panel) / "escape.pem"
    link.symlink_to(secret_file)
    try:
        reply = api.post(f"{INBOUNDS}/add", tls_inbound(str(link), "/etc/ssl/a.key"))
        refused(reply, f"certificateFile '{link}' is outside")
    finally:
        link.unlink()


def test_an_existing_and_a_missing_outside_file_get_the_same_answer(api, panel, secret_file):
    missing = str(secret_file.parent / "missing.pem")
    key = str(certs_dir(panel) / "key.pem")
    there = api.post(f"{INBOUNDS}/add", tls_inbound(str(secret_file), key))["msg"]
    absent = api.post(f"{INBOUNDS}/add", tls_inbound(missing, key))["msg"]
    assert same_words(there, absent, str(secret_file), missing), (there, absent)
    for route, field in ((f"{SERVER}/getCertHash", "certFile"),):
        there = api.post(route, {field: str(secret_file)})["msg"]
        absent = api.post(route, {field: missing})["msg"]
        assert same_words(there, absent, str(secret_file), missing), (there, absent)
    pair = {"webCertFile": str(secret_file), "webKeyFile": key}
    there = api.post(f"{SETTINGS}/update", pair)["msg"]
    absent = api.post(f"{SETTINGS}/update", {**pair, "webCertFile": missing})["msg"]
    assert same_words(there, absent, str(secret_file), missing), (there, absent)


def test_an_update_cannot_move_a_certificate_out(api, panel):
    cert, key = write_self_signed(certs_dir(panel), "inbound.example")
    inbound = create_inbound(api, tls_inbound(cert, key))
    moved = {**inbound, "streamSettings": tls_inbound("/etc/passwd", key)["streamSettings"]}
    refused(api.post(f"{INBOUNDS}/update/{inbound['id']}", moved), "is outside")
    stored = ok(api.get(f"{INBOUNDS}/get/{inbound['id']}"))
    assert stored["streamSettings"]["tlsSettings"]["certificates"][0]["certificateFile"] == cert


def test_a_folder_the_host_owner_adds_is_allowed(tmp_path):
    """Extra folders come from the host (flag or environment), never from the API."""
    extra = tmp_path / "host-certs"
    extra.mkdir()
    cert, key = write_self_signed(extra, "host.example")
    server = start_panel(tmp_path, env={"APPLIANCE_CERT_DIRS": str(extra)})
    try:
        api = server.client()
        stored = create_inbound(api, tls_inbound(cert, key))
        assert stored["streamSettings"]["tlsSettings"]["certificates"][0]["keyFile"] == key
        ok(api.post(f"{SETTINGS}/update", {"webCertFile": cert, "webKeyFile": key}))
    finally:
        server.stop()


# ---- panel certificates and time zone ------------------------------------------------------


def test_a_panel_certificate_outside_the_certificate_folders_is_refused(api, panel, tmp_path):
    cert, key = write_self_signed(tmp_path, "outside.example")
    before = setting_rows(panel)
    for prefix in ("web", "sub"):
        pair = {f"{prefix}CertFile": cert, f"{prefix}KeyFile": key}
        refused(api.post(f"{SETTINGS}/update", pair), f"{prefix}CertFile '{cert}' is outside")
    assert setting_rows(panel) == before


@pytest.mark.parametrize(
    "value", ["../../etc/passwd", "/etc/localtime", "Europe/../../etc/passwd", "Mars/Olympus", ""]
)
def test_time_location_must_be_a_zone_name(api, panel, value):
    before = setting_rows(panel)
    refused(
        api.post(f"{SETTINGS}/update", {"timeLocation": value}),
        "timeLocation must be Local or an IANA time zone name",
    )
    assert setting_rows(panel) == before


def test_a_zone_name_is_accepted(api):
    ok(api.post(f"{SETTINGS}/update", {"timeLocation": "Europe/Berlin"}))
    assert ok(api.post(f"{SETTINGS}/all"))["timeLocation"] == "Europe/Berlin"
    ok(api.post(f"{SETTINGS}/update", {"timeLocation": "Local"}))


def test_an_outbound_certificate_under_test_stays_in_its_place(api):
    """The probe's temporary core would read the file, and its refusal would tell
    whether the file exists: refused before any core starts."""
    tls = {"certificates": [{"certificateFile": "/etc/shadow", "keyFile": "/etc/ssl/a.key"}]}
    outbound = {
        "tag": "probe",
        "protocol": "vless",
        "settings": {"vnext": [{"address": "127.0.0.1", "port": 1, "users": []}]},
        "streamSettings": {"network": "tcp", "security": "tls", "tlsSettings": tls},
    }
    reply = api.post(f"{CORE}/testOutbound", {"outbound": json.dumps(outbound)})
    refused(reply, "outbounds[0].streamSettings.tlsSettings.certificates[0].certificateFile")
    chain = json.dumps([{**outbound, "tag": "hop"}])
    via_hop = {"tag": "via", "protocol": "freedom", "proxySettings": {"tag": "hop"}}
    reply = api.post(
        f"{CORE}/testOutbound", {"outbound": json.dumps(via_hop), "allOutbounds": chain}
    )
    refused(reply, "allOutbounds[0].streamSettings", "is outside")
