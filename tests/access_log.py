"""Access-log lines as V2Ray and Xray write them, the fail2ban filter docs/fail2ban.md
documents, and a store whose clients have IP limits: what the tests of client IPs, of the
online-IP API and of a jumping clock feed the IP collector with.

Lines carry documentation addresses (tests only have loopback), stamped relative to NOW.
"""

from __future__ import annotations

import functools
import re
import time

from core_panel import wait_until as poll_until
from helpers import ROOT, runs_every_feature, without_core_or_nodes

from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.clients.presence import Presence
from appliance.services.clients.query import ClientQuery
from appliance.services.clients.records import Clients
from appliance.services.inbounds.records import Inbounds
from appliance.services.webhooks.outbox import Outbox
from appliance.store import Store

NOW = float(int(time.time()))


DOCS = ROOT / "docs" / "fail2ban.md"


WAIT = 20


def stamp(ago: float) -> str:
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(NOW - ago))


def xray_line(ip: str, email: str, ago: float = 0, outbound: str = "direct") -> str:
    return (
        f"{stamp(ago)}.123456 from {ip}:40000 accepted tcp:example.com:443 "
        f"[in-1 >> {outbound}] email: {email}"
    )


def v2ray_line(ip: str, email: str, ago: float = 0, status: str = "accepted") -> str:
    if status == "rejected":
        return f"{stamp(ago)} {ip}:40000 rejected  proxy/vless/encoding: invalid request user id"
    return f"{stamp(ago)} {ip}:40000 accepted tcp:example.com:443 [direct] email: {email}"


def append(path: str, *lines: str) -> None:
    with open(path, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


def fail2ban_filter() -> re.Pattern:
    """The documented failregex as a Python expression: fail2ban's <ADDR> and <F-USER>
    tags become named groups."""
    text = DOCS.read_text()
    failregex = re.search(r"^failregex\s*=\s*(.+)$", text, re.MULTILINE).group(1).strip()
    pattern = (
        failregex.replace("<F-USER>", "(?P<user>")
        .replace("</F-USER>", ")")
        .replace("<ADDR>", r"(?P<addr>[0-9A-Fa-f.:]+)")
    )
    return re.compile(pattern)


def ip_limited_store(tmp_path, limits: dict[str, int]) -> tuple[Store, Settings, Clients]:
    """A store in `tmp_path` with ipLimitEnable on and one client per `limits` entry (email
    -> limitIp) on the inbound tagged in-1, the inbound the access-log lines name. The
    collector tests here and those of the core's online-user API start from it."""
    store = Store(str(tmp_path / "panel.db"))
    store.open()
    notice = ChangeNotice()
    settings = Settings(store, FilePlaces(str(tmp_path)), notice)
    settings.load()
    settings.write(settings.check({"ipLimitEnable": True}))
    inbounds = Inbounds(
        store,
        lambda: [],
        ClientQuery(store, settings, Presence()).by_inbound,
        places=settings.places,
        notice=notice,
        **without_core_or_nodes(),
    )
    inbound = inbounds.add({"protocol": "vless", "port": 4431, "tag": "in-1"})
    clients = Clients(store, notice, runs_every_feature, Outbox(store))
    for email, limit in limits.items():
        clients.add({"client": {"email": email, "limitIp": limit}, "inboundIds": [inbound["id"]]})
    return store, settings, clients


# core_panel's polling, for up to WAIT seconds: a line reaches the log a traffic tick late.
wait_until = functools.partial(poll_until, timeout=WAIT)
