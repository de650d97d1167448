"""Client IPs from the core's access log: the collector against a real SQLite store and
real files (lines with documentation addresses, since tests only have loopback), the
over-limit lines checked with the fail2ban filter documented in docs/fail2ban.md, and
the whole path through a panel on the real core."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from access_log import (
    NOW,
    append,
    fail2ban_filter,
    ip_limited_store,
    stamp,
    v2ray_line,
    wait_until,
    xray_line,
)
from core_helpers import LOOPBACK, echo_server
from core_traffic import add_client, add_inbound, client_core, passes, route, traffic_core_panel
from helpers import ok

from appliance.services.clients.ips import ACTIVE_WINDOW, ClientIps, host_addresses
from appliance.services.control.logs import ACCESS_LOG_KEEP, ACCESS_LOG_LIMIT

OWN = "203.0.113.250"  # stands in for an address of this host


# ---- the collector against a real store ---------------------------------------------------


@pytest.fixture
def world(tmp_path):
    """Clients Alice (limitIp 2), bob (0) and carol (1) on one inbound; ipLimitEnable on;
    an access log that already holds a line from before the collector started."""
    store, settings, clients = ip_limited_store(tmp_path, {"Alice": 2, "bob": 0, "carol": 1})
    access = str(tmp_path / "core" / "access.log")
    os.makedirs(os.path.dirname(access))
    append(access, xray_line("198.51.100.1", "Alice"))
    collector = ClientIps(
        store,
        settings,
        access_log=access,
        limit_log=str(tmp_path / "logs" / "ip-limit.log"),
        clock=lambda: NOW,
        own_addresses=lambda: {OWN, LOOPBACK, "::1"},
    )
    yield {"collector": collector, "clients": clients, "settings": settings, "access": access}
    store.close()


def ips(world, email: str) -> list[str]:
    return world["clients"].ips(email)


def over_limit(world) -> list[tuple[str, str]]:
    """(email, address) of every ip-limit.log line, read with the documented filter."""
    path = world["collector"].limit_log
    if not os.path.exists(path):
        return []
    lines = Path(path).read_text().splitlines()
    matches = [fail2ban_filter().search(line) for line in lines]
    assert all(matches), lines
    return [(m["user"], m["addr"]) for m in matches]


def feed(world, *lines: str) -> None:
    append(world["access"], *lines)
    world["collector"].collect()


def test_new_lines_of_known_clients_are_recorded_with_their_time(world):
    feed(
        world,
        xray_line("203.0.113.1", "alice", ago=30),  # emails compare case-insensitively
        v2ray_line("203.0.113.2", "bob", ago=5),
        xray_line("[2001:db8::1]", "Alice", ago=1),
        xray_line("203.0.113.3", "nobody@x"),  # no such client
        xray_line("203.0.113.4", "Alice", outbound="api"),  # the panel's own API calls
        v2ray_line("203.0.113.5", "", status="rejected"),
        f"{stamp(0)} [Warning] core: an error-log line",
    )
    assert ips(world, "Alice") == [
        f"2001:db8::1 ({int(NOW) - 1})",
        f"203.0.113.1 ({int(NOW) - 30})",
    ]  # 198.51.100.1 was in the file before the collector started
    assert ips(world, "bob") == [f"203.0.113.2 ({int(NOW) - 5})"]
    assert over_limit(world) == []


def test_a_sighting_moves_seen_at_forward_only(world):
    feed(world, xray_line("203.0.113.1", "Alice", ago=10), xray_line("203.0.113.1", "Alice", 50))
    assert ips(world, "Alice") == [f"203.0.113.1 ({int(NOW) - 10})"]
    feed(world, xray_line("203.0.113.1", "Alice", ago=100))
    assert ips(world, "Alice") == [f"203.0.113.1 ({int(NOW) - 10})"]
    feed(world, xray_line("203.0.113.1", "Alice", ago=2))
    assert ips(world, "Alice") == [f"203.0.113.1 ({int(NOW) - 2})"]


def test_a_truncated_access_log_is_read_from_its_start(world):
    feed(world, xray_line("203.0.113.1", "Alice", ago=9), xray_line("203.0.113.2", "bob", ago=9))
    with open(world["access"], "w") as fh:
        fh.write(v2ray_line("203.0.113.7", "bob") + "\n")
    world["collector"].collect()
    assert ips(world, "bob") == [f"203.0.113.7 ({int(NOW)})", f"203.0.113.2 ({int(NOW) - 9})"]


def test_addresses_beyond_the_limit_are_logged_for_fail2ban_once_per_sighting(world):
    feed(world, xray_line("203.0.113.1", "Alice", 60), xray_line("203.0.113.2", "Alice", 30))
    assert over_limit(world) == []
    feed(world, xray_line("203.0.113.3", "Alice"))
    assert over_limit(world) == [("Alice", "203.0.113.3")]
    feed(world, xray_line("203.0.113.1", "Alice"))  # one of the two it had first
    assert over_limit(world) == [("Alice", "203.0.113.3")]
    feed(world, xray_line("203.0.113.3", "Alice"), xray_line("[2001:db8::9]", "Alice"))
    assert over_limit(world) == [
        ("Alice", "203.0.113.3"),
        ("Alice", "203.0.113.3"),
        ("Alice", "2001:db8::9"),
    ]
    lines = Path(world["collector"].limit_log).read_text().splitlines()
    assert lines[0] == f"{stamp(0)} [LIMIT_IP] Email = Alice || SRC = 203.0.113.3"


def test_an_email_with_a_line_separator_stays_one_line_in_both_logs(tmp_path):
    # U+2028 is no control character, so an email may hold it; it must neither split the
    # core's access line (giving the sighting to client "ann") nor the ip-limit line.
    email = "ann\u2028tail@x"
    store, settings, clients = ip_limited_store(tmp_path, {email: 1, "ann": 0})
    access = tmp_path / "core" / "access.log"
    access.parent.mkdir()
    access.touch()
    collector = ClientIps(
        store,
        settings,
        access_log=str(access),
        limit_log=str(tmp_path / "logs" / "ip-limit.log"),
        clock=lambda: NOW,
        own_addresses=lambda: {OWN, LOOPBACK, "::1"},
    )
    try:
        append(str(access), xray_line("203.0.113.1", email, 9), xray_line("203.0.113.2", email))
        collector.collect()
        assert clients.ips("ann") == []
        assert clients.ips(email) == [
            f"203.0.113.2 ({int(NOW)})",
            f"203.0.113.1 ({int(NOW) - 9})",
        ]
        text = Path(collector.limit_log).read_text(encoding="utf-8")
        assert text.split("\n") == [
            f"{stamp(0)} [LIMIT_IP] Email = ann?tail@x || SRC = 203.0.113.2",
            "",
        ]
        assert fail2ban_filter().search(text.splitlines()[0])["user"] == "ann?tail@x"
    finally:
        store.close()


def test_only_addresses_seen_within_the_window_count(world):
    old = ACTIVE_WINDOW + 60
    feed(world, xray_line("203.0.113.1", "Alice", old), xray_line("203.0.113.2", "Alice", old))
    feed(world, xray_line("203.0.113.3", "Alice"), xray_line("203.0.113.4", "Alice"))
    assert over_limit(world) == []
    feed(world, xray_line("203.0.113.5", "Alice"))
    assert over_limit(world) == [("Alice", "203.0.113.5")]


def test_loopback_and_the_hosts_own_addresses_are_never_counted_or_logged(world):
    feed(
        world,
        v2ray_line(LOOPBACK, "carol"),
        xray_line("[::1]", "carol"),
        xray_line(OWN, "carol"),
        xray_line("127.0.0.2", "carol"),
        xray_line("203.0.113.60", "carol"),
    )
    assert over_limit(world) == []
    assert len(ips(world, "carol")) == 5  # still listed for the admin
    feed(world, xray_line("203.0.113.61", "carol"))
    assert over_limit(world) == [("carol", "203.0.113.61")]


def test_no_limit_lines_for_limit_zero_or_with_the_setting_off(world):
    feed(world, *(xray_line(f"203.0.113.{n}", "bob") for n in range(1, 20)))
    assert len(ips(world, "bob")) == 19
    settings = world["settings"]
    settings.write(settings.check({"ipLimitEnable": False}))
    feed(world, *(xray_line(f"203.0.113.{n}", "Alice") for n in range(1, 6)))
    assert len(ips(world, "Alice")) == 5
    assert over_limit(world) == []
    assert not os.path.exists(world["collector"].limit_log)


def test_an_access_log_past_its_limit_is_cut_back_and_still_followed(world):
    with open(world["access"], "r+b") as fh:
        fh.truncate(ACCESS_LOG_LIMIT + 1)  # sparse: a flood the disk must not keep
    world["collector"].collect()
    assert os.path.getsize(world["access"]) <= ACCESS_LOG_KEEP
    feed(world, v2ray_line("203.0.113.8", "bob"))
    assert ips(world, "bob") == [f"203.0.113.8 ({int(NOW)})"]


def test_the_hosts_own_addresses_include_loopback():
    assert LOOPBACK in host_addresses()


# ---- through the panel on the real core ----------------------------------------------------


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    server = traffic_core_panel(tmp_path_factory.mktemp("client-ips"))
    yield server
    server.stop()


def test_a_client_connecting_through_the_core_shows_up_in_its_ips(panel, tmp_path):
    api = panel.client()
    config = ok(api.get("/panel/api/server/getConfigJson"))
    assert config["log"]["access"] == os.path.join(panel.data_dir, "core", "access.log")
    inbound = add_inbound(api, "vless")
    client = add_client(api, inbound["id"])
    email = client["email"]
    assert ok(api.post(f"/panel/api/clients/ips/{email}")) == []
    before = int(time.time())
    way = route(inbound, client)
    with echo_server() as echo, client_core(tmp_path, [way]):
        wait_until(lambda: passes(way[0], echo), "the vless inbound carries bytes")
        listed = wait_until(
            lambda: ok(api.post(f"/panel/api/clients/ips/{email}")), "the client's IP is listed"
        )
    address, seen = re.fullmatch(r"(\S+) \((\d+)\)", listed[0]).groups()
    assert (address, len(listed)) == (LOOPBACK, 1)
    assert before - 1 <= int(seen) <= time.time()

    def corelogs(count="50", **form) -> str:
        return ok(api.post(f"/panel/api/server/corelogs/{count}", data=form))

    assert f"email: {email}" in corelogs(showDirect="true", filter=email)
    assert f"email: {email}" not in corelogs(showBlocked="true", showProxy="true")
    refused = api.post("/panel/api/server/corelogs/lots", data={"showDirect": "true"})
    assert refused["success"] is False and "count must be an integer" in refused["msg"]
