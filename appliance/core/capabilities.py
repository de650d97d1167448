"""What each kind and version of core can run, and what an inbound or a config asks of it.

A core's test mode is no proof that it runs a config: V2Ray 4.34 accepts a VLESS inbound
with `security: reality` and clients with the `xtls-rprx-vision` flow, then serves plain
VLESS, while links still advertise REALITY and Vision and every real app fails. So the
panel keeps one table of features per core kind (Xray, V2Ray; sing-box has room beside
them), each with the first release that runs it, and reads every inbound, client flow and
template against the detected core before it saves or runs them (`missing`). The same
reading serves the config builder's running path, the save checks, the subscription
renderer and the API that tells the browser what to grey out.

An entry is read in the shape the panel stores it and the core config carries it alike
(`protocol`, `settings`, `streamSettings`): inbound views, core config inbounds and
template outbounds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from appliance.domain.inbound_rules import tls_flow_capable

REALITY = "REALITY"
VISION = "XTLS Vision"
XHTTP = "XHTTP"
HTTPUPGRADE = "HTTPUpgrade"
SPLITHTTP = "SplitHTTP"
GRPC = "gRPC"
SS2022 = "Shadowsocks 2022"
HYSTERIA2 = "Hysteria 2"
WIREGUARD = "WireGuard"
LOOPBACK = "Loopback"
VLESS_ENCRYPTION = "VLESS encryption"
MLDSA65 = "ML-DSA-65"

# The first release of each kind that runs the feature; a feature a kind never runs is
# absent from its row. Xray's numbering went from 1.8.x to 24.x, which compares as
# numbers. V2Ray (v2fly) 4.x runs none of them (DESIGN: it rejects the transports, the
# 2022 ciphers and the protocols, and silently ignores REALITY and flows); v2fly 4.36
# brought gRPC, v5.10 HTTPUpgrade. Xray took the loopback outbound from v2fly in 1.5.1;
# V2Ray 4.34 refuses it ("unknown config id: loopback"), and v2fly's own first release
# with it is not pinned here, so no v2fly runs it by this table.
TABLE: dict[str, dict[str, str]] = {
    "xray": {
        GRPC: "1.4.0",
        SS2022: "1.6.0",
        REALITY: "1.8.0",
        VISION: "1.8.0",
        WIREGUARD: "1.8.0",
        LOOPBACK: "1.5.1",
        HTTPUPGRADE: "1.8.9",
        SPLITHTTP: "1.8.16",
        XHTTP: "24.11.30",
        MLDSA65: "25.7.26",
        VLESS_ENCRYPTION: "25.8.29",
        HYSTERIA2: "26.1.13",
    },
    "v2fly": {GRPC: "4.36.0", HTTPUPGRADE: "5.10.0"},
    "sing-box": {},
}
FEATURES = tuple(TABLE["xray"])
KIND_NAMES = {"xray": "Xray", "v2fly": "v2fly", "sing-box": "sing-box"}

TRANSPORT_FEATURES = {
    "xhttp": XHTTP,
    "httpupgrade": HTTPUPGRADE,
    "splithttp": SPLITHTTP,
    "grpc": GRPC,
}
PROTOCOL_FEATURES = {
    "hysteria": HYSTERIA2,
    "hysteria2": HYSTERIA2,
    "wireguard": WIREGUARD,
    "loopback": LOOPBACK,
}


def _version(text: str) -> tuple[int, ...]:
    """ "26.1.13" -> (26, 1, 13); a suffix such as "-rc1" is left out."""
    numbers = []
    for part in text.split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def runs(feature: str, kind: str, version: str) -> bool:
    """Whether the core `kind` at `version` runs `feature`."""
    first = TABLE.get(kind, {}).get(feature)
    return first is not None and _version(version) >= _version(first)


def _section(entry: dict, name: str) -> dict:
    value = entry.get(name)
    return value if isinstance(value, dict) else {}


def entry_features(entry: Any) -> set[str]:
    """The features an inbound or outbound entry (as stored, or in a core config) uses,
    besides client flows (see `inbound_features`)."""
    if not isinstance(entry, dict):
        return set()
    found = set()
    protocol = entry.get("protocol")
    if protocol in PROTOCOL_FEATURES:
        found.add(PROTOCOL_FEATURES[protocol])
    settings, stream = _section(entry, "settings"), _section(entry, "streamSettings")
    transport = TRANSPORT_FEATURES.get(stream.get("network"))
    if transport:
        found.add(transport)
    if stream.get("security") == "reality":
        found.add(REALITY)
        reality = _section(stream, "realitySettings")
        if reality.get("mldsa65Seed") or _section(reality, "settings").get("mldsa65Verify"):
            found.add(MLDSA65)
    if protocol == "vless":
        for key in ("decryption", "encryption"):
            if settings.get(key) not in (None, "", "none"):
                found.add(VLESS_ENCRYPTION)
    if protocol == "shadowsocks" and _ss2022(settings):
        found.add(SS2022)
    if _flows(settings):
        found.add(VISION)
    return found


def _ss2022(settings: dict) -> bool:
    methods = [settings.get("method")] + [
        c.get("method") for c in settings.get("clients") or [] if isinstance(c, dict)
    ]
    return any(isinstance(m, str) and m.startswith("2022-") for m in methods)


def _flows(settings: dict) -> bool:
    """Whether a core config entry gives a client or user a flow: inbound clients,
    outbound users under vnext, or an outbound's own flow."""
    people = [*(settings.get("clients") or [])]
    for server in settings.get("vnext") or []:
        if isinstance(server, dict):
            people += server.get("users") or []
    return bool(settings.get("flow")) or any(isinstance(p, dict) and p.get("flow") for p in people)


def inbound_features(inbound: dict, flows: Iterable[str] = ()) -> set[str]:
    """The features a stored inbound asks of its core, its clients' `flows` included
    (a flow counts where the inbound carries one: VLESS over TLS, REALITY or XHTTP)."""
    found = entry_features(inbound)
    if tls_flow_capable(inbound) and any(flows):
        found.add(VISION)
    return found


def config_features(config: Any) -> set[str]:
    """The features every inbound and outbound of a core config or template uses."""
    if not isinstance(config, dict):
        return set()
    found: set[str] = set()
    for name in ("inbounds", "outbounds"):
        entries = config.get(name)
        for entry in entries if isinstance(entries, list) else []:
            found |= entry_features(entry)
    return found


def missing(features: Iterable[str], core) -> list[str]:
    """Those of `features` the detected `core` (a `CoreFlavor`, or None when no core is
    installed) does not run, in the table's order. Without a core nothing is missing:
    there is nothing to hold a save against."""
    if core is None:
        return []
    wanted = set(features)
    return [f for f in FEATURES if f in wanted and not runs(f, core.flavor, core.version)]


def core_name(core) -> str:
    """ "v2fly 4.34.0", "Xray 26.1.13"."""
    return f"{KIND_NAMES.get(core.flavor, core.flavor)} {core.version}"


def _needs(feature: str) -> str:
    return f"Xray {TABLE['xray'][feature]} or later"


def refusal(lacking: list[str], core) -> str:
    """The sentence that refuses a save asking `lacking` (non-empty) of `core`."""
    names = " and ".join(lacking) if len(lacking) < 3 else ", ".join(lacking)
    if core.flavor == "xray":
        needs = "; ".join(f"{f} needs {_needs(f)}" for f in lacking)
    else:
        needs = ("it needs" if len(lacking) == 1 else "they need") + " Xray"
    return f"the running core ({core_name(core)}) cannot run {names}; {needs}"


def check(features: Iterable[str], core) -> str:
    """The refusal for `features` on `core`; "" when it runs them all."""
    lacking = missing(features, core)
    return refusal(lacking, core) if lacking else ""


def table_of(core) -> dict:
    """The capabilities of `core` as the API gives them: which features it runs, and
    for each one it lacks the sentence a save would be refused with."""
    if core is None:
        return {"kind": "", "version": "", "installed": False, "features": {}}
    return {
        "kind": core.flavor,
        "version": core.version,
        "installed": True,
        "features": {
            feature: {"runs": not reason, "reason": reason}
            for feature in FEATURES
            for reason in [check([feature], core)]
        },
    }


def runnable(views: list[dict], core) -> tuple[list[dict], dict[int, str]]:
    """The inbound views (with `clientRows`) the detected core runs as stored, and for
    each other enabled one on this host its id -> why it is left out. Inbounds on a node
    run on the node's core, which judges them itself. Clients are read only where a flow is what
    the core would lack, so on a core with Vision a build does not walk them twice."""
    kept, unfit = [], {}
    for view in views:
        local = view.get("nodeId") is None and view.get("enable", True)
        reason = _unfit_reason(view, core) if local else ""
        if reason:
            unfit[view["id"]] = f"inbound {view.get('tag')} is left out: {reason}"
        else:
            kept.append(view)
    return kept, unfit


def _unfit_reason(view: dict, core) -> str:
    features = entry_features(view)
    if core is not None and tls_flow_capable(view) and not runs(VISION, *core[:2]):
        rows = view.get("clientRows") or ()
        features = inbound_features(view, (row.get("flow") for row in rows))
    return check(features, core)
