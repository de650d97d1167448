"""The MTProto data centres pass the egress guard: `mtprotoDataCenters` at loopback, a
private network or the metadata address is refused at save unless the admin listed it in
allowPrivateDestinations (the metadata address always), and a value stored before the
guard covered it starts no proxy: the status says why, and a real Telegram client gets
nothing through until the admin opts in.
"""

from __future__ import annotations

import json

import pytest
from core_panel import wait_until
from helpers import db_rows, ok, refused
from mtproto_helpers import StandInDataCentre, telethon_exchange
from test_mtproto_api import (
    add_client,
    mtproto_inbound,
    proxy_of,
    refused_by_proxy,
    running_proxy,
    secret_in,
    tg_links,
)

SETTINGS = "/panel/api/setting"
DEFAULT_CENTRES = (
    "149.154.175.50:443,149.154.167.51:443,149.154.175.100:443,149.154.167.91:443,149.154.171.5:443"
)


def update(api, changes: dict) -> dict:
    return api.post(f"{SETTINGS}/update", changes)


def centres(api) -> str:
    return ok(api.post(f"{SETTINGS}/all"))["mtprotoDataCenters"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("127.0.0.1:443", ("127.0.0.1, a loopback address", "allowPrivateDestinations")),
        (DEFAULT_CENTRES + ",10.0.0.1:443", ("10.0.0.1, a private address",)),
        ("localhost:443", ("localhost (which resolves to", "a loopback address")),
        ("[::ffff:127.0.0.1]:443", ("::ffff:127.0.0.1", "loopback address (127.0.0.1) in IPv6")),
        ("2130706433:443", ("2130706433 (which resolves to 127.0.0.1)", "loopback")),
        ("192.168.1.5:443", ("192.168.1.5, a private address",)),
        ("169.254.169.254:80", ("169.254.169.254, the cloud metadata address", "never")),
    ],
)
def test_an_internal_data_centre_is_refused_at_save(api, value, words):
    refused(update(api, {"mtprotoDataCenters": value}), "mtprotoDataCenters", *words)
    assert centres(api) == DEFAULT_CENTRES


def test_the_opt_in_allows_internal_data_centres_but_never_the_metadata_address(api):
    try:
        ok(
            update(
                api,
                {
                    "allowPrivateDestinations": "mtprotoDataCenters",
                    "mtprotoDataCenters": "127.0.0.1:443,10.0.0.1:443",
                },
            )
        )
        assert centres(api) == "127.0.0.1:443,10.0.0.1:443"
        reply = update(api, {"mtprotoDataCenters": "127.0.0.1:443,169.254.169.254:80"})
        refused(reply, "169.254.169.254, the cloud metadata address", "never")
        # Withdrawing the opt-in while internal data centres are set is refused too.
        refused(update(api, {"allowPrivateDestinations": ""}), "127.0.0.1, a loopback")
        assert centres(api) == "127.0.0.1:443,10.0.0.1:443"
    finally:
        ok(update(api, {"allowPrivateDestinations": "", "mtprotoDataCenters": DEFAULT_CENTRES}))


def test_a_stored_loopback_data_centre_starts_no_proxy_until_opted_in(fresh_panel):
    data_centre = StandInDataCentre()
    try:
        fresh_panel.stop()
        # Written by a release whose save did not check the data centres.
        stored = json.dumps(",".join([data_centre.address] * 5))
        db_rows(
            fresh_panel,
            "INSERT INTO setting (key, value) VALUES (?, ?)",
            ("mtprotoDataCenters", stored),
        )
        fresh_panel.start()
        api = fresh_panel.client()
        inbound = mtproto_inbound(api)
        client = add_client(api, [inbound["id"]])
        [link] = tg_links(api, client["email"])

        def refusal():
            proxy = proxy_of(api, inbound["id"])
            return proxy if proxy and proxy["state"] == "error" else None

        proxy = wait_until(refusal, "the proxy's refusal in the status")
        assert proxy["pid"] == 0 and proxy["port"] == inbound["port"]
        assert proxy["errorMsg"].startswith("not started: the mtprotoDataCenters setting")
        assert "127.0.0.1, a loopback address" in proxy["errorMsg"]
        assert refused_by_proxy(inbound["port"], secret_in(link))
        assert data_centre.received == []

        ok(update(api, {"allowPrivateDestinations": "mtprotoDataCenters"}))
        running_proxy(api, inbound["id"], secrets=1)
        capture, _ = telethon_exchange(inbound["port"], secret_in(link), [b"z" * 16])
        assert [bytes(got) for got in data_centre.received] == [bytes(capture.sent)]
    finally:
        data_centre.close()
