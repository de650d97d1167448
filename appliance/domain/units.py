"""Byte counts as people read them, the same on the subscription page and in the chat bot."""

from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value, index = count / 1024, 1
    while value >= 1024 and index < len(UNITS) - 1:
        value, index = value / 1024, index + 1
    return f"{value:.2f} {UNITS[index]}"
