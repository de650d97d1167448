"""The core's logs: access lines parsed as V2Ray 4.34 really writes them (captured from a
real core in this module) and as Xray writes them, a log followed across appends,
truncation and rotation, trimming, and the filters of `server/corelogs`."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from core_helpers import (
    LOOPBACK,
    client_config,
    echo_server,
    inbound,
    running_core,
    server_config,
    socks_echo,
)
from helpers import free_port

from appliance.core.config import build_config
from appliance.errors import ServiceError
from appliance.runtime.file_paths import FilePlaces
from appliance.services.control.logs import (
    AccessLine,
    LogTail,
    lines_backwards,
    log_path,
    parse_access_line,
    recent_core_logs,
    trim,
)

WAIT = 15


def wait_for_lines(path, count: int) -> list[str]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if os.path.exists(path):
            lines = path.read_text().splitlines()
            if len(lines) >= count:
                return lines
        time.sleep(0.1)
    raise AssertionError(f"the core wrote fewer than {count} lines to {path}")


def reaches(socks_port: int, dest_port: int) -> bool:
    try:
        return socks_echo(socks_port, dest_port, b"ping") == b"ping"
    except OSError:
        return False


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Access lines V2Ray 4.34 wrote for: a client routed direct to an echo server, the
    same client routed to the blackhole, and a client the inbound does not know."""
    directory = tmp_path_factory.mktemp("v2ray-access")
    access = directory / "access.log"
    server_port, known, stranger = free_port(), free_port(), free_port()
    user = str(uuid.uuid4())
    config = server_config(
        free_port(),
        inbound("in-vless", "vless", server_port, {"id": user, "email": "Alice@x", "level": 0}),
    )
    config["log"] = {"access": str(access), "loglevel": "warning"}
    config["outbounds"].append({"tag": "blocked", "protocol": "blackhole", "settings": {}})
    blocked_port = free_port()  # nothing listens there: the rule below sends it nowhere
    config["routing"]["rules"].append(
        {"type": "field", "port": str(blocked_port), "outboundTag": "blocked"}
    )
    routes = [
        (known, "vless", server_port, {"id": user}),
        (stranger, "vless", server_port, {"id": str(uuid.uuid4())}),
    ]
    with (
        echo_server() as echo,
        running_core(directory, config, server_port),
        running_core(directory, client_config(routes), stranger),
    ):
        deadline = time.monotonic() + WAIT
        while not reaches(known, echo):
            assert time.monotonic() < deadline, "the vless route never carried bytes"
            time.sleep(0.1)
        mark = len(wait_for_lines(access, 1))
        socks_echo(known, blocked_port, b"ping")
        reaches(stranger, echo)
        lines = wait_for_lines(access, mark + 2)
    return {"lines": lines, "echo": echo, "blocked_port": blocked_port}


# ---- parsing ---------------------------------------------------------------------------------


def test_v2ray_lines_of_a_client_name_its_address_destination_outbound_and_email(captured):
    entries = [parse_access_line(line) for line in captured["lines"]]
    direct = [e for e in entries if e and e.outbound_tag == "direct"]
    assert direct, captured["lines"]
    assert direct[-1] == AccessLine(
        when=direct[-1].when,
        ip=LOOPBACK,
        status="accepted",
        destination=f"tcp:{LOOPBACK}:{captured['echo']}",
        inbound_tag="",  # 4.34 prints only the outbound
        outbound_tag="direct",
        email="Alice@x",
    )
    assert time.strptime(direct[-1].when, "%Y/%m/%d %H:%M:%S")
    blocked = [e for e in entries if e and e.outbound_tag == "blocked"]
    assert [(e.email, e.destination) for e in blocked] == [
        ("Alice@x", f"tcp:{LOOPBACK}:{captured['blocked_port']}")
    ]


def test_v2ray_rejects_an_unknown_user_in_a_line_without_email_or_route(captured):
    rejected = [
        e for e in map(parse_access_line, captured["lines"]) if e and e.status == "rejected"
    ]
    assert rejected, captured["lines"]
    assert all(e.ip == LOOPBACK and e.email == "" and e.outbound_tag == "" for e in rejected)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "2026/11/22 01:02:03.123456 from 203.0.113.5:51234 accepted "
            "tcp:example.com:443 [in-vless >> direct] email: alice@x",
            ("203.0.113.5", "tcp:example.com:443", "in-vless", "direct", "alice@x"),
        ),
        (
            "2026/11/22 01:02:03 from tcp:203.0.113.5:51234 accepted udp:1.1.1.1:53 "
            "[in-vless -> proxy-a] email: bob@x",
            ("203.0.113.5", "udp:1.1.1.1:53", "in-vless", "proxy-a", "bob@x"),
        ),
        (
            "2026/11/22 01:02:03.5 from [2001:db8::7]:443 accepted tcp:example.com:443 "
            "[in-vless ==> balanced-1] email: carol with space@x",
            ("2001:db8::7", "tcp:example.com:443", "in-vless", "balanced-1", "carol with space@x"),
        ),
        (
            "2026/11/22 01:02:03 [::ffff:203.0.113.9]:1 accepted tcp:example.com:443 [direct]",
            ("203.0.113.9", "tcp:example.com:443", "", "direct", ""),
        ),
        (  # early Xray releases: no space after "email:", one after the email
            "2026/11/22 01:02:03 203.0.113.5:1 accepted tcp:example.com:443 "
            "[in-vless -> direct] email:dave@x ",
            ("203.0.113.5", "tcp:example.com:443", "in-vless", "direct", "dave@x"),
        ),
        (
            "2026/11/22 01:02:03 from DNS:0 accepted tcp:8.8.8.8:53 [dns-in >> direct]",
            ("", "tcp:8.8.8.8:53", "dns-in", "direct", ""),
        ),
    ],
)
def test_xray_spellings_of_the_access_line(line, expected):
    entry = parse_access_line(line)
    assert entry is not None
    assert (entry.ip, entry.destination, entry.inbound_tag, entry.outbound_tag, entry.email) == (
        expected
    )
    assert entry.when == "2026/11/22 01:02:03"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "V2Ray 4.34.0 (V2Fly, a community-driven edition of V2Ray.) Custom (go1.15 linux/amd64)",
        "2026/11/22 01:02:03 [Warning] core: V2Ray 4.34.0 started",
        "2026/11/22 01:02:03 [Info] [123] proxy/vless/inbound: firstLen = 57",
        "01:02:03 127.0.0.1:5 accepted tcp:x:1 [direct]",
    ],
)
def test_other_lines_are_not_access_lines(line):
    assert parse_access_line(line) is None


def test_log_path_is_empty_for_none_and_for_the_core_output():
    assert log_path({"log": {"access": "/x/access.log"}}, "access") == "/x/access.log"
    assert log_path({"log": {"access": "none", "error": ""}}, "access") == ""
    assert log_path({"log": {"error": ""}}, "error") == ""
    assert log_path({}, "access") == log_path(None, "access") == ""


@pytest.mark.parametrize(
    ("template_log", "expected"),
    [
        (None, "/data/core/access.log"),
        ({"access": "none", "loglevel": "warning"}, "/data/core/access.log"),
        ({"access": ""}, "/data/core/access.log"),
        ({"access": "/var/log/xray/access.log"}, "/var/log/xray/access.log"),
    ],
)
def test_the_built_config_writes_the_access_log_unless_the_template_names_a_file(
    template_log, expected
):
    template = {} if template_log is None else {"log": dict(template_log)}
    config = build_config(template, [], 10085, access_log="/data/core/access.log")
    assert config["log"]["access"] == expected
    assert build_config(template, [], 10085).get("log") == template.get("log")


# ---- following a file ------------------------------------------------------------------------


def append(path, *lines: str, end: str = "\n") -> None:
    with open(path, "a") as fh:
        fh.write("".join(line + "\n" for line in lines[:-1]) + lines[-1] + end)


def test_a_tail_starts_at_the_end_and_returns_complete_new_lines_once(tmp_path):
    path = tmp_path / "access.log"
    append(path, "old 1", "old 2")
    tail = LogTail(str(path))
    assert tail.read() == []
    append(path, "new 1", "new 2 half", end="")
    assert tail.read() == ["new 1"]
    append(path, " done")
    assert tail.read() == ["new 2 half done"]
    assert tail.read() == []


def test_a_file_that_does_not_exist_yet_is_read_from_its_start(tmp_path):
    path = tmp_path / "access.log"
    tail = LogTail(str(path))
    assert tail.read() == []
    append(path, "first")
    assert tail.read() == ["first"]


def test_a_truncated_or_replaced_file_is_read_from_its_start(tmp_path):
    path = tmp_path / "access.log"
    append(path, "a long line before truncation")
    tail = LogTail(str(path))
    with open(path, "w") as fh:
        fh.write("after\n")
    assert tail.read() == ["after"]
    rotated = tmp_path / "access.log.1"
    os.rename(path, rotated)
    append(path, "a new file that is already longer than the old one was", "second")
    assert tail.read() == [
        "a new file that is already longer than the old one was",
        "second",
    ]


def test_a_read_takes_at_most_its_limit_and_the_rest_next_time(tmp_path):
    path = tmp_path / "access.log"
    tail = LogTail(str(path), read_limit=20)
    append(path, "0123456789", "abcdefghij", "klm")
    assert tail.read() == ["0123456789"]
    assert tail.read() == ["abcdefghij", "klm"]
    append(path, "x" * 50, "after")
    assert tail.read() == []  # the first 20 bytes of a 51-byte line: skipped
    assert tail.read() == []  # its next 20
    assert tail.read() == ["after"]  # its last 11, then the next line whole


def test_trim_keeps_the_newest_whole_lines_and_appends_continue(tmp_path):
    path = tmp_path / "access.log"
    lines = [f"line {n:04d}" for n in range(1000)]  # 10 bytes + newline each
    append(path, *lines)
    assert trim(str(path), limit=20_000, keep=100) is False
    assert trim(str(path), limit=5_000, keep=100) is True
    kept = path.read_text().splitlines()
    assert kept == lines[-len(kept) :] and 0 < len(kept) <= 9
    append(path, "after trim")
    assert path.read_text().splitlines()[-2:] == [lines[-1], "after trim"]


def test_lines_backwards_reads_newest_first_within_its_budget(tmp_path):
    path = tmp_path / "error.log"
    lines = [f"line {n}" for n in range(30_000)]
    append(path, *lines)
    assert list(lines_backwards(str(path)))[:3] == ["line 29999", "line 29998", "line 29997"]
    assert list(lines_backwards(str(path))) == lines[::-1]
    budget = list(lines_backwards(str(path), max_bytes=100))
    assert budget == lines[::-1][: len(budget)] and 0 < len(budget) < 12
    assert list(lines_backwards(str(tmp_path / "missing"))) == []


# ---- server/corelogs ---------------------------------------------------------------------------

ROUTED = [
    "2026/11/22 01:00:01 127.0.0.1:1 accepted tcp:a.example:443 [direct] email: a@x",
    "2026/11/22 01:00:02 127.0.0.1:2 accepted tcp:b.example:443 [blocked] email: a@x",
    "2026/11/22 01:00:03 127.0.0.1:3 accepted tcp:c.example:443 [via-warp] email: b@x",
    "2026/11/22 01:00:04 127.0.0.1:4 accepted tcp:127.0.0.1:5 [api]",
    "2026/11/22 01:00:05 127.0.0.1:6 accepted tcp:d.example:443 [out-free] email: b@x",
    "2026/11/22 01:00:06 127.0.0.1:7 rejected  proxy/vless/encoding: invalid request user id",
]
OUTPUT = [
    "V2Ray 4.34.0 (V2Fly, a community-driven edition of V2Ray.) Custom (go1.15 linux/amd64)",
    "2026/11/22 01:00:00 [Warning] core: V2Ray 4.34.0 started",
    "2026/11/22 01:00:04 [Warning] app/dispatcher: a warning between access lines",
]


@pytest.fixture
def logged(tmp_path):
    """A config whose access log is the panel's own, in the core directory of a data
    directory in `tmp_path` (`corelogs` reads no other file)."""
    path = tmp_path / "core" / "access.log"
    path.parent.mkdir()
    append(path, *ROUTED)
    return {
        "log": {"access": str(path), "error": ""},
        "outbounds": [
            {"tag": "direct", "protocol": "freedom"},
            {"tag": "out-free", "protocol": "freedom"},
            {"tag": "blocked", "protocol": "blackhole"},
            {"tag": "via-warp", "protocol": "wireguard"},
        ],
    }


def places_of(config) -> FilePlaces:
    """The places of the data directory whose core log `config` names."""
    return FilePlaces(os.path.dirname(os.path.dirname(config["log"]["access"])))


def shown(config, count=100, **form) -> list[str]:
    return recent_core_logs(config, OUTPUT, count, form, places_of(config)).splitlines()


def test_corelogs_shows_routes_by_their_outbound_class(logged):
    unrouted = [ROUTED[5], *OUTPUT]
    assert sorted(shown(logged)) == sorted(unrouted)
    assert sorted(shown(logged, showDirect="true")) == sorted([ROUTED[0], ROUTED[4], *unrouted])
    assert sorted(shown(logged, showBlocked="true")) == sorted([ROUTED[1], *unrouted])
    assert sorted(shown(logged, showProxy="true")) == sorted([ROUTED[2], *unrouted])


def test_corelogs_merges_both_logs_in_time_order_and_keeps_the_last_count(logged):
    every = shown(logged, showDirect="true", showBlocked="true", showProxy="true")
    assert every == [
        OUTPUT[0],
        OUTPUT[1],
        ROUTED[0],
        ROUTED[1],
        ROUTED[2],
        OUTPUT[2],
        ROUTED[4],
        ROUTED[5],
    ]
    assert shown(logged, count="2", showDirect="true") == [ROUTED[4], ROUTED[5]]


def test_corelogs_filter_is_a_case_insensitive_substring(logged):
    assert shown(logged, filter="B@X", showDirect="true", showProxy="true") == [
        ROUTED[2],
        ROUTED[4],
    ]


@pytest.mark.parametrize(
    ("count", "form", "message"),
    [
        ("0", {}, "count must be an integer from 1"),
        ("ten", {}, "count must be an integer from 1"),
        ("5", {"showDirect": "yes"}, "showDirect must be true or false"),
        ("5", {"filter": ["x"]}, "filter must be text"),
    ],
)
def test_corelogs_refuses_bad_input_with_a_sentence(logged, count, form, message):
    with pytest.raises(ServiceError) as caught:
        recent_core_logs(logged, OUTPUT, count, form, places_of(logged))
    assert message in caught.value.msg
