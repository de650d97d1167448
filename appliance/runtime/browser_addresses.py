"""The addresses a browser can reach the panel at, printed with the first-run credentials.

A panel bound to the wildcard address (`0.0.0.0` or `::`) is not reachable at that
address: a browser needs one of the host's own addresses. Like the installer, we name the
host's non-loopback addresses first (the ones another machine uses) and loopback last
(the one a tunnel or a browser on the host itself uses). Link-local addresses are left
out: a browser needs a zone to reach them, and the installer does not offer them either.
"""

from __future__ import annotations

import ipaddress
import socket

import psutil

WILDCARDS = {"", "0.0.0.0", "::"}


def browser_urls(scheme: str, host: str, port: int, base_path: str) -> list[str]:
    """`scheme://address:port/base/` for every address a browser can use to reach
    a panel listening on `host`."""
    addresses = [host]
    if host in WILDCARDS:
        addresses = [*_host_addresses(ipv6=host == "::"), "127.0.0.1"]
    return [f"{scheme}://{_in_url(address)}:{port}{base_path}" for address in addresses]


def _host_addresses(ipv6: bool) -> list[str]:
    """The host's own unicast addresses, IPv4 first; IPv6 only when the panel listens on it."""
    families = {socket.AF_INET, socket.AF_INET6} if ipv6 else {socket.AF_INET}
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family not in families:
                continue
            address = ipaddress.ip_address(entry.address.split("%", 1)[0])
            if address.is_loopback or address.is_link_local or address in found:
                continue
            found.append(address)
    found.sort(key=lambda address: address.version)
    return [str(address) for address in found]


def _in_url(address: str) -> str:
    return f"[{address}]" if ":" in address else address
