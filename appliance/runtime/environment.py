"""The environment every child process of the panel starts with.

A one-file build unpacks itself and points LD_LIBRARY_PATH at its own folder; the core,
journalctl and a new panel binary must not load libraries from there. One function says
what a child gets, so no place that starts a process forgets it.
"""

from __future__ import annotations

import os


def child_environment() -> dict[str, str]:
    """The environment for the core and its tools: the panel's own, with the user's
    LD_LIBRARY_PATH back in place of the one a frozen panel set for itself."""
    # The bootloader's own markers (_PYI_*) would make a PyInstaller-built tool started
    # by the core take itself for a part of this panel and use its unpack folder.
    env = {name: value for name, value in os.environ.items() if not name.startswith("_PYI_")}
    env.pop("LD_LIBRARY_PATH", None)
    original = env.pop("LD_LIBRARY_PATH_ORIG", None)
    if original:
        env["LD_LIBRARY_PATH"] = original
    return env
