"""Connections that make the server wait: a request whose line or headers never end, a
body that stops arriving, a keep-alive connection left idle, and too many connections
from one address on the subscription port.

Everything goes over real sockets to real panels: `quick` waits 2 s for a request's head
and for each byte of a body (APPLIANCE_HEADER_TIMEOUT, APPLIANCE_BODY_TIMEOUT) and serves
the subscription port itself; `capped` lets one address hold 3 connections there
(`--sub-connections-per-address`); `workers` runs as installed, on the documented
defaults, with the subscription port served by two worker processes. Times are loose
bounds around the documented limits, never exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import ssl
import time
from urllib.parse import urlsplit

import pytest
from helpers import (
    ROOT,
    certs_dir,
    connect,
    next_message,
    ok,
    panel_origin,
    run_appliance,
    write_self_signed,
)
from panels import start_panel, stop_and_drop

LIMIT = 2.0  # seconds: both limits of the `quick` panel
SLACK = 5.0  # how much later than its limit a connection may be closed
README = ROOT / "README.md"
LOG_LINE = re.compile(
    r"connections: request line and headers within (\S+) s .* request bodies given up "
    r"after (\S+) s without a byte; on the subscription port at most (\d+) connections"
)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    env = {
        "APPLIANCE_HEADER_TIMEOUT": f"{LIMIT:g}",
        "APPLIANCE_BODY_TIMEOUT": f"{LIMIT:g}",
        "APPLIANCE_SUB_WORKERS": "1",
    }
    server = start_panel(tmp_path_factory.mktemp("quick"), env=env)
    yield server
    stop_and_drop(server)


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    server = start_panel(
        tmp_path_factory.mktemp("capped"),
        "--sub-connections-per-address",
        "3",
        env={"APPLIANCE_SUB_WORKERS": "1"},
    )
    yield server
    stop_and_drop(server)


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    server = start_panel(tmp_path_factory.mktemp("workers"), env={"APPLIANCE_SUB_WORKERS": "2"})
    yield server
    stop_and_drop(server)


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname, parts.port


def door(panel, which: str) -> tuple[str, int]:
    return address(panel.url if which == "panel" else panel.sub_url)


def open_from(target: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(target)
    return sock


def read_until_closed(sock: socket.socket, limit: float) -> tuple[float, bytes]:
    """(seconds until the server closed `sock`, what it sent meanwhile); fails if it is
    still open after `limit` seconds."""
    started = time.monotonic()
    received = b""
    sock.settimeout(limit)
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the connection was still open after {limit:g} s; it sent {received!r}")
    return time.monotonic() - started, received


def drip(sock: socket.socket, pieces: list[bytes], every: float) -> float | None:
    """Send `pieces` one by one, `every` seconds apart; the seconds after which the
    server closed the connection, or None when every piece went out and it stayed open."""
    started = time.monotonic()
    for piece in pieces:
        try:
            sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
        sock.settimeout(every)
        try:
            # Peeked, not read: an answer stays for the caller.
            if sock.recv(1, socket.MSG_PEEK) == b"":
                return time.monotonic() - started
            time.sleep(every)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    return None


def answer_of(sock: socket.socket) -> tuple[str, bytes]:
    """The status line and body of one answer, read until the body is whole."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += more_of(sock, data)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(body) < length:
        body += more_of(sock, data + body)
    return head.split(b"\r\n", 1)[0].decode(), body


def more_of(sock: socket.socket, so_far: bytes) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        pytest.fail(f"the connection closed in the middle of an answer: {so_far!r}")
    return chunk


def request(path: str, host: str = "127.0.0.1") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


# ---- the request's line and headers -------------------------------------------------------


@pytest.mark.parametrize("which", ["panel", "sub"])
def test_half_a_request_line_is_closed_once_the_header_limit_passed(quick, which):
    sock = open_from(door(quick, which))
    sock.sendall(b"GET /sub/abc HT")
    waited, answer = read_until_closed(sock, LIMIT + SLACK)
    assert answer == b""
    assert waited >= LIMIT * 0.75


@pytest.mark.parametrize("which", ["panel", "sub"])
def test_headers_sent_a_line_at_a_time_do_not_stretch_the_limit(quick, which):
    """One header every half second: each read gets a byte well within the limit, but
    the head as a whole must be complete by then."""
    sock = open_from(door(quick, which))
    lines = [b"GET /sub/abc HTTP/1.1\r\nHost: 127.0.0.1\r\n"]
    lines += [f"X-Filler-{n}: {n}\r\n".encode() for n in range(int(LIMIT + SLACK) * 2)]
    closed_after = drip(sock, lines, every=0.5)
    assert closed_after is not None, "the server kept reading headers past its limit"
    assert LIMIT * 0.75 <= closed_after <= LIMIT + SLACK


@pytest.mark.parametrize("which", ["panel", "sub"])
def test_an_idle_keep_alive_connection_is_closed_after_the_header_limit(quick, which):
    sock = open_from(door(quick, which))
    sock.sendall(request("/sub/no-such-id"))
    status, _ = answer_of(sock)
    assert status.startswith("HTTP/1.1 404")
    waited, more = read_until_closed(sock, LIMIT + SLACK)
    assert more == b""
    assert waited >= LIMIT * 0.75


def test_a_tls_handshake_counts_against_the_header_limit(tmp_path):
    """A client that opens the TLS port and says nothing, and one that completes the
    handshake and sends half a request line, are both closed at the limit from the
    connection's start."""
    server = start_panel(tmp_path, env={"APPLIANCE_HEADER_TIMEOUT": f"{LIMIT:g}"})
    try:
        cert, key = write_self_signed(certs_dir(server), "sub.test")
        admin = server.client()
        ok(admin.post("/panel/api/setting/update", {"subCertFile": cert, "subKeyFile": key}))
        mark = len(server.lines)
        ok(admin.post("/panel/api/setting/restartPanel"))
        server.wait_listening(mark)
        target = address(server.sub_url)
        silent = open_from(target)
        waited, answer = read_until_closed(silent, LIMIT + SLACK)
        assert answer == b""
        assert waited >= LIMIT * 0.75
        context = ssl.create_default_context(cafile=cert)
        context.check_hostname = False
        started = time.monotonic()
        with context.wrap_socket(open_from(target)) as tls:
            tls.sendall(b"GET /sub/abc HT")
            assert read_until_closed(tls, LIMIT + SLACK)[1] == b""
        assert LIMIT * 0.75 <= time.monotonic() - started <= LIMIT + SLACK
    finally:
        stop_and_drop(server)


# ---- the body ----------------------------------------------------------------------------


def sign_in_head(length: int) -> bytes:
    return (
        "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_a_body_that_stops_is_refused_in_words_while_a_slow_one_is_read_whole(quick):
    stopped = open_from(door(quick, "panel"))
    stopped.sendall(sign_in_head(100) + b'{"username": ')
    status, body = answer_of(stopped)
    assert status == "HTTP/1.1 200 OK"
    reply = json.loads(body)
    assert reply["success"] is False
    assert reply["msg"] == (
        f"the request body could not be read: nothing of it arrived for {LIMIT:g} s"
    )
    assert read_until_closed(stopped, SLACK)[1] == b"", "the connection was not closed"
    # Pieces a second apart: longer than the limit in all, but none waits as long.
    body = json.dumps({"username": "slow-uploader", "password": "not the password"}).encode()
    pieces = [body[i : i + 12] for i in range(0, len(body), 12)]
    assert len(pieces) - 1 > LIMIT
    slow = open_from(door(quick, "panel"))
    slow.sendall(sign_in_head(len(body)))
    assert drip(slow, pieces, every=1.0) is None
    status, body = answer_of(slow)
    assert status == "HTTP/1.1 200 OK"
    reply = json.loads(body)
    assert reply["success"] is False
    assert "could not be read" not in reply["msg"]
    assert "password" in reply["msg"].lower()


# ---- what the limits must not cut ----------------------------------------------------------


def test_a_websocket_and_a_slow_download_outlive_the_limit_that_closes_an_idle_connection(
    quick,
):
    admin = quick.client()
    ws = connect(quick, admin, origin=panel_origin(quick))
    idle = open_from(door(quick, "panel"))
    download = slow_download(quick, admin)
    # Nothing is sent on the socket, or the idle connection, for three times the limit.
    time.sleep(LIMIT * 3)
    idle_waited, _ = read_until_closed(idle, SLACK)
    assert idle_waited < SLACK, "the idle connection beside them was not closed"
    # The socket still reads and pushes: a change made now reaches it.
    ok(admin.post("/panel/api/setting/apiTokens/create", {"name": "after-the-limits"}))
    next_message(ws, "invalidate", time.time() + 10, resource="apiTokens")
    ws.close()
    body = download()
    assert body.startswith(b"SQLite format 3\x00")


def slow_download(panel, admin):
    """Start `server/getDb` on a connection with a small receive window, read a few
    kilobytes at a time; returns what finishes it and gives the body."""
    host, port = address(panel.url)
    base = urlsplit(panel.url).path.rstrip("/")
    cookies = "; ".join(f"{k}={v}" for k, v in admin.http.cookies.items())
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    sock.sendall(
        f"GET {base}/panel/api/server/getDb HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Cookie: {cookies}\r\nConnection: close\r\n\r\n".encode()
    )

    def finish() -> bytes:
        sock.settimeout(10)
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
            time.sleep(0.01)
        sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        return body

    return finish


# ---- connections per address on the subscription port -----------------------------------


def answer_on_a_new_connection(target: tuple[str, int], source: str = "127.0.0.1") -> bytes:
    """All a request on a new connection from `source` gets back; b"" when the connection
    was closed or reset unanswered."""
    sock = open_from(target, source)
    try:
        sock.sendall(b"GET /sub/no-such-id HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        return read_until_closed(sock, 10)[1]
    except (BrokenPipeError, ConnectionResetError):
        return b""
    finally:
        sock.close()


def served(target: tuple[str, int], source: str = "127.0.0.1") -> bool:
    return answer_on_a_new_connection(target, source).startswith(b"HTTP/1.1 404")


def eventually(check, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def assert_capped_at(target: tuple[str, int], most: int) -> None:
    held = [open_from(target) for _ in range(most)]
    try:
        assert served(target, "127.0.0.2")
        assert answer_on_a_new_connection(target) == b""
        held.pop().close()
        assert eventually(lambda: served(target)), "a closed connection did not free its place"
    finally:
        for sock in held:
            sock.close()


def test_connections_over_the_cap_from_one_address_are_refused_while_others_are_served(
    capped,
):
    assert_capped_at(door(capped, "sub"), 3)
    told = "refusing connections from 127.0.0.1: it holds 3 open on the subscription port"
    assert eventually(lambda: told in capped.output()), "the refusal was not logged"
    # The panel's port has no cap, and a reverse proxy in trustedProxies is not capped.
    panel_port = door(capped, "panel")
    held = [open_from(panel_port) for _ in range(5)]
    try:
        sock = open_from(panel_port)
        sock.sendall(request("/no-such-page"))
        assert answer_of(sock)[0] == "HTTP/1.1 404 Not Found"
    finally:
        for sock in held:
            sock.close()
    admin = capped.client()
    ok(admin.post("/panel/api/setting/update", {"trustedProxies": "127.0.0.0/8"}))
    held = [open_from(door(capped, "sub")) for _ in range(3)]
    try:
        assert served(door(capped, "sub"))
    finally:
        for sock in held:
            sock.close()
        ok(admin.post("/panel/api/setting/update", {"trustedProxies": ""}))


# ---- the same in subscription workers, on the documented defaults -------------------------


def documented_default(variable: str) -> str:
    row = next(line for line in README.read_text().splitlines() if f"`{variable}`" in line)
    return re.search(r"\| (\d+)", row.split(f"`{variable}`", 1)[1]).group(1)


def test_the_defaults_in_force_are_the_documented_ones(workers):
    found = LOG_LINE.search(workers.output())
    assert found, workers.output()
    header, body, per_address = found.groups()
    assert header == documented_default("APPLIANCE_HEADER_TIMEOUT")
    assert body == documented_default("APPLIANCE_BODY_TIMEOUT")
    assert per_address == documented_default("APPLIANCE_SUB_CONNECTIONS_PER_ADDRESS")


def test_a_worker_closes_half_a_request_after_the_default_header_limit(workers):
    default = float(documented_default("APPLIANCE_HEADER_TIMEOUT"))
    sock = open_from(door(workers, "sub"))
    sock.sendall(b"GET /sub/abc HTTP/1.1\r\nHost: 127.")
    waited, answer = read_until_closed(sock, default + SLACK)
    assert answer == b""
    assert waited >= default * 0.75


@contextlib.contextmanager
def only_one_worker(panel):
    """Every worker but the first paused (SIGSTOP): the first one accepts everything."""
    pids = ok(panel.client().get("/panel/api/server/status"))["subWorkers"]
    assert len(pids) == 2
    for pid in pids[1:]:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids[0]
    finally:
        for pid in pids[1:]:
            os.kill(pid, signal.SIGCONT)


def test_a_worker_caps_the_connections_of_one_address(workers):
    most = int(documented_default("APPLIANCE_SUB_CONNECTIONS_PER_ADDRESS"))
    with only_one_worker(workers) as pid:
        assert_capped_at(door(workers, "sub"), most)
    told = f"[subscription worker {pid}] refusing connections from 127.0.0.1"
    assert eventually(lambda: told in workers.output()), "the worker's refusal was not logged"


# ---- the options themselves -------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("APPLIANCE_HEADER_TIMEOUT", "soon", "APPLIANCE_HEADER_TIMEOUT must be a number of"),
        ("APPLIANCE_BODY_TIMEOUT", "0", "APPLIANCE_BODY_TIMEOUT must be a number of seconds"),
        ("APPLIANCE_SUB_CONNECTIONS_PER_ADDRESS", "-1", "--sub-connections-per-address must"),
    ],
)
def test_a_bad_limit_stops_the_start_with_a_sentence(tmp_path, variable, value, words):
    result = run_appliance("run", "--data-dir", str(tmp_path), env={variable: value})
    assert result.returncode != 0
    assert words in result.stderr
    assert "Traceback" not in result.stderr
