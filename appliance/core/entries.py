"""The client entries of an inbound: what `settings.clients[]` holds for each protocol.

One client row becomes a different entry per protocol, carrying only what that protocol
uses (VLESS: id, flow, reverse; VMess: id, security; Trojan: password; Shadowsocks:
password, method; Hysteria: auth; all: email). Pure, so the inbound API and the core
config builder render clients the same way.

Trojan entries never carry `flow`: the core removed XTLS from Trojan and refuses a config
whose Trojan users have one ("Flow for Trojan" is a removed feature), so a client's VLESS
flow must not leak into its Trojan attachments. The Shadowsocks `method` is the one of
the inbound the entry is rendered for, so a client on two legacy-cipher inbounds gets the
right cipher in each, and none on a 2022 inbound.
"""

from __future__ import annotations


def client_entry(protocol: str, client: dict, flow_capable: bool, ss_method: str = "") -> dict:
    """`client` has the API field names (id, email, flow, security, password, ...);
    `flow_capable` says whether this VLESS inbound takes a flow, `ss_method` is the cipher
    a client entry of this Shadowsocks inbound names ("" for none)."""
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
    elif protocol == "shadowsocks":
        entry["password"] = client["password"]
        if ss_method:
            entry["method"] = ss_method
    elif protocol in ("hysteria", "hysteria2"):
        entry["auth"] = client["auth"]
    elif protocol == "mtproto":
        entry["secret"] = client.get("secret", "")
        if client.get("adTag"):
            entry["adTag"] = client["adTag"]
    return entry
