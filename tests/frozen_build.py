"""The one-file binary that the frozen and installer tests run.

`dist/appliance` is used when it is newer than every file it is built from; otherwise the
binary is built once per test session with scripts/build-binary into a temporary folder,
so a stale binary never stands in for the code under test and a developer's dist/ is
left alone. A build that fails fails the tests that need it, with the build's output.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DIST_BINARY = ROOT / "dist" / "appliance"
BUILD_SCRIPT = ROOT / "scripts" / "build-binary"
# Everything the binary is made of: the package, the UI, and how they are put together.
SOURCE_DIRS = ("appliance", "assets")
SOURCE_FILES = ("build.spec", "pyproject.toml", "scripts/build-binary")
BUILD_TIMEOUT = 900
OUTPUT_TAIL = 4000

_built: dict[str, str] = {}


def newest_source_time() -> float:
    """The last modification time among the files the binary is built from."""
    times = [(ROOT / name).stat().st_mtime for name in SOURCE_FILES]
    for directory in SOURCE_DIRS:
        for folder, subfolders, files in os.walk(ROOT / directory):
            subfolders[:] = [name for name in subfolders if name != "__pycache__"]
            times += [os.stat(os.path.join(folder, name)).st_mtime for name in files]
    return max(times)


def frozen_binary(scratch: Path) -> str:
    """The path of an up-to-date binary; builds it under `scratch` at most once a session."""
    if "path" not in _built:
        if DIST_BINARY.is_file() and DIST_BINARY.stat().st_mtime > newest_source_time():
            _built["path"] = str(DIST_BINARY)
        else:
            _built["path"] = _build(scratch)
    return _built["path"]


def _build(scratch: Path) -> str:
    dist, work = scratch / "dist", scratch / "work"
    try:
        result = subprocess.run(
            [str(BUILD_SCRIPT), "--dist", str(dist), "--work", str(work)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/build-binary did not finish within {BUILD_TIMEOUT} s")
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-OUTPUT_TAIL:]
        pytest.fail(f"scripts/build-binary failed (exit {result.returncode}):\n{output}")
    return str(dist / "appliance")
