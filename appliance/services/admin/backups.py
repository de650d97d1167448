"""Database backups and restores: the rules around the store-level copies.

A backup is a fresh consistent snapshot written to a scratch file in the data directory,
opened and then unlinked, so a download that breaks off leaves nothing behind. A restore
loads the offered file into a scratch SQLite file and checks it (`store.backup`), has the
routes' rules judge its values (`import_review`: bad settings are reset and listed, an
inbound that cannot run here refuses it); only then does it stop the core, keep the
current data as a timestamped file under `<data dir>/backups/`, and replace the live data
in one transaction. Any failure from there on puts the kept data back and starts the core
again. A success restarts the panel process, so nothing keeps a value read from the old
data.

SQLite work runs in gevent's thread pool: copying, checking or loading a large file takes
seconds, and in a thread it waits on the database's locks without stopping every other
request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import gevent
from gevent.lock import Semaphore

from appliance.errors import ServiceError
from appliance.services.admin.import_review import review_file
from appliance.store import backup
from appliance.store.transfer import migrate_database

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 512 * 1024 * 1024  # the largest database importDB accepts
BACKUP_DIR = "backups"
SCRATCH_PREFIX = ".scratch-"
SQLITE_TYPE = "application/vnd.sqlite3"
SQL_TYPE = "application/sql; charset=utf-8"


@dataclass
class BackupFile:
    """A backup ready to send: an open file (already unlinked) and how to name it."""

    stream: BinaryIO
    size: int
    filename: str
    content_type: str


class Backups:
    def __init__(
        self,
        store,
        data_dir: str,
        core,
        on_restored: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.directory = os.path.join(data_dir, BACKUP_DIR)
        self.core = core
        self.on_restored = on_restored
        self.clock = clock
        self._restoring = Semaphore()
        self._swept = False

    @property
    def networked(self) -> bool:
        return self.store.dialect != "sqlite"

    # ---- backups -----------------------------------------------------------------------------

    def database_file(self) -> BackupFile:
        """The whole database as one SQLite file (any backend)."""
        path = self.scratch_path(".db")
        self._guarded(self.snapshot_to, path)
        return self._open_once(path, f"appliance-{self._stamp()}.db", SQLITE_TYPE)

    def migration_file(self) -> BackupFile:
        """SQL text for a SQLite database, the portable SQLite file for a networked one."""
        if self.networked:
            return self.database_file()
        snapshot, dump = self.scratch_path(".db"), self.scratch_path(".sql")
        try:
            self.snapshot_to(snapshot)
            _in_thread(backup.dump_sql, snapshot, dump)
        except Exception:
            _remove(dump)
            raise
        finally:
            _remove(snapshot)
        return self._open_once(dump, f"appliance-{self._stamp()}.sql", SQL_TYPE)

    def snapshot_to(self, path: str) -> None:
        """Write a consistent snapshot of the live database to `path` as a SQLite file."""
        if not self.networked:
            _in_thread(backup.snapshot_sqlite, self.store.url.path, path)
            return
        conn = self.store.raw_connect()
        try:
            backup.snapshot_networked(conn, self.store.dialect, path)
        finally:
            conn.close()

    def scratch_path(self, suffix: str) -> str:
        """A new file name in the backup directory (same file system as the data)."""
        os.makedirs(self.directory, exist_ok=True)
        if not self._swept:
            # Scratch files outlive a process that died mid-backup; none is in use yet.
            for name in os.listdir(self.directory):
                if name.startswith(SCRATCH_PREFIX):
                    _remove(os.path.join(self.directory, name))
            self._swept = True
        return os.path.join(self.directory, f"{SCRATCH_PREFIX}{secrets.token_hex(8)}{suffix}")

    # ---- restore --------------------------------------------------------------------------------

    def restore(self, upload_path: str) -> tuple[str, list[str]]:
        """Replace the live data with the uploaded SQLite file or SQL dump; returns what
        happened and a sentence per value reset on the way. The upload file is consumed."""
        prepared = self.scratch_path(".db")
        try:
            if self._restoring.locked():
                raise ServiceError("another database import is running; wait for it to finish")
            with self._restoring:
                _in_thread(self._prepare, upload_path, prepared)
                resets = _in_thread(self._review, prepared)
                counts = _in_thread(backup.row_counts, prepared)
                kept = self._keep_current()
                self._replace(prepared, kept)
        finally:
            _remove(prepared)
            _remove(upload_path)
        self.on_restored()
        reset = f"; reset, as this panel refuses them: {'; '.join(resets)}" if resets else ""
        return (
            f"database imported: {_count(counts.get('inbound', 0), 'inbound')}, "
            f"{_count(counts.get('client', 0), 'client')}{reset}; the previous data is "
            f"kept in {kept}; the panel restarts now"
        ), resets

    def _prepare(self, upload_path: str, prepared: str) -> None:
        if backup.is_sqlite_file(upload_path):
            os.replace(upload_path, prepared)
        elif backup.looks_like_sql_dump(upload_path):
            backup.load_sql_dump(upload_path, prepared)
        else:
            raise ServiceError(
                "the file is neither a SQLite database nor an SQL dump of one; "
                "upload a file that getDb or getMigration produced"
            )
        backup.check_restorable(prepared)
        backup.prepare_for_restore(
            prepared, None if self.networked else backup.page_size(self.store.url.path)
        )

    def _review(self, prepared: str) -> list[str]:
        """The routes' rules on the checked file, with the files and the ports of the
        panel that runs the core."""
        return review_file(prepared, self.core.places, self.core.inbounds.reserved_ports)

    def _keep_current(self) -> str:
        kept = os.path.join(self.directory, f"appliance-before-import-{self._stamp()}.db")
        if os.path.exists(kept):
            kept = kept[: -len(".db")] + f"-{secrets.token_hex(3)}.db"
        partial = self.scratch_path(".db")
        try:
            self._guarded(self.snapshot_to, partial)
            os.replace(partial, kept)
        finally:
            _remove(partial)
        return kept

    def _replace(self, prepared: str, kept: str) -> None:
        core_was_running = self.core.process.state == "running"
        if core_was_running:
            self.core.stop()
        try:
            self._write_live(prepared)
        except Exception as exc:
            reason = exc.msg if isinstance(exc, ServiceError) else "an unexpected error"
            if not isinstance(exc, ServiceError):
                log.exception("replacing the database failed")
            self._put_back(kept)
            if core_was_running:
                self._start_core()
            raise ServiceError(
                f"the database was not replaced ({reason}); the panel keeps its previous data"
            ) from None

    def _write_live(self, prepared: str) -> None:
        if self.networked:
            migrate_database(prepared, self.store.url, replace=True)
        else:
            _in_thread(backup.restore_sqlite, prepared, self.store.url.path)

    def _put_back(self, kept: str) -> None:
        """After a failed SQLite restore the live file may hold the new pages; write the
        kept copy back (a networked replace rolled back in its own transaction)."""
        if self.networked:
            return
        try:
            _in_thread(backup.restore_sqlite, kept, self.store.url.path)
        except Exception:
            log.exception("putting the previous database back failed; it is kept in %s", kept)

    def _start_core(self) -> None:
        try:
            self.core.restart()
        except ServiceError as exc:
            log.error("the core did not start again after a failed import: %s", exc.msg)

    # ---- files -----------------------------------------------------------------------------

    def _open_once(self, path: str, filename: str, content_type: str) -> BackupFile:
        stream = open(path, "rb")  # noqa: SIM115 - the response closes it when sent
        _remove(path)
        size = os.fstat(stream.fileno()).st_size
        return BackupFile(stream, size, filename, content_type)

    def _guarded(self, action: Callable[[str], None], path: str) -> None:
        """Run `action(path)`, removing the scratch file at `path` if it fails."""
        try:
            action(path)
        except Exception:
            _remove(path)
            raise

    def _stamp(self) -> str:
        return time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.clock()))


def _in_thread(function: Callable, *args):
    """Run `function(*args)` in gevent's thread pool; its exceptions are raised here
    (the pool would also print each one as a traceback, refusals included)."""

    def call() -> tuple:
        try:
            return function(*args), None
        except Exception as exc:
            return None, exc

    result, error = gevent.get_hub().threadpool.apply(call)
    if error is not None:
        raise error
    return result


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _remove(path: str) -> None:
    """Remove a scratch file and what SQLite may have left beside it: a write that failed
    half-way (a full disk) can leave its rollback journal."""
    for name in (path, f"{path}-journal", f"{path}-wal", f"{path}-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)
