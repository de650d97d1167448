"""The client entries of an inbound: what `settings.clients[]` holds for each protocol.

One client row becomes a different entry per protocol, carrying only what that protocol
uses (VLESS: id, flow, reverse; VMess: id, security; Trojan: password, flow; Shadowsocks:
password, method; Hysteria: auth; all: email). Pure, so the inbound API and the core
config builder render clients the same way.
"""

from __future__ import annotations


def client_entry(protocol: str, client: dict, flow_capable: bool) -> dict:
    """`client` has the API field names (id, email, flow, security, password, ...)."""
    entry: dict = {"email": client["email"]}
    if protocol == "vless":
        entry["id"] = client["id"]
        if flow_capable and client.get("flow"):
            entry["flow"] = client["flow"]
        if client.get("reverse"):
            entry["reverse"] = client["reverse"]
    elif protocol == "vmess":
        entry["id"] = client["id"]
        entry["security"] = client.get("security") or "auto"
    elif protocol == "trojan":
        entry["password"] = client["password"]
        if client.get("flow"):
            entry["flow"] = client["flow"]
    elif protocol == "shadowsocks":
        entry["password"] = client["password"]
        if client.get("method"):
            entry["method"] = client["method"]
    elif protocol in ("hysteria", "hysteria2"):
        entry["auth"] = client["auth"]
    return entry
