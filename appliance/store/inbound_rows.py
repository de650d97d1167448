"""The columns an inbound row is read by, in the order `inbound_record` unpacks them
(services/inbounds/views.py): one list for every statement that reads inbounds whole."""

from __future__ import annotations

INBOUND_COLUMNS = [
    "id",
    "remark",
    "tag",
    "protocol",
    "listen",
    "port",
    "enable",
    "expiry_time",
    "total",
    "up",
    "down",
    "settings",
    "stream_settings",
    "sniffing",
    "node_id",
    "created_at",
    "updated_at",
]
INBOUND_SELECT = ", ".join(INBOUND_COLUMNS)
