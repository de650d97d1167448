"""A client as the spec's Client record, from a row read in CLIENT_COLUMNS order.

Why this module exists: the clients API, the subscriptions, what a node is told to run
and the inbound records (each client in `settings.clients`, its `clientStats` entry) all
turn the same raw rows into the same shapes. One module makes them, below every service
package that reads clients, so the shapes cannot drift apart and an inbound can show its
clients without importing the clients package. Pure: rows in, dicts out.
"""

from __future__ import annotations

from typing import Any

# Column order shared by `client_view` and the raw SQL readers of clients (services/clients).
CLIENT_COLUMNS = (
    "uuid",
    "email",
    "sub_id",
    "password",
    "auth",
    "flow",
    "security",
    "reverse_tag",
    "total_bytes",
    "expiry_time",
    "limit_ip",
    "reset_days",
    "tg_id",
    "comment",
    "enable",
    "group_name",
    "ad_tag",
    "mt_secret",
    "method",
    "created_at",
    "updated_at",
)

WIDTH = len(CLIENT_COLUMNS)


def client_view(row: tuple, inbound_ids: list[int], traffic: tuple) -> dict:
    """The API shape of a client from a tuple in `CLIENT_COLUMNS` order."""
    (
        uuid,
        email,
        sub_id,
        password,
        auth,
        flow,
        security,
        reverse_tag,
        total,
        expiry,
        limit_ip,
        reset,
        tg_id,
        comment,
        enable,
        group,
        ad_tag,
        mt_secret,
        method,
        created,
        updated,
    ) = row
    up, down, traffic_enable = traffic
    return {
        "id": uuid,
        "email": email,
        "subId": sub_id,
        "password": password,
        "auth": auth,
        "flow": flow,
        "security": security,
        "reverse": {"tag": reverse_tag} if reverse_tag else None,
        "totalGB": total,
        "expiryTime": expiry,
        "limitIp": limit_ip,
        "reset": reset,
        "tgId": tg_id,
        "comment": comment,
        "enable": bool(enable),
        "group": group,
        "adTag": ad_tag,
        "secret": mt_secret,
        "method": method,
        "createdAt": created,
        "updatedAt": updated,
        "inboundIds": inbound_ids,
        "traffic": {"up": up or 0, "down": down or 0, "enable": bool(traffic_enable)},
    }


def client_api_view(row: tuple) -> dict:
    """A row of `ClientQuery.by_inbound` as the client's API view (without inboundIds)."""
    return client_view(row[:WIDTH], [], traffic_of(row[WIDTH : WIDTH + 3]))


def slim_entry(row: tuple) -> dict:
    """What list/slim keeps of a client inside an inbound, from a slim `by_inbound` row."""
    email, enable, comment = row
    return {"email": email, "enable": bool(enable), "comment": comment}


def client_stat(inbound_id: int, view: dict, row: tuple) -> dict:
    """A clientStats entry: the client's counters as seen from one inbound."""
    return {
        "inboundId": inbound_id,
        "email": view["email"],
        "up": view["traffic"]["up"],
        "down": view["traffic"]["down"],
        "total": view["totalGB"],
        "expiryTime": view["expiryTime"],
        "reset": view["reset"],
        "enable": view["enable"] and view["traffic"]["enable"],
        "lastOnline": row[WIDTH + 3] or 0,
    }


def traffic_of(values: tuple) -> tuple:
    """(up, down, enable) of a LEFT JOINed traffic row, which may be all NULL."""
    up, down, enable = values
    return (up or 0, down or 0, traffic_flag(enable))


def traffic_flag(value: Any) -> bool:
    """A traffic flag; a client without a traffic row counts as enabled."""
    return True if value is None else bool(value)
