"""Panels that manage panels: a central panel and its nodes as real processes on loopback.

Each panel has its own data directory and (on a `--db` run) its own database. A node is
added to the central panel the way an admin does it: an API token of scope `node` is
created on the node, and the central panel gets the node's address, port, base path and
that token. Loopback is an internal address, so records set `allowPrivateAddress`.

A node that runs the real core (`core_node`) listens on a port fixed at its first start,
so it can be killed and started again on its data directory at the address the central
panel holds; `mirror_on_node` makes the node's side of an inbound bound to it and of its
clients, as deployment does.

A compromised node is played by `ForgingNode`: a small HTTP server on loopback in front
of a real node panel, passing every call through and rewriting the answers of the paths
it is told to forge, so deployment, heartbeats and polls all reach a working node while
what it reports is whatever the test says.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import requests
from core_panel import CORE_ENV, loopback_template, wait_until
from helpers import INBOUNDS, create_inbound, free_port, ok
from panels import PanelServer, start_panel

NODES = "/panel/api/nodes"


def node_token(node: PanelServer, name: str = "central", scope: str = "node") -> str:
    admin = node.client()
    created = ok(admin.post("/panel/api/setting/apiTokens/create", {"name": name, "scope": scope}))
    return created["token"]


def connection(node: PanelServer, token: str, **fields) -> dict:
    """The fields of a node record that reach `node`."""
    parts = urlsplit(node.url)
    return {
        "scheme": parts.scheme,
        "address": parts.hostname,
        "port": parts.port,
        "basePath": parts.path or "/",
        "apiToken": token,
        "allowPrivateAddress": True,
        **fields,
    }


def add_node(central_api, node: PanelServer, name: str, token: str | None = None, **fields):
    token = token or node_token(node, f"central-{name}")
    body = {"name": name, **connection(node, token), **fields}
    return ok(central_api.post(f"{NODES}/add", body))


# ---- nodes on the real core ----------------------------------------------------------


def restart(server: PanelServer) -> None:
    """Restart a panel through its API (a setting read at start takes effect) and wait
    until it listens again."""
    mark = len(server.lines)
    ok(server.client().post("/panel/api/setting/restartPanel"))
    server.wait_listening(mark)


def with_interval(server: PanelServer, interval: int = 1) -> PanelServer:
    """`trafficInterval` stored and in effect: the traffic jobs (the core's ticks, the
    node polls) read it at start."""
    ok(server.client().post("/panel/api/setting/update", {"trafficInterval": interval}))
    restart(server)
    return server


def core_node(tmp_path, interval: int = 1) -> PanelServer:
    """A node panel on the real core, running the loopback template, with traffic ticks
    every `interval` seconds. It listens on a port of its own choosing, so that a restart
    on the same data directory (after a kill) keeps the address its record holds."""
    server = start_panel(tmp_path, "--port", str(free_port()), env=CORE_ENV)
    api = server.client()
    ok(api.post("/panel/api/core/update", {"coreSetting": json.dumps(loopback_template(api))}))
    return with_interval(server, interval)


def mirror_on_node(node_api, central_inbound: dict, clients: list[dict]) -> dict:
    """The node's side of an inbound the central panel binds to a node, and of its
    clients: the inbound under the central tag without its `n<id>-` prefix, the clients
    with the same emails and fields, each created unless the node already has it (as
    deployment makes and adopts them). Returns the node's inbound once its core runs it."""
    prefix = f"n{central_inbound['nodeId']}-"
    assert central_inbound["tag"].startswith(prefix), central_inbound["tag"]
    tag = central_inbound["tag"].removeprefix(prefix)
    existing = {i["tag"]: i for i in ok(node_api.get(f"{INBOUNDS}/list"))}
    inbound = existing.get(tag)
    if inbound is None:
        settings = {k: v for k, v in central_inbound["settings"].items() if k != "clients"}
        fields = ("remark", "protocol", "listen", "port", "streamSettings", "sniffing")
        payload = {**{k: central_inbound[k] for k in fields}, "tag": tag, "settings": settings}
        inbound = create_inbound(node_api, payload)
    for client in clients:
        found = node_api.get(f"/panel/api/clients/get/{client['email']}")
        if not found["success"]:
            body = {"client": client, "inboundIds": [inbound["id"]]}
            ok(node_api.post("/panel/api/clients/add", body))

    def serving() -> bool:
        config = ok(node_api.get("/panel/api/server/getConfigJson"))
        running = ok(node_api.get("/panel/api/server/status"))["core"]["state"] == "running"
        return running and tag in {i.get("tag") for i in config.get("inbounds", [])}

    wait_until(serving, f"the node's core runs inbound {tag}")
    return inbound


# ---- a node that lies -------------------------------------------------------------------


class ForgingNode:
    """A node panel behind a proxy that rewrites the `obj` of chosen answers: `forgers`
    maps a path under the panel (such as `/panel/api/clients/counters`) to a function of
    the real `obj`; `calls` counts the forged answers per path."""

    def __init__(self, node: PanelServer):
        self.node = node
        self.forgers: dict[str, Callable] = {}
        self.calls: dict[str, int] = {}
        owner = self
        base = urlsplit(node.url).path.rstrip("/")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.relay()

            def do_POST(self) -> None:
                self.relay()

            def relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("authorization", "content-type", "accept", "x-panel-guid")
                }
                reply = requests.request(
                    self.command,
                    owner.node.url + self.path.removeprefix(base),
                    data=body,
                    headers=headers,
                    timeout=30,
                )
                content = reply.content
                forger = owner.forgers.get(self.path.removeprefix(base))
                if forger is not None and reply.status_code == 200:
                    answer = reply.json()
                    answer["obj"] = forger(answer["obj"])
                    content = json.dumps(answer).encode()
                    key = self.path.removeprefix(base)
                    owner.calls[key] = owner.calls.get(key, 0) + 1
                self.send_response(reply.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
