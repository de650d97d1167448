"""Share links, JSON client configs and Mihomo YAML for subscriptions: pure functions.

The subscription server and the clients API hand in records exactly as the services
return them (the inbound of `Inbounds.get`, the client of `Clients.get`, the enabled
hosts of the inbound in their order) and get text or dicts back; nothing here touches
the database, the settings or the web layer, so every format is tested on records built
by hand. `plan` decides what each link says (address, secret, transport, security) once;
`share`, `json_config`, `clash` and `singbox` only translate that into their format, so
the outputs of one client always agree and come in the same order.

What the links of an inbound share whoever the client is (parsed settings, targets,
security, the REALITY public key) is worked out by `prepare_inbound`; a caller rendering
many clients of few inbounds keeps that and calls the `prepared_*` functions, which give
exactly what the per-record functions give.
"""

from __future__ import annotations

from appliance.links.clash import clash_document, clash_proxy
from appliance.links.json_config import HTTP_PORT, SOCKS_PORT, client_config
from appliance.links.plan import LinkContext, PreparedInbound, plans_for, prepare_inbound
from appliance.links.share import share_link
from appliance.links.singbox import singbox_outbound, singbox_profile
from appliance.links.yaml_text import YAML_EMITTER

__all__ = [
    "YAML_EMITTER",
    "LinkContext",
    "PreparedInbound",
    "clash_document",
    "client_clash_proxies",
    "client_json_configs",
    "client_links",
    "client_singbox_outbounds",
    "prepare_inbound",
    "prepared_clash_proxies",
    "prepared_json_configs",
    "prepared_links",
    "prepared_singbox_outbounds",
    "singbox_profile",
]


def client_links(inbound: dict, client: dict, hosts: list[dict], ctx: LinkContext) -> list[str]:
    """Share links (vless://, vmess://, trojan://, ss://, hy2://, hysteria://,
    tg://proxy) of one client on one inbound: one per host in the order given, else one
    per legacy `externalProxy` entry, else one to `ctx.address` and the inbound's port.
    [] for protocols without a link form (socks, http, mixed, dokodemo, tunnel,
    wireguard)."""
    return prepared_links(prepare_inbound(inbound, hosts), client, ctx)


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
    return prepared_json_configs(
        prepare_inbound(inbound, hosts), client, ctx, socks_port=socks_port, http_port=http_port
    )


def client_clash_proxies(
    inbound: dict, client: dict, hosts: list[dict], ctx: LinkContext
) -> list[dict]:
    """One Mihomo proxy per link of `client_links` that Mihomo can express, in order."""
    return prepared_clash_proxies(prepare_inbound(inbound, hosts), client, ctx)


def client_singbox_outbounds(
    inbound: dict, client: dict, hosts: list[dict], ctx: LinkContext
) -> list[dict]:
    """One sing-box outbound per link of `client_links` that sing-box can express, in
    order."""
    return prepared_singbox_outbounds(prepare_inbound(inbound, hosts), client, ctx)


def prepared_links(prepared: PreparedInbound | None, client: dict, ctx: LinkContext) -> list[str]:
    """`client_links` of the inbound and hosts `prepared` was made from."""
    return [share_link(plan) for plan in plans_for(prepared, client, ctx)]


def prepared_json_configs(
    prepared: PreparedInbound | None,
    client: dict,
    ctx: LinkContext,
    *,
    socks_port: int = SOCKS_PORT,
    http_port: int = HTTP_PORT,
) -> list[dict]:
    """`client_json_configs` of the inbound and hosts `prepared` was made from."""
    return [
        client_config(plan, socks_port=socks_port, http_port=http_port)
        for plan in plans_for(prepared, client, ctx)
        if plan.hysteria_version == 2 and plan.protocol != "mtproto"
    ]


def prepared_clash_proxies(
    prepared: PreparedInbound | None, client: dict, ctx: LinkContext
) -> list[dict]:
    """`client_clash_proxies` of the inbound and hosts `prepared` was made from."""
    proxies = (clash_proxy(plan) for plan in plans_for(prepared, client, ctx))
    return [proxy for proxy in proxies if proxy is not None]


def prepared_singbox_outbounds(
    prepared: PreparedInbound | None, client: dict, ctx: LinkContext
) -> list[dict]:
    """`client_singbox_outbounds` of the inbound and hosts `prepared` was made from."""
    outbounds = (singbox_outbound(plan) for plan in plans_for(prepared, client, ctx))
    return [outbound for outbound in outbounds if outbound is not None]
