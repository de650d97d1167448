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
from core_panel import CORE_ENV, wait_until
from helpers import (
    REALITY,
    TLS,
    certs_dir,
    create_inbound,
    db_rows,
    free_port,
    ok,
    refused,
    setting_rows,
    sockets_dir,
    write_self_signed,
)
from panels import start_panel, stop_and_drop

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
        # Logged as the config was built; the test reads the panel's output as it comes.
        wait_until(
            lambda: "left out of the core config: log.error" in server.output(),
            "the panel's log names what it left out",
        )
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


# ---- unix sockets ---------------------------------------------------------------------------

OUTSIDE_SOCKET = "/tmp/appliance-outside.sock"


def socket_cases(sockets: str) -> list[tuple[str, str]]:
    """(value, why it is refused) of socket paths that are not in the sockets folder."""
    return [
        (OUTSIDE_SOCKET, "is outside the directories allowed for it"),
        ("/var/run/docker.sock", "is outside the directories allowed for it"),
        (f"{sockets}/../appliance.db", "may not contain '..'"),
    ]


def reality_stream(target: str) -> dict:
    reality = {**REALITY["realitySettings"], "target": target}
    return {**REALITY, "realitySettings": reality}


def fallback_master(api) -> dict:
    return create_inbound(api, {"protocol": "vless", "port": free_port(), "streamSettings": TLS})


def stored_inbounds(panel) -> list[tuple]:
    return db_rows(panel, "SELECT id, listen, stream_settings FROM inbound ORDER BY id")


def stored_fallbacks(panel) -> list[tuple]:
    return db_rows(panel, "SELECT id, dest FROM fallback ORDER BY id")


def test_a_listen_socket_outside_the_sockets_folder_is_refused(api, panel):
    """Add, import and update: the core would create (and first remove) that file."""
    sockets = sockets_dir(panel)
    kept = create_inbound(api, {"protocol": "socks", "listen": f"{sockets}/kept.sock"})
    before = stored_inbounds(panel)
    for value, why in socket_cases(sockets):
        for listen in (value, f"{value},0666"):
            payload = {"protocol": "socks", "listen": listen}
            refused(api.post(f"{INBOUNDS}/add", payload), "listen", why)
            reply = api.post(f"{INBOUNDS}/import", {"data": json.dumps(payload)})
            refused(reply, "listen", why)
            reply = api.post(f"{INBOUNDS}/update/{kept['id']}", {**kept, "listen": listen})
            refused(reply, "listen", why)
    refused(
        api.post(f"{INBOUNDS}/add", {"protocol": "socks", "listen": OUTSIDE_SOCKET}),
        f"({sockets}); put the socket there or use @name",
    )
    assert stored_inbounds(panel) == before


def test_an_existing_and_a_missing_socket_outside_get_the_same_answer(api, secret_file):
    missing = str(secret_file.parent / "missing.sock")
    replies = [
        api.post(f"{INBOUNDS}/add", {"protocol": "socks", "listen": path})
        for path in (str(secret_file), missing)
    ]
    for reply in replies:
        refused(reply, "is outside the directories allowed for it")
    answers = [reply["msg"] for reply in replies]
    assert same_words(*answers, str(secret_file), missing), answers


def test_a_fallback_to_a_socket_outside_is_refused(api, panel):
    """A fallback hands connections from the internet to that socket (a container
    engine's, a database's): by the fallbacks route and inside an added inbound."""
    sockets = sockets_dir(panel)
    master = fallback_master(api)
    ok(api.post(f"{INBOUNDS}/{master['id']}/fallbacks", {"fallbacks": [{"dest": 8080}]}))
    rules, count = stored_fallbacks(panel), inbound_count(api)
    for value, why in socket_cases(sockets):
        reply = api.post(f"{INBOUNDS}/{master['id']}/fallbacks", {"fallbacks": [{"dest": value}]})
        refused(reply, "fallbacks[0].dest", why)
        settings = {"decryption": "none", "fallbacks": [{"dest": value}]}
        payload = {"protocol": "vless", "port": free_port(), "settings": settings}
        refused(api.post(f"{INBOUNDS}/add", {**payload, "streamSettings": TLS}), why)
        stream = reality_stream(value)
        payload = {"protocol": "vless", "port": free_port(), "streamSettings": stream}
        refused(api.post(f"{INBOUNDS}/add", payload), "realitySettings.target", why)
    assert stored_fallbacks(panel) == rules
    assert inbound_count(api) == count


def test_sockets_in_their_folder_and_abstract_names_reach_the_core(api, panel, secret_file):
    """...but a link in the folder leading out does not."""
    sockets = sockets_dir(panel)
    link = Path(sockets) / "escape"
    link.symlink_to(secret_file.parent, target_is_directory=True)
    try:
        reply = api.post(f"{INBOUNDS}/add", {"protocol": "socks", "listen": f"{link}/x.sock"})
        refused(reply, f"listen '{link}/x.sock' is outside")
    finally:
        link.unlink()
    listens = [f"{sockets}/in.sock,0666", f"{sockets}/sub/in.sock", "@abstract-in", "@@padded"]
    tags = []
    for listen in listens:
        created = create_inbound(api, {"protocol": "socks", "listen": listen})
        assert created["listen"] == listen
        tags.append(created["tag"])
    master = fallback_master(api)
    dests = [f"{sockets}/fallback.sock", "@fallback"]
    rules = {"fallbacks": [{"dest": dest} for dest in dests]}
    ok(api.post(f"{INBOUNDS}/{master['id']}/fallbacks", rules))
    reality = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": free_port(),
            "streamSettings": reality_stream(f"{sockets}/r.sock"),
        },
    )
    config = ok(api.get(f"{SERVER}/getConfigJson"))
    by_tag = {inbound["tag"]: inbound for inbound in config["inbounds"]}
    assert [by_tag[tag]["listen"] for tag in tags] == listens
    assert [f["dest"] for f in by_tag[master["tag"]]["settings"]["fallbacks"]] == dests
    target = by_tag[reality["tag"]]["streamSettings"]["realitySettings"]["target"]
    assert target == f"{sockets}/r.sock"


def test_the_sockets_folder_is_made_at_start(panel):
    assert os.path.isdir(sockets_dir(panel))
    assert os.path.isdir(os.path.join(panel.data_dir, "www"))


def test_a_socket_in_the_template_stays_in_its_folder(api, panel):
    """The template's own inbounds: listen, fallbacks and dsSettings (V2Ray's domain
    socket transport) are held to the same folder."""
    sockets = sockets_dir(panel)
    before = setting_rows(panel)
    template = ok(api.get(f"{CORE}/getDefaultJsonConfig"))
    cases = [
        ({"tag": "t", "listen": OUTSIDE_SOCKET, "protocol": "socks"}, "inbounds[0].listen"),
        (
            {
                "tag": "t",
                "port": 1,
                "protocol": "vless",
                "settings": {"fallbacks": [{"dest": OUTSIDE_SOCKET}]},
            },
            "inbounds[0].settings.fallbacks[0].dest",
        ),
        (
            {
                "tag": "t",
                "port": 1,
                "protocol": "socks",
                "streamSettings": {
                    "network": "domainsocket",
                    "dsSettings": {"path": OUTSIDE_SOCKET},
                },
            },
            "inbounds[0].streamSettings.dsSettings.path",
        ),
    ]
    for inbound, name in cases:
        text = json.dumps({**template, "inbounds": [inbound]})
        refused(api.post(f"{CORE}/update", {"coreSetting": text}), f"{name} '{OUTSIDE_SOCKET}'")
        refused(api.post(f"{SETTINGS}/update", {"coreTemplate": text}), name)
    assert setting_rows(panel) == before
    placed = {"tag": "t", "listen": f"{sockets}/template.sock", "protocol": "socks"}
    ok(api.post(f"{CORE}/update", {"coreSetting": json.dumps({**template, "inbounds": [placed]})}))
    config = ok(api.get(f"{SERVER}/getConfigJson"))
    assert {"t": f"{sockets}/template.sock"}.items() <= {
        i["tag"]: i.get("listen") for i in config["inbounds"]
    }.items()
    ok(api.post(f"{CORE}/update", {"coreSetting": json.dumps(template)}))


# ---- TLS key logs, served folders, geo files ----------------------------------------------


def test_a_tls_key_log_is_refused_anywhere(api, panel):
    """masterKeyLog writes every TLS session key: refused outright, in an inbound and in
    the template's outbounds alike."""
    count = inbound_count(api)
    for value in ("/tmp/keys.log", os.path.join(panel.data_dir, "core", "keys.log")):
        inbound = tls_inbound("/etc/ssl/a.crt", "/etc/ssl/a.key")
        inbound["streamSettings"]["tlsSettings"]["masterKeyLog"] = value
        refused(
            api.post(f"{INBOUNDS}/add", inbound),
            "streamSettings.tlsSettings.masterKeyLog must be empty",
            "TLS session keys",
        )
    assert inbound_count(api) == count
    template = ok(api.get(f"{CORE}/getDefaultJsonConfig"))
    template["outbounds"][0]["streamSettings"] = {"tlsSettings": {"masterKeyLog": "/tmp/k"}}
    reply = api.post(f"{CORE}/update", {"coreSetting": json.dumps(template)})
    refused(reply, "outbounds[0].streamSettings.tlsSettings.masterKeyLog must be empty")
    inbound = tls_inbound("/etc/ssl/a.crt", "/etc/ssl/a.key")
    inbound["streamSettings"]["tlsSettings"]["masterKeyLog"] = ""
    create_inbound(api, inbound)


def hysteria_inbound(masquerade: dict) -> dict:
    stream = {**TLS, "network": "hysteria", "hysteriaSettings": {"masquerade": masquerade}}
    return {"protocol": "hysteria2", "port": free_port(), "streamSettings": stream}


def test_a_masquerade_folder_outside_www_is_refused(api, panel, secret_file):
    """Whatever the folder holds is served to anyone who connects."""
    www = os.path.join(panel.data_dir, "www")
    link = Path(www) / "escape"
    link.symlink_to(secret_file.parent)
    count = inbound_count(api)
    try:
        for folder, why in (
            ("/etc", "is outside the directories allowed for it"),
            (panel.data_dir, "is outside the directories allowed for it"),
            (str(link), "is outside the directories allowed for it"),
            (f"{www}/../core", "may not contain '..'"),
            ("www", "must be an absolute path"),
            ("", f"must be a folder in {www}"),
        ):
            reply = api.post(f"{INBOUNDS}/add", hysteria_inbound({"type": "file", "dir": folder}))
            refused(reply, "streamSettings.hysteriaSettings.masquerade.dir", why)
    finally:
        link.unlink()
    assert inbound_count(api) == count


def test_a_masquerade_folder_in_www_reaches_the_core(api, panel):
    """...where a sibling folder whose name starts the same does not."""
    site = os.path.join(panel.data_dir, "www", "site")
    sibling = hysteria_inbound({"type": "file", "dir": os.path.join(panel.data_dir, "www2")})
    refused(api.post(f"{INBOUNDS}/add", sibling), "masquerade.dir", "is outside")
    created = create_inbound(api, hysteria_inbound({"type": "file", "dir": site}))
    other = create_inbound(api, hysteria_inbound({"type": "string", "content": "hi"}))
    config = ok(api.get(f"{SERVER}/getConfigJson"))
    by_tag = {inbound["tag"]: inbound for inbound in config["inbounds"]}
    masquerade = by_tag[created["tag"]]["streamSettings"]["hysteriaSettings"]["masquerade"]
    assert masquerade == {"type": "file", "dir": site}
    assert by_tag[other["tag"]]["streamSettings"]["hysteriaSettings"]["masquerade"]["content"]


@pytest.mark.parametrize(
    ("section", "value"),
    [
        ("domain", "ext:../../../etc/shadow:x"),
        ("domain", "ext:/etc/passwd:root"),
        ("ip", "ext:sub/geo.dat:cn"),
        ("ip", "ext::cn"),
    ],
)
def test_a_geo_file_outside_the_core_folder_is_refused(api, panel, section, value):
    before = setting_rows(panel)
    template = ok(api.get(f"{CORE}/getDefaultJsonConfig"))
    dns = {**json.loads(json.dumps(template)), "dns": {"servers": [{"domains": [value]}]}}
    template["routing"]["rules"].append(
        {"type": "field", section: [value], "outboundTag": "blocked"}
    )
    text = json.dumps(template)
    index = len(template["routing"]["rules"]) - 1
    name = f"routing.rules[{index}].{section}[0]"
    refused(api.post(f"{CORE}/update", {"coreSetting": text}), name, "plain name")
    refused(api.post(f"{SETTINGS}/update", {"coreTemplate": text}), name, "plain name")
    reply = api.post(f"{CORE}/update", {"coreSetting": json.dumps(dns)})
    refused(reply, "dns.servers[0].domains[0]", "plain name")
    assert setting_rows(panel) == before


def test_a_geo_file_by_its_plain_name_reaches_the_core(api):
    """...where a name with a folder in it does not, even as a DNS host key."""
    template = ok(api.get(f"{CORE}/getDefaultJsonConfig"))
    hosts = {**template, "dns": {"hosts": {"ext:../geo.dat:x": "127.0.0.1"}}}
    reply = api.post(f"{CORE}/update", {"coreSetting": json.dumps(hosts)})
    refused(reply, "dns.hosts.ext:../geo.dat:x must name a geo file by its plain name")
    rule = {"type": "field", "domain": ["ext:custom.dat:ads"], "outboundTag": "blocked"}
    template["routing"]["rules"].append(rule)
    ok(api.post(f"{CORE}/update", {"coreSetting": json.dumps(template)}))
    assert rule in ok(api.get(f"{SERVER}/getConfigJson"))["routing"]["rules"]
    template["routing"]["rules"].remove(rule)
    ok(api.post(f"{CORE}/update", {"coreSetting": json.dumps(template)}))


# ---- stored before the rules ----------------------------------------------------------------


def test_stored_sockets_folders_and_key_logs_are_left_out_and_the_panel_starts(tmp_path):
    """Values an older release or an imported backup left in the database: the panel
    starts, the core config leaves out each one with what cannot work without it, and
    the panel's log says why."""
    server = start_panel(tmp_path)
    try:
        api = server.client()
        sockets = sockets_dir(server)
        bad_listen = create_inbound(api, {"protocol": "socks", "listen": f"{sockets}/a.sock"})
        good = create_inbound(api, {"protocol": "socks", "listen": f"{sockets}/b.sock"})
        keylog = create_inbound(api, tls_inbound("/etc/ssl/a.crt", "/etc/ssl/a.key"))
        site = os.path.join(server.data_dir, "www")
        hysteria = create_inbound(api, hysteria_inbound({"type": "file", "dir": site}))
        master = fallback_master(api)
        rules = {"fallbacks": [{"dest": f"{sockets}/f.sock"}, {"dest": 8080}]}
        ok(api.post(f"{INBOUNDS}/{master['id']}/fallbacks", rules))
        template = ok(api.get(f"{CORE}/getDefaultJsonConfig"))
        rule = {"type": "field", "domain": ["ext:../../etc/shadow:x"], "outboundTag": "blocked"}
        template["routing"]["rules"].append(rule)
        template["inbounds"] = [{"tag": "t", "listen": OUTSIDE_SOCKET, "protocol": "socks"}]
        server.stop()

        def restream(inbound: dict, change) -> None:
            stream = inbound["streamSettings"]
            change(stream)
            db_rows(
                server,
                "UPDATE inbound SET stream_settings = ? WHERE id = ?",
                (json.dumps(stream), inbound["id"]),
            )

        db_rows(
            server, "UPDATE inbound SET listen = ? WHERE id = ?", (OUTSIDE_SOCKET, bad_listen["id"])
        )
        restream(keylog, lambda s: s["tlsSettings"].update(masterKeyLog="/tmp/keys.log"))
        restream(hysteria, lambda s: s["hysteriaSettings"]["masquerade"].update(dir="/etc"))
        db_rows(
            server,
            "UPDATE fallback SET dest = ? WHERE dest = ?",
            ("/var/run/docker.sock", f"{sockets}/f.sock"),
        )
        db_rows(server, "DELETE FROM setting WHERE key = 'coreTemplate'")
        db_rows(
            server,
            "INSERT INTO setting (key, value) VALUES ('coreTemplate', ?)",
            (json.dumps(json.dumps(template)),),
        )
        server.start()
        api = server.client()
        config = ok(api.get(f"{SERVER}/getConfigJson"))
        by_tag = {inbound["tag"]: inbound for inbound in config["inbounds"]}
        assert bad_listen["tag"] not in by_tag and "t" not in by_tag
        assert by_tag[good["tag"]]["listen"] == f"{sockets}/b.sock"
        assert "masterKeyLog" not in by_tag[keylog["tag"]]["streamSettings"]["tlsSettings"]
        assert "masquerade" not in by_tag[hysteria["tag"]]["streamSettings"]["hysteriaSettings"]
        assert by_tag[master["tag"]]["settings"]["fallbacks"] == [{"dest": 8080}]
        assert rule not in config["routing"]["rules"]
        # The core's start logs them; on a busy host that may come after the answer above.
        for line in (
            f"inbound {bad_listen['tag']}: listen '{OUTSIDE_SOCKET}' is outside",
            f"left out of the core config: inbound {bad_listen['tag']}, which cannot run",
            f"inbound {keylog['tag']}: streamSettings.tlsSettings.masterKeyLog must be empty",
            f"inbound {hysteria['tag']}: streamSettings.hysteriaSettings.masquerade.dir '/etc'",
            f"inbound {master['tag']}: settings.fallbacks[0].dest '/var/run/docker.sock'",
            "left out of the core config: routing.rules[",
            f"left out of the core config: inbounds[0].listen '{OUTSIDE_SOCKET}'",
        ):
            wait_until(lambda line=line: line in server.output(), f"the log says {line!r}")
        assert "Traceback" not in server.output()
        assert ok(api.get(f"{INBOUNDS}/get/{bad_listen['id']}"))["listen"] == OUTSIDE_SOCKET
    finally:
        server.stop()


def test_a_missing_certificate_in_its_place_is_named_in_words(tmp_path):
    """A certificate path inside its folder that names no file: the core refuses the
    config, and the refusal says which file of which inbound is missing in words, not in
    the JSON path of the core's config."""
    server = start_panel(tmp_path, env=CORE_ENV)
    try:
        api = server.client()
        missing = str(certs_dir(server) / "absent.pem")
        cert, key = write_self_signed(certs_dir(server), "words.example")
        inbound = {**tls_inbound(missing, str(key)), "remark": "words"}
        reply = api.post(f"{INBOUNDS}/add", inbound)
        refused(reply, f"the certificate file {missing} of inbound 'words' does not exist")
        assert "tlsSettings" not in reply["msg"], reply["msg"]
        stored = ok(api.post(f"{INBOUNDS}/add", {**tls_inbound(cert, str(key)), "remark": "w"}))
        moved = {**stored, "streamSettings": tls_inbound(cert, missing)["streamSettings"]}
        reply = api.post(f"{INBOUNDS}/update/{stored['id']}", moved)
        refused(reply, f"the key file {missing} of inbound 'w' does not exist")
        assert [item["remark"] for item in ok(api.get(f"{INBOUNDS}/list"))] == ["w"]
    finally:
        stop_and_drop(server)
