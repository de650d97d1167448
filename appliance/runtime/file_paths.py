"""Where the files an admin names may be, and the one check that keeps them there.

An admin types file paths into the panel: the core's log files in its config template,
certificate and key files of inbounds (and of anything else in the template that speaks
TLS) and of the panel's own ports, unix sockets inbounds listen on or connections are
handed to, the folder a Hysteria inbound serves to strangers, the geo files routing rules
name. The core runs as the panel's user (root under systemd) and creates, appends to,
reads, serves or connects to whatever it is told, and the panel serves the core's logs
back through `server/corelogs`; a path taken as given would make all of them a way to
read and to write any file on the host. So every such path is confined: it holds no
`..`, and once symbolic links are resolved it lies inside the place meant for it:

- the core's logs: `access.log` (log.access) or `error.log` (log.error) in
  `<data dir>/core`, the files the panel itself chose and reads back; a relative name is
  taken in that directory, as the core (which runs there) would take it;
- certificates and keys: absolute paths in `<data dir>/certs`, `/etc/letsencrypt`,
  `/etc/ssl`, or a directory the host's owner adds with `--cert-dir` /
  `APPLIANCE_CERT_DIRS`. Never through the API: a place an admin could widen would
  confine nothing;
- unix sockets (an inbound's `listen`, with or without the core's `,0666` mode suffix; a
  fallback's or REALITY's `dest`/`target`; `dsSettings.path`): absolute paths in
  `<data dir>/sockets`. Abstract names (`@name`, `@@name`) touch no file and are taken as
  they are. A socket elsewhere could replace a service's socket or hand connections from
  the internet to one (a container engine's, a database's);
- a Hysteria masquerade of type `file`: its `dir` in `<data dir>/www`, since everything
  in it is served to anyone who connects;
- `ext:FILE:LIST` in the template's `routing` and `dns`: FILE a plain file name, read
  from the core's asset folder beside its binary (no `/`, no `..`).

`masterKeyLog` (TLS session keys) is refused outright: with it, anyone holding that file
and a capture reads every connection, and the only folder it could go to, the core's,
holds files the key lines would corrupt or be served through.

A refusal reads the same whether the file exists or not, so it tells nothing about the
disk outside. A path is kept as typed, not as resolved: a certificate behind a link that
its renewal moves (Let's Encrypt's `live/`) keeps working.

Data stored before these rules (an older release, an imported backup) must not stop the
panel: `drop_misplaced_paths` and `drop_misplaced_inbound` remove such paths from the
config the core is given (and with them the smallest part that cannot work without them:
a certificate, a fallback, a routing rule, a DNS server, a template inbound, or the
inbound itself), and the caller writes why into the panel's log; `check_paths` and
`check_inbound_paths` refuse them on input.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from appliance.errors import ServiceError

CORE_DIR = "core"
CERTS_DIR = "certs"
SOCKETS_DIR = "sockets"
WWW_DIR = "www"
SYSTEM_CERT_DIRS = ("/etc/letsencrypt", "/etc/ssl")
# log key of the core config -> the file in the core directory it may name.
CORE_LOGS = {"access": "access.log", "error": "error.log"}
# Values of a log key that name no file ("" sends the error log to the core's output).
NO_LOG_FILE = ("", "none")
CERTIFICATE_FILE_KEYS = ("certificateFile", "keyFile")
# Keys whose value, when it starts with "/", is a unix socket the core connects to
# (fallbacks, REALITY); "listen" is one it creates.
SOCKET_TARGET_KEYS = ("dest", "target")
# Template sections whose rules may name geo files of their own (`ext:FILE:LIST`).
ASSET_SECTIONS = ("routing", "dns")
ASSET_PREFIXES = ("ext:", "ext-domain:", "ext-ip:")
# The sections of an inbound record or view that may carry paths.
INBOUND_PARTS = ("listen", "settings", "streamSettings")


@dataclass(frozen=True)
class FilePlaces:
    """The places of one panel: its data directory and the certificate directories the
    host's owner added."""

    data_dir: str
    extra_cert_dirs: tuple[str, ...] = ()

    @property
    def core_dir(self) -> str:
        return os.path.join(self.data_dir, CORE_DIR)

    def core_log(self, key: str) -> str:
        """The file the panel has the core write log `key` ("access", "error") into."""
        return os.path.join(self.core_dir, CORE_LOGS[key])

    def cert_dirs(self) -> list[str]:
        """The directories certificate and key files may be in, resolved, in order."""
        return resolved_dirs(
            [os.path.join(self.data_dir, CERTS_DIR), *SYSTEM_CERT_DIRS, *self.extra_cert_dirs]
        )

    def certificate(self, path: object, what: str) -> str:
        """`path` when it is a certificate or key file in its place; else ServiceError."""
        if isinstance(path, str) and path.strip() and not os.path.isabs(path.strip()):
            raise ServiceError(f"{what} must be an absolute path (got {_shown(path)})")
        return confined(path, self.cert_dirs(), what)

    def log_file(self, key: str, value: object, what: str) -> str:
        """The log setting `value` of key `key` as the core should get it: "" or "none"
        as they are, the panel's own file for its name; else ServiceError."""
        if not isinstance(value, str):
            raise ServiceError(f"{what} must be a string: none, empty or a file name")
        if value.strip().lower() in NO_LOG_FILE:
            return value
        wanted = self.core_log(key)
        path = os.path.join(self.core_dir, value.strip())
        if _has_parent_step(value) or not self.is_core_log(key, path):
            raise ServiceError(
                f"{what} may be none, empty or {wanted}, the file the panel reads back "
                f"(got {_shown(value)})"
            )
        return wanted

    @property
    def sockets_dir(self) -> str:
        return os.path.join(self.data_dir, SOCKETS_DIR)

    @property
    def www_dir(self) -> str:
        return os.path.join(self.data_dir, WWW_DIR)

    def socket(self, value: object, what: str, *, mode_suffix: bool = False) -> str:
        """`value` when it is an abstract socket name or a socket path in the sockets
        folder (`mode_suffix`: the core's ",0666" after the path is allowed, as in a
        `listen`); else ServiceError."""
        if isinstance(value, str) and value.strip().startswith("@"):
            return value
        path = value.split(",", 1)[0] if isinstance(value, str) and mode_suffix else value
        if isinstance(path, str) and path.strip() and not os.path.isabs(path.strip()):
            raise ServiceError(
                f"{what} must be an absolute socket path or an abstract name like @name "
                f"(got {_shown(path)})"
            )
        confined(path, [self.sockets_dir], what, advice="put the socket there or use @name")
        return value

    def served_dir(self, value: object, what: str) -> str:
        """`value` when it is a folder in the one whose files the core may serve to
        anyone; else ServiceError."""
        if not isinstance(value, str) or not value.strip():
            raise ServiceError(f"{what} must be a folder in {self.www_dir}, whose files it serves")
        if not os.path.isabs(value.strip()):
            raise ServiceError(f"{what} must be an absolute path (got {_shown(value)})")
        return confined(value, [self.www_dir], what, advice="put the files there")

    def is_core_log(self, key: str, path: str) -> bool:
        """Whether `path` is the panel's own file for log `key`: it resolves to that name
        in the resolved core directory (so that file may not be a link leading out)."""
        core_dir = _real(self.core_dir)
        return (
            bool(path)
            and core_dir is not None
            and _real(path) == os.path.join(core_dir, CORE_LOGS[key])
        )


def confined(
    path: object, allowed_dirs: Iterable[str], what: str, advice: str = "put the file there"
) -> str:
    """`path`, stripped, when it holds no `..` and resolves (symbolic links followed) to a
    place inside one of `allowed_dirs`; else ServiceError with a sentence that reads the
    same whether or not the file exists (ending in `advice`)."""
    if not isinstance(path, str) or not path.strip():
        raise ServiceError(f"{what} must be a file path")
    text = path.strip()
    if _has_parent_step(text):
        raise ServiceError(f"{what} may not contain '..' (got {_shown(text)})")
    dirs = resolved_dirs(allowed_dirs)
    real = _real(text)
    if real is None or not any(_inside(real, directory) for directory in dirs):
        raise ServiceError(
            f"{what} {_shown(text)} is outside the directories allowed for it "
            f"({', '.join(dirs)}); {advice}"
        )
    return text


def asset_name(value: str, what: str) -> str:
    """`value` (`ext:FILE:LIST`) when FILE is a plain file name, which the core reads from
    its asset folder; else ServiceError."""
    parts = value.split(":", 2)
    file_name = parts[1] if len(parts) > 1 else ""
    if (
        not file_name.strip()
        or "/" in file_name
        or "\\" in file_name
        or "\x00" in file_name
        or file_name.strip() in (".", "..")
    ):
        raise ServiceError(
            f"{what} must name a geo file by its plain name, like ext:custom.dat:list, "
            f"which the core reads from its own folder (got {_shown(value)})"
        )
    return value


def resolved_dirs(dirs: Iterable[str]) -> list[str]:
    """`dirs` with symbolic links resolved, without duplicates, in order."""
    result: list[str] = []
    for directory in dirs:
        real = _real(directory)
        if real is not None and real not in result:
            result.append(real)
    return result


def check_paths(document: object, places: FilePlaces, label: str = "") -> None:
    """Refuse, naming it, the first misplaced path in a core template or a list of
    outbounds (`label` prefixes the names in messages)."""
    problems = _misplaced(document, places, label, repair=False)
    if problems:
        raise ServiceError(problems[0])


def drop_misplaced_paths(document: object, places: FilePlaces, label: str = "") -> list[str]:
    """Make `document` (a core template the caller owns) fit for the core: a misplaced log
    path is removed (the panel's default applies), a log path in place is written as the
    panel's file, and every other misplaced path is left out with the smallest part that
    needs it (see `_walk`). Returns a sentence per change, for the panel's log."""
    return _misplaced(document, places, label, repair=True)


def check_inbound_paths(record: dict, places: FilePlaces) -> None:
    """Refuse, naming it, the first misplaced path of an inbound record: its `listen`,
    and what its `settings` and `streamSettings` name."""
    problems: list[str] = []
    _walk(_inbound_parts(record), "", places, problems, repair=False)
    if problems:
        raise ServiceError(problems[0])


def missing_certificate_file(record: dict) -> str:
    """Names the first certificate or key file of an inbound record's TLS certificates
    that is not on disk ("the certificate file PATH"), or "" when all are there. Call it
    only on a record whose paths `check_inbound_paths` accepted: outside their places,
    whether a file exists is nobody's business."""
    stream = record.get("streamSettings")
    tls = stream.get("tlsSettings") if isinstance(stream, dict) else None
    certificates = tls.get("certificates") if isinstance(tls, dict) else None
    for certificate in certificates if isinstance(certificates, list) else []:
        if not isinstance(certificate, dict):
            continue
        for key, what in (("certificateFile", "certificate file"), ("keyFile", "key file")):
            path = certificate.get(key)
            if isinstance(path, str) and path.strip() and not os.path.exists(path.strip()):
                return f"the {what} {path.strip()}"
    return ""


def drop_misplaced_inbound(view: dict, places: FilePlaces) -> tuple[bool, list[str]]:
    """Make an inbound view the caller owns fit for the core, as `drop_misplaced_paths`
    does for a template. Returns whether the inbound can still run (not when the socket
    it listens on, or the one its REALITY hands over to, is misplaced) and a sentence per
    change."""
    problems: list[str] = []
    unusable = _walk(_inbound_parts(view), f"inbound {view.get('tag')}:", places, problems, True)
    return not unusable, problems


def _inbound_parts(record: dict) -> dict:
    """The parts of an inbound that may name files, sharing their objects with it."""
    return {key: record[key] for key in INBOUND_PARTS if key in record}


def _misplaced(document: object, places: FilePlaces, label: str, *, repair: bool) -> list[str]:
    problems: list[str] = []
    if not isinstance(document, dict):
        _walk(document, label, places, problems, repair)
        return problems
    log = document.get("log")
    if isinstance(log, dict):
        for key in CORE_LOGS:
            if key not in log:
                continue
            try:
                placed = places.log_file(key, log[key], _name(label, f"log.{key}"))
            except ServiceError as exc:
                problems.append(exc.msg)
                if repair:
                    del log[key]
                continue
            if repair:
                log[key] = placed
    for key in list(document):
        where = _name(label, key)
        assets = key in ASSET_SECTIONS
        if _walk(document[key], where, places, problems, repair, assets=assets) and repair:
            del document[key]
    return problems


def _walk(
    node: object,
    where: str,
    places: FilePlaces,
    problems: list[str],
    repair: bool,
    *,
    assets: bool = False,
) -> bool:
    """Check (and with `repair`, fix) every path in `node`, appending a sentence per
    problem; True when `node` cannot work without what was wrong in it.

    A misplaced certificate or key file, socket or `ext:` geo file makes the object that
    holds it unusable, and so every object above it up to the nearest list, from which it
    is removed: a certificate, a fallback, a routing rule, a DNS server, an inbound or
    outbound of the template; an inbound view as a whole reports True. A misplaced
    masquerade folder or `ext:` host key is removed alone (the core's defaults apply), as
    is any `masterKeyLog`."""
    if isinstance(node, list):
        unusable, kept = False, []
        for index, value in enumerate(node):
            if _walk(value, f"{where}[{index}]", places, problems, repair, assets=assets):
                if isinstance(value, dict):
                    continue
                unusable = True
            kept.append(value)
        if repair:
            node[:] = kept
        return unusable
    if isinstance(node, str):
        return assets and _failed(problems, _asset, node, where)
    if not isinstance(node, dict):
        return False
    unusable = False
    for key in list(node):
        value, name = node[key], _name(where, key)
        if _failed(problems, _check_value, key, value, name, places):
            unusable = True
        elif _failed(problems, _check_removable, key, value, name, places, assets):
            if repair:
                del node[key]
        elif isinstance(value, (dict, list)) or assets:
            unusable |= _walk(value, name, places, problems, repair, assets=assets)
    return unusable


def _check_value(key: str, value: object, name: str, places: FilePlaces) -> None:
    """The checks of one key whose object cannot work without a path in place."""
    if key in CERTIFICATE_FILE_KEYS and value not in (None, ""):
        places.certificate(value, name)
    elif key == "listen" and isinstance(value, str) and value.strip().startswith(("/", "@")):
        places.socket(value, name, mode_suffix=True)
    elif key in SOCKET_TARGET_KEYS and isinstance(value, str) and value.strip().startswith("/"):
        places.socket(value, name)
    elif (
        key == "dsSettings"
        and isinstance(value, dict)
        and value.get("abstract") is not True
        and value.get("path") not in (None, "")
    ):
        places.socket(value["path"], f"{name}.path")


def _check_removable(key: str, value: object, name: str, places: FilePlaces, assets: bool) -> None:
    """The checks of one key the core can do without."""
    if key == "masterKeyLog" and value not in (None, ""):
        raise ServiceError(
            f"{name} must be empty: the panel does not let the core write TLS session "
            f"keys to a file, which would let anyone holding it read every connection"
        )
    if key == "masquerade" and isinstance(value, dict):
        kind = value.get("type")
        if isinstance(kind, str) and kind.strip().lower() == "file":
            places.served_dir(value.get("dir"), f"{name}.dir")
    if assets:
        _asset(key, name)


def _asset(value: str, where: str) -> None:
    if value.startswith(ASSET_PREFIXES):
        asset_name(value, where)


def _failed(problems: list[str], check: Callable[..., None], *args: object) -> bool:
    """Run `check(*args)`; on ServiceError note its sentence and answer True."""
    try:
        check(*args)
    except ServiceError as exc:
        problems.append(exc.msg)
        return True
    return False


def _name(label: str, key: str) -> str:
    if label.endswith(":"):
        return f"{label} {key}"
    return f"{label}.{key}" if label else key


def _has_parent_step(path: str) -> bool:
    return ".." in path.replace("\\", "/").split("/")


def _real(path: str) -> str | None:
    """The resolved absolute path; None for one that is no path (a NUL byte in it)."""
    try:
        return os.path.realpath(path)
    except (ValueError, OSError):
        return None


def _inside(real: str, directory: str) -> bool:
    return real == directory or real.startswith(directory.rstrip("/") + "/")


def _shown(value: str) -> str:
    """A typed value quoted for a message, cut to a readable length."""
    text = value.strip()
    return repr(text if len(text) <= 200 else text[:200] + "...")
