"""The panel's own log: stderr, an optional rotating file, and a ring served by the API.

Why this module exists: `POST server/logs/:count` shows the panel's recent log lines in
the browser, so the process keeps the last 5000 formatted lines in memory next to the
usual stderr and file output. Each line is stored with its level number so the endpoint
can filter by level without parsing text.

Approach: the handlers sit on the root logger, whose level is WARNING, and the
`appliance` logger gets the configured level and propagates to root. Records from the
panel's own loggers therefore arrive at the configured level, while other libraries
(gevent, urllib3, ...) only reach the log with warnings and errors. Handlers installed
here are tagged, so a second `setup_logging` call replaces them instead of doubling
every line. The ring outlives reconfiguration.

Python's logging has no NOTICE level; the panel never logs at one, so the level name
`notice`, which the browser offers between info and warning, filters like `info`.

Callers must never pass secrets (passwords, tokens, private keys) into log messages;
nothing here redacts them.
"""

from __future__ import annotations

import collections
import logging
import logging.handlers
import os
import shutil
import subprocess
import sys

from appliance.errors import ServiceError
from appliance.runtime.environment import child_environment

RING_SIZE = 5000
MAX_COUNT = 10000
LINE_FORMAT = "%(asctime)s %(levelname)s - %(name)s: %(message)s"
DATE_FORMAT = "%Y/%m/%d %H:%M:%S"
FILE_MAX_BYTES = 1 << 20
FILE_BACKUPS = 3

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

# (level number, formatted line); appended by RingHandler, read by read_logs.
_ring: collections.deque[tuple[int, str]] = collections.deque(maxlen=RING_SIZE)
_HANDLER_TAG = "_appliance_log_handler"


class RingHandler(logging.Handler):
    """Appends each formatted record, with its level number, to the in-memory ring."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _ring.append((record.levelno, self.format(record)))
        except Exception:
            self.handleError(record)


def parse_level(level: str) -> int:
    """Return the logging level number for one of debug, info, notice, warning, error."""
    number = LEVELS.get(level.strip().lower()) if isinstance(level, str) else None
    if number is None:
        raise ServiceError(f"level must be one of {', '.join(LEVELS)} (got {level!r})")
    return number


def parse_count(count: int | str) -> int:
    """Return `count` as an int from 1 to MAX_COUNT; it may arrive as a URL string."""
    value: int | None = None
    if isinstance(count, int) and not isinstance(count, bool):
        value = count
    elif isinstance(count, str) and count.strip().isdigit():
        value = int(count.strip())
    if value is None or not 1 <= value <= MAX_COUNT:
        raise ServiceError(f"count must be an integer from 1 to {MAX_COUNT} (got {count!r})")
    return value


def setup_logging(log_file: str | None, level: str = "info") -> None:
    """Send panel logs at `level` and other libraries' warnings to stderr, file and ring."""
    panel_level = parse_level(level)
    formatter = logging.Formatter(LINE_FORMAT, DATE_FORMAT)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr), RingHandler()]
    if log_file:
        directory = os.path.dirname(os.path.abspath(log_file))
        os.makedirs(directory, exist_ok=True)
        handlers.append(
            logging.handlers.RotatingFileHandler(
                log_file, maxBytes=FILE_MAX_BYTES, backupCount=FILE_BACKUPS, encoding="utf-8"
            )
        )

    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_TAG, False)]:
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        setattr(handler, _HANDLER_TAG, True)
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.WARNING)

    panel = logging.getLogger("appliance")
    panel.setLevel(panel_level)
    panel.propagate = True


def read_logs(count: int | str, level: str = "info") -> str:
    """Return the last `count` ring lines at or above `level`, newest last, joined by "\\n"."""
    wanted = parse_count(count)
    threshold = parse_level(level)
    picked: list[str] = []
    for levelno, line in reversed(list(_ring)):  # copy first: appends may happen meanwhile
        if levelno >= threshold:
            picked.append(line)
            if len(picked) == wanted:
                break
    picked.reverse()
    return "\n".join(picked)


JOURNAL_PRIORITIES = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "err",
}


def read_journal(count: int | str, level: str = "info", unit: str = "appliance") -> str:
    """The service's lines from the systemd journal, for when the panel runs as a unit
    and the lines of earlier runs matter too."""
    wanted = parse_count(count)
    priority = JOURNAL_PRIORITIES[parse_level(level)]
    journalctl = shutil.which("journalctl")
    if journalctl is None:
        raise ServiceError("reading the system log needs journalctl, which is not installed")
    result = subprocess.run(
        [journalctl, "-u", unit, "-n", str(wanted), "-p", priority, "--no-pager", "-o", "short"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
        env=child_environment(),
    )
    if result.returncode != 0:
        raise ServiceError(f"journalctl failed: {result.stderr.strip()[:200]}")
    return result.stdout.rstrip("\n")
