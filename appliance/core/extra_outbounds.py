"""Outbounds from outside the template joined to the template's own.

Why this module exists: outbound subscriptions and the tunnel and VPN providers add
outbounds the user did not write into the template, and the template must stay as the
user saved it. The core config is built from a copy with the extra outbounds merged:
`first` before the template's outbounds (the first outbound is the core's default
route, so a subscription marked `prepend` takes the traffic no rule sends elsewhere),
`last` after them. An extra outbound whose tag the template (or an earlier extra
outbound) already uses is left out: the template's own always wins. Pure.
"""

from __future__ import annotations


def with_outbounds(template: dict, first: list[dict], last: list[dict]) -> dict:
    """A shallow copy of `template` whose outbounds are first + template's + last."""
    if not first and not last:
        return template
    own = list(template.get("outbounds") or [])
    taken = {o.get("tag") for o in own if isinstance(o, dict)}
    merged_first = _unique(first, taken)
    merged_last = _unique(last, taken)
    return {**template, "outbounds": [*merged_first, *own, *merged_last]}


def _unique(outbounds: list[dict], taken: set) -> list[dict]:
    kept = []
    for outbound in outbounds:
        if outbound.get("tag") not in taken:
            taken.add(outbound.get("tag"))
            kept.append(outbound)
    return kept
