"""Client IPs from Xray's online-user API, with the access log for cores without it.

Xray cannot run here, so its side is `fake_xray.FakeXray`: a real gRPC server on loopback
serving StatsService under Xray's method paths, with the field numbers of Xray's
app/stats/command/command.proto. The API client and the collector are tested against it
in this process (real SQLite store, real files), and a panel is run with `fake_xray.py`
as its core binary: the panel detects Xray, writes `statsUserOnline`, asks the API every
traffic tick, and falls back to the access log when the API answers "unimplemented".
"""

from __future__ import annotations

import re
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from access_log import NOW as LOG_NOW
from access_log import fail2ban_filter, ip_limited_store, wait_until, xray_line
from fake_xray import FakeXray
from fake_xray_panel import add_clients, calls, fake_xray_panel, write_state
from helpers import ok
from panels import stop_and_drop

from appliance.core.api import CoreApi, CoreApiNotFound, CoreApiUnsupported, wire
from appliance.services.clients import ips as client_ips
from appliance.services.clients.ips import ClientIps, pick_online

NOW = int(LOG_NOW)  # the time of the access-log lines `xray_line` writes
STATS = "/xray.app.stats.command.StatsService/"


# ---- the choice of whom to ask -------------------------------------------------------------


def test_everybody_online_is_asked_while_they_fit_the_budget():
    online = ["a", "b", "c"]
    assert pick_online(online, {"b"}, budget=3, turn=0) == online
    assert pick_online(online, set(), budget=3, turn=7) == online


def test_over_the_budget_the_limited_come_first_and_the_others_take_turns():
    online = ["a", "b", "c", "d", "e", "f"]
    limited = {"b", "e"}
    assert pick_online(online, limited, budget=4, turn=0) == ["b", "e", "a", "c"]
    assert pick_online(online, limited, budget=4, turn=1) == ["b", "e", "d", "f"]
    assert pick_online(online, limited, budget=4, turn=2) == ["b", "e", "a", "c"]
    # Nobody limited (or the limit off): everybody online, in turns.
    assert pick_online(online, set(), budget=4, turn=0) == ["a", "b", "c", "d"]
    assert pick_online(online, set(), budget=4, turn=1) == ["e", "f", "a", "b"]


def test_more_limited_users_than_the_budget_take_turns_among_themselves():
    online = [f"u{n}" for n in range(10)]
    limited = {"u1", "u3", "u5", "u7", "u9"}
    seen = [pick_online(online, limited, budget=2, turn=turn) for turn in range(3)]
    assert seen == [["u1", "u3"], ["u5", "u7"], ["u9", "u1"]]


# ---- the API client against Xray's StatsService ----------------------------------------------


@pytest.fixture
def xray(tmp_path):
    """A FakeXray on loopback and a CoreApi talking to it with Xray's prefix."""
    state, recorded = tmp_path / "state.json", tmp_path / "calls.jsonl"
    write_state(state)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([FakeXray(str(state), str(recorded))])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    api = CoreApi(f"127.0.0.1:{port}", "xray")
    yield {"api": api, "state": state, "calls": recorded}
    api.close()
    server.stop(None)


def test_online_users_and_their_addresses_field_by_field(xray):
    online = {"alice@x": {"203.0.113.1": NOW - 5, "2001:db8::1": NOW}, "Bob": {}}
    write_state(xray["state"], online=online)
    assert xray["api"].online_users() == ["alice@x", "Bob"]
    assert xray["api"].online_ips("alice@x") == {"203.0.113.1": NOW - 5, "2001:db8::1": NOW}
    assert xray["api"].online_ips("Bob") == {}
    sent = calls(xray["calls"])
    assert sent[0] == (STATS + "GetAllOnlineUsers", b"")  # GetAllOnlineUsersRequest{}
    method, request = sent[1]
    assert method == STATS + "GetStatsOnlineIpList"
    # GetStatsRequest{name = 1}: the online map's name; reset (2) never sent.
    assert list(wire.fields(request)) == [(1, b"user>>>alice@x>>>online")]


def test_an_offline_user_is_not_found_and_a_missing_method_unsupported(xray):
    write_state(xray["state"], online={})
    with pytest.raises(CoreApiNotFound, match="user>>>gone>>>online not found"):
        xray["api"].online_ips("gone")
    write_state(xray["state"], unimplemented=True)
    with pytest.raises(CoreApiUnsupported):
        xray["api"].online_users()
    with pytest.raises(CoreApiUnsupported):
        xray["api"].online_ips("gone")


# ---- the collector on a real store ----------------------------------------------------------


@pytest.fixture
def world(tmp_path, xray):
    """Clients Alice (limitIp 1), bob (0) and carol (2); ipLimitEnable on; an access log."""
    store, settings, clients = ip_limited_store(tmp_path, {"Alice": 1, "bob": 0, "carol": 2})
    access = tmp_path / "access.log"
    access.write_text("")
    collector = ClientIps(
        store,
        settings,
        access_log=str(access),
        limit_log=str(tmp_path / "logs" / "ip-limit.log"),
        clock=lambda: NOW,
        own_addresses=lambda: {"127.0.0.1", "::1"},
    )
    yield {**xray, "collector": collector, "clients": clients, "access": access}
    store.close()


def tick(world, process: int = 1) -> None:
    world["collector"].collect("", world["api"], process)


def over_limit(world) -> list[tuple[str, str]]:
    path = Path(world["collector"].limit_log)
    if not path.exists():
        return []
    matches = [fail2ban_filter().search(line) for line in path.read_text().splitlines()]
    assert all(matches)
    return [(m["user"], m["addr"]) for m in matches]


def test_online_addresses_are_recorded_and_the_limit_enforced(world):
    write_state(
        world["state"],
        online={
            "alice": {"203.0.113.1": NOW - 30},  # the core's spelling of the email
            "bob": {"203.0.113.2": NOW - 3, "2001:DB8:0::7": NOW + 60},
            "stranger": {"203.0.113.9": NOW},  # no such client
        },
    )
    tick(world)
    assert world["clients"].ips("Alice") == [f"203.0.113.1 ({NOW - 30})"]
    assert world["clients"].ips("bob") == [f"2001:db8::7 ({NOW})", f"203.0.113.2 ({NOW - 3})"]
    assert over_limit(world) == []
    write_state(world["state"], online={"alice": {"203.0.113.1": NOW, "203.0.113.5": NOW}})
    tick(world)
    assert over_limit(world) == [("Alice", "203.0.113.5")]
    assert world["clients"].ips("Alice") == [f"203.0.113.1 ({NOW})", f"203.0.113.5 ({NOW})"]


def test_the_access_log_is_not_parsed_while_the_api_answers(world):
    write_state(world["state"], online={})
    with open(world["access"], "a") as fh:
        fh.write(xray_line("203.0.113.4", "bob") + "\n")
    tick(world)
    assert world["clients"].ips("bob") == []
    assert [method for method, _ in calls(world["calls"])] == [STATS + "GetAllOnlineUsers"]


def test_a_user_gone_between_the_two_calls_is_skipped(world):
    """bob is on the list, but the core has dropped his map by the time he is asked."""
    write_state(world["state"], online={"carol": {"203.0.113.3": NOW}}, dropped=["bob"])
    tick(world)
    assert world["clients"].ips("carol") == [f"203.0.113.3 ({NOW})"]
    assert world["clients"].ips("bob") == []
    asked = [request for method, request in calls(world["calls"]) if "IpList" in method]
    assert sorted(asked) == [b"\n\x13user>>>bob>>>online", b"\n\x15user>>>carol>>>online"]


def test_without_the_api_the_access_log_is_read_for_the_life_of_that_core(world):
    write_state(world["state"], unimplemented=True)
    with open(world["access"], "a") as fh:
        fh.write(xray_line("203.0.113.4", "bob") + "\n")
    tick(world, process=1)
    assert world["clients"].ips("bob") == [f"203.0.113.4 ({NOW})"]
    with open(world["access"], "a") as fh:
        fh.write(xray_line("203.0.113.6", "carol") + "\n")
    tick(world, process=1)
    assert len(world["clients"].ips("carol")) == 1
    assert calls(world["calls"]) == [(STATS + "GetAllOnlineUsers", None)]  # asked once
    # A new core process (an upgraded Xray, say) is asked again.
    write_state(world["state"], online={"carol": {"203.0.113.7": NOW}})
    tick(world, process=2)
    assert f"203.0.113.7 ({NOW})" in world["clients"].ips("carol")


def test_over_the_budget_the_limited_clients_are_asked(world, monkeypatch):
    monkeypatch.setattr(client_ips, "ONLINE_IP_CALLS", 1)
    online = {"bob": {"203.0.113.2": NOW}, "Alice": {"203.0.113.1": NOW}}
    write_state(world["state"], online=online)
    tick(world)
    tick(world)
    asked = [
        dict(wire.fields(request))[1]
        for method, request in calls(world["calls"])
        if method.endswith("GetStatsOnlineIpList")
    ]
    assert asked == [b"user>>>Alice>>>online", b"user>>>Alice>>>online"]
    assert world["clients"].ips("bob") == []


# ---- a panel whose core is (a stand-in for) Xray ---------------------------------------------


def refused_calls(tmp_path) -> list[tuple[str, None]]:
    """The calls the fake core refused as unknown methods, in order."""
    return [call for call in calls(tmp_path / "calls.jsonl") if call[1] is None]


def listed(api, email: str) -> list[str]:
    return ok(api.post(f"/panel/api/clients/ips/{email}"))


def test_a_panel_on_xray_collects_client_ips_through_the_api(tmp_path):
    server = fake_xray_panel(tmp_path)
    now = int(time.time())  # the panel judges limits on its own clock: sightings are fresh
    try:
        api = server.client()
        config = ok(api.get("/panel/api/server/getConfigJson"))
        assert config["policy"]["levels"]["0"]["statsUserOnline"] is True
        add_clients(api, {"dana@x": 1, "erik@x": 0})
        write_state(tmp_path / "state.json", online={"dana@x": {"198.51.100.1": now}})
        wait_until(lambda: listed(api, "dana@x"), "dana's address is listed")
        assert listed(api, "dana@x") == [f"198.51.100.1 ({now})"]
        online = {"dana@x": {"198.51.100.1": now, "198.51.100.2": now}, "erik@x": {"::1": now}}
        write_state(tmp_path / "state.json", online=online)
        limit_log = Path(server.data_dir, "logs", "ip-limit.log")
        wait_until(limit_log.exists, "dana's second address is written for fail2ban")
        line = limit_log.read_text().splitlines()[0]
        match = fail2ban_filter().search(line)
        assert (match["user"], match["addr"]) == ("dana@x", "198.51.100.2")
        assert wait_until(lambda: listed(api, "erik@x"), "erik's address") == [f"::1 ({now})"]
        sent = calls(tmp_path / "calls.jsonl")
        assert (STATS + "GetAllOnlineUsers", b"") in sent
        assert (STATS + "GetStatsOnlineIpList", b"\n\x16user>>>dana@x>>>online") in sent
    finally:
        stop_and_drop(server)


def test_a_panel_on_an_xray_without_the_api_reads_the_access_log(tmp_path):
    server = fake_xray_panel(tmp_path, unimplemented=True)
    try:
        api = server.client()
        add_clients(api, {"fred@x": 0})
        access = ok(api.get("/panel/api/server/getConfigJson"))["log"]["access"]
        with open(access, "a") as fh:
            fh.write(xray_line("192.0.2.8", "fred@x") + "\n")
        address = wait_until(lambda: listed(api, "fred@x"), "fred's address from the log")
        assert re.fullmatch(r"192\.0\.2\.8 \(\d+\)", address[0])
        asked = refused_calls(tmp_path)
        assert asked and set(asked) == {(STATS + "GetAllOnlineUsers", None)}
        time.sleep(2.5)  # more ticks of the same core process, which is not asked again
        assert refused_calls(tmp_path) == asked
    finally:
        stop_and_drop(server)
