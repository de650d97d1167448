"""Where the files an admin names may be, and the one check that keeps them there.

An admin types file paths into the panel: the core's log files in its config template,
certificate and key files of inbounds (and of anything else in the template that speaks
TLS) and of the panel's own ports. The core runs as the panel's user (root under
systemd) and creates, appends to or reads whatever it is told, and the panel serves the
core's logs back through `server/corelogs`; a path taken as given would make both a way
to read and to write any file on the host. So every such path is confined: it holds no
`..`, and once symbolic links are resolved it lies inside the place meant for it:

- the core's logs: `access.log` (log.access) or `error.log` (log.error) in
  `<data dir>/core`, the files the panel itself chose and reads back; a relative name is
  taken in that directory, as the core (which runs there) would take it;
- certificates and keys: absolute paths in `<data dir>/certs`, `/etc/letsencrypt`,
  `/etc/ssl`, or a directory the host's owner adds with `--cert-dir` /
  `APPLIANCE_CERT_DIRS`. Never through the API: a place an admin could widen would
  confine nothing.

A refusal reads the same whether the file exists or not, so it tells nothing about the
disk outside. A path is kept as typed, not as resolved: a certificate behind a link that
its renewal moves (Let's Encrypt's `live/`) keeps working.

Data stored before these rules (an older release, an imported backup) must not stop the
panel: `drop_misplaced_paths` removes such paths from the config the core is given, and
the caller writes why into the panel's log; `check_paths` refuses them on input.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from appliance.errors import ServiceError

CORE_DIR = "core"
CERTS_DIR = "certs"
SYSTEM_CERT_DIRS = ("/etc/letsencrypt", "/etc/ssl")
# log key of the core config -> the file in the core directory it may name.
CORE_LOGS = {"access": "access.log", "error": "error.log"}
# Values of a log key that name no file ("" sends the error log to the core's output).
NO_LOG_FILE = ("", "none")
CERTIFICATE_FILE_KEYS = ("certificateFile", "keyFile")


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

    def is_core_log(self, key: str, path: str) -> bool:
        """Whether `path` is the panel's own file for log `key`: it resolves to that name
        in the resolved core directory (so that file may not be a link leading out)."""
        core_dir = _real(self.core_dir)
        return (
            bool(path)
            and core_dir is not None
            and _real(path) == os.path.join(core_dir, CORE_LOGS[key])
        )


def confined(path: object, allowed_dirs: Iterable[str], what: str) -> str:
    """`path`, stripped, when it holds no `..` and resolves (symbolic links followed) to a
    place inside one of `allowed_dirs`; else ServiceError with a sentence that reads the
    same whether or not the file exists."""
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
            f"({', '.join(dirs)}); put the file there"
        )
    return text


def resolved_dirs(dirs: Iterable[str]) -> list[str]:
    """`dirs` with symbolic links resolved, without duplicates, in order."""
    result: list[str] = []
    for directory in dirs:
        real = _real(directory)
        if real is not None and real not in result:
            result.append(real)
    return result


def check_paths(document: object, places: FilePlaces, label: str = "") -> None:
    """Refuse, naming it, the first misplaced path in a core template or an inbound's
    `streamSettings` (`label` prefixes the names in messages)."""
    problems = _misplaced(document, places, label, repair=False)
    if problems:
        raise ServiceError(problems[0])


def drop_misplaced_paths(document: object, places: FilePlaces, label: str = "") -> list[str]:
    """Make `document` (a core template or an inbound's `streamSettings` the caller owns)
    fit for the core: a misplaced log path is removed (the panel's default applies), a
    log path in place is written as the panel's file, and a certificate with a misplaced
    file is left out. Returns a sentence per change, for the panel's log."""
    return _misplaced(document, places, label, repair=True)


def _misplaced(document: object, places: FilePlaces, label: str, *, repair: bool) -> list[str]:
    problems: list[str] = []
    log = document.get("log") if isinstance(document, dict) else None
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
    for certificates, where in _certificate_lists(document, label):
        kept = []
        for index, certificate in enumerate(certificates):
            try:
                for key in CERTIFICATE_FILE_KEYS:
                    value = certificate.get(key) if isinstance(certificate, dict) else None
                    if value not in (None, ""):
                        places.certificate(value, f"{where}[{index}].{key}")
            except ServiceError as exc:
                problems.append(exc.msg)
                continue
            kept.append(certificate)
        if repair:
            certificates[:] = kept
    return problems


def _certificate_lists(node: object, label: str) -> Iterator[tuple[list, str]]:
    """Every `certificates` list of a TLS object anywhere in `node`, with its name."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = _name(label, key)
            if key == "certificates" and isinstance(value, list):
                yield value, where
            else:
                yield from _certificate_lists(value, where)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _certificate_lists(value, f"{label}[{index}]")


def _name(label: str, key: str) -> str:
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
