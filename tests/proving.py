"""Proving a link, a Mihomo proxy or a JSON config: a client app's core runs on it and bytes
go through it to an echo server, or (for a case that must fail) do not.

The client is sing-box, the core of Hiddify, Karing and the SFA/SFI apps. REALITY and TLS
fingerprints need uTLS, which the package's sing-box leaves out; there the config is still
checked (everything but uTLS must be accepted) and the bytes go through the real Xray.
"""

from __future__ import annotations

from collections.abc import Callable

import sing_box
import xray_core
from core_helpers import socks_echo
from core_panel import wait_until
from helpers import free_port
from sing_box_links import CERTS, outbound_of

from appliance.links.json_config import proxy_outbound
from appliance.links.plan import LinkPlan

PAYLOAD = b"proven by sing-box " * 40
# How long a link that should work may take: the server may still be starting.
CONNECT_WAIT = 15


def carries(mixed_port: int, echo_port: int) -> bool:
    try:
        return socks_echo(mixed_port, echo_port, PAYLOAD, timeout=3) == PAYLOAD
    except OSError:
        return False


# REALITY and TLS fingerprints need uTLS, which the package's sing-box leaves out; there
# the configs are still checked (everything but uTLS must be accepted) and the bytes go
# through the real Xray.
WITHOUT_UTLS = not sing_box.has_tag("with_utls")


def needs_utls(box: dict) -> bool:
    """Whether a sing-box outbound or inbound needs uTLS: REALITY or a fingerprint."""
    tls = box.get("tls", {})
    return bool(tls.get("reality") or tls.get("utls"))


def assert_only_utls_missing(verdict: str) -> None:
    """sing-box read the whole config and refused it only for the uTLS it lacks."""
    assert "decode config" not in verdict and "uTLS" in verdict, verdict


def prove(
    tmp_path,
    name: str,
    plan: LinkPlan,
    echo_port: int,
    *,
    works: bool,
    trusts_ca: bool,
    xray_outbound: dict | None = None,
) -> None:
    """Run a client app's core on `plan` and push bytes through it: they must come back
    when `works`, and must not (over several tries) otherwise. The client is sing-box;
    where its build lacks the uTLS the plan needs, sing-box must accept all but that and
    the bytes go through Xray instead (`xray_outbound`, else the plan's core outbound)."""
    outbound = outbound_of(plan, trusts_ca=trusts_ca)
    config = sing_box.client_config(outbound, free_port())
    verdict = sing_box.check(tmp_path, name, config)
    if WITHOUT_UTLS and needs_utls(outbound):
        assert_only_utls_missing(verdict)
        xray_outbound = xray_outbound or proxy_outbound(plan)
        if trusts_ca:
            xray_outbound = xray_core.trusting(xray_outbound, CERTS.ca_pem)
        xray_config = xray_core.client_config(xray_outbound, free_port())
        port = xray_config["inbounds"][0]["port"]
        with xray_core.running(tmp_path, name, xray_config, port):
            push(name, port, echo_port, works, lambda: xray_core.log_text(tmp_path, name))
        return
    assert verdict == ""
    mixed_port = config["inbounds"][0]["listen_port"]
    with sing_box.running(tmp_path, name, config, mixed_port):
        push(name, mixed_port, echo_port, works, lambda: sing_box.log_text(tmp_path, name))


def push(name: str, proxy_port: int, echo_port: int, works: bool, log: Callable[[], str]):
    if works:
        try:
            wait_until(lambda: carries(proxy_port, echo_port), name, CONNECT_WAIT)
        except AssertionError:
            raise AssertionError(
                f"{name} carries no bytes; the client says:\n{log()[-2000:]}"
            ) from None
    else:
        for _ in range(3):
            assert not carries(proxy_port, echo_port), f"{name} carried bytes"
