"""The built-in core config template.

The panel's generated config starts from a template the user may edit (log, routing,
outbounds, DNS, policy); inbounds and clients are filled in from the database. This is
the template a new install starts with, and what `getDefaultJsonConfig` returns.
"""

from __future__ import annotations

import copy

# What `geoip:private` means, written out: the default then works without geo files,
# which a fresh install or a packaged core may not have yet.
PRIVATE_NETWORKS = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
]

DEFAULT_TEMPLATE: dict = {
    "log": {"access": "none", "dnsLog": False, "error": "", "loglevel": "warning"},
    "api": {"tag": "api", "services": ["HandlerService", "LoggerService", "StatsService"]},
    "inbounds": [],
    "outbounds": [
        {"tag": "direct", "protocol": "freedom", "settings": {"domainStrategy": "AsIs"}},
        {"tag": "blocked", "protocol": "blackhole", "settings": {}},
    ],
    "policy": {
        "levels": {"0": {"statsUserUplink": True, "statsUserDownlink": True}},
        "system": {
            "statsInboundUplink": True,
            "statsInboundDownlink": True,
            "statsOutboundUplink": True,
            "statsOutboundDownlink": True,
        },
    },
    "routing": {
        "domainStrategy": "AsIs",
        "rules": [
            {"type": "field", "inboundTag": ["api"], "outboundTag": "api"},
            {"type": "field", "outboundTag": "blocked", "ip": PRIVATE_NETWORKS},
            {"type": "field", "outboundTag": "blocked", "protocol": ["bittorrent"]},
        ],
    },
    "stats": {},
}


def default_template() -> dict:
    """A fresh copy: callers may mutate what they get."""
    return copy.deepcopy(DEFAULT_TEMPLATE)
