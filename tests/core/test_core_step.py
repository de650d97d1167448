"""Never out of step in silence: saves the core cannot run, and a core that still ends up
out of step with what is stored.

A panel runs Debian's V2Ray 4.34 as its core, which refuses the XChaCha20 Shadowsocks
cipher (Xray runs it). An inbound save whose config that core refuses must be refused with
the core's words and change nothing: no row, no restart. (What the core lacks and would
not refuse, such as REALITY, is refused before its test: tests/core/test_core_capabilities.py.)
A config the core refuses can still be stored by other means: a database restored from a
panel on another core holds such an inbound. Then the status, the panel log and the
answers to client saves say that the core does not run what is stored, and which inbounds
it does not run as stored.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from core_helpers import REFUSED_STREAM
from core_panel import CORE_ENV, loopback_template, use_template, wait_until
from core_traffic import core_pid, in_core
from helpers import db_rows, free_port, ok, refused
from panels import start_panel

INBOUNDS = "/panel/api/inbounds"
CLIENTS = "/panel/api/clients"
REFUSED_CIPHER = "xchacha20-poly1305"
CORE_WORDS = f"unknown cipher method: {REFUSED_CIPHER}"
# A cipher the capability table says V2Ray 4.34 lacks: refused before the core's test.
LACKING_CIPHER = "2022-blake3-aes-128-gcm"
PLAIN = {"network": "tcp", "security": "none"}


def shadowsocks(method: str, **fields) -> dict:
    return {
        "protocol": "shadowsocks",
        "remark": f"ss-{uuid.uuid4().hex[:6]}",
        "listen": "127.0.0.1",
        "port": free_port(),
        "settings": {"method": method, "network": "tcp"},
        "streamSettings": PLAIN,
        **fields,
    }


def vless() -> dict:
    return {
        "protocol": "vless",
        "remark": f"vless-{uuid.uuid4().hex[:6]}",
        "listen": "127.0.0.1",
        "port": free_port(),
        "settings": {"decryption": "none"},
        "streamSettings": PLAIN,
    }


def add_client(api, inbound_id: int) -> dict:
    client = {"email": f"{uuid.uuid4().hex[:10]}@step", "id": str(uuid.uuid4())}
    return api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]})


def stored_inbounds(server) -> list[tuple]:
    return db_rows(server, "SELECT id, protocol, port, settings FROM inbound ORDER BY id")


def core_status(api) -> dict:
    return ok(api.get("/panel/api/server/status"))["core"]


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = start_panel(tmp_path_factory.mktemp("core-step"), env=CORE_ENV)
    api = server.client()
    use_template(api, loopback_template(api))
    wait_until(lambda: core_pid(server), "the core runs")
    yield server
    server.stop()


# ---- saves the core refuses change nothing ---------------------------------------------


def test_an_inbound_the_core_refuses_is_not_added_and_the_core_is_untouched(api, panel):
    running = in_core(api, panel, ok(api.post(f"{INBOUNDS}/add", vless())))
    before = stored_inbounds(panel)

    refused(
        api.post(f"{INBOUNDS}/add", shadowsocks(REFUSED_CIPHER)),
        "the core refused the config",
        CORE_WORDS,
    )
    data = json.dumps(shadowsocks(REFUSED_CIPHER))
    refused(api.post(f"{INBOUNDS}/import", {"data": data}), "the core refused", CORE_WORDS)

    assert stored_inbounds(panel) == before
    assert core_pid(panel) == running
    assert core_status(api)["inStep"] is True


def test_an_update_into_an_inbound_the_core_refuses_keeps_the_stored_one(api, panel):
    inbound = ok(api.post(f"{INBOUNDS}/add", shadowsocks("aes-256-gcm")))
    ok(add_client(api, inbound["id"]))
    running = in_core(api, panel, inbound)
    stored = ok(api.get(f"{INBOUNDS}/get/{inbound['id']}"))
    secrets = db_rows(panel, "SELECT email, password, method FROM client ORDER BY id")

    changed = {**stored, "settings": {**stored["settings"], "method": REFUSED_CIPHER}}
    refused(api.post(f"{INBOUNDS}/update/{inbound['id']}", changed), CORE_WORDS)
    changed = {**stored, "settings": {**stored["settings"], "method": LACKING_CIPHER}}
    reply = api.post(f"{INBOUNDS}/update/{inbound['id']}", changed)
    refused(reply, "the running core (v2fly 4.34.0) cannot run Shadowsocks 2022")

    assert ok(api.get(f"{INBOUNDS}/get/{inbound['id']}")) == stored
    # The clients' secrets re-fitted to the new cipher were rolled back with it.
    assert db_rows(panel, "SELECT email, password, method FROM client ORDER BY id") == secrets
    assert core_pid(panel) == running


def test_enabling_an_inbound_the_core_refuses_is_refused(api, panel):
    # A disabled inbound is not in the core's config, so the core has nothing to refuse.
    disabled = ok(api.post(f"{INBOUNDS}/add", shadowsocks(REFUSED_CIPHER, enable=False)))
    try:
        refused(
            api.post(f"{INBOUNDS}/setEnable/{disabled['id']}", {"enable": True}),
            CORE_WORDS,
        )
        assert ok(api.get(f"{INBOUNDS}/get/{disabled['id']}"))["enable"] is False
    finally:
        ok(api.post(f"{INBOUNDS}/del/{disabled['id']}"))


def test_a_template_the_core_refuses_is_refused_in_its_words(api, panel):
    saved = ok(api.post("/panel/api/core/"))["coreSetting"]
    template = loopback_template(api)
    template["outbounds"].append(
        {"tag": "ss-out", "protocol": "shadowsocks", "settings": {"servers": [
            {"address": "127.0.0.1", "port": 1, "method": REFUSED_CIPHER, "password": "x"}
        ]}}
    )  # fmt: skip
    reply = api.post("/panel/api/core/update", {"coreSetting": json.dumps(template)})
    refused(reply, "the core refused the config", REFUSED_CIPHER)
    assert ok(api.post("/panel/api/core/"))["coreSetting"] == saved


# ---- a core out of step says so ----------------------------------------------------------


def test_a_core_out_of_step_says_so_in_the_status_the_log_and_client_saves(api, panel):
    inbound = ok(api.post(f"{INBOUNDS}/add", vless()))
    ok(add_client(api, inbound["id"]))
    running = in_core(api, panel, inbound)
    # As a database restored from a newer core's panel would hold it; the next change is
    # refused.
    db_rows(
        panel,
        "UPDATE inbound SET stream_settings = ? WHERE id = ?",
        (json.dumps(REFUSED_STREAM), inbound["id"]),
    )
    ok(add_client(api, inbound["id"]))

    status = wait_until(
        lambda: (core := core_status(api))["inStep"] is False and core, "the core is out of step"
    )
    assert status["state"] == "running"
    assert "the core refused the config" in status["errorMsg"]
    assert "meek" in status["errorMsg"]
    assert status["staleInbounds"] == [inbound["id"]]
    assert core_pid(panel) == running
    assert any(
        "WARNING" in line and "out of step" in line and "meek" in line for line in panel.lines
    )

    reply = add_client(api, inbound["id"])
    assert reply["success"] is True
    assert reply["msg"].startswith("client created; stored, but not running: ")
    assert "meek" in reply["msg"]

    # Putting the inbound right is tested, accepted and brings the core back in step.
    stored = ok(api.get(f"{INBOUNDS}/get/{inbound['id']}"))
    ok(api.post(f"{INBOUNDS}/update/{inbound['id']}", {**stored, "streamSettings": PLAIN}))
    wait_until(lambda: core_status(api)["inStep"], "the core is in step again")
    time.sleep(0.5)
    assert core_status(api)["staleInbounds"] == []
    assert add_client(api, inbound["id"])["msg"] == "client created"
