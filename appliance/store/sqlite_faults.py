"""The SQLite file as something other programs can lock or make unwritable.

Another program can hold the file's write lock (a `sqlite3` shell left in `BEGIN
EXCLUSIVE`, a backup tool), and the file, its `-wal` file or its folder can become
read-only or fail. Such faults are the database being unavailable, as a networked server
that went away is: the request answers 503 with a sentence, and the panel recovers by
itself on the next request once the fault is gone.

Waiting for the lock is the delicate part. SQLite's own busy timeout sleeps inside the C
library, which under gevent stops the whole process: every other request, the
subscription server and the WebSockets waited the full five seconds of Python's default
with each write. So connections here wait only briefly in C (`C_BUSY_SECONDS`, for the
rare moments a reader meets a lock), and a write transaction asks for the lock without
waiting in C, retrying with cooperative sleeps until `WRITE_LOCK_WAIT_SECONDS` after it
first asked; then it fails with "database is locked". Writers of this process still take
turns through Pony's transaction lock, so waiting behind one of our own long writes is not
bounded, only waiting for another program.

Recovering is the other. SQLite opens a file it may not write read-only, and such a
connection stays read-only after the file is writable again. A connection therefore notes
at opening whether its files could be written (`Connection.opened_read_only`); a write
transaction on one that could not reconnects first, so the first write after the fault
is lifted succeeds, even on a connection that only read during it.
"""

from __future__ import annotations

import os
import sqlite3
import time

from pony.orm.dbapiprovider import OperationalError
from pony.orm.dbproviders.sqlite import SQLiteProvider

C_BUSY_SECONDS = 0.2
# The README promises an answer within three seconds; the rest is for the request's work.
WRITE_LOCK_WAIT_SECONDS = 2.0
WRITE_LOCK_POLL_SECONDS = 0.05

LOCKED = "the database file is locked by another program; try again when it lets go"
FAULTS = {
    sqlite3.SQLITE_BUSY: LOCKED,
    sqlite3.SQLITE_LOCKED: LOCKED,
    sqlite3.SQLITE_PROTOCOL: LOCKED,
    sqlite3.SQLITE_READONLY: (
        "the database file cannot be written; check that the file, its -wal and -shm "
        "files and its folder are writable by the panel"
    ),
    sqlite3.SQLITE_PERM: "the database file may not be written; check its permissions",
    sqlite3.SQLITE_CANTOPEN: (
        "the database file cannot be opened; check that it and its folder exist and are "
        "writable by the panel"
    ),
    sqlite3.SQLITE_IOERR: (
        "the database file cannot be read or written (a disk input/output error); check "
        "the disk and that the file, its -wal file and its folder are writable"
    ),
    sqlite3.SQLITE_FULL: "the disk holding the database file is full",
}


def fault_reason(exc: BaseException) -> str | None:
    """What went wrong, in words, when `exc` is SQLite reporting a lock, a read-only or
    failing file or a full disk (as the driver raised it or as Pony wrapped it); None for
    anything else."""
    original = getattr(exc, "original_exc", None) or exc
    if not isinstance(original, sqlite3.Error):
        return None
    code = getattr(original, "sqlite_errorcode", None)
    if code is None:
        return None
    return FAULTS.get(code & 0xFF)


class Connection(sqlite3.Connection):
    """A connection that knows whether SQLite had to open its files read-only."""

    def __init__(self, database: str, *args, **kwargs):
        # Looked at before opening: a fault that starts in between fails the first write
        # (and that closes the connection), one that ends costs one needless reconnect.
        self.opened_read_only = not all(
            os.access(path, os.W_OK)
            for path in (database, f"{database}-wal", f"{database}-shm")
            if os.path.exists(path)
        )
        super().__init__(database, *args, **kwargs)


class OpenedReadOnly(sqlite3.OperationalError):
    """A write asked of a connection opened while its files could not be written."""

    def __init__(self):
        super().__init__("attempt to write a readonly database")
        self.sqlite_errorcode = sqlite3.SQLITE_READONLY


class CooperativeSQLiteProvider(SQLiteProvider):
    """Pony's SQLite provider on `Connection`s, waiting for another program's write lock
    with gevent-friendly sleeps instead of inside SQLite."""

    def __init__(self, database, filename: str, **kwargs):
        super().__init__(database, filename, factory=Connection, **kwargs)

    def should_reconnect(self, exc: BaseException) -> bool:
        """Pony drops the connection and opens a new one when this says so."""
        return isinstance(exc, OpenedReadOnly)

    def set_transaction_mode(self, connection, cache) -> None:
        if not cache.immediate:
            super().set_transaction_mode(connection, cache)
            return
        if connection.opened_read_only:
            raise OperationalError(OpenedReadOnly())
        deadline = time.monotonic() + WRITE_LOCK_WAIT_SECONDS
        connection.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                try:
                    super().set_transaction_mode(connection, cache)
                    return
                except OperationalError as exc:
                    if fault_reason(exc) != LOCKED or time.monotonic() >= deadline:
                        raise
                time.sleep(WRITE_LOCK_POLL_SECONDS)
        finally:
            connection.execute(f"PRAGMA busy_timeout = {int(C_BUSY_SECONDS * 1000)}")
