"""Running the real Xray core in tests, from the `xray-core` package (a test dependency).

Xray is the core of v2rayNG, v2rayN and the panel's production servers. The package builds
the whole of Xray (REALITY, Vision and the uTLS fingerprints included) into a Python
extension whose `startFromJSON` runs a config until the process is told to stop, so a
child interpreter running it is an Xray process. Tests use it where the Debian v2fly core
and the packaged sing-box (built without uTLS) cannot go: a REALITY server from the panel's
own config, and a client that presents a browser's TLS fingerprint.

A client that should trust the test CA gets it as a certificate of usage "verify" in its
TLS settings, which is how an Xray config trusts a CA of its own.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from core_helpers import LOOPBACK, wait_port

START_TIMEOUT = 15
# Runs a config file the way `xray run -c` does; Xray ends the process with exit code 23
# when it refuses the config, before it starts anything.
RUN = "import sys, xray; xray.startFromJSON(open(sys.argv[1]).read())"
REFUSED = 23
REFUSAL_WAIT = 5


@contextlib.contextmanager
def running(
    directory: Path,
    name: str,
    config: dict,
    wait_for: int,
) -> Iterator[subprocess.Popen]:
    """Xray on `config`, once port `wait_for` accepts TCP connections."""
    path = directory / f"xray-{name}.json"
    path.write_text(json.dumps(config, indent=1))
    log = directory / f"xray-{name}.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-c", RUN, str(path)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        try:
            wait_port(wait_for, START_TIMEOUT)
        except TimeoutError:
            code = process.poll()
            raise RuntimeError(f"Xray did not start (exit {code}):\n{log.read_text()}") from None
        yield process
    finally:
        process.kill()
        process.wait()


def refuses(directory: Path, name: str, config: dict) -> bool:
    """Whether Xray refuses `config`: it ends with exit code 23 instead of running."""
    path = directory / f"xray-{name}.json"
    path.write_text(json.dumps(config, indent=1))
    process = subprocess.Popen(
        [sys.executable, "-c", RUN, str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return process.wait(REFUSAL_WAIT) == REFUSED
    except subprocess.TimeoutExpired:
        return False
    finally:
        process.kill()
        process.wait()


def log_text(directory: Path, name: str) -> str:
    path = directory / f"xray-{name}.log"
    return path.read_text() if path.exists() else ""


def trusting(outbound: dict, ca_pem: str) -> dict:
    """`outbound` with `ca_pem` among the CAs its TLS verifies the server against."""
    stream = outbound.get("streamSettings", {})
    if stream.get("security") != "tls":
        return outbound
    verify = {"usage": "verify", "certificate": ca_pem.splitlines()}
    tls = stream.get("tlsSettings", {})
    tls = {**tls, "certificates": [*tls.get("certificates", []), verify]}
    return {**outbound, "streamSettings": {**stream, "tlsSettings": tls}}


def client_config(outbound: dict, socks_port: int) -> dict:
    """A client app's config: a SOCKS inbound on 127.0.0.1:`socks_port` and everything
    sent through `outbound`."""
    return {
        "log": {"loglevel": "warning"},
        "inbounds": [
            {
                "tag": "socks-in",
                "listen": LOOPBACK,
                "port": socks_port,
                "protocol": "socks",
                "settings": {"udp": False},
            }
        ],
        "outbounds": [{**outbound, "tag": "proxy"}],
    }


def server_config(*inbounds: dict) -> dict:
    """An Xray server: `inbounds`, everything they accept sent out directly."""
    return {
        "log": {"loglevel": "warning"},
        "inbounds": list(inbounds),
        # Since 26.4 freedom refuses private addresses to traffic from proxy inbounds
        # unless a final rule allows them; the echo server is on loopback.
        "outbounds": [
            {
                "tag": "direct",
                "protocol": "freedom",
                "settings": {"finalRules": [{"action": "allow", "ip": [f"{LOOPBACK}/32"]}]},
            }
        ],
    }
