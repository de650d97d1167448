"""An imported backup brings in nothing a route would refuse, and a bad stored value
blocks no unrelated save (security case 40).

The backups are real ones, taken from the panel with getDb and edited with sqlite3 as
someone handing over a crafted file would: a `javascript:` support URL, a web base path
with a space, a core template whose inbound listens on every address at the panel's own
port while the panel runs with `--listen 127.0.0.1`, a host and an outbound subscription
with `javascript:` addresses, an inbound record on the panel's port. The
panel runs on a fixed port, so the port the backup aims at is still the panel's after
the restart an import makes. On PostgreSQL and MariaDB the edited file is the portable
SQLite backup these backends produce and restore from.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from urllib.parse import urlsplit

import pytest
import requests
from helpers import create_inbound, db_rows, free_port, ok, refused
from panels import start_panel, stop_and_drop

SERVER = "/panel/api/server"
UPDATE = "/panel/api/setting/update"
ALL = "/panel/api/setting/all"
CORE_UPDATE = "/panel/api/core/update"
RESTART_WAIT = 40


@pytest.fixture
def fixed_port_panel(tmp_path):
    """A panel of the test's own on a port that stays the same across its restarts."""
    port = free_port()
    server = start_panel(tmp_path, "--port", str(port))
    yield server, port
    stop_and_drop(server)


def template_open_at(port: int) -> str:
    """A core template with an inbound on every address at `port`."""
    return json.dumps(
        {
            "log": {"loglevel": "warning"},
            "inbounds": [
                {"tag": "open-door", "listen": "0.0.0.0", "port": port, "protocol": "socks"}
            ],
            "outbounds": [{"tag": "direct", "protocol": "freedom"}],
        }
    )


def with_client(api) -> tuple[dict, str]:
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": free_port(),
            "remark": "kept",
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )
    sub_id = uuid.uuid4().hex[:16]
    email = f"c-{uuid.uuid4().hex[:8]}"
    client = {"email": email, "subId": sub_id}
    ok(api.post("/panel/api/clients/add", {"client": client, "inboundIds": [inbound["id"]]}))
    return inbound, sub_id


def edited_backup(api, tmp_path, statements: list[tuple[str, tuple | dict]]) -> bytes:
    reply = api.raw("GET", f"{SERVER}/getDb")
    assert reply.status_code == 200, reply.text
    path = tmp_path / f"edited-{uuid.uuid4().hex}.db"
    path.write_bytes(reply.content)
    conn = sqlite3.connect(path)
    for statement, params in statements:
        conn.execute(statement, params)
    conn.commit()
    conn.close()
    return path.read_bytes()


def stored_setting(key: str, value) -> tuple[str, tuple]:
    return "INSERT OR REPLACE INTO setting (key, value) VALUES (?, ?)", (key, json.dumps(value))


def host_row(inbound_id: int, remark: str, address: str) -> tuple[str, tuple]:
    return (
        "INSERT INTO host (inbound_id, remark, address, port, security, sni, tags, enable, "
        "sort_order) VALUES (?, ?, ?, 0, 'same', '', '[]', 1, 0)",
        (inbound_id, remark, address),
    )


def import_db(api, content: bytes) -> dict:
    files = {"db": ("backup.db", content)}
    return api.raw("POST", f"{SERVER}/importDB", files=files).json()


def test_an_import_resets_what_the_routes_refuse_and_lists_it(fixed_port_panel, tmp_path):
    server, port = fixed_port_panel
    api = server.client()
    inbound, sub_id = with_client(api)
    content = edited_backup(
        api,
        tmp_path,
        [
            stored_setting("subSupportUrl", "javascript:alert(1)"),
            stored_setting("subProfileUrl", "https://profile.example.com/"),
            stored_setting("webBasePath", "/a b/"),
            stored_setting("coreTemplate", template_open_at(port)),
            host_row(inbound["id"], "good", "cdn.example.com"),
            host_row(inbound["id"], "crafted", "javascript:alert(1)"),
            (
                "INSERT INTO outbound_sub (remark, url, tag_prefix, update_interval, enabled, "
                "allow_private, prepend, sort_order, outbounds, last_refresh, last_attempt, "
                "last_error, created_at) VALUES ('crafted', 'javascript:alert(1)', 'x-', 600, "
                "1, 0, 0, 1, '[]', 0, 0, '', 0)",
                (),
            ),
        ],
    )
    mark = len(server.lines)
    reply = import_db(api, content)
    assert reply["success"] is True, reply
    reset = reply["obj"]["reset"]
    assert [line.split(" ", 1)[0] for line in reset] == [
        "subSupportUrl",
        "webBasePath",
        "coreTemplate",
        "host",
        "outbound",
    ], reset
    assert "must be an http:// or https:// URL" in reset[0]
    assert "which the panel itself uses" in reset[2]
    assert "(crafted) was left out (address must be a domain name" in reset[3]
    assert "(crafted) was left out (url must be an http(s) address" in reset[4]
    assert "subSupportUrl was reset to its default" in reply["msg"]
    server.wait_listening(mark, timeout=RESTART_WAIT)
    assert any("import: coreTemplate was reset" in line for line in server.lines[mark:])

    api = server.client()
    values = ok(api.post(ALL))
    assert (values["subSupportUrl"], values["webBasePath"], values["coreTemplate"]) == ("", "/", "")
    assert values["subProfileUrl"] == "https://profile.example.com/"
    stored = {key for (key,) in db_rows(server, "SELECT key FROM setting")}
    assert not stored & {"subSupportUrl", "webBasePath", "coreTemplate"}
    assert [i["id"] for i in ok(api.get("/panel/api/inbounds/list"))] == [inbound["id"]]
    assert [host["remark"] for host in ok(api.get("/panel/api/hosts/list"))] == ["good"]
    assert ok(api.get("/panel/api/core/outbound-subs")) == []

    served = requests.get(f"{server.sub_url}/sub/{sub_id}", timeout=20)
    assert served.status_code == 200
    assert "Support-Url" not in served.headers
    assert served.headers["Profile-Web-Page-Url"] == "https://profile.example.com/"

    config = ok(api.get(f"{SERVER}/getConfigJson"))
    assert [entry for entry in config["inbounds"] if entry.get("listen") == "0.0.0.0"] == [], (
        config["inbounds"]
    )
    assert port not in [entry.get("port") for entry in config["inbounds"]]

    # Each page saves alone.
    ok(api.post(UPDATE, {"subTitle": "after import"}))
    template = ok(api.get("/panel/api/core/getDefaultJsonConfig"))
    ok(api.post(CORE_UPDATE, {"coreSetting": json.dumps(template)}))


CRAFTED_INBOUNDS = {
    "on the panel's port": (
        "UPDATE inbound SET listen = '0.0.0.0', port = :port WHERE id = :id",
        "listens on port {port}/tcp, which the panel itself uses",
    ),
    "of no protocol the panel knows": (
        "UPDATE inbound SET protocol = 'telnet' WHERE id = :id",
        "is one the inbound routes refuse (protocol",
    ),
}


@pytest.mark.parametrize("case", sorted(CRAFTED_INBOUNDS))
def test_an_import_with_an_inbound_the_routes_refuse_is_refused(fixed_port_panel, tmp_path, case):
    server, port = fixed_port_panel
    api = server.client()
    inbound, _sub_id = with_client(api)
    statement, words = CRAFTED_INBOUNDS[case]
    content = edited_backup(api, tmp_path, [(statement, {"port": port, "id": inbound["id"]})])
    refused(
        import_db(api, content),
        f"the backup's inbound {inbound['id']} (kept)",
        words.format(port=port),
        "nothing was imported",
    )
    live = ok(api.get(f"/panel/api/inbounds/get/{inbound['id']}"))
    assert (live["protocol"], live["listen"], live["port"]) == ("vless", "", inbound["port"])


def test_a_bad_stored_value_blocks_no_unrelated_save(fixed_port_panel):
    server, port = fixed_port_panel
    api = server.client()
    for key, value in (
        ("subSupportUrl", "javascript:alert(1)"),
        ("coreTemplate", "{not json"),
        # Overridden by --listen for this run, so the panel starts on it.
        ("webListen", "not-an-address"),
    ):
        db_rows(server, "INSERT INTO setting (key, value) VALUES (?, ?)", (key, json.dumps(value)))
    mark = len(server.lines)
    ok(api.post("/panel/api/setting/restartPanel"))
    server.wait_listening(mark, timeout=RESTART_WAIT)
    api = server.client()

    # The Settings page, sending every value back as it got it, and the Core page.
    values = ok(api.post(ALL))
    ok(api.post(UPDATE, {**values, "subTitle": "still saved"}))
    template = ok(api.get("/panel/api/core/getDefaultJsonConfig"))
    ok(api.post(CORE_UPDATE, {"coreSetting": json.dumps(template)}))
    # A change checked beside a bad stored value names that value and the way out.
    refused(
        api.post(UPDATE, {"subPort": free_port()}),
        "the stored webListen is not valid",
        "save webListen with a valid value together with this change",
    )
    ok(api.post(UPDATE, {"subPort": free_port(), "webListen": ""}))
    # The core template route refuses an inbound on the panel's own port, as the inbound
    # routes do.
    refused(
        api.post(CORE_UPDATE, {"coreSetting": template_open_at(port)}),
        f"listens on 0.0.0.0 port {port}/tcp, which the panel itself uses",
    )
    assert urlsplit(server.url).port == port


def test_an_import_resets_a_subscription_template_its_route_refuses(fixed_port_panel, tmp_path):
    """A template that reaches for Python's internals, or whose Clash document has no
    proxies, is reset to the built-in format and named; a good one is kept and served."""
    server, _port = fixed_port_panel
    api = server.client()
    _inbound, sub_id = with_client(api)
    good = "proxies: {{ proxies | tojson }}\nproxy-groups: []\nrules: ['MATCH,DIRECT']"
    content = edited_backup(
        api,
        tmp_path,
        [
            stored_setting("subTemplateSingbox", "{{ lipsum.__globals__['os'] }}"),
            stored_setting("subTemplateJson", '{"outbounds": []}'),
            stored_setting("subTemplateClash", good),
        ],
    )
    mark = len(server.lines)
    reply = import_db(api, content)
    assert reply["success"] is True, reply
    reset = reply["obj"]["reset"]
    assert [line.split(" ", 1)[0] for line in reset] == ["subTemplateSingbox", "subTemplateJson"]
    assert "may not read the attribute '__globals__'" in reset[0]
    assert "needs a non-empty list of outbounds" in reset[1]
    server.wait_listening(mark, timeout=RESTART_WAIT)
    api = server.client()
    values = ok(api.post(ALL))
    assert (values["subTemplateSingbox"], values["subTemplateJson"]) == ("", "")
    assert values["subTemplateClash"] == good
    served = requests.get(f"{server.sub_url}/sub/{sub_id}?format=clash", timeout=20)
    assert served.status_code == 200
    assert served.text.startswith("proxies: [{")
