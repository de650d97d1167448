"""The one gate every connection the panel opens on an admin's say-so goes through.

Why this module exists: the panel fetches from addresses an admin types (release lists,
geo files, the chat-bot API, the mail server, the outbound test URL, a server whose
certificate is to be pinned), and a request it sends on someone's behalf must not become
a way into the machine it runs on or the network behind it: the panel itself on
loopback, a database on the LAN, a cloud's metadata service. So every such connection is
made here, in four steps:

1. Resolve the host name once, all of its addresses (`getaddrinfo`), and refuse the lot
   when any of them is internal: loopback, private (RFC 1918), link-local, unspecified,
   carrier-grade NAT (100.64/10), multicast, reserved, unique-local (fc00::/7) or the
   metadata address. IPv6 forms that carry an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`,
   NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the address they carry, and the
   resolver reads every legacy IPv4 spelling (`2130706433`, `0x7f000001`, `127.1`)
   the way the connection would, so no spelling slips past.
2. Connect to an address that was checked, never to the name: a second lookup could
   answer differently (DNS rebinding). TLS still names the host (SNI, certificate check)
   and HTTP still sends it as `Host`.
3. Follow HTTP redirects by hand, at most `MAX_REDIRECTS`, checking each target as in 1.
4. Bound every answer in size and time; what a server sends is never put into a message.

Some admins do keep a release mirror, a Bot API server or a mail relay on the LAN or on
this machine. They list that setting in `allowPrivateDestinations`; then the host and
port written in that setting may be internal. Other hosts reached on its behalf (a
redirect, a download link in a release list) are still checked, and the metadata address
is never fetched from, opted in or not.

Addresses the panel hands to another program to connect to are judged by the same rule:
the Telegram data centres its MTProto proxies relay to (a destination here like the
others, checked when saved and when a proxy starts, and by the proxy with `refusal` when
it connects), and the servers of an outbound subscription that become core outbounds
(`screened`).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import gevent

from appliance.errors import ServiceError

ALLOW_SETTING = "allowPrivateDestinations"
# Everything the panel connects to on an admin's say-so: the settings that hold an address,
# and getRemoteCertHash, whose address comes with the request.
DESTINATIONS = (
    "coreReleaseUrl",
    "geoipUrl",
    "geositeUrl",
    "panelUpdateUrl",
    "tgBotAPIServer",
    "smtpHost",
    "outboundTestUrl",
    "warpApiUrl",
    "vpnApiUrl",
    "mtprotoDataCenters",
    "getRemoteCertHash",
)
MAX_REDIRECTS = 5
# A DNS server that does not answer makes the system resolver retry for half a minute
# or more (timeout x attempts x servers); a name lookup gets this long, then it failed.
LOOKUP_SECONDS = 5.0
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
CHUNK = 64 << 10
METADATA = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
CGNAT = ipaddress.ip_network("100.64.0.0/10")
UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
METADATA_REASON = "the cloud metadata address"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


class DestinationRefused(ServiceError):
    """A host the guard does not connect to; the message names the setting and the way
    to opt in."""


class FetchFailed(ServiceError):
    """A fetch that did not complete; the message is the reason alone (callers say what
    was being fetched)."""


class TlsRefused(FetchFailed):
    """A server answered, but no TLS connection came of it (a handshake alert, or a
    certificate this side refused)."""


class CertificateRefused(TlsRefused):
    """The server's certificate did not pass verification; nothing was sent to it."""


class LookupTimedOut(socket.gaierror):
    """A name lookup that had no answer within LOOKUP_SECONDS; its text says so."""


def system_resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, in the resolver's order, without repeats; raises
    `LookupTimedOut` when the resolver has no answer within LOOKUP_SECONDS."""
    late = LookupTimedOut(
        socket.EAI_AGAIN,
        f"the name {host} did not resolve within {LOOKUP_SECONDS:g} s "
        "(no answer from the DNS server)",
    )
    with gevent.Timeout(LOOKUP_SECONDS, late):
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[str] = []
    for *_, sockaddr in answers:
        if sockaddr[0] not in found:
            found.append(sockaddr[0])
    return found


def refusal(address: Address) -> str | None:
    """Why the guard refuses `address` (a phrase like "a loopback address"), or None for
    an address on the public internet."""
    if address in METADATA:
        return METADATA_REASON
    if isinstance(address, ipaddress.IPv6Address):
        carried = _carried_ipv4(address)
        if carried is not None:
            reason = refusal(carried)
            return f"{reason} ({carried}) in IPv6 form" if reason else None
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address in CGNAT:
        return "a carrier-grade NAT address (100.64.0.0/10)"
    if address in UNIQUE_LOCAL:
        return "a unique-local address (fc00::/7)"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "a special-purpose address"
    return None


def _carried_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def screened(host: str, resolve: Resolver, private_ok: bool) -> tuple[Address, str] | None:
    """The first address of `host` (a literal in any spelling, or a name resolved now)
    that the guard refuses, with the reason; None when every one may be reached. With
    `private_ok` only the metadata address is refused. For an address the panel hands to
    another program to connect to (a core outbound's server), so a name that does not
    resolve now is left to that program."""
    bare = host.strip().strip("[]")
    literal = _parse_address(bare)
    try:
        found = [literal] if literal else [_parse_address(a) for a in resolve(bare, 0)]
    except (OSError, UnicodeError):
        return None
    for address in found:
        reason = refusal(address) if address is not None else None
        if reason and (not private_ok or reason.startswith(METADATA_REASON)):
            return address, reason
    return None


def parse_allowed(text: str) -> list[str]:
    """The names in `allowPrivateDestinations` (comma-separated), each one the panel knows."""
    names = [part.strip() for part in (text or "").split(",") if part.strip()]
    unknown = [name for name in names if name not in DESTINATIONS]
    if unknown:
        raise ServiceError(
            f"{ALLOW_SETTING} lists '{unknown[0][:100]}', which is not something the panel "
            f"connects to; list any of {', '.join(DESTINATIONS)}, separated by commas"
        )
    return sorted(set(names), key=DESTINATIONS.index)


def host_key(host: str) -> str:
    """`host` the way two spellings of one name compare equal (case, brackets, a final
    dot, the zeros of an IPv6 address)."""
    bare = host.strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return bare


@dataclass(frozen=True)
class Egress:
    """Connections on behalf of one destination `name` (a setting, or getRemoteCertHash),
    whose own host and port are `origin`; `private_ok` when the admin listed `name` in
    allowPrivateDestinations."""

    name: str
    origin: tuple[str, int]
    private_ok: bool = False
    resolve: Resolver = system_resolve
    # How to opt in, when that is not allowPrivateDestinations (a node has its own flag).
    opt_in: str = ""

    # ---- the check ---------------------------------------------------------------------------

    def addresses(self, host: str, port: int, *, redirected: bool = False) -> list[Address]:
        """The addresses of `host`, each one checked; raises `DestinationRefused` when any
        of them is refused, and `socket.gaierror` when the name does not resolve."""
        bare = host.strip("[]")
        key = (host_key(bare), port)
        literal = _parse_address(bare)
        found = [literal] if literal else [_parse_address(a) for a in self.resolve(bare, port)]
        if not found:
            raise socket.gaierror(socket.EAI_NONAME, f"{bare} has no address")
        for address in found:
            reason = refusal(address) if address is not None else "an address the panel cannot read"
            if reason is None:
                continue
            # The metadata address in an IPv6 form is the metadata address all the same.
            metadata = reason.startswith(METADATA_REASON)
            if not metadata and self.private_ok and key == self.origin:
                continue
            raise DestinationRefused(self._refused(bare, port, address, reason, redirected))
        return found

    def _refused(self, host: str, port: int, address, reason: str, redirected: bool) -> str:
        shown = host if host_key(host) == str(address) else f"{host} (which resolves to {address})"
        if (host_key(host), port) == self.origin:
            lead = f"the {self.name} setting points at {shown}"
        elif redirected:
            lead = f"a redirect followed for {self.name} leads to {shown}"
        else:
            lead = f"{self.name} leads to {shown}"
        if reason.startswith(METADATA_REASON):
            return f"{lead}, {reason}; the panel never connects to it"
        if self.opt_in:
            return f"{lead}, {reason}; {self.opt_in}"
        if self.private_ok:
            origin_host, origin_port = self.origin
            return (
                f"{lead}, {reason}; listing {self.name} in {ALLOW_SETTING} lets only the host "
                f"written there ({origin_host}, port {origin_port}) be an internal address"
            )
        return (
            f"{lead}, {reason}; the panel connects to loopback, private, link-local and "
            f"other internal addresses only for the settings listed in {ALLOW_SETTING}: "
            f"add {self.name} there if this address is meant"
        )

    # ---- connections -------------------------------------------------------------------------

    def connect(
        self, host: str, port: int, timeout: float, *, redirected: bool = False
    ) -> socket.socket:
        """A TCP connection to a checked address of `host` (the first that answers)."""
        *others, last = self.addresses(host, port, redirected=redirected)
        for address in others:
            with contextlib.suppress(OSError):
                return socket.create_connection((str(address), port), timeout=timeout)
        return socket.create_connection((str(last), port), timeout=timeout)

    @contextlib.contextmanager
    def request(
        self,
        url: str,
        *,
        method: str = "GET",
        body: bytes | Iterable[bytes] | None = None,
        headers: dict[str, str] | None = None,
        connect_timeout: float = 10,
        read_timeout: float = 60,
        total_timeout: float = 600,
        tls: ssl.SSLContext | None = None,
        check_peer: Callable[[ssl.SSLSocket], None] | None = None,
    ) -> Iterator[Reply]:
        """An HTTP(S) exchange with `url`; a GET follows up to MAX_REDIRECTS redirects,
        each target checked. Failures to connect or to get an answer raise `FetchFailed`
        with the reason; reading the body is bounded by `Reply.chunks`. `tls` replaces the
        system-store context, and `check_peer` judges the TLS connection before anything
        is sent on it (a pinned certificate), raising `ServiceError` to refuse it."""
        deadline = time.monotonic() + total_timeout
        redirected = False
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            port = url_port(parts)
            if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
                raise FetchFailed(f"{url[:200]!r} is not an http(s) URL with a valid port")
            connection = _Connection(self, parts, port, connect_timeout, read_timeout, redirected)
            connection.tls, connection.check_peer = tls, check_peer
            try:
                try:
                    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                    connection.request(method, target, body=body, headers=headers or {})
                    response = connection.getresponse()
                except (OSError, http.client.HTTPException) as exc:
                    failure = (
                        CertificateRefused
                        if isinstance(exc, ssl.SSLCertVerificationError)
                        else TlsRefused
                        if isinstance(exc, ssl.SSLError)
                        else FetchFailed
                    )
                    raise failure(
                        _reason(exc, connection.connected, connect_timeout, read_timeout)
                    ) from None
                location = response.getheader("Location")
                if method == "GET" and response.status in REDIRECT_STATUSES and location:
                    url, redirected = urljoin(url, location.strip()), True
                    continue
                yield Reply(response, url, deadline, total_timeout, read_timeout)
                return
            finally:
                connection.close()
        raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")


class Reply:
    """An HTTP answer whose body is read in bounded pieces."""

    def __init__(self, response, url: str, deadline: float, total: float, read_timeout: float):
        self.status: int = response.status
        self.headers = response.headers
        self.url = url
        self._response = response
        self._deadline = deadline
        self._total = total
        self._read_timeout = read_timeout

    def chunks(self, limit: int) -> Iterator[bytes]:
        """The body: at most `limit` bytes, all of them before the deadline; `FetchFailed`
        otherwise."""
        declared = self.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise FetchFailed(f"the answer is larger than the limit of {_size(limit)}")
        size = 0
        while True:
            try:
                chunk = self._response.read1(CHUNK)
            except (OSError, http.client.HTTPException) as exc:
                raise FetchFailed(_reason(exc, True, 0, self._read_timeout)) from None
            if not chunk:
                return
            size += len(chunk)
            if size > limit:
                raise FetchFailed(f"the answer is larger than the limit of {_size(limit)}")
            if time.monotonic() > self._deadline:
                raise FetchFailed(f"the answer took longer than {self._total:g} s")
            yield chunk

    def read(self, limit: int) -> bytes:
        return b"".join(self.chunks(limit))


class _Connection(http.client.HTTPConnection):
    """HTTP(S) to a checked address of the URL's host; TLS and `Host` name the host."""

    def __init__(self, egress: Egress, parts, port, connect_timeout, read_timeout, redirected):
        self.default_port = 443 if parts.scheme == "https" else 80
        super().__init__(parts.hostname, port, timeout=read_timeout)
        self._egress = egress
        self._tls = parts.scheme == "https"
        self._connect_timeout = connect_timeout
        self._redirected = redirected
        self.connected = False
        self.tls: ssl.SSLContext | None = None
        self.check_peer: Callable[[ssl.SSLSocket], None] | None = None

    def connect(self) -> None:
        sock = self._egress.connect(
            self.host, self.port, self._connect_timeout, redirected=self._redirected
        )
        self.connected = True
        sock.settimeout(self.timeout)
        if self._tls:
            context = self.tls or tls_context()
            try:
                sock = context.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
            if self.check_peer:
                try:
                    self.check_peer(sock)
                except BaseException:
                    sock.close()
                    raise
        self.sock = sock


@functools.cache
def tls_context() -> ssl.SSLContext:
    """Certificates verified against the system's store (`SSL_CERT_FILE` extends it) and
    the Mozilla bundle, which a one-file binary carries on any distribution."""
    import certifi

    context = ssl.create_default_context()
    context.load_verify_locations(cafile=certifi.where())
    return context


def allowed(settings) -> frozenset[str]:
    """The destinations the admin let reach internal addresses."""
    return frozenset(
        part.strip() for part in settings.get(ALLOW_SETTING).split(",") if part.strip()
    )


def for_host(settings, name: str, host: str, port: int) -> Egress:
    """The guard for `name`, whose own address is `host`:`port`."""
    return Egress(name, (host_key(host), port), name in allowed(settings))


def for_url(settings, name: str, url: str) -> Egress:
    """The guard for `name`, whose own address is the host and port of `url`."""
    port = url_port(urlsplit(url))
    if port is None:
        raise ServiceError(f"the port in the {name} setting must be from 1 to 65535")
    return for_host(settings, name, urlsplit(url).hostname or "", port)


def url_port(parts) -> int | None:
    """The port a split http(s) URL names or implies; None when it names a bad one."""
    try:
        port = parts.port
    except ValueError:
        return None
    if port is None:
        return 443 if parts.scheme == "https" else 80
    return port or None


def _parse_address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _size(limit: int) -> str:
    return f"{limit >> 20} MB" if limit >= 1 << 20 else f"{limit >> 10} kB"


def _reason(exc: BaseException, connected: bool, connect_timeout, read_timeout) -> str:
    """The words for a failed exchange: never the server's own bytes."""
    if isinstance(exc, LookupTimedOut):
        return exc.strerror
    if isinstance(exc, socket.gaierror):
        return "the host name does not resolve"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the server's certificate is not trusted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return f"the TLS handshake failed ({exc.reason or type(exc).__name__})"
    if isinstance(exc, TimeoutError):
        if not connected:
            return f"no connection within {connect_timeout:g} s"
        return f"the server sent nothing for {read_timeout:g} s"
    if isinstance(exc, http.client.IncompleteRead):
        return "the connection broke off before the whole answer arrived"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(exc, http.client.HTTPException):
        return "the server's answer is not HTTP"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__
