"""What the MTProto sync reads, by name: the MTProto inbounds this host runs and the
clients of each, with what decides whether a client's secret is served (enable, quota,
expiry and its traffic). Both run in the caller's db_session."""

from __future__ import annotations


def listeners(store) -> list[tuple[int, str, str, int, str]]:
    """(id, tag, listen, port, settings text) of the enabled MTProto inbounds of this
    host (none bound to a node)."""
    return store.rows(
        "SELECT id, tag, listen, port, settings FROM inbound "
        "WHERE protocol = ? AND enable = ? AND node_id IS NULL",
        ["mtproto", True],
    )


def secret_rows(store, inbound_id: int) -> list[tuple]:
    """The clients of one MTProto inbound as its sync reads them: (secret, email, ad tag,
    enable, total bytes, expiry, traffic up, down and enable), the traffic NULL for a
    client without a traffic row."""
    return store.rows(
        "SELECT c.mt_secret, c.email, c.ad_tag, c.enable, c.total_bytes, c.expiry_time, "
        "t.up, t.down, t.enable FROM client_inbound ci JOIN client c ON c.id = ci.client_id "
        "LEFT JOIN client_traffic t ON t.email_key = c.email_key WHERE ci.inbound_id = ?",
        [inbound_id],
    )
