"""A client as seen from one inbound: the entries an inbound record shows of its clients.

Why this module exists: an inbound record carries its clients (`settings.clients`, one
`clientStats` entry each, or the slim list of list/slim), and the inbound records must not
import the clients package to make them. These are made here, below every service
package, from the one client value (`domain/clients.py`). Pure: records in, dicts out.
"""

from __future__ import annotations

from appliance.domain.clients import ClientRecord, api_view


def client_api_view(entry: tuple[ClientRecord, int | None]) -> dict:
    """A `by_inbound` entry as the client's API view (without inboundIds)."""
    return api_view(entry[0], [])


def slim_entry(row: tuple) -> dict:
    """What list/slim keeps of a client inside an inbound, from a slim `by_inbound` row."""
    email, enable, comment = row
    return {"email": email, "enable": bool(enable), "comment": comment}


def client_stat(inbound_id: int, view: dict, entry: tuple[ClientRecord, int | None]) -> dict:
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
        "lastOnline": entry[1] or 0,
    }
