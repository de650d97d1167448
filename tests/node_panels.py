"""Panels that manage panels: a central panel and its nodes as real processes on loopback.

Each panel has its own data directory and (on a `--db` run) its own database. A node is
added to the central panel the way an admin does it: an API token of scope `node` is
created on the node, and the central panel gets the node's address, port, base path and
that token. Loopback is an internal address, so records set `allowPrivateAddress`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from conftest import PanelServer
from helpers import ok

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
