"""Where the panel keeps its data and how it listens, from flags, environment or defaults.

Every option of `appliance run` has an environment variable, so a systemd unit or a
container can configure the panel without editing a command line. A flag beats its
variable; a port given either way beats the stored setting, so a user locked out by a
bad port can always get back in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = {
    "data_dir": "APPLIANCE_DATA_DIR",
    "listen": "APPLIANCE_LISTEN",
    "port": "APPLIANCE_PORT",
    "sub_port": "APPLIANCE_SUB_PORT",
    "db": "APPLIANCE_DB",
    "log_level": "APPLIANCE_LOG_LEVEL",
    "core": "APPLIANCE_CORE",
    "cert_dirs": "APPLIANCE_CERT_DIRS",
    "sub_workers": "APPLIANCE_SUB_WORKERS",
    "header_timeout": "APPLIANCE_HEADER_TIMEOUT",
    "body_timeout": "APPLIANCE_BODY_TIMEOUT",
    "sub_connections_per_address": "APPLIANCE_SUB_CONNECTIONS_PER_ADDRESS",
    "instance_name": "APPLIANCE_INSTANCE_NAME",
    "instance_address": "APPLIANCE_INSTANCE_ADDRESS",
}
DB_FILE = "appliance.db"
MAX_SUB_WORKERS = 64
# How long a connection may make either port wait (web.connections): for a request's
# line and headers (and, between requests, idle), and for each byte of its body.
HEADER_TIMEOUT_SECONDS = 15.0
BODY_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 3600.0
# Connections one client address may hold at once on the subscription port, per process:
# client apps open one or two; a few hundred are an attack or a proxy (trustedProxies).
SUB_CONNECTIONS_PER_ADDRESS = 64
MAX_SUB_CONNECTIONS_PER_ADDRESS = 100_000
# (option, its flag, the setting it overrides for the run): the Settings page says so.
SETTING_OVERRIDES = (
    ("listen", "--listen", "webListen"),
    ("port", "--port", "webPort"),
    ("sub_port", "--sub-port", "subPort"),
)


@dataclass(frozen=True)
class Options:
    data_dir: str
    db: str
    listen: str | None = None
    port: int | None = None
    sub_port: int | None = None
    log_level: str = "info"
    core: str | None = None  # the core binary; None finds xray, then v2ray, on PATH
    # Directories beyond the standard ones that certificate and key files may be in
    # (services.file_paths); only the host's owner sets them, never the API.
    cert_dirs: tuple[str, ...] = ()
    # Processes serving the subscription port, always; None (`auto`): the panel, and up
    # to one worker per core while the demand lasts. One: the panel itself.
    sub_workers: int | None = None
    header_timeout: float = HEADER_TIMEOUT_SECONDS
    body_timeout: float = BODY_TIMEOUT_SECONDS
    sub_connections_per_address: int = SUB_CONNECTIONS_PER_ADDRESS
    # How this process is listed among the panels sharing its database (server/cluster);
    # None: the host's name, and the address it reaches the database from.
    instance_name: str | None = None
    instance_address: str | None = None

    @property
    def log_file(self) -> str:
        return os.path.join(self.data_dir, "logs", "panel.log")


def default_data_dir() -> str:
    if os.geteuid() == 0:
        return "/var/lib/appliance"
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "appliance")


def resolve(args) -> Options:
    """Merge parsed CLI arguments (attributes named like `ENV`'s keys) with the
    environment and defaults."""

    def pick(name: str):
        value = getattr(args, name, None)
        if value in (None, ""):
            value = os.environ.get(ENV[name]) or None
        return value

    data_dir = os.path.abspath(pick("data_dir") or default_data_dir())
    db = pick("db") or os.path.join(data_dir, DB_FILE)
    return Options(
        data_dir=data_dir,
        db=db,
        listen=pick("listen"),
        port=_port(pick("port"), "--port"),
        sub_port=_port(pick("sub_port"), "--sub-port"),
        log_level=pick("log_level") or "info",
        core=pick("core"),
        cert_dirs=_cert_dirs(getattr(args, "cert_dirs", None)),
        sub_workers=_workers(pick("sub_workers")),
        header_timeout=_seconds(pick("header_timeout"), "header_timeout", HEADER_TIMEOUT_SECONDS),
        body_timeout=_seconds(pick("body_timeout"), "body_timeout", BODY_TIMEOUT_SECONDS),
        sub_connections_per_address=_per_address(pick("sub_connections_per_address")),
        instance_name=pick("instance_name"),
        instance_address=pick("instance_address"),
    )


def _cert_dirs(flags: list[str] | None) -> tuple[str, ...]:
    """`--cert-dir` flags, else the directories of the environment variable separated by
    ':'; each made absolute."""
    dirs = flags or (os.environ.get(ENV["cert_dirs"]) or "").split(os.pathsep)
    return tuple(os.path.abspath(d) for d in dirs if d.strip())


def _workers(value) -> int | None:
    if value is None or str(value).strip().lower() == "auto":
        return None
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if not 1 <= count <= MAX_SUB_WORKERS:
        raise SystemExit(
            f"--sub-workers must be auto or a number of processes from 1 to {MAX_SUB_WORKERS} "
            f"(got {value!r})"
        )
    return count


def _seconds(value, name: str, default: float) -> float:
    if value is None:
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = 0.0
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        raise SystemExit(
            f"{ENV[name]} must be a number of seconds above 0 and at most "
            f"{MAX_TIMEOUT_SECONDS:g} (got {value!r})"
        )
    return seconds


def _per_address(value) -> int:
    if value is None:
        return SUB_CONNECTIONS_PER_ADDRESS
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = -1
    if not 0 <= count <= MAX_SUB_CONNECTIONS_PER_ADDRESS:
        raise SystemExit(
            "--sub-connections-per-address must be a number of connections from 0 (no cap) "
            f"to {MAX_SUB_CONNECTIONS_PER_ADDRESS} (got {value!r})"
        )
    return count


def _port(value, flag: str) -> int | None:
    if value is None:
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise SystemExit(f"{flag} must be a port number from 0 to 65535 (got {value!r})") from None
    if not 0 <= port <= 65535:
        raise SystemExit(f"{flag} must be a port number from 0 to 65535 (got {port})")
    return port
