"""MTProto inbounds end to end: the panel runs a real proxy process per inbound, Telegram's
own client library (Telethon) connects through it with a client's secret, and a stand-in
data centre on loopback checks what arrives.

One panel for the module, with `trafficInterval` 1 and every data centre pointed at the
stand-in (`mtprotoDataCenters`). What a user observes is asserted: the bytes the data
centre receives, the refusal of a wrong or withdrawn secret, the traffic on the client's
row, the status of the proxy process, the links.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import time
import uuid

import psutil
import pytest
import requests
from core_panel import wait_until
from helpers import connect, free_port, next_message, ok, panel_origin, refused
from mtproto_helpers import (
    FakeTlsClient,
    StandInDataCentre,
    hold_port,
    telethon_connect,
    telethon_exchange,
    telethon_round,
)
from panels import start_panel, stop_and_drop

API = "/panel/api/clients"
INBOUNDS = "/panel/api/inbounds"
AD_TAG = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def data_centre():
    dc = StandInDataCentre()
    yield dc
    dc.close()


@pytest.fixture(scope="module")
def panel(tmp_path_factory, data_centre):
    server = start_panel(tmp_path_factory.mktemp("mtproto"))
    api = server.client()
    changes = {
        "trafficInterval": 1,
        "mtprotoDataCenters": ",".join([data_centre.address] * 5),
        # The stand-in is on loopback, where data centres are only on the admin's say-so.
        "allowPrivateDestinations": "mtprotoDataCenters",
    }
    ok(api.post("/panel/api/setting/update", changes))
    mark = len(server.lines)
    ok(api.post("/panel/api/setting/restartPanel"))
    server.wait_listening(mark)
    yield server
    stop_and_drop(server)


def unique(prefix: str = "tg") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def mtproto_inbound(api, **settings) -> dict:
    payload = {
        "protocol": "mtproto",
        "listen": "127.0.0.1",
        "port": free_port(),
        "remark": unique("mt"),
        "settings": settings,
    }
    return ok(api.post(f"{INBOUNDS}/add", payload))


def add_client(api, inbound_ids: list[int], **fields) -> dict:
    client = {"email": unique(), **fields}
    return ok(api.post(f"{API}/add", {"client": client, "inboundIds": inbound_ids}))


def proxy_of(api, inbound_id: int) -> dict | None:
    status = ok(api.get("/panel/api/server/status"))
    return next((p for p in status["mtproto"] if p["inboundId"] == inbound_id), None)


def running_proxy(api, inbound_id: int, secrets: int | None = None) -> dict:
    def ready():
        proxy = proxy_of(api, inbound_id)
        if proxy and proxy["state"] == "running" and secrets in (None, proxy["secrets"]):
            return proxy
        return None

    return wait_until(ready, f"the proxy of inbound {inbound_id} runs")


def tg_links(api, email: str) -> list[str]:
    return [link for link in ok(api.get(f"{API}/links/{email}")) if link.startswith("tg://")]


def secret_in(link: str) -> str:
    return link.split("secret=", 1)[1].split("&", 1)[0]


def traffic(api, email: str) -> tuple[int, int]:
    row = ok(api.get(f"{API}/traffic/{email}"))
    return row["up"], row["down"]


def refused_by_proxy(port: int, secret: str) -> bool:
    try:
        telethon_exchange(port, secret, [b"q" * 16])
    except (TimeoutError, ConnectionError, OSError):
        return True
    return False


# ---- the proxy relays what Telegram's client library sends --------------------------------


def test_client_secret_relays_exactly_what_telethon_sent(api, data_centre):
    inbound = mtproto_inbound(api)
    client = add_client(api, [inbound["id"]])
    running_proxy(api, inbound["id"], secrets=1)
    [link] = tg_links(api, client["email"])
    assert link == (
        f"tg://proxy?server=127.0.0.1&port={inbound['port']}&secret=dd{client['secret']}"
    )
    entries = ok(api.get(f"{INBOUNDS}/get/{inbound['id']}"))["settings"]["clients"]
    assert entries == [{"email": client["email"], "secret": client["secret"]}]
    before = len(data_centre.received)
    payloads = [os.urandom(16), os.urandom(40), os.urandom(1000)]
    capture, answers = telethon_exchange(inbound["port"], secret_in(link), payloads)
    assert answers == [hashlib.sha256(body).digest() for body in capture.bodies]
    assert bytes(data_centre.received[before]) == bytes(capture.sent)
    assert data_centre.dc_ids[-1] == 2


def test_fake_tls_secret_relays_too(api, data_centre):
    inbound = mtproto_inbound(api, domain="cdn.example.com")
    client = add_client(api, [inbound["id"]])
    running_proxy(api, inbound["id"], secrets=1)
    [link] = tg_links(api, client["email"])
    secret = secret_in(link)
    assert secret == "ee" + client["secret"] + b"cdn.example.com".hex()
    before = len(data_centre.received)
    app = FakeTlsClient(inbound["port"], secret)
    try:
        app.send(b"hello telegram!!")
        answer = app.recv()
        assert answer == hashlib.sha256(bytes(app.sent[4:])).digest()
        wait_until(lambda: bytes(data_centre.received[before]) == bytes(app.sent), "relayed")
    finally:
        app.close()
    # The same key without the TLS disguise is not what this inbound accepts.
    assert refused_by_proxy(inbound["port"], "dd" + secret[2:34])


def test_wrong_secret_is_refused(api):
    inbound = mtproto_inbound(api)
    add_client(api, [inbound["id"]])
    running_proxy(api, inbound["id"], secrets=1)
    assert refused_by_proxy(inbound["port"], "dd" + os.urandom(16).hex())


# ---- accounting ---------------------------------------------------------------------------


def test_bytes_are_counted_once_for_the_right_client(api, panel):
    inbound = mtproto_inbound(api)
    alice = add_client(api, [inbound["id"]])
    bob = add_client(api, [inbound["id"]])
    running_proxy(api, inbound["id"], secrets=2)
    [link] = tg_links(api, alice["email"])
    capture, _ = telethon_exchange(inbound["port"], secret_in(link), [os.urandom(5000)])
    wait_until(lambda: traffic(api, alice["email"])[0] >= len(capture.sent), "alice's upload")
    counted = traffic(api, alice["email"])
    # What went up: the 64-byte opening and the frames; down: the answer frame.
    assert counted[0] == 64 + len(capture.sent)
    assert counted[1] == 4 + 32
    assert traffic(api, bob["email"]) == (0, 0)

    # The proxy is killed: the browsers are told, it comes back with counters from zero,
    # and nothing is counted twice; what passes through the new process is added on top.
    pid = running_proxy(api, inbound["id"])["pid"]
    ws = connect(panel, api, origin=panel_origin(panel))
    try:
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 15
        down = next_message(ws, "mtprotoState", deadline)["data"]
        assert (down["inboundId"], down["state"]) == (inbound["id"], "error")
        assert "signal 9" in down["errorMsg"]
        states = []
        while not states or states[-1] == "starting":
            state = next_message(ws, "mtprotoState", deadline)["data"]
            assert state["inboundId"] == inbound["id"]
            states.append(state["state"])
        assert states == ["starting", "running"]
    finally:
        ws.close()
    assert running_proxy(api, inbound["id"])["pid"] != pid
    time.sleep(2.5)  # two ticks on the new process
    assert traffic(api, alice["email"]) == counted
    capture2, _ = telethon_exchange(inbound["port"], secret_in(link), [os.urandom(100)])
    expected = (counted[0] + 64 + len(capture2.sent), counted[1] + 36)
    wait_until(lambda: traffic(api, alice["email"]) == expected, "the second exchange counted")
    row = ok(api.get(f"{INBOUNDS}/get/{inbound['id']}"))
    assert (row["up"], row["down"]) == expected
    # The history holds the same bytes, for the client and for the inbound.
    history = ok(api.get(f"{API}/history/{alice['email']}"))
    assert (history["up"], history["down"]) == expected
    history = ok(api.get(f"{INBOUNDS}/{inbound['id']}/history"))
    assert (history["up"], history["down"]) == expected


def test_an_open_connection_shows_the_client_online_with_its_address(api):
    inbound = mtproto_inbound(api)
    client = add_client(api, [inbound["id"]])
    running_proxy(api, inbound["id"], secrets=1)
    [link] = tg_links(api, client["email"])

    async def scenario():
        conn, capture = await telethon_connect(inbound["port"], secret_in(link))
        try:
            await telethon_round(conn, capture, b"o" * 16)
            online = await asyncio.to_thread(
                wait_until,
                lambda: client["email"] in ok(api.post(f"{API}/onlines")),
                "the client online",
            )
            addresses = await asyncio.to_thread(api.post, f"{API}/ips/{client['email']}")
        finally:
            await conn.disconnect()
        return online, ok(addresses)

    online, addresses = asyncio.run(scenario())
    assert online
    assert [entry.split(" ", 1)[0] for entry in addresses] == ["127.0.0.1"]


def test_a_panel_restart_starts_new_proxies_and_counts_nothing_twice(api, panel):
    inbound = mtproto_inbound(api)
    client = add_client(api, [inbound["id"]])
    pid = running_proxy(api, inbound["id"], secrets=1)["pid"]
    [link] = tg_links(api, client["email"])
    telethon_exchange(inbound["port"], secret_in(link), [os.urandom(300)])
    wait_until(lambda: traffic(api, client["email"])[1] == 36, "the exchange counted")
    counted = traffic(api, client["email"])
    mark = len(panel.lines)
    ok(api.post("/panel/api/setting/restartPanel"))
    panel.wait_listening(mark)
    fresh = panel.client()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert running_proxy(fresh, inbound["id"], secrets=1)["pid"] != pid
    telethon_exchange(inbound["port"], secret_in(link), [b"r" * 16])
    wait_until(lambda: traffic(fresh, client["email"])[1] == counted[1] + 36, "counted anew")
    time.sleep(1.5)
    assert traffic(fresh, client["email"])[1] == counted[1] + 36


def test_depleted_client_loses_its_secret_live(api):
    inbound = mtproto_inbound(api)
    client = add_client(api, [inbound["id"]], totalGB=1000)
    running_proxy(api, inbound["id"], secrets=1)
    [link] = tg_links(api, client["email"])
    telethon_exchange(inbound["port"], secret_in(link), [os.urandom(2000)])
    wait_until(lambda: running_proxy(api, inbound["id"])["secrets"] == 0, "the secret withdrawn")
    assert ok(api.get(f"{API}/get/{client['email']}"))["client"]["email"] == client["email"]
    assert tg_links(api, client["email"]) == []
    assert refused_by_proxy(inbound["port"], secret_in(link))


# ---- secrets change live ------------------------------------------------------------------


def test_secrets_change_without_dropping_other_connections(api):
    inbound = mtproto_inbound(api)
    alice = add_client(api, [inbound["id"]])
    running_proxy(api, inbound["id"], secrets=1)
    [alice_link] = tg_links(api, alice["email"])
    pid = running_proxy(api, inbound["id"])["pid"]

    async def scenario():
        conn, capture = await telethon_connect(inbound["port"], secret_in(alice_link))
        try:
            first = await telethon_round(conn, capture, b"a" * 16)
            # A new client, added through the API, works at once ...
            bob = await asyncio.to_thread(add_client, api, [inbound["id"]], adTag=AD_TAG)
            await asyncio.to_thread(running_proxy, api, inbound["id"], 2)
            [bob_link] = await asyncio.to_thread(tg_links, api, bob["email"])
            await asyncio.to_thread(
                telethon_exchange, inbound["port"], secret_in(bob_link), [b"b" * 16]
            )
            # ... and deleted, is refused at once; alice's connection stays open throughout.
            ok(await asyncio.to_thread(api.post, f"{API}/del/{bob['email']}"))
            await asyncio.to_thread(running_proxy, api, inbound["id"], 1)
            assert await asyncio.to_thread(refused_by_proxy, inbound["port"], secret_in(bob_link))
            second = await telethon_round(conn, capture, b"c" * 16)
        finally:
            await conn.disconnect()
        return capture, [first, second]

    capture, answers = asyncio.run(scenario())
    assert answers == [hashlib.sha256(body).digest() for body in capture.bodies]
    assert running_proxy(api, inbound["id"])["pid"] == pid


def test_subscriptions_carry_the_link_and_hosts_override_the_server(api, panel):
    inbound = mtproto_inbound(api, domain="cdn.example.com")
    client = add_client(api, [inbound["id"]])
    secret = "ee" + client["secret"] + b"cdn.example.com".hex()
    host = {"inboundId": inbound["id"], "remark": "tg", "address": "tg.example.org", "port": 8443}
    ok(api.post("/panel/api/hosts/add", host))
    expected = f"tg://proxy?server=tg.example.org&port=8443&secret={secret}"
    assert ok(api.get(f"{API}/subLinks/{client['subId']}")) == [expected]
    body = requests.get(f"{panel.sub_url}/sub/{client['subId']}", timeout=10).text
    assert base64.b64decode(body).decode().split("\n") == [expected]
    ok(api.post(f"{API}/update/{client['email']}", {"client": {**client, "enable": False}}))
    assert ok(api.get(f"{API}/subLinks/{client['subId']}")) == []
    assert tg_links(api, client["email"]) == []


def test_an_expiry_that_passes_withdraws_the_secret(api):
    inbound = mtproto_inbound(api)
    client = add_client(api, [inbound["id"]])
    running_proxy(api, inbound["id"], secrets=1)
    [link] = tg_links(api, client["email"])
    # Set once the proxy serves the secret: a proxy slow to start must not see it lapse first.
    expiry = int(time.time() * 1000) + 2000
    ok(api.post(f"{API}/update/{client['email']}", {"client": {**client, "expiryTime": expiry}}))

    def withdrawn() -> bool:
        disabled = ok(api.get(f"{API}/get/{client['email']}"))["client"]["enable"] is False
        return disabled and running_proxy(api, inbound["id"])["secrets"] == 0

    wait_until(withdrawn, "the client disabled and its secret withdrawn")
    assert tg_links(api, client["email"]) == []
    assert refused_by_proxy(inbound["port"], secret_in(link))


def test_disabled_client_has_no_link_and_no_secret(api):
    inbound = mtproto_inbound(api)
    client = add_client(api, [inbound["id"]], enable=False)
    assert tg_links(api, client["email"]) == []
    assert running_proxy(api, inbound["id"])["secrets"] == 0


def test_rekey_changes_the_secret_everywhere(api):
    inbound = mtproto_inbound(api)
    client = add_client(api, [inbound["id"]])
    running_proxy(api, inbound["id"], secrets=1)
    [old] = tg_links(api, client["email"])
    new_key = os.urandom(16).hex()
    ok(api.post(f"{API}/update/{client['email']}", {"client": {**client, "secret": new_key}}))
    assert ok(api.get(f"{API}/get/{client['email']}"))["client"]["secret"] == new_key
    [new] = tg_links(api, client["email"])
    assert secret_in(new) == "dd" + new_key
    assert ok(api.get(f"{API}/get/{client['email']}"))["client"]["id"] == client["id"]
    wait_until(lambda: refused_by_proxy(inbound["port"], secret_in(old)), "the old key refused")
    telethon_exchange(inbound["port"], secret_in(new), [b"n" * 16])


@pytest.mark.parametrize(
    ("field", "bad", "words"),
    [
        ("adTag", "0123", "adTag must be exactly 32 hexadecimal characters"),
        ("adTag", AD_TAG + "0", "adTag must be exactly 32 hexadecimal characters"),
        ("adTag", "g" * 32, "adTag must be exactly 32 hexadecimal characters"),
        ("secret", "dd" + AD_TAG, "secret must be 32 hexadecimal characters"),
        ("secret", 5, "secret must be 32 hexadecimal characters"),
    ],
)
def test_bad_tag_or_secret_is_refused_on_every_save_path(api, field, bad, words):
    inbound = mtproto_inbound(api)
    email = unique()
    item = {"client": {"email": email, field: bad}, "inboundIds": [inbound["id"]]}
    refused(api.post(f"{API}/add", item), words)
    result = ok(api.post(f"{API}/bulkCreate", [item]))
    assert result["created"] == 0 and words in result["skipped"][0]["reason"]
    result = ok(api.post(f"{API}/import", {"data": json.dumps([item])}))
    assert result["created"] == 0 and words in result["skipped"][0]["reason"]
    client = add_client(api, [inbound["id"]], adTag=AD_TAG.upper())
    assert client["adTag"] == AD_TAG and len(client["secret"]) == 32
    refused(api.post(f"{API}/update/{client['email']}", {"client": {**client, field: bad}}), words)
    stored = ok(api.get(f"{API}/get/{client['email']}"))["client"]
    assert (stored["adTag"], stored["secret"]) == (AD_TAG, client["secret"])


def test_client_tag_overrides_the_inbound_tag_for_active_secrets_only(api, panel):
    inbound_tag = "f" * 32
    inbound = mtproto_inbound(api, adTag=inbound_tag)
    own = add_client(api, [inbound["id"]], adTag=AD_TAG)
    plain = add_client(api, [inbound["id"]])
    off = add_client(api, [inbound["id"]], adTag=AD_TAG, enable=False)
    running_proxy(api, inbound["id"], secrets=2)
    path = os.path.join(panel.data_dir, "mtproto", f"{inbound['id']}.json")
    with open(path) as fh:
        config = json.load(fh)
    assert config["secrets"] == {
        own["email"]: {"secret": own["secret"], "adTag": AD_TAG},
        plain["email"]: {"secret": plain["secret"], "adTag": inbound_tag},
    }
    assert off["email"] not in config["secrets"]
    assert os.stat(path).st_mode & 0o077 == 0


def test_listener_change_restarts_only_that_proxy(api):
    one = mtproto_inbound(api)
    two = mtproto_inbound(api)
    add_client(api, [one["id"], two["id"]])
    pid_one = running_proxy(api, one["id"], secrets=1)["pid"]
    pid_two = running_proxy(api, two["id"], secrets=1)["pid"]
    new_port = free_port()
    ok(api.post(f"{INBOUNDS}/update/{one['id']}", {**one, "port": new_port}))

    def moved() -> dict | None:
        proxy = proxy_of(api, one["id"])
        on_new_port = proxy and proxy["state"] == "running" and proxy["port"] == new_port
        return proxy if on_new_port else None

    restarted = wait_until(moved, "the proxy of the changed inbound runs on its new port")
    assert restarted["pid"] not in (0, pid_one)
    assert running_proxy(api, two["id"])["pid"] == pid_two
    assert psutil.pid_exists(pid_two)
    ok(api.post(f"{INBOUNDS}/del/{one['id']}"))
    wait_until(lambda: proxy_of(api, one["id"]) is None, "the proxy of a deleted inbound stops")


def test_a_proxy_that_cannot_start_again_says_why_and_comes_back(api):
    inbound = mtproto_inbound(api)
    pid = running_proxy(api, inbound["id"])["pid"]
    os.kill(pid, signal.SIGKILL)
    holder = hold_port(inbound["port"])
    try:
        down = wait_until(
            lambda: (
                (proxy := proxy_of(api, inbound["id"]))
                and "cannot listen" in proxy["errorMsg"]
                and proxy
            ),
            "the proxy's reason in the status",
        )
        assert down["state"] == "error" and "Address already in use" in down["errorMsg"]
    finally:
        holder.close()
    assert running_proxy(api, inbound["id"])["pid"] not in (0, pid)


def test_management_api_needs_its_token(api):
    inbound = mtproto_inbound(api)
    pid = running_proxy(api, inbound["id"])["pid"]
    ports = [
        c.laddr.port
        for c in psutil.Process(pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port != inbound["port"]
    ]
    assert ports and all(c for c in ports)
    reply = requests.get(f"http://127.0.0.1:{ports[0]}/stats", timeout=5)
    assert reply.status_code == 401
    reply = requests.put(
        f"http://127.0.0.1:{ports[0]}/secrets",
        headers={"Authorization": "Bearer guessed"},
        json={"secrets": {}},
        timeout=5,
    )
    assert reply.status_code == 401
