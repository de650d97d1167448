"""The statements of device limits (`client_device`), and the one write path that
subscription workers have.

A device is admitted by inserting its slot: `(sub_id, slot)` and `(sub_id, hwid)` are
both unique, so of two new devices racing for the last free slot the database lets one
insert win and refuses the other, in any process, on every backend, with no lock taken.

Subscription workers read the panel's database on read-only sessions (`Store.attach`);
admission must write there too, so `DeviceWrites` holds a few plain connections of its
own that are not read-only and can run nothing but the statements below: insert a
device, note when known devices were last seen. They run in autocommit, so no read or
insert holds a transaction open; the batch of sightings is one short transaction. The
panel admits through the same class, so both admit alike. A device refused is written
the same way, once (`device_refusal`), for the webhook pass that raises
client.device_refused (services/webhooks/devices.py).
"""

from __future__ import annotations

import sqlite3
import threading

import gevent

DEVICE_COLUMNS = "hwid, os, os_version, model, user_agent, address, first_seen, last_seen"
REFUSAL_COLUMNS = "hwid, os, os_version, model, user_agent, address, first_seen"
# Connections kept for admission per process: a few requests admit at once at most.
WRITE_CONNECTIONS = 4
# Refused devices kept per subscription: past this, one that asks with ever new device
# ids writes nothing more.
REFUSALS_KEPT = 20
# How long a write waits for SQLite's writer lock, yielding to the other greenlets (the
# holder may be one of this process's, which a blocking wait would never let finish).
SQLITE_WAIT_SECONDS = 10


def device_slot(rows, sub_id: str, hwid: str) -> int | None:
    """The slot the device holds on the subscription; None when it holds none."""
    found = rows("SELECT slot FROM client_device WHERE sub_id = ? AND hwid = ?", [sub_id, hwid])
    return found[0][0] if found else None


def taken_slots(rows, sub_id: str) -> list[int]:
    """The slots the subscription's devices hold, in order."""
    return [
        row[0]
        for row in rows("SELECT slot FROM client_device WHERE sub_id = ? ORDER BY slot", [sub_id])
    ]


def devices_of(rows, sub_ids: list[str]) -> list[tuple]:
    """(sub id, DEVICE_COLUMNS...) of the devices of some subscription ids, each
    subscription's in the order they were first seen."""
    if not sub_ids:
        return []
    return rows(
        f"SELECT sub_id, {DEVICE_COLUMNS} FROM client_device "
        f"WHERE sub_id IN ({_marks(sub_ids)}) ORDER BY sub_id, first_seen, slot",
        list(sub_ids),
    )


def device_counts(rows, sub_ids: list[str]) -> dict[str, int]:
    """sub id -> how many devices it holds, for those that hold any."""
    if not sub_ids:
        return {}
    found = rows(
        f"SELECT sub_id, COUNT(*) FROM client_device WHERE sub_id IN ({_marks(sub_ids)}) "
        "GROUP BY sub_id",
        list(sub_ids),
    )
    return {sub_id: count for sub_id, count in found}


def delete_device(store, sub_id: str, hwid: str) -> int:
    """Forget one device of a subscription (inside the caller's transaction), and the
    devices it refused: with a place free, a refusal is news again."""
    store.execute("DELETE FROM device_refusal WHERE sub_id = ?", [sub_id])
    return store.execute("DELETE FROM client_device WHERE sub_id = ? AND hwid = ?", [sub_id, hwid])


def delete_devices(store, sub_id: str) -> int:
    """Forget every device of a subscription and every device it refused (inside the
    caller's transaction)."""
    store.execute("DELETE FROM device_refusal WHERE sub_id = ?", [sub_id])
    return store.execute("DELETE FROM client_device WHERE sub_id = ?", [sub_id])


class DeviceWrites:
    """Plain writable connections that run the admission statements alone."""

    def __init__(self, store, size: int = WRITE_CONNECTIONS):
        self.store = store
        self._idle: list = []
        self._slots = threading.BoundedSemaphore(size)  # cooperative once gevent patched it

    def rows(self, statement: str, params: list) -> list[tuple]:
        """Reads for admission, on the same connections (they see every insert)."""
        return self._run(lambda cursor: _fetch(cursor, self._dialect(statement), params))

    def insert(self, sub_id: str, slot: int, device: tuple) -> bool:
        """Insert the device (DEVICE_COLUMNS' values) at `slot`; False when a unique key
        refused it (the slot or the device is taken meanwhile)."""
        statement = self._dialect(
            f"INSERT INTO client_device (sub_id, slot, {DEVICE_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        try:
            self._run(lambda cursor: cursor.execute(statement, [sub_id, slot, *device]))
        except self._integrity_errors():
            return False
        return True

    def refuse(self, sub_id: str, device: tuple) -> bool:
        """Note that the subscription refused the device (DEVICE_COLUMNS' values up to
        the address, then when): False when it was noted before or REFUSALS_KEPT are."""
        kept = self.rows("SELECT COUNT(*) FROM device_refusal WHERE sub_id = ?", [sub_id])
        if kept[0][0] >= REFUSALS_KEPT:
            return False
        statement = self._dialect(
            f"INSERT INTO device_refusal (sub_id, {REFUSAL_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        )
        try:
            self._run(lambda cursor: cursor.execute(statement, [sub_id, *device]))
        except self._integrity_errors():
            return False
        return True

    def seen(self, sightings: list[tuple[int, str, str, str]]) -> None:
        """Last sightings as (last seen, address, sub id, hwid), in one batch."""
        if not sightings:
            return
        statement = self._dialect(
            "UPDATE client_device SET last_seen = ?, address = ? WHERE sub_id = ? AND hwid = ?"
        )
        # One transaction for the batch: in autocommit each row would be a commit of its
        # own, and ten thousand of them every few seconds (SQLite syncs each) starved the
        # requests the batch exists to spare.
        begin = "BEGIN IMMEDIATE" if self.store.dialect == "sqlite" else "BEGIN"

        def batch(cursor) -> None:
            cursor.execute(begin)
            try:
                cursor.executemany(statement, sightings)
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")

        self._run(batch)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def _run(self, work):
        with self._slots:
            connection = self._idle.pop() if self._idle else self._connect()
            try:
                result = self._with_turn(connection, work)
            except self._integrity_errors():
                self._idle.append(connection)
                raise
            except Exception:
                connection.close()
                raise
            self._idle.append(connection)
            return result

    def _with_turn(self, connection, work):
        waited, pause = 0.0, 0.005
        while True:
            cursor = connection.cursor()
            try:
                return work(cursor)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if waited >= SQLITE_WAIT_SECONDS:
                    raise
            finally:
                cursor.close()
            gevent.sleep(pause)
            waited += pause
            pause = min(pause * 2, 0.1)

    def _connect(self):
        connection = self.store.writable_connect()
        if self.store.dialect == "sqlite":
            connection.execute("PRAGMA busy_timeout = 0")
        elif self.store.dialect == "postgres":
            connection.autocommit = True
        else:
            connection.autocommit(True)
        return connection

    def _dialect(self, statement: str) -> str:
        return statement if self.store.dialect == "sqlite" else statement.replace("?", "%s")

    def _integrity_errors(self) -> tuple[type[BaseException], ...]:
        if self.store.dialect == "sqlite":
            return (sqlite3.IntegrityError,)
        if self.store.dialect == "postgres":
            import psycopg2

            return (psycopg2.IntegrityError,)
        import pymysql

        return (pymysql.err.IntegrityError,)


def _fetch(cursor, statement: str, params: list) -> list[tuple]:
    cursor.execute(statement, params)
    return [tuple(row) for row in cursor.fetchall()]


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))
