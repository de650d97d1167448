"""Testing outbounds before (or while) they carry traffic: does this server answer, and how
fast?

Why a temporary core: an outbound is only meaningful to the core that speaks its protocol,
so the full probe starts a second process of the same core binary, in a directory of its
own, on a config holding one SOCKS inbound per outbound under test (loopback, a port the
kernel picked) routed to that outbound, plus the outbounds a dialer-proxy chain of it
needs (`proxySettings.tag`, `streamSettings.sockopt.dialerProxy`, followed through
`allOutbounds`). The panel then fetches the `outboundTestUrl` setting through each SOCKS
port and times the steps: the tunnel into the temporary core (connect), the TLS handshake
with the test URL's server (https only), the wait for the first byte of the answer after
the request went out, and the whole exchange up to the status line (delay). The running
core is never touched, and the temporary one is stopped when the call ends.

The `tcp` mode only dials the outbound's server address and port from here, which says
the server is reachable but nothing about its protocol. Outbounds whose transport is UDP
(mKCP, QUIC, Hysteria, WireGuard) cannot be dialed over TCP, and outbounds without a
server (freedom, blackhole) have nothing to dial: those get the full probe in either mode.

The test URL's host is resolved and checked by the egress guard on behalf of
`outboundTestUrl` once per call, and the temporary core is asked to connect to that
address (SOCKS with an IP, not a name), while TLS and the `Host` header still name the
host: whatever outbound carries the probe, it reaches only an address that was checked.
The outbounds' own servers are not the guard's business: they are what is being tested.

A batch is at most 50 outbounds; each result is an entry of its own (a dead server is a
failed entry, not a failed call), in the order sent. A config the core refuses fails a
single test with the core's reason; in a batch each outbound is then checked on its own
so only the refused ones fail.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import ssl
import struct
import tempfile
import time
from urllib.parse import urlsplit

import gevent
from gevent.pool import Pool

from appliance.core.process import CoreProcess
from appliance.domain.parse import load_json
from appliance.errors import ServiceError
from appliance.runtime.egress import LookupTimedOut, for_url, system_resolve, url_port
from appliance.runtime.file_paths import check_paths
from appliance.runtime.ports import free_loopback_port

BATCH_LIMIT = 50
PROBE_TIMEOUT = 10.0
START_TIMEOUT = 10.0
CONCURRENT_PROBES = 25
HEADER_LIMIT = 64 * 1024
LOOPBACK = "127.0.0.1"
TCP_MODE = "tcp"
# Transports and protocols that carry their traffic over UDP: no TCP dial can reach them.
UDP_NETWORKS = frozenset({"kcp", "mkcp", "quic", "hysteria"})
UDP_PROTOCOLS = frozenset({"hysteria", "hysteria2", "wireguard"})
PROBE_TAG = "panel-probe-{}"


class OutboundProbe:
    def __init__(self, process: CoreProcess, settings, workdir: str):
        """`process` is the panel's core process (its binary runs the temporary core);
        `settings` holds outboundTestUrl; temporary cores run in directories under
        `workdir`."""
        self.process = process
        self.settings = settings
        self.workdir = workdir

    def test_one(self, outbound, all_outbounds, mode) -> dict:
        """The result of one outbound (see `_result`); a refused config raises."""
        tested = [_outbound(_json_value(outbound, "outbound"), "outbound")]
        results = self._run(tested, _outbound_list(all_outbounds), _mode(mode), isolate=False)
        return results[0]

    def test_many(self, outbounds, all_outbounds, mode) -> list[dict]:
        """Results in the order of `outbounds` (1 to 50 of them)."""
        value = _json_value(outbounds, "outbounds")
        if not isinstance(value, list) or not value:
            raise ServiceError("outbounds must be a non-empty JSON array of outbound objects")
        if len(value) > BATCH_LIMIT:
            raise ServiceError(
                f"at most {BATCH_LIMIT} outbounds per test (got {len(value)}); split the batch"
            )
        tested = [_outbound(item, f"outbounds[{index}]") for index, item in enumerate(value)]
        return self._run(tested, _outbound_list(all_outbounds), _mode(mode), isolate=True)

    # ---- running the probes -------------------------------------------------------------

    def _run(self, tested: list[dict], chain: list[dict], mode: str, isolate: bool) -> list:
        # The temporary core reads the certificate files they name, and its refusal would
        # tell whether a file exists: outside their folders they are refused first.
        check_paths(tested, self.settings.places, "outbounds")
        check_paths(chain, self.settings.places, "allOutbounds")
        url = self._test_url()
        results: list[dict | None] = [None] * len(tested)
        pool, dials, through_core = Pool(CONCURRENT_PROBES), {}, []
        for index, outbound in enumerate(tested):
            server = _server(outbound)
            if mode == TCP_MODE and server is not None and not _udp_transport(outbound):
                dials[index] = pool.spawn(_dial, outbound, server)
            else:
                through_core.append(index)
        try:
            if through_core:
                probed = self._through_core([tested[i] for i in through_core], chain, url, isolate)
                for index, result in zip(through_core, probed, strict=True):
                    results[index] = result
        finally:
            pool.join()
        for index, dialed in dials.items():
            results[index] = dialed.value
        return results

    def _through_core(self, tested: list[dict], chain: list[dict], url, isolate) -> list[dict]:
        os.makedirs(self.workdir, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="probe-", dir=self.workdir) as directory:
            core = CoreProcess(self.process.binary, directory)
            try:
                refused, ports = self._start(core, tested, chain, isolate)
                if ports and core.state != "running":
                    raise ServiceError(f"the temporary core did not start: {core.error}")
                _wait_listening(list(ports.values()))
                # Checked once the core runs: a missing core is the first thing to hear of.
                address = self._test_address(url) if ports else ""

                def probe(index: int) -> dict:
                    why = refused.get(index) or _unresolved(_server(tested[index]))
                    if why:
                        return _failed(tested[index], "http", why)
                    return _http_probe(tested[index], ports[index], url, address)

                return Pool(CONCURRENT_PROBES).map(probe, range(len(tested)))
            finally:
                core.stop()

    def _start(self, core: CoreProcess, tested, chain, isolate) -> tuple[dict, dict]:
        """Start `core` on the probe config: ({index: why the core refused it},
        {index: SOCKS port}) for the outbounds it runs. A refused batch is retried
        without the outbounds the core refuses on their own."""
        config, ports = probe_config(tested, chain)
        try:
            core.restart(config)
            return {}, dict(enumerate(ports))
        except ServiceError as exc:
            if not isolate:
                raise
            refused = self._refused_alone(core, tested, chain)
            if not refused:
                refused = dict.fromkeys(range(len(tested)), exc.msg)
        kept = [index for index in range(len(tested)) if index not in refused]
        if not kept:
            return refused, {}
        config, kept_ports = probe_config([tested[index] for index in kept], chain)
        core.restart(config)
        return refused, dict(zip(kept, kept_ports, strict=True))

    def _refused_alone(self, core: CoreProcess, tested, chain) -> dict[int, str]:
        """{index: the core's reason} for each outbound the core refuses on its own."""
        refused = {}
        for index, outbound in enumerate(tested):
            try:
                core.test(probe_config([outbound], chain)[0])
            except ServiceError as exc:
                refused[index] = exc.msg
        return refused

    def _test_url(self):
        url = self.settings.get("outboundTestUrl")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServiceError(
                f"the outboundTestUrl setting must be an http or https URL (it is {url!r})"
            )
        if url_port(parts) is None:
            raise ServiceError(f"the port in the outboundTestUrl setting is not valid ({url!r})")
        return parts

    def _test_address(self, url) -> str:
        """The checked address the probes connect to for the test URL's host."""
        egress = for_url(self.settings, "outboundTestUrl", url.geturl())
        try:
            return str(egress.addresses(url.hostname, url_port(url))[0])
        except LookupTimedOut as exc:
            raise ServiceError(f"the outboundTestUrl setting: {exc.strerror}") from None
        except OSError:
            raise ServiceError(
                f"the host of the outboundTestUrl setting ({url.hostname}) does not resolve"
            ) from None


# ---- the config of the temporary core -------------------------------------------------------


def probe_config(tested: list[dict], chain: list[dict]) -> tuple[dict, list[int]]:
    """The temporary core's config and the SOCKS port of each tested outbound, in order.

    Tested outbounds get tags of their own, so two with one tag (or none) never collide;
    what a dialer-proxy chain refers to keeps its tag and comes from `chain`."""
    inbounds, outbounds, rules, ports = [], [], [], []
    for index, outbound in enumerate(tested):
        port = free_loopback_port()
        ports.append(port)
        inbound_tag, outbound_tag = PROBE_TAG.format(f"in-{index}"), PROBE_TAG.format(index)
        inbounds.append(
            {
                "tag": inbound_tag,
                "listen": LOOPBACK,
                "port": port,
                "protocol": "socks",
                "settings": {"auth": "noauth", "udp": False},
            }
        )
        outbounds.append({**outbound, "tag": outbound_tag})
        rules.append({"type": "field", "inboundTag": [inbound_tag], "outboundTag": outbound_tag})
    outbounds += _chained(tested, chain)
    config = {
        "log": {"loglevel": "warning"},
        "inbounds": inbounds,
        "outbounds": outbounds,
        "routing": {"rules": rules},
    }
    return config, ports


def _chained(tested: list[dict], chain: list[dict]) -> list[dict]:
    """The outbounds of `chain` that the tested ones dial through, directly or not."""
    by_tag = {o["tag"]: o for o in chain if isinstance(o.get("tag"), str) and o["tag"]}
    wanted = [tag for outbound in tested for tag in _dialer_tags(outbound)]
    found: dict[str, dict] = {}
    while wanted:
        tag = wanted.pop()
        if tag in found or tag not in by_tag:
            continue
        found[tag] = by_tag[tag]
        wanted += _dialer_tags(by_tag[tag])
    return list(found.values())


def _dialer_tags(outbound: dict) -> list[str]:
    tags = []
    proxy = outbound.get("proxySettings")
    if isinstance(proxy, dict) and isinstance(proxy.get("tag"), str):
        tags.append(proxy["tag"])
    stream = outbound.get("streamSettings")
    sockopt = stream.get("sockopt") if isinstance(stream, dict) else None
    if isinstance(sockopt, dict) and isinstance(sockopt.get("dialerProxy"), str):
        tags.append(sockopt["dialerProxy"])
    return [tag for tag in tags if tag]


# ---- reading the input ----------------------------------------------------------------------


def _json_value(value, name: str):
    """A form field carries JSON text; a JSON body may carry the value itself."""
    if isinstance(value, str):
        if not value.strip():
            raise ServiceError(f"{name} is required")
        return load_json(value, name)
    if value is None:
        raise ServiceError(f"{name} is required")
    return value


def _outbound(value, name: str) -> dict:
    if not isinstance(value, dict):
        raise ServiceError(f"{name} must be an outbound object")
    if not isinstance(value.get("protocol"), str) or not value["protocol"].strip():
        raise ServiceError(f"{name} has no protocol")
    tag = value.get("tag", "")
    if not isinstance(tag, str):
        raise ServiceError(f"{name}.tag must be text")
    return value


def _outbound_list(value) -> list[dict]:
    if value in (None, ""):
        return []
    value = _json_value(value, "allOutbounds")
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ServiceError("allOutbounds must be a JSON array of outbound objects")
    return value


def _mode(value) -> str:
    if value in (None, ""):
        return ""
    if value != TCP_MODE:
        raise ServiceError(f"mode must be tcp or empty (got {value!r})")
    return TCP_MODE


def _server(outbound: dict) -> tuple[str, int] | None:
    """The address and port the outbound dials, if it names one."""
    settings = outbound.get("settings")
    if not isinstance(settings, dict):
        return None
    candidates = [settings]
    for key in ("vnext", "servers", "peers"):
        entries = settings.get(key)
        if isinstance(entries, list) and entries and isinstance(entries[0], dict):
            candidates.insert(0, entries[0])
    for entry in candidates:
        address, port = entry.get("address"), entry.get("port")
        if isinstance(port, str) and port.isdigit():
            port = int(port)
        if isinstance(address, str) and address and isinstance(port, int) and 0 < port < 65536:
            return address, port
    return None


def _udp_transport(outbound: dict) -> bool:
    stream = outbound.get("streamSettings")
    network = stream.get("network") if isinstance(stream, dict) else None
    return outbound.get("protocol") in UDP_PROTOCOLS or network in UDP_NETWORKS


# ---- probes ---------------------------------------------------------------------------------


def _result(outbound: dict, mode: str, **measured) -> dict:
    """One entry: the outbound's tag, whether it answered, and the timings in ms."""
    return {
        "tag": outbound.get("tag", ""),
        "protocol": outbound.get("protocol", ""),
        "mode": mode,
        "success": True,
        "delay": 0,
        "statusCode": 0,
        "connectMs": 0,
        "tlsMs": 0,
        "firstByteMs": 0,
        "error": "",
        **measured,
    }


def _failed(outbound: dict, mode: str, error: str, **measured) -> dict:
    return _result(outbound, mode, success=False, error=error, **measured)


def _ms(seconds: float) -> int:
    return max(round(seconds * 1000), 0)


def _unresolved(server: tuple[str, int] | None) -> str:
    """Why the outbound's server name cannot be dialed ("" when it resolves or is an
    address), found here within LOOKUP_SECONDS rather than by the core's own resolver,
    which may retry for half a minute and then only answer that it could not connect."""
    if server is None or _is_address(server[0]):
        return ""
    try:
        system_resolve(server[0], server[1])
    except LookupTimedOut as exc:
        return exc.strerror
    except (OSError, UnicodeError):
        return f"the server name {server[0]} does not resolve"
    return ""


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _dial(outbound: dict, server: tuple[str, int]) -> dict:
    address, port = server
    why = _unresolved(server)
    if why:
        return _failed(outbound, TCP_MODE, f"cannot connect to {address}:{port}: {why}")
    started = time.monotonic()
    try:
        with socket.create_connection((address, port), timeout=PROBE_TIMEOUT):
            elapsed = _ms(time.monotonic() - started)
    except (OSError, ValueError) as exc:
        return _failed(outbound, TCP_MODE, f"cannot connect to {address}:{port}: {_why(exc)}")
    return _result(outbound, TCP_MODE, delay=elapsed, connectMs=elapsed)


def _http_probe(outbound: dict, socks_port: int, url, address: str) -> dict:
    """GET the test URL through the temporary core's SOCKS port for this outbound, to
    `address`, the checked address of its host."""
    host = url.hostname
    port = url_port(url)
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    timings: dict[str, int] = {}
    started = time.monotonic()
    try:
        with socket.create_connection((LOOPBACK, socks_port), timeout=PROBE_TIMEOUT) as raw:
            _socks_connect(raw, address, port)
            timings["connectMs"] = _ms(time.monotonic() - started)
            sock = raw
            if url.scheme == "https":
                handshake = time.monotonic()
                sock = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
                timings["tlsMs"] = _ms(time.monotonic() - handshake)
            host_header = host if url.port is None else f"{host}:{url.port}"
            request = (
                f"GET {path} HTTP/1.1\r\nHost: {host_header}\r\n"
                "User-Agent: appliance-outbound-test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
            )
            sock.sendall(request.encode())
            sent = time.monotonic()
            status = _status_code(sock, sent, timings)
    except (OSError, ValueError) as exc:
        return _failed(outbound, "http", _why(exc), **timings)
    return _result(
        outbound, "http", delay=_ms(time.monotonic() - started), statusCode=status, **timings
    )


def _socks_connect(sock: socket.socket, address: str, port: int) -> None:
    """SOCKS5 without authentication, CONNECT to the IP `address` (nothing left for the
    core to resolve)."""
    sock.sendall(b"\x05\x01\x00")
    if _read(sock, 2) != b"\x05\x00":
        raise ValueError("the temporary core refused the SOCKS greeting")
    ip = ipaddress.ip_address(address)
    kind = b"\x01" if ip.version == 4 else b"\x04"
    sock.sendall(b"\x05\x01\x00" + kind + ip.packed + struct.pack(">H", port))
    head = _read(sock, 4)
    if head[1] != 0:
        raise ValueError(f"the outbound could not open a connection (SOCKS reply {head[1]})")
    address_length = {1: 4, 4: 16}.get(head[3])
    if address_length is None:
        address_length = _read(sock, 1)[0]
    _read(sock, address_length + 2)


def _status_code(sock, sent: float, timings: dict) -> int:
    """Read up to the end of the status line; the first byte's arrival is timed."""
    received = b""
    while b"\r\n" not in received:
        chunk = sock.recv(4096)
        if not chunk:
            raise ValueError(
                "the connection closed before an HTTP answer came back "
                "(the outbound's server is unreachable or refused it)"
            )
        if not received:
            timings["firstByteMs"] = _ms(time.monotonic() - sent)
        received += chunk
        if len(received) > HEADER_LIMIT:
            raise ValueError("the answer has no HTTP status line")
    line = received.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError("the answer has no HTTP status line (is outboundTestUrl an HTTP server?)")
    return int(parts[1])


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ValueError(
                "the temporary core closed the connection "
                "(the outbound's server is unreachable or refused it)"
            )
        data += chunk
    return data


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no answer within {PROBE_TIMEOUT:g} s"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake with the test URL failed: {exc.reason or exc}"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _wait_listening(ports: list[int]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    for port in ports:
        while True:
            with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 0.5):
                break
            if time.monotonic() > deadline:
                raise ServiceError(f"the temporary core did not listen within {START_TIMEOUT:g} s")
            gevent.sleep(0.05)
