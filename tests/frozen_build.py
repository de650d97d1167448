"""The one-file binary that the frozen and installer tests run.

`dist/appliance` is used when it is newer than every file it is built from; otherwise the
binary is built with scripts/build-binary into build/test-dist (once, however many test
processes need it), so a stale binary never stands in for the code under test and a
developer's dist/ is left alone. A build that fails fails the tests that need it, with
the build's output.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DIST_BINARY = ROOT / "dist" / "appliance"
TEST_DIST = ROOT / "build" / "test-dist"
BUILD_SCRIPT = ROOT / "scripts" / "build-binary"
# Everything the binary is made of: the package (its UI included) and how it is put together.
SOURCE_DIRS = ("appliance",)
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
    """The path of an up-to-date binary: dist/appliance when it is, else one built under
    build/test-dist, at most once however many test processes ask (they wait for each
    other on a lock file); `scratch` holds the build's work files."""
    if "path" not in _built:
        if _fresh(DIST_BINARY):
            _built["path"] = str(DIST_BINARY)
        else:
            TEST_DIST.mkdir(parents=True, exist_ok=True)
            with open(TEST_DIST / ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                binary = TEST_DIST / "appliance"
                _built["path"] = str(binary) if _fresh(binary) else _build(scratch)
    return _built["path"]


def _fresh(binary: Path) -> bool:
    return binary.is_file() and binary.stat().st_mtime > newest_source_time()


def _build(scratch: Path) -> str:
    dist, work = TEST_DIST, scratch / "work"
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
