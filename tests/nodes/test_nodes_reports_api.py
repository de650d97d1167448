"""What a compromised node can and cannot do to the panel that manages it.

The central panel manages two nodes, real panels on loopback: `hostile`, reached through
a `ForgingNode` that rewrites its answers to `clients/counters` (forged counters, growing
at every poll, for clients and inbounds, its own and others')
and to `clients/clientIpsByGuid` (addresses for those clients, under its guid, the
central panel's and the other node's), and `honest`. Central inbounds: `edge` bound to
`hostile` with client `own`, `far` bound to `honest` with client `far`, and `home` here
with client `ext`. Each test proves one sentence of the README's "What a managed node can
and cannot do".
"""

from __future__ import annotations

import itertools
import json

import pytest
from core_panel import wait_until
from helpers import INBOUNDS, create_inbound, free_port, ok
from node_panels import NODES, ForgingNode, add_node, with_interval
from panels import start_panel, stop_and_drop

CLIENTS = "/panel/api/clients"
COUNTERS = "/panel/api/clients/counters"
IPS = "/panel/api/clients/clientIpsByGuid"
GIB = 1 << 30
WAIT = 30
PLAIN = {"network": "tcp", "security": "none"}


def vless(remark: str, tag: str, node_id: int | None) -> dict:
    return {
        "protocol": "vless",
        "remark": remark,
        "listen": "127.0.0.1",
        "port": free_port(),
        "tag": tag,
        "nodeId": node_id,
        "settings": {"decryption": "none"},
        "streamSettings": PLAIN,
    }


def guid_of(panel) -> str:
    return ok(panel.client().get("/panel/api/server/status"))["guid"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    node = start_panel(tmp_path_factory.mktemp("hostile-node"))
    honest = start_panel(tmp_path_factory.mktemp("honest-node"))
    central = with_interval(start_panel(tmp_path_factory.mktemp("central")))
    forging = ForgingNode(node)
    try:
        api = central.client()
        emails = {name: f"{name}@fleet" for name in ("own", "far", "ext")}
        guids = {"node": guid_of(node), "honest": guid_of(honest), "central": guid_of(central)}
        ticks = itertools.count(1)

        def counters(obj: dict) -> dict:
            tick = next(ticks)
            forged = {
                emails["ext"]: (30 * GIB + tick, 30 * GIB + tick),
                emails["far"]: (GIB + tick, GIB + tick),
                emails["own"]: (1000 + tick, 2000 + tick),
            }
            obj["clients"] = [c for c in obj["clients"] if c["email"] not in forged] + [
                {"email": e, "up": up, "down": down} for e, (up, down) in forged.items()
            ]
            obj["inbounds"] = [
                {"tag": "edge", "up": 500 + tick, "down": 700 + tick},
                {"tag": "home", "up": GIB + tick, "down": GIB + tick},
                {"tag": "ghost", "up": tick, "down": tick},
            ]
            return obj

        def addresses(obj: dict) -> dict:
            return {
                guids["node"]: {
                    emails["own"]: [{"ip": "192.0.2.10", "timestamp": 1}],
                    emails["ext"]: [{"ip": "192.0.2.66", "timestamp": 1}],
                },
                guids["central"]: {emails["ext"]: [{"ip": "192.0.2.77", "timestamp": 1}]},
                guids["honest"]: {emails["far"]: [{"ip": "192.0.2.88", "timestamp": 1}]},
            }

        # Disabled until the inbounds and clients are in place: from its first poll on,
        # the hostile node's forgeries meet the bindings the tests judge them by.
        hostile = add_node(api, node, "hostile", port=forging.port, enable=False)
        fair = add_node(api, honest, "honest")
        inbounds = {
            "edge": create_inbound(api, vless("edge", "edge", hostile["id"])),
            "far": create_inbound(api, vless("far", "far", fair["id"])),
            "home": create_inbound(api, vless("home", "home", None)),
        }
        for name, inbound in (("own", "edge"), ("far", "far"), ("ext", "home")):
            client = {"email": emails[name], "totalGB": 2500 if name == "own" else 0}
            body = {"client": client, "inboundIds": [inbounds[inbound]["id"]]}
            ok(api.post(f"{CLIENTS}/add", body))
        forging.forgers = {COUNTERS: counters, IPS: addresses}
        ok(api.post(f"{NODES}/setEnable/{hostile['id']}", {"enable": True}))
        world = {
            "central": central,
            "node": node,
            "emails": emails,
            "guids": guids,
            "inbounds": inbounds,
            "hostile": hostile,
            "honest": fair,
            "forging": forging,
        }
        # Several polls, each with counters that moved for the clients not its own.
        wait_until(
            lambda: forging.calls.get(COUNTERS, 0) >= 6 and forging.calls.get(IPS, 0) >= 1,
            "the central panel polls the hostile node several times",
            WAIT,
        )
        yield world
    finally:
        forging.close()
        for server in (central, honest, node):
            stop_and_drop(server)


def traffic(world, name: str) -> dict:
    return ok(world["central"].client().get(f"{CLIENTS}/traffic/{world['emails'][name]}"))


def client(world, name: str) -> dict:
    return ok(world["central"].client().get(f"{CLIENTS}/get/{world['emails'][name]}"))["client"]


def row(world, name: str) -> dict:
    return next(n for n in ok(world["central"].client().get(f"{NODES}/list")) if n["name"] == name)


# ---- what it can do ---------------------------------------------------------------------------


def test_it_can_charge_the_clients_on_its_inbounds_and_so_disable_them(world):
    """Any traffic for a client attached to an inbound bound to it counts, up to and past
    the client's quota, and the client is disabled."""
    used = traffic(world, "own")
    assert used["up"] > 1000 and used["down"] - used["up"] == 1000, used
    wait_until(lambda: client(world, "own")["enable"] is False, "the quota sweep", WAIT)
    central = world["central"].client()
    assert ok(central.post(f"{CLIENTS}/lastOnline"))[world["emails"]["own"]] > 0


def test_it_can_set_the_counters_of_the_inbounds_bound_to_it(world):
    found = ok(world["central"].client().get(f"{INBOUNDS}/get/{world['inbounds']['edge']['id']}"))
    assert found["up"] > 500 and found["down"] - found["up"] == 200, found


def test_it_holds_the_credentials_of_the_clients_on_its_inbounds_and_no_others(world):
    node = world["node"].client()
    held = {c["email"]: c for c in ok(node.get(f"{CLIENTS}/list"))}
    own = world["emails"]["own"]
    assert held[own]["id"] == client(world, "own")["id"]
    assert world["emails"]["ext"] not in held and world["emails"]["far"] not in held


# ---- what it cannot do ------------------------------------------------------------------------


def test_it_cannot_charge_or_disable_a_client_not_on_its_inbounds(world):
    """`ext` is on an inbound here, `far` on the other node's: neither gains a byte, nor
    a last-online time, and both stay enabled."""
    central = world["central"].client()
    last_online = ok(central.post(f"{CLIENTS}/lastOnline"))
    for name in ("ext", "far"):
        used = traffic(world, name)
        assert (used["up"], used["down"]) == (0, 0), (name, used)
        assert client(world, name)["enable"] is True
        assert world["emails"][name] not in last_online


def test_it_cannot_mark_a_client_online_that_is_not_on_its_inbounds(world):
    central = world["central"].client()
    emails = world["emails"]
    online = ok(central.post(f"{CLIENTS}/onlines"))
    assert emails["own"] in online
    assert emails["ext"] not in online and emails["far"] not in online
    by_guid = ok(central.post(f"{CLIENTS}/onlinesByGuid"))
    assert by_guid[world["guids"]["node"]] == [emails["own"]]


def test_it_cannot_move_or_mark_active_an_inbound_not_bound_to_it(world):
    central = world["central"].client()
    home = ok(central.get(f"{INBOUNDS}/get/{world['inbounds']['home']['id']}"))
    assert (home["up"], home["down"]) == (0, 0)
    active = ok(central.post(f"{CLIENTS}/activeInbounds"))
    assert active[world["guids"]["node"]] == [world["inbounds"]["edge"]["tag"]]


def test_it_cannot_report_addresses_for_other_clients_nor_under_another_panels_guid(world):
    answer = ok(world["central"].client().post(f"{CLIENTS}/clientIpsByGuid"))
    assert answer[world["guids"]["node"]] == {
        world["emails"]["own"]: [{"ip": "192.0.2.10", "timestamp": 1}]
    }
    text = json.dumps(answer)
    for forged in ("192.0.2.66", "192.0.2.77", "192.0.2.88"):
        assert forged not in text, answer


def test_what_it_reports_beyond_its_clients_is_logged_once_and_shown_on_its_row(world):
    emails = world["emails"]
    shown = row(world, "hostile")["ignoredReports"]
    assert shown == {"count": 2, "clients": sorted([emails["ext"], emails["far"]]), "inbounds": []}
    assert row(world, "honest")["ignoredReports"] == {"count": 0, "clients": [], "inbounds": []}
    lines = [line for line in world["central"].lines if "not bound to it" in line]
    for name in ("ext", "far"):
        assert len([line for line in lines if emails[name] in line]) == 1, lines
    # The node's own names (an inbound the central panel does not have) are its business.
    assert not [line for line in lines if "ghost" in line]
