"""What a read-scope token is answered instead of secrets, rule by rule: the API test
(`test_token_scopes_api.py`) proves no planted secret comes back over HTTP; these show
which values are kept, so monitoring tools still parse and understand the answers."""

from __future__ import annotations

import json

from appliance.web.redaction import REDACTED, redact, redact_text

UUID = "5c0e4b1e-6a7d-4c51-9d2b-0d4a3f3a7e11"


def test_a_client_keeps_its_keys_and_loses_its_credentials():
    client = {"email": "a@x", "id": UUID, "password": "p", "subId": "s", "auth": "", "up": 5}
    assert redact(client) == {
        "email": "a@x",
        "id": REDACTED,
        "password": REDACTED,
        "subId": REDACTED,
        "auth": "",
        "up": 5,
    }


def test_record_ids_stay_and_so_do_unset_values():
    inbound = {"id": 3, "settings": {"decryption": "none", "clients": []}, "tag": "in-1"}
    assert redact(inbound) == inbound
    assert redact({"id": "not-a-client", "enable": True}) == {"id": "not-a-client", "enable": True}


def test_share_links_are_redacted_wherever_they_are():
    answer = [
        f"vless://{UUID}@example.com:443?security=reality#a",
        "vmess://eyJ2IjoiMiJ9",
        "tg://proxy?server=x&port=1&secret=ee00",
        "https://user:secret@example.com/",
        "https://example.com/page",
    ]
    assert redact(answer) == [REDACTED] * 4 + ["https://example.com/page"]


def test_secret_fields_hide_every_text_inside_them():
    keys = {"privateKey": "k", "peers": [{"preSharedKey": "p", "publicKey": "pub"}]}
    assert redact(keys) == {
        "privateKey": REDACTED,
        "peers": [{"preSharedKey": REDACTED, "publicKey": "pub"}],
    }
    assert redact({"key": ["-----BEGIN", "KEY"]}) == {"key": [REDACTED, REDACTED]}


def test_json_kept_as_text_is_redacted_inside_and_stays_text():
    template = json.dumps({"outbounds": [{"settings": {"servers": [{"password": "p"}]}}]})
    seen = redact({"coreSetting": template, "inboundTags": '["a"]'})
    assert json.loads(seen["coreSetting"])["outbounds"][0]["settings"]["servers"] == [
        {"password": REDACTED}
    ]
    assert seen["inboundTags"] == '["a"]'
    assert json.loads(redact_text(json.dumps([{"email": "a", "id": UUID}]))) == [
        {"email": "a", "id": REDACTED}
    ]
