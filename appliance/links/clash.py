"""Mihomo (Clash.Meta) proxies and the YAML document of the `/yaml/` subscription.

Each `LinkPlan` becomes one entry of Mihomo's `proxies:` list with the fields its proxy
schema names for that type (wiki.metacubex.one, config/proxies):

- common: name, type, server, port, udp: true;
- vless: uuid, flow, encryption; vmess: uuid, alterId 0, cipher; trojan: password;
  ss: cipher, password; hysteria2: password, ports; hysteria: auth-str, protocol, up, down;
- TLS: `tls: true` with `servername` (vless, vmess) or `sni` (trojan, hysteria),
  `alpn` list, `skip-cert-verify`, `client-fingerprint`; REALITY adds
  `reality-opts: {public-key, short-id}`;
- transports: `network` tcp, http (raw TCP with HTTP obfuscation, `http-opts`), ws
  (`ws-opts`; HTTPUpgrade is ws with `v2ray-http-upgrade: true`), grpc (`grpc-opts`),
  xhttp (VLESS only, `xhttp-opts`).

What Mihomo cannot express gets no proxy: mKCP and QUIC transports, Trojan without TLS
(Mihomo's Trojan always speaks TLS), Trojan over HTTP obfuscation or XHTTP, VMess over
XHTTP, and Shadowsocks over anything but plain TCP (Mihomo's ss has plugins, not the
core's transports).

`clash_profile` makes the whole profile and `clash_document` writes it: the proxies
(names made unique, as Mihomo refuses duplicates), one `select` group named PROXY listing
them and DIRECT, and the rules of the `subRoutingRules` setting followed by `MATCH,PROXY`.

The text is written by `appliance.links.yaml_text`, which writes exactly what
`yaml.safe_dump` writes, faster.
"""

from __future__ import annotations

from appliance.links import transport as tr
from appliance.links.names import with_unique_names
from appliance.links.plan import LinkPlan
from appliance.links.share import bandwidth_mbps
from appliance.links.yaml_text import dump_yaml

GROUP_NAME = "PROXY"
MIHOMO_TRANSPORTS = {
    "vless": frozenset({"tcp", "http", "ws", "httpupgrade", "grpc", "xhttp"}),
    "vmess": frozenset({"tcp", "http", "ws", "httpupgrade", "grpc"}),
    "trojan": frozenset({"tcp", "ws", "httpupgrade", "grpc"}),
    "shadowsocks": frozenset({"tcp"}),
}


def clash_proxy(plan: LinkPlan) -> dict | None:
    """The Mihomo proxy of one plan, or None when Mihomo cannot express it."""
    if plan.protocol in ("hysteria", "hysteria2"):
        return _hysteria(plan)
    if plan.protocol == "mtproto":
        return None
    network = _mihomo_network(plan)
    if network not in MIHOMO_TRANSPORTS[plan.protocol]:
        return None
    if plan.protocol == "trojan" and plan.security.kind == "none":
        return None
    if plan.protocol == "shadowsocks" and plan.security.kind != "none":
        return None
    proxy = _common(plan)
    proxy.update(_credentials(plan))
    if plan.protocol != "shadowsocks":
        proxy.update(_security(plan))
        proxy.update(_transport(plan, network))
    return proxy


def _common(plan: LinkPlan) -> dict:
    kind = "ss" if plan.protocol == "shadowsocks" else plan.protocol
    return {"name": plan.remark, "type": kind, "server": plan.address, "port": plan.port}


def _credentials(plan: LinkPlan) -> dict:
    if plan.protocol == "vless":
        credentials = {"uuid": plan.user_id, "udp": True}
        if plan.flow:
            # Mihomo's Vision already behaves like the core's "-udp443" variant.
            credentials["flow"] = "xtls-rprx-vision"
        if plan.vless_encryption != "none":
            credentials["encryption"] = plan.vless_encryption
        return credentials
    if plan.protocol == "vmess":
        return {"uuid": plan.user_id, "alterId": 0, "cipher": plan.vmess_security, "udp": True}
    if plan.protocol == "trojan":
        return {"password": plan.password, "udp": True}
    return {"cipher": plan.ss_method, "password": plan.password, "udp": True}


def _security(plan: LinkPlan) -> dict:
    security = plan.security
    if security.kind == "none":
        return {"tls": False} if plan.protocol != "trojan" else {}
    options: dict = {} if plan.protocol == "trojan" else {"tls": True}
    if security.sni:
        options["sni" if plan.protocol == "trojan" else "servername"] = security.sni
    if security.alpn:
        options["alpn"] = list(security.alpn)
    if security.fingerprint:
        options["client-fingerprint"] = security.fingerprint
    options["skip-cert-verify"] = security.allow_insecure
    if security.kind == "reality":
        options["reality-opts"] = {
            "public-key": security.public_key,
            "short-id": security.short_id,
        }
    return options


def _mihomo_network(plan: LinkPlan) -> str:
    """The plan's network in Mihomo's terms: raw TCP with HTTP obfuscation is "http"."""
    if plan.network == "tcp" and tr.header_type(plan.transport) == "http":
        return "http"
    return plan.network


def _transport(plan: LinkPlan, network: str) -> dict:
    transport = plan.transport
    if network == "http":
        hosts = tr.http_request_hosts(transport)
        http_opts: dict = {"method": "GET", "path": tr.http_request_paths(transport)}
        if hosts:
            http_opts["headers"] = {"Host": hosts}
        return {"network": "http", "http-opts": http_opts}
    if network in ("ws", "httpupgrade"):
        ws_opts: dict = {"path": tr.path(transport) or "/"}
        host = tr.host(transport)
        if host:
            ws_opts["headers"] = {"Host": host}
        if network == "httpupgrade":
            ws_opts["v2ray-http-upgrade"] = True
        return {"network": "ws", "ws-opts": ws_opts}
    if network == "grpc":
        return {
            "network": "grpc",
            "grpc-opts": {"grpc-service-name": tr.grpc_service_name(transport)},
        }
    if network == "xhttp":
        xhttp_opts = {"path": tr.path(transport) or "/"}
        host = tr.host(transport)
        if host:
            xhttp_opts["host"] = host
        mode = tr.xhttp_mode(transport)
        if mode != "auto":
            xhttp_opts["mode"] = mode
        return {"network": "xhttp", "xhttp-opts": xhttp_opts}
    return {"network": "tcp"}


def _hysteria(plan: LinkPlan) -> dict:
    security = plan.security
    if plan.hysteria_version == 1:
        proxy = {
            **_common(plan),
            "type": "hysteria",
            "auth-str": plan.password,
            "protocol": "udp",
            "up": f"{bandwidth_mbps(plan.transport.get('up'))} Mbps",
            "down": f"{bandwidth_mbps(plan.transport.get('down'))} Mbps",
        }
    else:
        proxy = {**_common(plan), "type": "hysteria2", "password": plan.password}
        hop = tr.hop_ports(plan.transport)
        if hop:
            proxy["ports"] = hop
    proxy["udp"] = True
    if security.sni:
        proxy["sni"] = security.sni
    if security.alpn:
        proxy["alpn"] = list(security.alpn)
    proxy["skip-cert-verify"] = security.allow_insecure
    return proxy


# ---------------------------------------------------------------------------------------
# The document
# ---------------------------------------------------------------------------------------


def clash_document(proxies: list[dict], routing_rules: str) -> str:
    """The Mihomo YAML profile for `proxies` (from `client_clash_proxies`), as text."""
    return dump_yaml(clash_profile(proxies, routing_rules))


def clash_profile(proxies: list[dict], routing_rules: str) -> dict:
    """The Mihomo profile for `proxies` (from `client_clash_proxies`).

    `routing_rules` is the `subRoutingRules` setting: Mihomo rules, one per line, as
    Mihomo writes them (`DOMAIN-SUFFIX,example.com,DIRECT`, `GEOIP,CN,DIRECT`); a line may
    start with "- " as in a YAML list; blank lines, lines starting with "#" and lines
    without a comma are skipped. The rules target the group "PROXY", "DIRECT" or
    "REJECT". `MATCH,PROXY` is appended unless the setting ends in a MATCH rule itself.
    """
    named = with_unique_names(proxies, "name", "proxy", {GROUP_NAME, "DIRECT", "REJECT"})
    names = [proxy["name"] for proxy in named]
    rules = parse_rules(routing_rules)
    if not rules or not rules[-1].upper().startswith("MATCH,"):
        rules.append(f"MATCH,{GROUP_NAME}")
    return {
        "mixed-port": 7890,
        "allow-lan": False,
        "mode": "rule",
        "log-level": "warning",
        "proxies": named,
        "proxy-groups": [{"name": GROUP_NAME, "type": "select", "proxies": [*names, "DIRECT"]}],
        "rules": rules,
    }


def parse_rules(routing_rules: str) -> list[str]:
    """The rule lines of the `subRoutingRules` setting (see `clash_document`)."""
    rules = []
    for line in (routing_rules or "").splitlines() if isinstance(routing_rules, str) else []:
        rule = line.strip()
        if rule.startswith("- "):
            rule = rule[2:].strip()
        rule = rule.strip("'\"")
        if rule and not rule.startswith("#") and "," in rule:
            rules.append(rule)
    return rules
