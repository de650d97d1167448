"""The core config builder: the panel's records in, the core's JSON config out.

The core reads one JSON document. It is rebuilt from the database on every change rather
than edited in place, so what runs is always a function of what is stored: the user's
template (log, DNS, outbounds, routing, policy) plus one core inbound per inbound that
should be running, each carrying the client entries that should be able to connect.
Pure: no database, no files, no clock unless `now_ms` is left out.

Input contract (what the panel produces from one read of Inbounds + ClientQuery):

- `template`: the stored core template (`settings.core_template()`), never mutated.
- `inbounds`: `Inbounds.list()` views in the order given (the panel lists them by id):
  tag, protocol, listen, port, enable, expiryTime, total, up, down, settings,
  streamSettings, sniffing, nodeId, plus `clientRows`: an iterable of the API views of
  the clients attached to that inbound (id, email, flow, security, password, auth,
  reverse, enable, totalGB, expiryTime, traffic {up, down, enable}), in client order. It
  may be iterated more than once; the panel passes one that reads the views from the
  database as the builder goes, so they are never all in memory at once. Other view
  keys (id, remark, clientStats...) are ignored. `settings.clients` of the view is
  ignored too: it is derived for display and says nothing about whether a client may
  connect; entries are rebuilt from `clientRows`. `settings.fallbacks` is used as
  rendered by the panel (a rule pointing at a child inbound already carries that
  child's address).

Rules:

- The API inbound (dokodemo-door on 127.0.0.1:`api_port`, tag "api") comes first; the
  template's `api` (tag "api", HandlerService and StatsService added to its services),
  `stats`, the user and system stats policy, and a first routing rule sending inbound
  "api" to outbound "api" are ensured; on Xray the client level also gets
  `statsUserOnline`, so the API lists who is online from which addresses. A template
  inbound tagged "api" is replaced by ours; the template's other inbounds, outbounds and
  rules are kept in their order.
- `access_log` (a path) becomes the template's `log.access` unless the template names a
  file of its own: the panel reads the access log for client IPs and `corelogs`, so an
  empty value or "none" there gives way to the panel's file. The caller confines the
  file and socket paths of the template and the inbounds first (runtime.file_paths):
  the builder reads no files, so it cannot resolve them.
- An inbound runs in this core when it is enabled, its expiry has not passed, its quota
  is not used up, it is not assigned to a node (nodes run their own core) and it is not
  MTProto (its own process).
- A client is rendered when it is enabled, its traffic row is enabled, its quota is not
  used up and its expiry has not passed; a negative expiry (counting starts on first
  use) has not passed. Entries come from `client_entry` with `level: 0`, the level whose
  policy turns on per-user stats. A legacy Shadowsocks entry names the inbound's cipher
  (what the client's links use), 2022 entries carry only their key: the inbound's
  `method` and `password` (the server key) stay at the settings level, which is Xray's
  multi-user 2022 form.
- Client lists are written as `clients`: every Xray release and v2fly read that name;
  newer Xray documents `users` and still reads `clients` as its older spelling.
- Panel-only data stays out: `externalProxy`, WireGuard's `pubKey` and its peers'
  `privateKey` (what the panel shows a peer in its config), and the transport and
  security objects of the networks and securities not in use (the panel keeps them so
  switching back restores them). The Hysteria transport gets `version: 2`, which the core requires.
- Protocol names: dokodemo -> dokodemo-door (classic settings names address, port,
  network), tunnel -> tunnel (Xray's newer name, with rewriteAddress, rewritePort,
  allowedNetwork), hysteria and hysteria2 -> hysteria (the core's only Hysteria inbound,
  version 2), the rest keep their names.

Flavor "v2fly" adapts what V2Ray 4.34, the stand-in core of the tests, spells
differently: tunnel -> dokodemo-door with the classic names, mixed -> socks (4.34 has no
mixed inbound; its SOCKS half keeps working, HTTP proxy requests on that port do not),
network raw -> tcp (rawSettings -> tcpSettings), sniffing limited to http and tls, and a
Shadowsocks inbound with exactly one client written in the single-user form (4.34 reads
no client list). Everything 4.34 cannot run at all (XHTTP, gRPC, HTTPUpgrade, Hysteria,
WireGuard, 2022 ciphers, several Shadowsocks users) is emitted exactly as for Xray.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable

# The panel's own entry rules and pure read-side helpers, so the core gets exactly the
# entries the inbound API shows (which flow and which cipher a client entry carries).
from appliance.core.entries import client_entry
from appliance.domain.client_rules import SINGLE_USER_METHODS, legacy_method
from appliance.domain.clients import expired, is_served, over_quota
from appliance.domain.inbound_rules import CLIENT_PROTOCOLS, TRANSPORT_OBJECTS, tls_flow_capable

FLAVORS = ("xray", "v2fly")
API_TAG = "api"
API_SERVICES = ("HandlerService", "StatsService")
LOOPBACK = "127.0.0.1"
# Protocols that never run in the core: MTProto is served by its own process.
OUTSIDE_CORE = frozenset({"mtproto"})
CORE_PROTOCOLS = {
    "xray": {
        "dokodemo": "dokodemo-door",
        "tunnel": "tunnel",
        "hysteria": "hysteria",
        "hysteria2": "hysteria",
    },
    "v2fly": {
        "dokodemo": "dokodemo-door",
        "tunnel": "dokodemo-door",
        "hysteria": "hysteria",
        "hysteria2": "hysteria",
        "mixed": "socks",
    },
}
# Port-forwarding settings: (classic name, name of the tunnel protocol).
FORWARD_NAMES = (
    ("address", "rewriteAddress"),
    ("port", "rewritePort"),
    ("network", "allowedNetwork"),
)
SECURITY_OBJECTS = {"tls": "tlsSettings", "reality": "realitySettings"}
PANEL_ONLY_STREAM_KEYS = ("externalProxy",)
V2FLY_SNIFFERS = ("http", "tls")
# The level every client entry gets; the policy below turns on its per-user counters.
CLIENT_LEVEL = 0


def build_config(
    template: dict,
    inbounds: list[dict],
    api_port: int,
    flavor: str = "xray",
    now_ms: int | None = None,
    access_log: str = "",
) -> dict:
    """The core config for these records (see the module docstring for the contract)."""
    if flavor not in FLAVORS:
        raise ValueError(f"flavor must be one of {', '.join(FLAVORS)} (got {flavor!r})")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    config = copy.deepcopy(template)
    if access_log:
        _ensure_access_log(config, access_log)
    _ensure_api(config, flavor)
    _ensure_stats(config)
    _ensure_policy(config, flavor)
    _ensure_api_rule(config)
    kept = [
        inbound
        for inbound in config.get("inbounds") or []
        if not (isinstance(inbound, dict) and inbound.get("tag") == API_TAG)
    ]
    config["inbounds"] = [
        api_inbound(api_port),
        *kept,
        *(
            core_inbound(inbound, flavor, now)
            for inbound in inbounds
            if inbound_in_core(inbound, now) and _servable(inbound, flavor, now)
        ),
    ]
    return config


def _servable(inbound: dict, flavor: str, now_ms: int) -> bool:
    """V2Ray 4.34's Shadowsocks inbound needs exactly one user; without one it refuses
    the whole config, so such an inbound waits outside it until a client can use it."""
    if not clients_shape_inbound(inbound, flavor):
        return True
    return any(client_in_core(client, now_ms) for client in inbound.get("clientRows") or [])


def clients_shape_inbound(inbound: dict, flavor: str) -> bool:
    """Whether the clients of this inbound view decide more of its core inbound than its
    client list: V2Ray's Shadowsocks inbound is left out without a client and written in
    the single-user form with one. Elsewhere a config built without any client differs
    from the whole one in client lists only."""
    return flavor == "v2fly" and inbound.get("protocol") == "shadowsocks"


def config_fingerprint(config: dict) -> str:
    """SHA-256 of the config as canonical JSON (sorted keys, no spaces): equal for equal
    configs whatever their key order, so it tells whether the core needs the new one."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def inbound_in_core(inbound: dict, now_ms: int) -> bool:
    """Whether this inbound view belongs in this host's core right now."""
    return (
        bool(inbound.get("enable"))
        and not expired(inbound.get("expiryTime"), now_ms)
        and not over_quota(inbound.get("total"), inbound.get("up"), inbound.get("down"))
        and inbound.get("nodeId") is None
        and inbound.get("protocol") not in OUTSIDE_CORE
    )


def client_in_core(client: dict, now_ms: int) -> bool:
    """Whether this client view may connect right now (the domain's served rule)."""
    traffic = client.get("traffic") or {}
    return is_served(
        client.get("enable"),
        traffic.get("enable", True),
        client.get("totalGB"),
        traffic.get("up"),
        traffic.get("down"),
        client.get("expiryTime"),
        now_ms,
    )


def api_inbound(api_port: int) -> dict:
    """The loopback door of the core's gRPC API; routed to the "api" outbound."""
    return {
        "tag": API_TAG,
        "listen": LOOPBACK,
        "port": api_port,
        "protocol": "dokodemo-door",
        "settings": {"address": LOOPBACK},
    }


def core_inbound(inbound: dict, flavor: str, now_ms: int) -> dict:
    """One inbound view as a core inbound object."""
    protocol = inbound["protocol"]
    entry: dict = {"tag": inbound["tag"]}
    if inbound.get("listen"):
        entry["listen"] = inbound["listen"]
    if inbound.get("port"):
        entry["port"] = inbound["port"]
    entry["protocol"] = CORE_PROTOCOLS[flavor].get(protocol, protocol)
    entry["settings"] = _settings(inbound, flavor, now_ms)
    stream = _stream(inbound.get("streamSettings") or {}, flavor)
    if stream:
        entry["streamSettings"] = stream
    if inbound.get("sniffing"):
        entry["sniffing"] = _sniffing(inbound["sniffing"], flavor)
    return entry


# ---- sections of the template ----------------------------------------------------------


def _section(config: dict, key: str) -> dict:
    """config[key] as a dict, replacing anything else there."""
    if not isinstance(config.get(key), dict):
        config[key] = {}
    return config[key]


def _ensure_access_log(config: dict, path: str) -> None:
    log = _section(config, "log")
    own = log.get("access")
    if not isinstance(own, str) or own.strip().lower() in ("", "none"):
        log["access"] = path


def _ensure_api(config: dict, flavor: str) -> None:
    """The gRPC services the panel calls: users and counters on every core; on Xray
    also the router (route test, balancer override) and, when the template runs an
    observatory, its status (V2Ray 4.34 has neither service)."""
    api = _section(config, "api")
    api["tag"] = API_TAG
    services = api.get("services")
    services = list(services) if isinstance(services, list) else []
    wanted = list(API_SERVICES)
    if flavor == "xray":
        wanted.append("RoutingService")
        if config.get("observatory") or config.get("burstObservatory"):
            wanted.append("ObservatoryService")
    api["services"] = services + [name for name in wanted if name not in services]


def _ensure_stats(config: dict) -> None:
    _section(config, "stats")


def _ensure_policy(config: dict, flavor: str) -> None:
    """Per-user and per-inbound/outbound counters on; on Xray also the online map of each
    user (`statsUserOnline`), which its API lists with the addresses a user is connected
    from. V2Ray 4.34 has no online maps and ignores the key, so it is left out there."""
    policy = _section(config, "policy")
    level = _section(_section(policy, "levels"), str(CLIENT_LEVEL))
    level["statsUserUplink"] = level["statsUserDownlink"] = True
    if flavor == "xray":
        level["statsUserOnline"] = True
    system = _section(policy, "system")
    for key in (
        "statsInboundUplink",
        "statsInboundDownlink",
        "statsOutboundUplink",
        "statsOutboundDownlink",
    ):
        system[key] = True


def _ensure_api_rule(config: dict) -> None:
    """The API rule first, so no user rule can send API calls elsewhere."""
    routing = _section(config, "routing")
    rules = routing.get("rules") if isinstance(routing.get("rules"), list) else []
    routing["rules"] = [
        {"type": "field", "inboundTag": [API_TAG], "outboundTag": API_TAG},
        *(rule for rule in rules if not _is_api_rule(rule)),
    ]


def _is_api_rule(rule: object) -> bool:
    return (
        isinstance(rule, dict)
        and rule.get("inboundTag") == [API_TAG]
        and rule.get("outboundTag") == API_TAG
    )


# ---- one inbound -----------------------------------------------------------------------


def _settings(inbound: dict, flavor: str, now_ms: int) -> dict:
    protocol = inbound["protocol"]
    settings = {
        key: copy.deepcopy(value)
        for key, value in (inbound.get("settings") or {}).items()
        if key not in ("clients", "users")
    }
    if protocol in ("hysteria", "hysteria2"):
        settings.setdefault("version", 2)
    if protocol == "wireguard":
        _drop_peer_keys(settings)
    if protocol in ("dokodemo", "tunnel"):
        settings = _forward_settings(settings, modern=protocol == "tunnel" and flavor == "xray")
    if protocol not in CLIENT_PROTOCOLS:
        return settings
    if protocol == "shadowsocks" and settings.get("method") in SINGLE_USER_METHODS:
        # Served on the inbound's own key alone: Xray refuses the whole config when this
        # cipher has users, which clients attached before the panel refused them (or a
        # database from elsewhere) would give it.
        return settings
    clients = _client_entries(inbound, now_ms)
    if clients_shape_inbound(inbound, flavor) and len(clients) == 1:
        return _single_user(settings, clients[0])
    settings["clients"] = clients
    return settings


def _drop_peer_keys(settings: dict) -> None:
    """The keys the panel keeps to show peers their configs (the server's public key and
    each peer's private key) are no business of the core's."""
    settings.pop("pubKey", None)
    for peer in settings.get("peers") or []:
        if isinstance(peer, dict):
            peer.pop("privateKey", None)


def _client_entries(inbound: dict, now_ms: int) -> list[dict]:
    render = entry_renderer(inbound)
    return [
        render(client)
        for client in inbound.get("clientRows") or []
        if client_in_core(client, now_ms)
    ]


def entry_renderer(inbound: dict) -> Callable[[dict], dict]:
    """The function that turns a client view into its entry in this inbound's client list
    (whether the client belongs there is `client_in_core`'s to say). One client edit
    renders that client's entries alone with it, exactly as a whole build would."""
    protocol = inbound["protocol"]
    flow_capable = tls_flow_capable(inbound)
    method = legacy_method(inbound["settings"].get("method")) if protocol == "shadowsocks" else ""

    def render(client: dict) -> dict:
        return {**client_entry(protocol, client, flow_capable, method), "level": CLIENT_LEVEL}

    return render


def _single_user(settings: dict, client: dict) -> dict:
    """V2Ray 4.34's Shadowsocks inbound serves one user given at the settings level."""
    single = {key: value for key, value in settings.items() if key not in client}
    single.update(client)
    return single


def _forward_settings(settings: dict, *, modern: bool) -> dict:
    """Port-forwarding settings under one naming: the tunnel names or the classic ones.
    Where both were given the classic one wins, as in the core (a port of 0 means none)."""
    result = dict(settings)
    for classic, newer in FORWARD_NAMES:
        value = next(
            (result[key] for key in (classic, newer) if result.get(key) not in (None, "", 0)),
            None,
        )
        target, other = (newer, classic) if modern else (classic, newer)
        if other in result and target not in result:
            result = _renamed(result, other, target)
        result.pop(other, None)
        if value is None:
            result.pop(target, None)
        else:
            result[target] = value
    return result


def _stream(stored: dict, flavor: str) -> dict:
    """The transport as the core reads it: the active network's and security's objects
    only (the core builds every transport object present, stale or not), no panel-only
    keys; `raw` spelled `tcp` for v2fly."""
    if not stored:
        return {}
    network = stored.get("network", "tcp")
    security = stored.get("security", "none")
    unused = {name for names in TRANSPORT_OBJECTS.values() for name in names}
    unused -= set(TRANSPORT_OBJECTS.get(network, ()))
    unused |= {name for key, name in SECURITY_OBJECTS.items() if key != security}
    unused |= set(PANEL_ONLY_STREAM_KEYS)
    stream = {key: copy.deepcopy(value) for key, value in stored.items() if key not in unused}
    if network == "hysteria":
        hysteria = stream.setdefault("hysteriaSettings", {})
        hysteria.setdefault("version", 2)
    if flavor == "v2fly" and network in ("tcp", "raw"):
        stream["network"] = "tcp"
        if "rawSettings" in stream:
            # Xray reads rawSettings over tcpSettings when both are given; so does this.
            stream.pop("tcpSettings", None)
            stream = _renamed(stream, "rawSettings", "tcpSettings")
    return stream


def _sniffing(sniffing: dict, flavor: str) -> dict:
    result = copy.deepcopy(sniffing)
    if flavor == "v2fly" and isinstance(result.get("destOverride"), list):
        result["destOverride"] = [p for p in result["destOverride"] if p in V2FLY_SNIFFERS]
    return result


# ---- helpers ---------------------------------------------------------------------------


def _renamed(mapping: dict, old: str, new: str) -> dict:
    """`mapping` with key `old` renamed to `new` in the same position (stable output)."""
    return {(new if key == old else key): value for key, value in mapping.items()}
