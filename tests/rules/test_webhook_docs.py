"""The README's table of webhook events is the declared table (services/webhooks/
events.py): an event added or reworded there without the README fails here, and the
README's Python verification snippet verifies what the deliverer signs."""

from __future__ import annotations

import hashlib
import hmac
import re
import time

from helpers import ROOT

from appliance.services.webhooks.deliverer import signature
from appliance.services.webhooks.events import EVENTS

README = ROOT / "README.md"
START, END = "<!-- webhook-events:start -->", "<!-- webhook-events:end -->"


def test_the_readme_lists_every_event_as_declared():
    text = README.read_text(encoding="utf-8")
    table = text[text.index(START) : text.index(END)]
    rows = re.findall(r"^\| `([\w.]+)` \| (.+) \|$", table, re.MULTILINE)
    assert rows == list(EVENTS.items())


def test_the_readme_python_snippet_verifies_a_signed_body():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Webhooks") :]
    snippet = section[section.index("```python") + len("```python") : section.index("```\n\n")]
    scope: dict = {}
    exec(snippet, scope)  # the README's own words, run as written
    body, sent_at = b'{"id":"1","event":"client.created"}', str(int(time.time()))
    headers = {
        "X-Webhook-Timestamp": sent_at,
        "X-Webhook-Signature": signature("k" * 16, sent_at, body),
    }
    assert scope["verified"]("k" * 16, headers, body)
    assert not scope["verified"]("x" * 16, headers, body)
    assert not scope["verified"]("k" * 16, headers, body + b" ")
    old = str(int(time.time()) - 3600)
    stale = {"X-Webhook-Timestamp": old, "X-Webhook-Signature": signature("k" * 16, old, body)}
    assert not scope["verified"]("k" * 16, stale, body)
    assert hmac.compare_digest(
        signature("s", "1", b"b"), "sha256=" + hmac.new(b"s", b"1.b", hashlib.sha256).hexdigest()
    )
