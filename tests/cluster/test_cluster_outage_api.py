"""Several panels on one database, and the database gone from under all of them for a
while: every request to any instance is answered, a success or "the database is
unavailable"; nothing answered as saved is lost; each instance recovers in the same
process; and afterwards they are one cluster again, with one leader and every change
reaching the others within 2 s.

The instances reach the database through a relay the test cuts (closing every open
connection, listening nowhere) and resumes: the server every other test of the run
shares is never stopped.
"""

from __future__ import annotations

import base64
import time
import uuid

import pytest
from cluster_panels import subscription, three_instances, wait_for, within_2s
from db_load import Load
from db_relay import Relay, via
from helpers import NETWORKED, create_plain_vless, free_port, ok
from panels import backend

CLIENTS = "/panel/api/clients"
CLUSTER = "/panel/api/server/cluster"
WORKERS = 6  # two per instance
LOAD_PHASE_SECONDS = 2
OUTAGE_SECONDS = 6
# A request begun this long after the database came back must succeed (each instance
# replaces its connections on the first request that finds them gone).
RECONNECT_GRACE = 1.0
ANSWER_WAIT = 20
LEADER_WAIT = 30
# The 2 s a change takes, and the sender's retry (1 s) after its first try failed.
RESEND_SECONDS = 4


@pytest.fixture
def relay():
    kind = backend["kind"]
    if kind == "sqlite":
        pytest.skip("several panels share a PostgreSQL or MariaDB database, not a SQLite file")
    relay = Relay(NETWORKED[kind], free_port()).resume()
    yield relay
    relay.cut()


def test_the_database_gone_under_three_instances_loses_nothing_answered_as_saved(
    relay, tmp_path_factory
):
    with three_instances(tmp_path_factory, url_of=lambda url, _: via(url, relay.port)) as servers:
        inbound_id = create_plain_vless(servers[0].client(), 32700)
        pids = [server.process.pid for server in servers]
        load = Load(servers, inbound_id, WORKERS).start()
        try:
            cut_at, resumed_at = load.through_outage(
                relay, LOAD_PHASE_SECONDS, OUTAGE_SECONDS, RECONNECT_GRACE, ANSWER_WAIT
            )
        finally:
            answers = load.stop()

        odd = [a for a in answers if not (a.succeeded or a.unavailable)]
        assert odd == [], odd[:3]
        during = [a for a in answers if cut_at < a.started and a.ended < resumed_at]
        assert during and all(a.unavailable for a in during)
        after = [a for a in answers if a.started > resumed_at + RECONNECT_GRACE]
        assert {a.worker for a in after} == set(range(WORKERS))
        assert [a for a in after if not a.succeeded] == []
        assert [server.process.poll() for server in servers] == [None] * 3
        assert [server.process.pid for server in servers] == pids

        # Every add answered as saved is listed by every instance; one that was not is
        # not, unless it was on its way when the connections were cut.
        added = {a.email for a in answers if a.email and a.succeeded}
        in_flight = {a.email for a in answers if a.email and a.started < cut_at < a.ended}
        for server in servers:
            listed = {item["email"] for item in ok(server.client().get(f"{CLIENTS}/list"))}
            assert added <= listed
            assert listed - added <= in_flight

        wait_for(lambda: one_leader(servers), LEADER_WAIT, "one leader after the outage")
        sub_id = uuid.uuid4().hex[:16]
        client = {"email": f"{sub_id}@after", "subId": sub_id}
        api = servers[1].client()
        ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]}))
        others = [servers[0], servers[2]]
        within_2s(others, lambda s: subscription(s, sub_id).status_code == 200, "a new client")
    for server in servers:
        assert "Traceback" not in server.output()


def test_a_change_whose_sending_failed_reaches_the_others_all_the_same(relay, tmp_path_factory):
    """Instance c alone reaches the database through the relay, cut and resumed at once:
    it loses every connection, the one it sends its changes on among them. Its next edit
    is committed on a new connection, the first sending of the change fails, and the
    change reaches the others' subscriptions all the same. (c is not the leader: a
    leader's cut would hand the lead over, and the changes of that reach the others too.)"""

    def reach(url: str, name: str) -> str:
        return via(url, relay.port) if name == "c" else url

    with three_instances(tmp_path_factory, url_of=reach) as servers:
        a, b, c = servers
        api = c.client()
        inbound_id = create_plain_vless(api, 32710)
        sub_id = uuid.uuid4().hex[:16]
        email = f"{sub_id}@resent"
        client = {"email": email, "subId": sub_id}
        ok(api.post(f"{CLIENTS}/add", {"client": client, "inboundIds": [inbound_id]}))
        within_2s([a, b], lambda s: subscription(s, sub_id).status_code == 200, "the client")
        stored = ok(api.get(f"{CLIENTS}/get/{email}"))["client"]

        relay.cut()
        relay.resume()
        fresh = str(uuid.uuid4())
        # The first request after the cut may find its connection gone and say so.
        wait_for(
            lambda: api.post(f"{CLIENTS}/update/{email}", {**stored, "id": fresh})["success"],
            ANSWER_WAIT,
            "the edit saved on the instance that lost its connections",
        )
        edited = time.monotonic()
        for other in (a, b):
            wait_for(
                lambda s=other: fresh in links(s, sub_id),
                max(edited + RESEND_SECONDS - time.monotonic(), 0.1),
                "the edit in another instance's subscription",
            )
        assert "changes are not reaching the other instances" in c.output()
        wait_for(
            lambda: "changes reach the other instances again" in c.output(),
            RESEND_SECONDS,
            "the sender's log saying it sends again",
        )


def links(server, sub_id: str) -> str:
    return base64.b64decode(subscription(server, sub_id).content).decode()


def one_leader(servers) -> bool:
    """Each instance lists the three as live, with the same one leading."""
    leaders = set()
    for server in servers:
        members = ok(server.client().get(CLUSTER))
        live = [m for m in members if not m["stale"]]
        if len(live) != 3:
            return False
        leaders |= {m["guid"] for m in live if m["leader"]}
    return len(leaders) == 1
