"""The client of the core's gRPC API: traffic counters, live user changes, and Xray's
online users and their addresses, routing test, balancer override and observatory.

The core serves StatsService and HandlerService on a loopback port named in its config.
Xray and V2Ray serve the same messages under different package prefixes (`xray.` and
`v2ray.core.`), in the method paths and in TypedMessage type names alike, so the prefix
of the detected core is the one thing this client needs besides the address. Calls are
unary gRPC calls (`channel`, on the `h2` library) carrying bytes built by `wire`.

Every failure (core not listening, a deadline, a refusal such as "proxy is not a
UserManager" for Shadowsocks) becomes a `CoreApiError` carrying the core's own words.
It is a `ServiceError`, so a caller that does not handle it still answers with an
envelope rather than a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from appliance.core.api import channel, wire
from appliance.errors import ServiceError

CALL_TIMEOUT = 5.0

# Xray keeps the addresses of each online user in a map named after the user's email.
ONLINE_PREFIX = "user>>>"
ONLINE_SUFFIX = ">>>online"

# Go errors carry the package path of each layer ("v2ray.com/core/proxy/vless: User x
# already exists."); the path helps a Go developer, not the person reading the message.
GO_PACKAGE_PATH = re.compile(r"(?<![\w/.-])[\w.-]+(?:/[\w.-]+)+: ")


def core_words(message: str) -> str:
    """The core's error message without the Go package paths of its layers."""
    return GO_PACKAGE_PATH.sub("", message).strip()


def online_email(name: str) -> str:
    """The email in an online map's name `user>>>EMAIL>>>online`; any other name as it is."""
    if name.startswith(ONLINE_PREFIX) and name.endswith(ONLINE_SUFFIX):
        return name[len(ONLINE_PREFIX) : -len(ONLINE_SUFFIX)]
    return name


class CoreApiError(ServiceError):
    """The core's API could not be reached or refused the request."""


def lacks_xray_api(info, feature: str) -> str:
    """Why a core known not to be Xray cannot serve `feature`, or "" when it may: only
    Xray serves these API services, so the answer does not wait on its API port."""
    if info is None or info.flavor == "xray":
        return ""
    return f"the running core ({info.flavor} {info.version}) has no {feature}; it needs Xray"


class CoreApiUnreachable(CoreApiError):
    """Nothing answers on the core's API port: the core is not running, or has just
    started and does not listen yet."""


class CoreApiUnsupported(CoreApiError):
    """The core does not serve the service or method called: a core without it (V2Ray
    has no balancer override), or an Xray whose template leaves it out of api.services."""


class CoreApiNotFound(CoreApiError):
    """The core has no such item: Xray asked for the addresses of a user not online."""


def _identity(data: bytes) -> bytes:
    return data


class CoreApi:
    def __init__(self, address: str, prefix: str, timeout: float = CALL_TIMEOUT):
        """`address` is host:port of the core's API inbound; `prefix` is "xray" or
        "v2ray.core", as reported by the process supervisor's detection."""
        self.address = address
        self.prefix = prefix
        self.timeout = timeout
        self._channel = channel.Channel(address)
        self._stats = f"/{prefix}.app.stats.command.StatsService/"
        self._handler = f"/{prefix}.app.proxyman.command.HandlerService/"
        self._routing = f"/{prefix}.app.router.command.RoutingService/"
        # Xray's observatory package alone carries "core" (xray.core.app.observatory).
        observatory = "xray.core" if prefix == "xray" else prefix
        self._observatory = f"/{observatory}.app.observatory.command.ObservatoryService/"

    def query_stats(self, pattern: str = "", reset: bool = False) -> dict[str, int]:
        """Counters whose name contains `pattern` (all of them for ""), as {name: value}."""
        request = wire.query_stats_request(pattern, reset)
        return self._call(
            self._stats + "QueryStats", request, wire.decode_query_stats_response, "read stats"
        )

    def sys_stats(self) -> dict[str, int]:
        """The core's runtime figures (goroutines, memory, GC, uptime in seconds)."""
        return self._call(
            self._stats + "GetSysStats", b"", wire.decode_sys_stats_response, "read sys stats"
        )

    def online_users(self) -> list[str]:
        """The emails of the users connected now (Xray with `statsUserOnline` in their
        policy level); the core names each by its online map, `user>>>EMAIL>>>online`."""
        names = self._call(
            self._stats + "GetAllOnlineUsers", b"", wire.decode_online_users, "list online users"
        )
        return [online_email(name) for name in names]

    def online_ips(self, email: str) -> dict[str, int]:
        """The addresses `email` is connected from now, each with the unix second the core
        last saw it (Xray); a user who is not online is an error the core words."""
        return self._call(
            self._stats + "GetStatsOnlineIpList",
            wire.online_ip_request(f"{ONLINE_PREFIX}{email}{ONLINE_SUFFIX}"),
            wire.decode_online_ips,
            f"list the addresses of {email}",
        )

    def add_user(self, inbound_tag: str, protocol: str, entry: dict) -> None:
        """Add one client to a running inbound. `entry` is the inbound's settings.clients
        entry as the config builder renders it (appliance.core.entries)."""
        account = self._account(protocol, entry)
        user = wire.user(0, entry["email"], account)
        operation = self._typed("app.proxyman.command.AddUserOperation")
        self._alter(
            inbound_tag,
            wire.typed_message(operation, wire.add_user_operation(user)),
            f"add user {entry['email']} to inbound {inbound_tag}",
        )

    def remove_user(self, inbound_tag: str, email: str) -> None:
        """Remove one client, by email, from a running inbound; new connections of that
        client are refused from now on."""
        operation = self._typed("app.proxyman.command.RemoveUserOperation")
        self._alter(
            inbound_tag,
            wire.typed_message(operation, wire.remove_user_operation(email)),
            f"remove user {email} from inbound {inbound_tag}",
        )

    def route(self, context: bytes) -> dict:
        """Which outbound the router picks for `context` (a `wire.routing_context`):
        {outboundTag, outboundGroupTags}. Nothing is sent anywhere."""
        request = wire.route_test_request(context, ["outbound"])
        return self._call(self._routing + "TestRoute", request, wire.decode_routed, "test a route")

    def balancer_info(self, tag: str) -> dict:
        """A balancer's override and the targets it prefers now (Xray)."""
        return self._call(
            self._routing + "GetBalancerInfo",
            wire.balancer_info_request(tag),
            wire.decode_balancer_info,
            f"read balancer {tag}",
        )

    def override_balancer(self, tag: str, target: str) -> None:
        """Force balancer `tag` to outbound `target`; "" lets it choose again (Xray)."""
        self._call(
            self._routing + "OverrideBalancerTarget",
            wire.override_balancer_request(tag, target),
            _identity,
            f"override balancer {tag}",
        )

    def outbound_status(self, tags: list[str] | None = None) -> list[dict]:
        """The observatory's latest result per outbound (all of them for no tags)."""
        return self._call(
            self._observatory + "GetOutboundStatus",
            wire.outbound_status_request(tags or []),
            wire.decode_outbound_status,
            "read the observatory",
        )

    def close(self) -> None:
        self._channel.close()

    # ---- internals ------------------------------------------------------------------

    def _typed(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def _account(self, protocol: str, entry: dict) -> bytes:
        """The protocol's Account message wrapped in a TypedMessage; Shadowsocks and the
        rest are passed on to the core, whose refusal names the reason."""
        if protocol == "vless":
            account = wire.vless_account(entry["id"], entry.get("flow", ""))
        elif protocol == "vmess":
            account = wire.vmess_account(entry["id"], entry.get("security", "auto"))
        elif protocol == "trojan":
            account = wire.trojan_account(entry["password"], entry.get("flow", ""))
        elif protocol == "shadowsocks":
            return wire.typed_message(self._typed("proxy.shadowsocks.Account"), b"")
        else:
            raise CoreApiError(f"users of {protocol} inbounds cannot be changed live")
        return wire.typed_message(self._typed(f"proxy.{protocol}.Account"), account)

    def _alter(self, inbound_tag: str, operation: bytes, what: str) -> None:
        request = wire.alter_inbound_request(inbound_tag, operation)
        self._call(self._handler + "AlterInbound", request, _identity, what)

    def _call(self, method: str, request: bytes, decode: Callable[[bytes], object], what: str):
        try:
            response = self._channel.unary(method, request, self.timeout)
        except channel.RpcError as exc:
            if exc.code == channel.UNIMPLEMENTED:
                raise CoreApiUnsupported(f"cannot {what}: {self._reason(exc)}") from None
            if exc.code == channel.NOT_FOUND:
                raise CoreApiNotFound(f"cannot {what}: {self._reason(exc)}") from None
            if exc.code == channel.UNAVAILABLE:
                raise CoreApiUnreachable(f"cannot {what}: {self._reason(exc)}") from None
            raise CoreApiError(f"cannot {what}: {self._reason(exc)}") from None
        try:
            return decode(response)
        except wire.WireError as exc:
            raise CoreApiError(f"cannot {what}: the core sent a malformed answer ({exc})") from None

    def _reason(self, exc: channel.RpcError) -> str:
        if exc.code == channel.UNAVAILABLE:
            return f"the core API at {self.address} is not reachable (is the core running?)"
        if exc.code == channel.DEADLINE_EXCEEDED:
            return f"the core API at {self.address} did not answer within {self.timeout:g} s"
        return core_words(exc.details) if exc.details else exc.name
