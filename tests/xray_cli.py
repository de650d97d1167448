"""The real Xray behind the command line the panel drives, for a panel whose core is Xray.

The `xray-core` package gives Xray as a Python extension (tests/xray_core.py), not as
the `xray` program, so `install` writes an executable that answers the three commands the
panel's `CoreProcess` gives a core:

- `xray -version`: the version line, read off Xray's own start message ("Xray 26.x.y
  started") on an empty config.
- `xray run -c FILE`: the process becomes Xray running FILE (exec, so the panel's signals
  and exit code are Xray's own).
- `xray run -test -c FILE`: Xray builds and starts FILE inside a network namespace of its
  own (`unshare -n`, as root), so its listeners bind nothing on the host and cannot
  collide with the running core; it passes once Xray says it started, and fails when
  Xray ends with its refusal code (23). The extension prints no reason for a refusal, so
  the panel's message then says only that the core refused the config.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

RUN = "import sys, xray; xray.startFromJSON(open(sys.argv[1]).read())"
STARTED = re.compile(r"core: Xray (\S+) started")
REFUSED = 23
TEST_TIMEOUT = 20


def install(directory: Path) -> Path:
    """An executable `xray` in `directory` that runs this module with this interpreter."""
    path = directory / "xray"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import xray_cli\n"
        "sys.exit(xray_cli.main(sys.argv[1:]))\n"
    )
    path.chmod(0o755)
    return path


def main(args: list[str]) -> int:
    if args in (["-version"], ["version"]):
        return version()
    if args[:1] == ["run"] and "-c" in args:
        config = args[args.index("-c") + 1]
        return started_in_namespace(config) if "-test" in args else run(config)
    print(f"xray: unsupported arguments {args}", file=sys.stderr)
    return 2


def run(config: str) -> int:
    os.execv(sys.executable, [sys.executable, "-c", RUN, config])
    return 0  # not reached: exec replaces the process


def version() -> int:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as empty:
        json.dump({"log": {"loglevel": "warning"}}, empty)
        empty.flush()
        ok, said = start_and_stop(empty.name)
    found = STARTED.search(said)
    if not ok or not found:
        print(said, file=sys.stderr)
        return 1
    print(f"Xray {found.group(1)} (Xray, Penetrates Everything.) (xray-core package)")
    return 0


def started_in_namespace(config: str) -> int:
    ok, said = start_and_stop(config)
    if ok:
        print(f"Configuration OK. {said.strip()}")
        return 0
    print(f"Failed to start: Xray refused the config\n{said}")
    return REFUSED


def start_and_stop(config: str) -> tuple[bool, str]:
    """Start Xray on `config` in a network namespace of its own; (started, what it said)."""
    process = subprocess.Popen(
        ["unshare", "-n", sys.executable, "-c", RUN, config],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    said = []
    try:
        for line in process.stdout:
            said.append(line)
            if STARTED.search(line):
                return True, "".join(said)
        process.wait(TEST_TIMEOUT)
        return False, "".join(said)
    finally:
        process.kill()
        process.wait()
