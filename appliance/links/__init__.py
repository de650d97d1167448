"""Share links, JSON client configs and Mihomo YAML for subscriptions: pure functions.

The subscription server and the clients API hand in records exactly as the services
return them (the inbound of `Inbounds.get`, the client of `Clients.get`, the enabled
hosts of the inbound in their order) and get text or dicts back; nothing here touches
the database, the settings or the web layer, so every format is tested on records built
by hand. `plan` decides what each link says (address, secret, transport, security) once;
`share`, `json_config` and `clash` only translate that into their format, so the three
outputs of one client always agree and come in the same order.
"""

from __future__ import annotations

from appliance.links.clash import clash_document, clash_proxy
from appliance.links.json_config import HTTP_PORT, SOCKS_PORT, client_config
from appliance.links.plan import LinkContext, link_plans
from appliance.links.share import share_link

__all__ = [
    "LinkContext",
    "clash_document",
    "client_clash_proxies",
    "client_json_configs",
    "client_links",
]


def client_links(inbound: dict, client: dict, hosts: list[dict], ctx: LinkContext) -> list[str]:
    """Share links (vless://, vmess://, trojan://, ss://, hy2://, hysteria://) of one
    client on one inbound: one per host in the order given, else one per legacy
    `externalProxy` entry, else one to `ctx.address` and the inbound's port. [] for
    protocols without a link form (socks, http, mixed, dokodemo, tunnel, wireguard,
    mtproto)."""
    return [share_link(plan) for plan in link_plans(inbound, client, hosts, ctx)]


def client_json_configs(
    inbound: dict,
    client: dict,
    hosts: list[dict],
    ctx: LinkContext,
    *,
    socks_port: int = SOCKS_PORT,
    http_port: int = HTTP_PORT,
) -> list[dict]:
    """One complete core client config per link of `client_links`, in the same order.
    Hysteria 1 links get none: the core speaks Hysteria 2 only."""
    return [
        client_config(plan, socks_port=socks_port, http_port=http_port)
        for plan in link_plans(inbound, client, hosts, ctx)
        if plan.hysteria_version == 2
    ]


def client_clash_proxies(
    inbound: dict, client: dict, hosts: list[dict], ctx: LinkContext
) -> list[dict]:
    """One Mihomo proxy per link of `client_links` that Mihomo can express, in order."""
    proxies = (clash_proxy(plan) for plan in link_plans(inbound, client, hosts, ctx))
    return [proxy for proxy in proxies if proxy is not None]
