"""Every event a webhook endpoint can ask for, declared once with what raises it.

Endpoints name the events they want from this table (none named: all of them); the
README's table of events is checked against it.
"""

from __future__ import annotations

from appliance.errors import ServiceError

EVENTS: dict[str, str] = {
    "client.created": "a client was added (one by one, in bulk or by an import)",
    "client.modified": "a client's record or its inbounds changed",
    "client.deleted": "a client was deleted; data is the client as it was",
    "client.enabled": "a client was switched on",
    "client.disabled": "a client was switched off by an admin",
    "client.traffic_reset": (
        "a client's traffic counters were set back to zero: by an admin, or at expiry "
        "when its `reset` period started a new one"
    ),
    "client.limited": "the sweep switched a client off: its traffic quota is used up",
    "client.expired": "the sweep switched a client off: its expiry time passed",
    "client.first_connected": "a client's traffic was counted by this panel's core for the "
    "first time",
    "client.device_added": "a new device of a client was admitted to its subscription "
    "(data.device says which); raised within a few seconds",
    "client.device_refused": "a new device was refused: the subscription's device limit "
    "is reached (data.device says which); once per device until a device is removed",
    "client.usage_reached": "a client used a share of its quota given in webhookUsagePercents "
    "(data.percent says which); once per share and quota",
    "client.expires_in_72_hours": "a client's expiry is 72 hours away or less",
    "client.expires_in_48_hours": "a client's expiry is 48 hours away or less",
    "client.expires_in_24_hours": "a client's expiry is 24 hours away or less",
    "client.expired_24_hours_ago": "a client's expiry passed a day ago",
    "node.online": "a node's heartbeat answers again",
    "node.offline": "a node's heartbeat fails (down, unreachable or answering nonsense)",
    "node.out_of_step": "a change could not be pushed to a node; it is brought in step later",
    "core.stopped": "the core, seen running, stopped or failed (errorMsg says why)",
    "core.out_of_step": "the core refused what is stored and runs something else",
    "admin.login_failed": "a sign-in to the panel was refused (wrong credentials)",
    "endpoint.test": "an admin asked for a test delivery to this endpoint",
}


def checked_events(value: object) -> list[str]:
    """The event names of an endpoint's `events`: a list of names from EVENTS, each once
    (an empty list: every event)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ServiceError("events must be an array of event names (empty: every event)")
    unknown = [name for name in value if name not in EVENTS]
    if unknown:
        raise ServiceError(f"unknown event {unknown[0][:64]!r}; the events are {', '.join(EVENTS)}")
    return list(dict.fromkeys(value))


def wanted(events: list[str], event: str) -> bool:
    """Whether an endpoint asking for `events` gets `event`; a test goes where asked."""
    return not events or event in events or event == "endpoint.test"
