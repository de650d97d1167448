"""Asking the running core about its routing: which outbound a connection would take,
and how its balancers stand, with a live override of a balancer's choice.

Why a module of its own: these are questions to the router of the running process (its
RoutingService), not to the stored template. A route test sends no traffic; an override
lasts until the core restarts, since it lives in the process and nowhere else, so the
panel keeps no copy that could drift from it.

Only Xray serves the balancer methods; V2Ray 4.34 serves no RoutingService at all. A core
without the service answers "unimplemented", which becomes a failure naming the running
core and what it lacks, never an error page. Input is checked against the running config
first (a balancer or outbound that is not there), so a wrong tag changes nothing.
"""

from __future__ import annotations

import ipaddress

import gevent

from appliance.core.api import (
    CoreApiError,
    CoreApiUnreachable,
    CoreApiUnsupported,
    lacks_xray_api,
    wire,
)
from appliance.domain.parse import parse_port, parse_text
from appliance.errors import ServiceError

BALANCER_TAGS_LIMIT = 100
# A core started this recently may not listen on its API port yet (Xray takes a moment,
# longer on a busy host): a question asked then waits for it rather than failing.
STARTUP_GRACE = 10.0
STARTUP_POLL = 0.2
FIELD_LIMIT = 255
# The router's answer when no rule matches: the connection then takes the first outbound.
NO_RULE_MATCHED = "not enough information for making a decision"


class CoreRouting:
    def __init__(self, core):
        """`core` is the CoreService: its process, its API client and the running config."""
        self.core = core

    def balancer_status(self, tags_text) -> dict[str, dict]:
        """{balancer tag: {override, principleTargets}} for the comma-separated tags;
        every balancer of the running config when none are named."""
        config = self._running_config()
        known = _balancer_tags(config)
        if tags_text in (None, ""):
            tags = known
        elif isinstance(tags_text, str):
            tags = list(dict.fromkeys(tag.strip() for tag in tags_text.split(",") if tag.strip()))
        else:
            raise ServiceError("tags must be balancer tags separated by commas")
        if len(tags) > BALANCER_TAGS_LIMIT:
            raise ServiceError(f"at most {BALANCER_TAGS_LIMIT} balancer tags per call")
        for tag in tags:
            _require_balancer(tag, known)
        status = {}
        for tag in tags:
            info = self._ask(lambda api, tag=tag: api.balancer_info(tag), "balancer status")
            status[tag] = {
                "override": info["override"],
                "principleTargets": info["principleTargets"],
            }
        return status

    def override_balancer(self, tag, target) -> str:
        """Force balancer `tag` to outbound `target` until the core restarts; an empty
        target lets the balancer choose again. Returns what was done, in words."""
        config = self._running_config()
        if not isinstance(tag, str) or not tag.strip():
            raise ServiceError("tag is required: the balancer to override")
        tag = tag.strip()
        _require_balancer(tag, _balancer_tags(config))
        if target is None:
            target = ""
        if not isinstance(target, str):
            raise ServiceError("target must be an outbound tag (empty clears the override)")
        target = target.strip()
        outbounds = _outbound_tags(config)
        if target and target not in outbounds:
            raise ServiceError(
                f"no outbound '{target}' in the running core config "
                f"(outbounds: {', '.join(outbounds) or 'none'})"
            )
        self._ask(lambda api: api.override_balancer(tag, target), "balancer override")
        if target:
            return f"balancer {tag} now sends everything to {target} until the core restarts"
        return f"balancer {tag} chooses its outbound again"

    def route_test(self, form: dict) -> dict:
        """The outbound the router would pick for a connection described by `form`
        (domain or ip, port, network, inboundTag, protocol, email); nothing is sent."""
        context = routing_context(form)
        config = self._running_config()
        try:
            routed = self._ask(lambda api: api.route(context), "routing test")
        except CoreApiError as exc:
            if NO_RULE_MATCHED not in exc.msg:
                raise
            outbounds = _outbound_tags(config)
            routed = {"outboundTag": outbounds[0] if outbounds else "", "outboundGroupTags": []}
            return {**routed, "matchedRule": False}
        return {**routed, "matchedRule": True}

    # ---- internals ---------------------------------------------------------------------

    def _running_config(self) -> dict:
        """The running config without its client entries, which routing never needs."""
        running = self.core.running
        if self.core.process.state != "running" or running is None:
            raise ServiceError("the core is not running; start it to ask its router")
        return running.skeleton

    def _ask(self, call, feature: str):
        if self.core.api is None:
            self._not_running()
        info = self.core.process.info
        lacking = lacks_xray_api(info, feature)
        if lacking:
            raise ServiceError(lacking)
        try:
            return self._answered(call)
        except CoreApiUnsupported:
            if info is not None:
                raise ServiceError(
                    f"the core's API does not serve RoutingService, which the {feature} "
                    'needs: add "RoutingService" to api.services in the core template'
                ) from None
            unknown = f"the running core (unknown) has no {feature}; it needs Xray"
            raise ServiceError(unknown) from None

    def _answered(self, call):
        """`call` on the core's API, retried while a core that has just started does
        not listen yet (a restart may bring a new API client: it is read each time); any
        other failure, or a core long started that does not answer, raises."""
        while True:
            try:
                return call(self.core.api or self._not_running())
            except CoreApiUnreachable:
                if not 0 < self.core.process.running_for() < STARTUP_GRACE:
                    raise
            gevent.sleep(STARTUP_POLL)

    @staticmethod
    def _not_running():
        raise ServiceError("the core is not running; start it to ask its router")


def routing_context(form: dict) -> bytes:
    """The RoutingContext for a route test form, or ServiceError naming the bad field."""
    if not isinstance(form, dict):
        raise ServiceError("send the route test as a form or JSON object")
    domain = parse_text(form.get("domain"), "domain", FIELD_LIMIT)
    ip_text = parse_text(form.get("ip"), "ip", FIELD_LIMIT)
    if not domain and not ip_text:
        raise ServiceError("domain or ip is required: the destination to route")
    target_ips = []
    if ip_text:
        try:
            target_ips.append(ipaddress.ip_address(ip_text).packed)
        except ValueError:
            raise ServiceError(f"ip must be an IPv4 or IPv6 address (got {ip_text!r})") from None
    network = parse_text(form.get("network"), "network", FIELD_LIMIT).lower() or "tcp"
    if network not in wire.NETWORKS:
        raise ServiceError(f"network must be tcp or udp (got {network!r})")
    return wire.routing_context(
        inbound_tag=parse_text(form.get("inboundTag"), "inboundTag", FIELD_LIMIT),
        network=network,
        target_ips=target_ips,
        target_port=parse_port(form.get("port"), "leave it out"),
        target_domain=domain,
        protocol=parse_text(form.get("protocol"), "protocol", FIELD_LIMIT),
        user=parse_text(form.get("email"), "email", FIELD_LIMIT),
    )


def _balancer_tags(config: dict) -> list[str]:
    routing = config.get("routing") if isinstance(config.get("routing"), dict) else {}
    balancers = routing.get("balancers") if isinstance(routing.get("balancers"), list) else []
    return [b["tag"] for b in balancers if isinstance(b, dict) and isinstance(b.get("tag"), str)]


def _outbound_tags(config: dict) -> list[str]:
    outbounds = config.get("outbounds") if isinstance(config.get("outbounds"), list) else []
    return [o["tag"] for o in outbounds if isinstance(o, dict) and isinstance(o.get("tag"), str)]


def _require_balancer(tag: str, known: list[str]) -> None:
    if tag not in known:
        raise ServiceError(
            f"no balancer '{tag}' in the running core config "
            f"(balancers: {', '.join(known) or 'none'})"
        )
