"""The reads subscriptions make, by name, and the plain connections the hot one runs on.

A subscription request makes a single indexed read (`client.sub_id`, joined with the
traffic row and the client's attachments) that yields everything that belongs to its
clients, and with a device limit on, whether the requesting device is one of theirs;
the inbounds and hosts it is rendered from are read rarely and kept by the service.
These reads run on plain DB-API connections kept for them (`ReadConnections`) rather
than in a Pony `db_session`: on SQLite the session's bookkeeping costs more than the
indexed query itself, and they need nothing of Pony. The panel API's link lists (by
email, by inbound) read through the Store in the caller's db_session instead; every
function that takes `rows` accepts either (`Store.rows` or `ReadConnections.rows`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from appliance.domain.clients import ClientRecord
from appliance.store.client_rows import (
    CLIENT_FROM,
    CLIENT_SELECT,
    CLIENT_WIDTH,
    client_record,
    client_records,
)
from appliance.store.inbound_rows import INBOUND_SELECT

log = logging.getLogger(__name__)

# (statement with ? placeholders, parameters) -> rows.
Rows = Callable[[str, list], list[tuple]]
# Enough for the subscription server's reads to overlap; on a networked database each is a
# server connection, so they stay few.
READ_CONNECTIONS = 8
# Everything a subscription needs of its clients, one row per attachment (one row with a
# NULL inbound id for a client on none), and on each the slot the requesting device holds
# on the subscription (NULL: none, or no device asked).
LOOKUP_SQL = (
    f"SELECT {CLIENT_SELECT}, ci.inbound_id, "
    "(SELECT d.slot FROM client_device d WHERE d.sub_id = c.sub_id AND d.hwid = ?) "
    f"{CLIENT_FROM} LEFT JOIN client_inbound ci ON ci.client_id = c.id "
    "WHERE c.sub_id = ? ORDER BY c.id, ci.inbound_id"
)
HOST_SELECT = "id, inbound_id, remark, address, port, security, sni, tags, enable, sort_order"
INBOUND_SELECT_AS_I = ", ".join(f"i.{column.strip()}" for column in INBOUND_SELECT.split(","))


def subscription_clients(
    rows: Rows, sub_id: str, hwid: str = ""
) -> tuple[list[tuple[ClientRecord, tuple[int, ...]]], int | None]:
    """The clients of a subscription id, in id order, each with the ids of the inbounds
    it is attached to (in order; none for a client on none); and the slot device `hwid`
    holds on the subscription (None: it holds none). One read: the device check of every
    request of a device-aware app costs no second round trip."""
    found: list[tuple[ClientRecord, list[int]]] = []
    last = slot = None
    for row in rows(LOOKUP_SQL, [hwid, sub_id]):
        if row[0] != last:
            last = row[0]
            found.append((client_record(row), []))
        inbound_id, slot = row[CLIENT_WIDTH], row[CLIENT_WIDTH + 1]
        if inbound_id is not None:
            found[-1][1].append(inbound_id)
    return [(client, tuple(inbound_ids)) for client, inbound_ids in found], slot


def clients_of_key(store, key: str) -> list[ClientRecord]:
    """The client of an email key (none or one)."""
    return client_records(
        store.rows(
            f"SELECT {CLIENT_SELECT} {CLIENT_FROM} WHERE c.email_key = ? ORDER BY c.id", [key]
        )
    )


def enabled_inbound_rows(rows: Rows, inbound_ids: list[int]) -> list[tuple]:
    """The rows of those of `inbound_ids` that are enabled."""
    return rows(
        f"SELECT {INBOUND_SELECT} FROM inbound WHERE enable = ? AND id IN ({_marks(inbound_ids)})",
        [True, *inbound_ids],
    )


def attached_inbound_rows(store, client_ids: list[int]) -> list[tuple]:
    """(client id, the inbound's row...) of every attachment of the clients, by inbound,
    then client."""
    return store.rows(
        f"SELECT ci.client_id, {INBOUND_SELECT_AS_I} FROM client_inbound ci "
        "JOIN inbound i ON i.id = ci.inbound_id "
        f"WHERE ci.client_id IN ({_marks(client_ids)}) ORDER BY i.id, ci.client_id",
        client_ids,
    )


def attached_count(store, inbound_id: int) -> int:
    """How many clients an inbound has."""
    return store.rows("SELECT COUNT(*) FROM client_inbound WHERE inbound_id = ?", [inbound_id])[0][
        0
    ]


def attached_page(store, inbound_id: int, size: int, offset: int) -> list[int]:
    """The client ids of one page of an inbound's clients, in the order they were made."""
    rows = store.rows(
        "SELECT client_id FROM client_inbound WHERE inbound_id = ? "
        "ORDER BY client_id LIMIT ? OFFSET ?",
        [inbound_id, size, offset],
    )
    return [row[0] for row in rows]


def enabled_host_rows(rows: Rows, inbound_ids: list[int]) -> list[tuple]:
    """The enabled hosts of some inbounds as (id, inbound id, remark, address, port,
    security, sni, tags, enable, sort order), by inbound, in their order."""
    return rows(
        f"SELECT {HOST_SELECT} FROM host WHERE enable = ? AND inbound_id IN "
        f"({_marks(inbound_ids)}) ORDER BY inbound_id, sort_order, id",
        [True, *inbound_ids],
    )


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))


class ReadConnections:
    """A few plain DB-API connections (`Store.raw_connect`) for single reads outside
    Pony, each in autocommit mode so a read never holds a transaction open. At most
    READ_CONNECTIONS are in use at once; a caller beyond that waits for one.

    A networked server that restarted leaves every idle connection broken: a read that
    fails drops them all and is tried once more on a new connection, so the first
    request after the restart is served rather than failed."""

    def __init__(self, store, size: int = READ_CONNECTIONS):
        self.store = store
        self._idle: list = []
        self._slots = threading.BoundedSemaphore(size)  # cooperative once gevent patched it

    def rows(self, statement: str, params: list) -> list[tuple]:
        if self.store.dialect != "sqlite":
            statement = statement.replace("?", "%s")
        with self._slots:
            try:
                return self._read(statement, params)
            except Exception:
                log.warning("a subscription read failed; reconnecting", exc_info=True)
                self.close()
                return self._read(statement, params)

    def _read(self, statement: str, params: list) -> list[tuple]:
        connection = self._idle.pop() if self._idle else self._connect()
        try:
            cursor = connection.cursor()
            cursor.execute(statement, params)
            rows = list(cursor.fetchall())
            cursor.close()
        except Exception:
            connection.close()
            raise
        self._idle.append(connection)
        return rows

    def _connect(self):
        connection = self.store.raw_connect()
        if self.store.dialect == "postgres":
            connection.autocommit = True
        elif self.store.dialect == "mysql":
            connection.autocommit(True)
        return connection

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
