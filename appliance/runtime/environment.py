"""The environment every child process of the panel starts with.

A one-file build unpacks itself and points LD_LIBRARY_PATH at its own folder; the core,
journalctl and a new panel binary must not load libraries from there. One function says
what a child gets, so no place that starts a process forgets it; another says what a
process gets that is this program again (a subscription worker), which keeps them.
"""

from __future__ import annotations

import os
import sys


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


def self_command(*args: str) -> list[str]:
    """The command that runs this program again with `args`: the one-file binary is its
    own interpreter (`sys.executable`), a Python install runs the package."""
    if getattr(sys, "frozen", False):
        return [sys.executable, *args]
    return [sys.executable, "-m", "appliance", *args]


def self_environment() -> dict[str, str]:
    """The environment of a process that is this program again: the panel's own, whole.

    Unlike the core and other tools (`child_environment`), a worker keeps the one-file
    binary's LD_LIBRARY_PATH and `_PYI_*` markers: they make the binary reuse the folder
    the panel unpacked instead of unpacking itself again, and its libraries are the
    worker's own. PYTHONPATH, which points a development checkout's interpreter at its
    package, stays for the same reason."""
    return dict(os.environ)
