"""Two bulk creates at once, each giving the rest of the panel turns while it works.

A bulk create of thousands of clients checks its items and inserts their rows a slice
at a time, letting other requests in between. Two such calls naming some of the same
emails must still end as if one ran after the other: every email created once, by
exactly one of them, and reported as already in use by the other; nothing refused as a
whole and no duplicate rows.
"""

from __future__ import annotations

import threading

from helpers import create_inbound, free_port, ok

API = "/panel/api/clients"
EACH = 1500
SHARED = 700


def test_two_bulk_creates_with_shared_emails_each_claim_an_email_once(panel):
    setup = panel.client()
    inbound_id = create_inbound(
        setup,
        {
            "protocol": "vless",
            "port": free_port(),
            "remark": "turns",
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )["id"]
    shared = [f"shared-{n}@turns.test" for n in range(SHARED)]
    batches = {
        side: shared + [f"{side}-{n}@turns.test" for n in range(EACH - SHARED)]
        for side in ("left", "right")
    }
    answers: dict[str, dict] = {}

    def run(side: str) -> None:
        items = [{"client": {"email": e}, "inboundIds": [inbound_id]} for e in batches[side]]
        answers[side] = ok(panel.client().post(f"{API}/bulkCreate", items))

    threads = [threading.Thread(target=run, args=(side,)) for side in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert set(answers) == {"left", "right"}
    unique = 2 * EACH - SHARED
    assert answers["left"]["created"] + answers["right"]["created"] == unique
    skipped = [item for answer in answers.values() for item in answer["skipped"]]
    assert sorted(item["email"] for item in skipped) == sorted(shared)
    assert all(item["reason"].endswith("is already in use") for item in skipped)
    listed = ok(setup.get(f"{API}/list/paged?pageSize=1&search=turns.test"))
    assert listed["filtered"] == unique
