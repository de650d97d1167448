"""The built-in core config template.

The panel's generated config starts from a template the user may edit (log, routing,
outbounds, DNS, policy); inbounds and clients are filled in from the database. This is
the template a new install starts with, and what `getDefaultJsonConfig` returns.
"""

from __future__ import annotations

import copy

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
            {"type": "field", "outboundTag": "blocked", "ip": ["geoip:private"]},
            {"type": "field", "outboundTag": "blocked", "protocol": ["bittorrent"]},
        ],
    },
    "stats": {},
}


def default_template() -> dict:
    """A fresh copy: callers may mutate what they get."""
    return copy.deepcopy(DEFAULT_TEMPLATE)
