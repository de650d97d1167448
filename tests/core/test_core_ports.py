"""Ports held by other programs, with the real core (Debian's V2Ray 4.34).

The core's test mode never binds, so a port another program holds used to be accepted for
an inbound; the core then exited on it and took every inbound offline, restarting with
backoff on the same config. Now a save is refused while another program holds the port,
and a core that still fails on one listener (the port was taken after the save) restarts
without that inbound, names it in the status and takes it back once the port is free.
"""

from __future__ import annotations

import contextlib
import socket

import pytest
from core_helpers import LOOPBACK, echo_server, socks_echo, wait_port
from core_panel import core_panel, wait_until
from helpers import INBOUNDS, free_port, ok, refused
from panels import stop_and_drop

SOCKS = {"auth": "noauth", "udp": False}
PLAIN = {"network": "tcp", "security": "none"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    panel = core_panel(tmp_path_factory.mktemp("ports"))
    yield panel
    stop_and_drop(panel)


@pytest.fixture
def api(server):
    return server.client()


@contextlib.contextmanager
def held(port: int, kind: int = socket.SOCK_STREAM):
    """A plain socket of this test on every address at `port`: another program."""
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind(("0.0.0.0", port))
    if kind == socket.SOCK_STREAM:
        sock.listen()
    try:
        yield sock
    finally:
        sock.close()


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 0.5):
        return True
    return False


def socks(port: int, remark: str) -> dict:
    return {"protocol": "socks", "port": port, "remark": remark, "settings": SOCKS}


def vless(port: int, remark: str) -> dict:
    return {
        "protocol": "vless",
        "port": port,
        "remark": remark,
        "settings": {"decryption": "none"},
        "streamSettings": PLAIN,
    }


def core_status(api) -> dict:
    return ok(api.get("/panel/api/server/status"))["core"]


def inbound_ports(api) -> list[int]:
    return [inbound["port"] for inbound in ok(api.get(f"{INBOUNDS}/list"))]


def test_a_port_held_by_another_program_is_refused_and_nothing_is_saved(api):
    port = free_port()
    before = inbound_ports(api)
    with held(port):
        refused(
            api.post(f"{INBOUNDS}/add", vless(port, "taken")),
            f"port {port}",
            "in use by another program",
        )
    assert inbound_ports(api) == before


def test_a_udp_port_held_by_another_program_is_refused_for_a_udp_inbound(api):
    port = free_port()
    tunnel = {
        "protocol": "dokodemo",
        "port": port,
        "settings": {"address": "1.1.1.1", "port": 53, "network": "udp"},
    }
    kcp = {**vless(port, "kcp"), "streamSettings": {"network": "kcp", "security": "none"}}
    before = inbound_ports(api)
    with held(port, socket.SOCK_DGRAM):
        refused(api.post(f"{INBOUNDS}/add", tunnel), f"port {port}", "another program", "udp")
        refused(api.post(f"{INBOUNDS}/add", kcp), f"port {port}", "another program", "udp")
        # The same port over TCP is free: a TCP inbound takes it.
        created = ok(api.post(f"{INBOUNDS}/add", vless(port, "tcp beside udp")))
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))
    assert inbound_ports(api) == before


def test_enabling_an_inbound_whose_port_another_program_holds_is_refused(api):
    port = free_port()
    created = ok(api.post(f"{INBOUNDS}/add", {**vless(port, "off"), "enable": False}))
    with held(port):
        reply = api.post(f"{INBOUNDS}/setEnable/{created['id']}", {"enable": True})
        refused(reply, f"port {port}", "another program")
    assert ok(api.get(f"{INBOUNDS}/get/{created['id']}"))["enable"] is False
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_an_inbound_the_core_already_runs_on_its_port_can_be_edited(api):
    port = free_port()
    created = ok(api.post(f"{INBOUNDS}/add", socks(port, "live")))
    wait_until(lambda: listening(port), "the core listens on the new inbound")
    reply = api.post(f"{INBOUNDS}/update/{created['id']}", socks(port, "live, renamed"))
    assert ok(reply)["remark"] == "live, renamed"
    ok(api.post(f"{INBOUNDS}/del/{created['id']}"))


def test_a_port_taken_while_the_core_was_stopped_leaves_only_that_inbound_out(api):
    serving_port, taken_port = free_port(), free_port()
    serving = ok(api.post(f"{INBOUNDS}/add", socks(serving_port, "serving")))
    taken = ok(api.post(f"{INBOUNDS}/add", vless(taken_port, "grabbed")))
    wait_until(lambda: listening(taken_port), "the core listens on both inbounds")
    ok(api.post("/panel/api/server/stopCoreService"))
    wait_until(lambda: not listening(serving_port), "the core stopped")

    with held(taken_port), echo_server() as echo_port:
        ok(api.post("/panel/api/server/restartCoreService"))

        def left_out():
            status = core_status(api)
            ids = [failed["id"] for failed in status["failedInbounds"]]
            return status if status["state"] == "running" and ids == [taken["id"]] else None

        status = wait_until(left_out, "the core runs without the inbound whose port is taken")
        assert f"inbound {taken['id']} (grabbed)" in status["errorMsg"]
        assert "address already in use" in status["errorMsg"]
        assert f"port {taken_port}/tcp" in status["failedInbounds"][0]["msg"]
        wait_port(serving_port)
        assert socks_echo(serving_port, echo_port, b"still serving") == b"still serving"
        config = ok(api.get("/panel/api/server/getConfigJson"))
        tags = [inbound["tag"] for inbound in config["inbounds"]]
        assert serving["tag"] in tags and taken["tag"] not in tags

    def back():
        status = core_status(api)
        return status["state"] == "running" and not status["failedInbounds"]

    wait_until(back, "the inbound goes back into the core once its port is free")
    wait_until(lambda: listening(taken_port), "the core listens on the freed port")
    assert core_status(api)["errorMsg"] == ""
    for created in (serving, taken):
        ok(api.post(f"{INBOUNDS}/del/{created['id']}"))
