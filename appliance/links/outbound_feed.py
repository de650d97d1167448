"""A provider's subscription body turned into the core's outbounds, with stable tags.

Why this module exists: an outbound subscription is refreshed again and again, and the
routing rules and balancers a user writes name outbounds by tag. So the tag of a server
must survive refreshes: it is the subscription's prefix plus a name made from the
server's remark the first time the server is seen, and a later refresh gives the same
server (same protocol, address, port and secret) the tag it had, whatever its remark
became. New servers get new names; a name is never reused within one subscription.

A body is read as a Clash/Mihomo YAML profile when it has a `proxies:` list, else as
base64 of share-link lines, else as the lines themselves. YAML is read by the bounded
`load_yaml` (`domain/parse.py`): a profile nested too deeply or swollen by aliases is
refused with the reason, since composing it would take the process down. Entries that
cannot be read (or that the core cannot run: Hysteria 1) are counted with the first
reasons, never echoed: a body is a stranger's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance.domain.parse import load_yaml
from appliance.errors import ServiceError
from appliance.links.import_links import (
    SCHEMES,
    LinkError,
    decode_base64,
    read_clash_proxy,
    read_link,
)
from appliance.links.json_config import proxy_outbound
from appliance.links.names import free_name
from appliance.links.plan import LinkPlan

MAX_ENTRIES = 1000
NAME_LENGTH = 48
_NAME_SPOILERS = re.compile(r"[^\w.@-]+")
# The scheme a nameless server's tag starts with: ss, not shadowsocks.
SCHEME_NAMES = {protocol: scheme for scheme, protocol in SCHEMES.items()}
# A top-level `proxies:` key: the body is meant as a Clash profile, readable or not.
CLASH_KEY = re.compile(r"^proxies\s*:", re.MULTILINE)


@dataclass(frozen=True)
class Feed:
    """What a body holds: the plans read, and how many entries were skipped and why."""

    plans: list[LinkPlan]
    skipped: int
    reasons: list[str]


def read_feed(body: bytes) -> Feed:
    """The plans of a subscription body (see the module docstring for the formats);
    ServiceError for a Clash profile that cannot be read safely."""
    text = body.decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    entries: list = []
    clash = _clash_proxies(text)
    if clash is not None:
        entries, reader = clash, read_clash_proxy
    else:
        if "://" not in text:
            try:
                text = decode_base64(text)
            except (ValueError, UnicodeDecodeError):
                text = ""
        entries = [line.strip() for line in text.splitlines() if "://" in line]
        reader = read_link
    plans: list[LinkPlan] = []
    reasons: list[str] = []
    skipped = 0
    for entry in entries[:MAX_ENTRIES]:
        try:
            plan = reader(entry)
            if plan.protocol == "hysteria" and plan.hysteria_version == 1:
                raise LinkError("Hysteria 1 is not spoken by the core")
        except LinkError as exc:
            skipped += 1
            if str(exc) not in reasons and len(reasons) < 5:
                reasons.append(str(exc))
            continue
        plans.append(plan)
    skipped += max(0, len(entries) - MAX_ENTRIES)
    return Feed(plans, skipped, reasons)


def link_outbound(text: str) -> dict:
    """The core outbound of one share link, tagged from its remark; LinkError says why a
    link cannot be one (Hysteria 1 among them: the core does not speak it)."""
    plan = read_link(text)
    if plan.protocol == "hysteria" and plan.hysteria_version == 1:
        raise LinkError("Hysteria 1 is not spoken by the core")
    return core_outbound(tagged_outbounds([plan], "", [])[0])


def _clash_proxies(text: str) -> list | None:
    if "proxies" not in text:
        return None
    try:
        document = load_yaml(text, "the subscription's Clash profile", len(text))
    except ServiceError:
        if CLASH_KEY.search(text):
            raise
        return None
    if isinstance(document, dict) and isinstance(document.get("proxies"), list):
        return document["proxies"]
    return None


def server_key(plan: LinkPlan) -> str:
    """What makes two plans the same server, whatever their remarks."""
    secret = plan.user_id or plan.password
    return f"{plan.protocol}|{plan.address.lower()}|{plan.port}|{secret}"


def tagged_outbounds(plans: list[LinkPlan], prefix: str, previous: list[dict]) -> list[dict]:
    """The core outbound of each plan, tagged `prefix` + a stable name. `previous` is what
    the last refresh made (outbounds carrying `tag` and the panel-only `_server`); a server
    found there keeps its tag."""
    known: dict[str, list[str]] = {}
    for outbound in previous:
        key, tag = outbound.get("_server"), outbound.get("tag")
        if isinstance(key, str) and isinstance(tag, str):
            known.setdefault(key, []).append(tag)
    taken = {tag for tags in known.values() for tag in tags}
    outbounds = []
    for plan in plans:
        key = server_key(plan)
        earlier = known.get(key)
        tag = earlier.pop(0) if earlier else free_name(prefix + _name(plan), taken, "-")
        taken.add(tag)
        outbound = proxy_outbound(plan)
        outbound["tag"] = tag
        outbound["_server"] = key
        outbounds.append(outbound)
    return outbounds


def core_outbound(stored: dict) -> dict:
    """A stored outbound as the core reads it: without the panel's own keys."""
    return {key: value for key, value in stored.items() if not key.startswith("_")}


def _name(plan: LinkPlan) -> str:
    name = _NAME_SPOILERS.sub("-", plan.remark).strip("-")[:NAME_LENGTH]
    return name or f"{SCHEME_NAMES.get(plan.protocol, plan.protocol)}-{plan.address}-{plan.port}"
