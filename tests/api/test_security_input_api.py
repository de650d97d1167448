"""Hostile and look-alike emails (cases 9 and 10 of docs/security-cases.md), on every
backend: an email is stored byte for byte or refused with a reason and no row, and the
emails that are one after normalisation (`Ä`/`ä`, NFC/NFD) are one client everywhere.
"""

from __future__ import annotations

import unicodedata
import uuid

import pytest
from helpers import create_plain_vless, free_port, ok

CLIENTS = "/panel/api/clients"


@pytest.fixture(scope="module")
def inbound(panel) -> int:
    return create_plain_vless(panel.client(), free_port())


def listed(api) -> set[str]:
    return {client["email"] for client in ok(api.get(f"{CLIENTS}/list"))}


@pytest.mark.parametrize(
    "email",
    [
        "x'; DROP TABLE client; --@x",
        'a" OR 1=1 -- @x',
        "%_\\@x",
        "<img src=x onerror=alert(1)>@x",
        "\u202egnp.exe@x",
        "a" * 10_000 + "@x",
        "nul\x00@x",
    ],
)
def test_a_hostile_email_is_stored_exactly_or_refused_without_a_row(api, inbound, email):
    email = f"{uuid.uuid4().hex[:6]}{email}"
    before = listed(api)
    reply = api.post(f"{CLIENTS}/add", {"client": {"email": email}, "inboundIds": [inbound]})
    if reply["success"]:
        assert reply["obj"]["email"] == email
        assert listed(api) == before | {email}
    else:
        assert reply["msg"].startswith("email"), reply
        assert listed(api) == before
    if len(email) > 255 or "\x00" in email:
        assert reply["success"] is False


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("\u00c4", "\u00e4"),  # Ä and ä
        ("\u00e4", unicodedata.normalize("NFD", "\u00e4")),  # NFC and NFD
        (unicodedata.normalize("NFD", "\u00c4"), "\u00e4"),
    ],
)
def test_look_alike_emails_are_one_client_on_every_backend(api, inbound, first, second):
    suffix = f"-{uuid.uuid4().hex[:6]}@x"
    ok(api.post(f"{CLIENTS}/add", {"client": {"email": first + suffix}, "inboundIds": [inbound]}))
    reply = api.post(
        f"{CLIENTS}/add", {"client": {"email": second + suffix}, "inboundIds": [inbound]}
    )
    assert reply["success"] is False and "already in use" in reply["msg"], reply
    assert [e for e in listed(api) if e.endswith(suffix)] == [first + suffix]
