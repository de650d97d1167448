"""Length limits of stored text and bounds on JSON, over real HTTP.

Every text column has a length, and a value longer than its column used to reach the
database: SQLite kept it, Pony or PostgreSQL/MariaDB raised, and the client got a 500.
JSON from a client (a request body, a document sent as text inside a field) used to be
parsed with nothing but the parser's own recursion limit. Each case here must come back
as a failure envelope whose message says what is wrong, with nothing stored. Run with
`--db=postgres` or `--db=mysql` for the networked backends.
"""

from __future__ import annotations

import json

import requests
from helpers import INBOUNDS, free_port, ok, refused

DEEP = 10_000


def vless(port: int, **fields) -> dict:
    return {
        "protocol": "vless",
        "port": port,
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "none"},
        **fields,
    }


def inbound_remarks(api) -> list[str]:
    return [inbound["remark"] for inbound in ok(api.get(f"{INBOUNDS}/list"))]


def test_a_remark_over_255_characters_is_refused_and_nothing_is_created(api):
    before = inbound_remarks(api)
    refused(api.post(f"{INBOUNDS}/add", vless(free_port(), remark="r" * 256)), "remark", "255")
    assert inbound_remarks(api) == before


def test_a_remark_of_255_characters_is_stored_exactly(api):
    remark = "é" * 254 + "🙂"
    created = ok(api.post(f"{INBOUNDS}/add", vless(free_port(), remark=remark)))
    assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["remark"] == remark


def test_an_update_with_a_long_remark_changes_nothing(api):
    created = ok(api.post(f"{INBOUNDS}/add", vless(free_port(), remark="kept")))
    payload = vless(created["port"], remark="x" * 300)
    refused(api.post(f"{INBOUNDS}/update/{created['id']}", payload), "remark", "255")
    assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["remark"] == "kept"


def test_a_core_template_nested_10000_deep_is_refused(api):
    before = ok(api.post("/panel/api/core/"))["coreSetting"]
    deep = '{"log": ' + "[" * DEEP + "]" * DEEP + "}"
    response = api.raw("POST", "/panel/api/core/update", json={"coreSetting": deep})
    assert response.status_code in (200, 400)
    refused(response.json(), "coreTemplate", "nested too deeply")
    assert ok(api.post("/panel/api/core/"))["coreSetting"] == before


def test_a_core_template_with_an_outbound_tag_too_long_to_count_is_refused(api):
    template = ok(api.get("/panel/api/core/getDefaultJsonConfig"))
    template["outbounds"][0]["tag"] = "t" * 300
    reply = api.post("/panel/api/core/update", {"coreSetting": json.dumps(template)})
    refused(reply, "outbounds[0].tag", "223")


def test_a_request_body_nested_10000_deep_is_refused(api):
    before = inbound_remarks(api)
    body = '{"remark": ' + "[" * DEEP + "]" * DEEP + "}"
    response = api.raw(
        "POST", f"{INBOUNDS}/add", data=body, headers={"Content-Type": "application/json"}
    )
    refused(response.json(), "the request body", "nested too deeply")
    assert inbound_remarks(api) == before


def test_settings_sent_as_text_nested_10000_deep_are_refused(api):
    before = inbound_remarks(api)
    deep = '{"decryption": "none", "x": ' + "[" * DEEP + "]" * DEEP + "}"
    refused(api.post(f"{INBOUNDS}/add", vless(free_port(), settings=deep)), "settings", "nested")
    assert inbound_remarks(api) == before


def test_brackets_inside_strings_do_not_count_as_nesting(api):
    remark = "[" * 100 + '\\"{' * 50
    created = ok(api.post(f"{INBOUNDS}/add", vless(free_port(), remark=remark)))
    assert created["remark"] == remark
    settings = json.dumps({"decryption": "none", "note": "{[" * 200})
    created = ok(api.post(f"{INBOUNDS}/add", vless(free_port(), settings=settings)))
    assert created["settings"]["note"] == "{[" * 200


def test_documents_longer_than_255_characters_are_stored_on_every_backend(api):
    """Settings, transports and the core template are text columns without a length; the
    only limit on them is the request's."""
    note = "n" * 2000
    created = ok(
        api.post(
            f"{INBOUNDS}/add",
            vless(free_port(), settings={"decryption": "none", "note": note}, remark="long"),
        )
    )
    assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["settings"]["note"] == note
    template = ok(api.get("/panel/api/core/getDefaultJsonConfig"))
    template["log"]["note"] = note
    ok(api.post("/panel/api/core/update", {"coreSetting": json.dumps(template)}))
    assert json.loads(ok(api.post("/panel/api/core/"))["coreSetting"])["log"]["note"] == note


def test_a_nul_character_anywhere_is_refused_in_words(api):
    """PostgreSQL cannot store NUL; no field takes one, so every backend refuses it alike."""
    remark = "before\x00after"
    refused(api.post(f"{INBOUNDS}/add", vless(free_port(), remark=remark)), "remark", "control")
    assert remark not in inbound_remarks(api)
    refused(api.get("/panel/api/clients/get/a%00b"), "email", "control")
    refused(api.get("/panel/api/clients/list/paged?search=a%00b"), "search", "control")
    form = api.raw("POST", "/panel/api/clients/groups/create", data={"name": "a\x00b"})
    refused(form.json(), "name", "control")


def test_a_subscription_address_with_a_nul_character_is_not_found(panel):
    for path in ("/sub/%00", "/sub/a%00b"):
        assert requests.get(panel.sub_url + path, timeout=10).status_code == 404, path
    assert "Traceback" not in panel.output()
