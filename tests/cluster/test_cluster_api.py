"""Several panels on one database: three `appliance run` processes share a fresh
PostgreSQL or MariaDB database, list each other with exactly one leader, see each
other's edits in their subscriptions within 2 s, and hand the leadership over when the
leader is killed. On SQLite a panel is alone: the list names it, the leader.
"""

from __future__ import annotations

import base64
import itertools
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from cluster_panels import (
    PROPAGATION_SECONDS,
    instance_env,
    subscription,
    three_instances,
    wait_for,
    within_2s,
)
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from helpers import (
    create_database,
    create_inbound,
    drop_database,
    networked_rows,
    ok,
)
from panels import backend, start_panel

from appliance.store.migrations import LATEST

CLUSTER = "/panel/api/server/cluster"
CLIENTS = "/panel/api/clients"
FAILOVER_SECONDS = 30
# Fixed ports an inbound is saved on (no core runs here, the port is never bound).
_ports = itertools.count(32400)


def test_a_panel_alone_is_the_one_instance_and_leads(panel):
    members = ok(panel.client().get(CLUSTER))
    if backend["kind"] != "sqlite":
        members = [member for member in members if member["self"]]
    assert len(members) == 1
    (me,) = members
    assert me["self"] is True and me["leader"] is True and me["stale"] is False
    assert me["guid"] and me["name"] and me["version"]
    assert abs(me["lastSeen"] / 1000 - time.time()) < 30


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Three instances on one fresh database, the first of which made the admin."""
    with three_instances(tmp_path_factory) as servers:
        yield servers


def test_three_instances_list_each_other_with_exactly_one_leader(world):
    apis = [signed_in(server) for server in world]

    def settled():
        lists = [ok(api.get(CLUSTER)) for api in apis]
        live = [[m for m in listed if not m["stale"]] for listed in lists]
        return (
            lists if all(len(m) == 3 and sum(x["leader"] for x in m) == 1 for m in live) else None
        )

    lists = wait_for(settled, 15, "three instances with one leader")
    names = {member["name"] for member in lists[0]}
    assert names == {"panel-a", "panel-b", "panel-c"}
    for listed in lists:
        assert sum(member["self"] for member in listed) == 1
        assert {m["guid"] for m in listed} == {m["guid"] for m in lists[0]}
        assert len({m["guid"] for m in listed if m["leader"]}) == 1
    mine = [next(m for m in listed if m["self"]) for listed in lists]
    assert len({m["guid"] for m in mine}) == 3, "each instance has its own guid"
    assert all(m["address"] for m in mine)


def test_a_client_added_or_edited_on_one_reaches_the_others_subscriptionswithin_2s(world):
    a, b, c = world
    api = signed_in(a)
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": next(_ports),
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )
    sub_id = uuid.uuid4().hex[:16]
    for other in (b, c):
        assert subscription(other, sub_id).status_code == 404
    client = {"email": f"{uuid.uuid4().hex[:8]}@cluster", "subId": sub_id}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound["id"]]}))
    within_2s(
        [b, c], lambda server: subscription(server, sub_id).status_code == 200, "the new client"
    )
    ok(signed_in(b).get(f"{CLIENTS}/get/{quote(client['email'])}"))
    # Each has rendered (and cached) the subscription; an edit on A reaches both bodies.
    for other in (b, c):
        assert subscription(other, sub_id).status_code == 200
    stored = ok(api.get(f"{CLIENTS}/get/{quote(client['email'])}"))["client"]
    fresh = str(uuid.uuid4())
    ok(api.post(f"{CLIENTS}/update/{quote(client['email'])}", {**stored, "id": fresh}))
    assert fresh in _links(a, sub_id)
    within_2s([b, c], lambda server: fresh in _links(server, sub_id), "the client's new UUID")


def _links(server, sub_id: str) -> str:
    """The subscription's share links (its body is them in base64)."""
    return base64.b64decode(subscription(server, sub_id).content).decode()


def test_a_setting_changed_on_one_is_seen_by_the_others(world):
    a, b, c = world
    api = signed_in(a)
    sub_id = uuid.uuid4().hex[:16]
    inbound = create_inbound(
        api,
        {
            "protocol": "vless",
            "port": next(_ports),
            "settings": {"decryption": "none"},
            "streamSettings": {"network": "tcp", "security": "none"},
        },
    )
    client = {"email": f"{uuid.uuid4().hex[:8]}@cluster", "subId": sub_id}
    ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound["id"]]}))
    wait_for(lambda: subscription(b, sub_id).status_code == 200, 5, "the client on b")
    hours = 7
    ok(api.post("/panel/api/setting/update", {"subUpdates": hours}))
    changed = time.monotonic()
    for other in (b, c):
        wait_for(
            lambda server=other: (
                subscription(server, sub_id).headers.get("profile-update-interval")
                == str(hours * 60)
            ),
            PROPAGATION_SECONDS - (time.monotonic() - changed),
            "the new refresh interval in another instance's subscription",
        )
    assert ok(signed_in(b).post("/panel/api/setting/all"))["subUpdates"] == hours


def test_failed_sign_ins_on_every_instance_spend_one_budget(world):
    """Five wrong passwords from one address, spread over the three instances, spend the
    pair's budget of five: each instance then refuses that address for the username, as
    one panel would. Counted per instance, each had seen two at most."""
    username = f"guess-{uuid.uuid4().hex[:8]}"

    def attempt(server) -> requests.Response:
        body = {"username": username, "password": "not-the-password"}
        return requests.post(f"{server.url}/login", json=body, timeout=10)

    for number in range(5):
        answer = attempt(world[number % 3])
        assert answer.status_code == 200 and answer.json()["success"] is False, answer.text
    for server in world:
        answer = attempt(server)
        assert answer.status_code == 429, answer.text
        assert "too many failed sign-ins" in answer.json()["msg"]
        assert 0 < int(answer.headers["Retry-After"]) <= 900


def test_three_instances_started_at_once_on_an_empty_database_migrate_and_seed_it_once(
    tmp_path,
):
    kind = backend["kind"]
    if kind == "sqlite":
        pytest.skip("several panels share a PostgreSQL or MariaDB database, not a SQLite file")
    url = create_database(kind)
    started: dict[str, object] = {}
    failed: list[BaseException] = []

    def start(name: str) -> None:
        try:
            started[name] = start_panel(tmp_path / name, "--db", url, env=instance_env(name))
        except BaseException as error:
            failed.append(error)

    threads = [threading.Thread(target=start, args=(name,)) for name in "xyz"]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failed, failed
        servers = list(started.values())
        time.sleep(1)  # credentials follow the listen lines
        for server in servers:
            server._read_credentials(server.lines)
        made = [server for server in servers if server.password]
        assert len(made) == 1, "exactly one instance made the first admin"
        for server in servers:
            server.username, server.password = made[0].username, made[0].password
            api = server.client()
            assert ok(api.get(CLUSTER)), "each instance takes the one admin's sign-in"
        versions = networked_rows(
            url, "SELECT version, COUNT(*) FROM schema_version GROUP BY version"
        )
        assert versions and all(count == 1 for _, count in versions)
        assert networked_rows(url, "SELECT COUNT(*) FROM admin") == [(1,)]
        # One session secret: a session begun on one instance is good on the others.
        first, *others = servers
        api = first.client()
        for other in others:
            api.url = other.url
            assert ok(api.get(CLUSTER))
    finally:
        for server in started.values():
            server.stop()
        drop_database(url)


def test_every_instance_hands_out_one_mtls_ca_and_presents_a_certificate_it_signed(world):
    """A node that trusts the CA nodes/mtls/ca answers is driven by whichever instance
    leads: every instance answers the same CA (asked at once, the first offer is the
    one kept), and the client certificate each presents to mTLS nodes is signed by it."""
    answers: list[str] = []
    threads = [
        threading.Thread(
            target=lambda s=server: answers.append(
                ok(signed_in(s).post("/panel/api/nodes/mtls/ca"))["caCert"]
            )
        )
        for server in world
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 3 and len(set(answers)) == 1
    ca = x509.load_pem_x509_certificate(answers[0].encode())
    for server in world:
        pem = (Path(server.data_dir) / "mtls" / "client.pem").read_bytes()
        client = x509.load_pem_x509_certificate(pem)
        assert client.issuer == ca.subject
        ca.public_key().verify(
            client.signature,
            client.tbs_certificate_bytes,
            ec.ECDSA(client.signature_hash_algorithm),
        )
    assert {ok(signed_in(s).post("/panel/api/nodes/mtls/ca"))["caCert"] for s in world} == {
        answers[0]
    }


def test_the_leader_killed_hands_the_leadership_over_within_30s(world):
    by_guid = {}
    for server in world:
        mine = next(m for m in members_signed_in(server) if m["self"])
        by_guid[mine["guid"]] = server
    listed = members_signed_in(world[0])
    (leader,) = [m for m in listed if m["leader"]]
    dead = by_guid[leader["guid"]]
    dead.process.kill()
    dead.process.wait()
    killed = time.monotonic()
    survivors = [server for server in world if server is not dead]

    def new_leader():
        lists = [members_signed_in(server) for server in survivors]
        leaders = [{m["guid"] for m in listed if m["leader"]} for listed in lists]
        if all(len(found) == 1 and found != {leader["guid"]} for found in leaders):
            return leaders[0]
        return None

    (guid,) = wait_for(new_leader, FAILOVER_SECONDS, "another instance leading")
    took = time.monotonic() - killed
    assert guid in by_guid and by_guid[guid] is not dead, took

    def shown_stale():
        gone = next(m for m in members_signed_in(survivors[0]) if m["guid"] == leader["guid"])
        return gone["stale"] and not gone["leader"]

    wait_for(shown_stale, FAILOVER_SECONDS, "the dead leader shown as stale")


_signed_in: dict[int, object] = {}


def signed_in(server):
    """One signed-in session per instance for the module (sessions are shared)."""
    if id(server) not in _signed_in:
        _signed_in[id(server)] = server.client()
    return _signed_in[id(server)]


def members_signed_in(server) -> list[dict]:
    return ok(signed_in(server).get(CLUSTER))


def test_instances_behind_a_newer_schema_serve_reads_only_and_stop_leading(world):
    """A newer release migrated the database (a version past this release's is recorded):
    within a heartbeat every instance of this release refuses writes, saying why, keeps
    serving reads and sign-ins, and no instance of it leads. Last in the module: the
    instances stay so until restarted."""
    live = [server for server in world if server.process.poll() is None]
    url = live[0].args[live[0].args.index("--db") + 1]
    newer = LATEST + 1
    networked_rows(
        url,
        "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
        (newer, "a newer release's migration", int(time.time())),
    )
    email = f"{uuid.uuid4().hex[:8]}@behind"
    for server in live:
        api = signed_in(server)

        def refused(api=api):
            answer = api.raw("POST", f"{CLIENTS}/add", json={"client": {"email": email}})
            return answer.json() if answer.status_code == 503 else None

        answer = wait_for(refused, 10, "writes refused")
        msg = answer["msg"]
        assert answer["success"] is False
        assert f"migrated it to version {newer}" in msg and "upgrade this instance" in msg
        mine = next(m for m in ok(api.get(CLUSTER)) if m["self"])
        assert mine["writesRefused"] == msg
        assert server.client().get(CLUSTER)["success"], "a sign-in is still served"
    wait_for(
        lambda: not any(m["leader"] for m in members_signed_in(live[0])),
        10,
        "no instance of the older release leading",
    )
    assert networked_rows(url, "SELECT COUNT(*) FROM client WHERE email = ?", (email,)) == [(0,)]
