"""A client's secrets fitted to the inbounds it is on.

Why this module exists: a Shadowsocks 2022 inbound takes keys of its cipher's length,
and a legacy cipher is the inbound's, so a client's password and method follow its
inbounds whenever either side changes: the client's attachments (services/clients) or
an inbound's cipher (services/inbounds/records.py). It lives with the inbounds, the
lower of the two packages, so both can call it.
"""

from __future__ import annotations

from appliance.domain import client_rules
from appliance.services.inbounds.views import record_of


def refit(row, inbounds: list) -> None:
    """Re-check a client row's secrets against a set of inbound rows (a 2022 key of the
    wrong length is replaced, a legacy cipher copied); the caller holds the db_session."""
    record = {"password": row.password, "method": row.method}
    client_rules.fit_inbounds(record, [record_of(i) for i in inbounds])
    row.password, row.method = record["password"], record["method"]
