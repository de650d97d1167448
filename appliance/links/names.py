"""Names made unique with a counter, the one rule every rendered document follows.

Mihomo refuses a profile with two proxies of one name, sing-box a config with two
outbounds of one tag, and the core two outbounds of one tag; remarks repeat all the time
(two inbounds named "Germany", a subscription feed that lists a server twice). The first
holder of a name keeps it; a later one gets the first free "<name> 2", "<name> 3" ...
(the separator is the caller's), so a name someone already uses, the document's own
group names included, is never handed out twice.
"""

from __future__ import annotations

from collections.abc import Iterable


def free_name(base: str, taken: set[str], separator: str = " ") -> str:
    """`base`, or else the first of `base` + `separator` + 2, 3 ... that `taken` lacks."""
    name, counter = base, 1
    while name in taken:
        counter += 1
        name = f"{base}{separator}{counter}"
    return name


def with_unique_names(
    items: list[dict], key: str, fallback: str, reserved: Iterable[str]
) -> list[dict]:
    """Copies of `items` whose `key` entries are unique and none of `reserved`, in order.
    An item without a name is named after its `type`, or else `fallback`."""
    taken = set(reserved)
    named = []
    for item in items:
        name = free_name(str(item.get(key) or item.get("type") or fallback), taken)
        taken.add(name)
        named.append({**item, key: name})
    return named
