"""Installing the core and its geo files from published releases.

The release list comes from a configurable URL that answers like GitHub's releases API
(by default XTLS/Xray-core's). It is cached for 15 minutes per URL, and a list fetched
once is served stale while the source fails, so a flaky network never empties the version
picker. Every download is bounded in time and size and checked against the digest its
publisher put beside it (Xray's `.dgst`, a geo file's `.sha256sum`) before anything
replaces what is installed; a core release without a digest is refused rather than
trusted. Every connection goes through the egress guard on behalf of the setting that
named the source (`coreReleaseUrl` also for the files its list links to), and an error
status is reported as such, never with what the server sent along.

Files are assembled in a staging directory inside the destination and moved in with
`os.replace`, so the core's directory holds the old file or the new one, never a
half-written one. A new core binary must answer `-version` like a core before it moves
in. The old files stay linked in the staging directory until the running core has
accepted the new ones: when the hand-off to the core fails, they are put back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from appliance.core.process import DETECT_TIMEOUT, VERSION_LINE, version_output
from appliance.errors import ServiceError
from appliance.runtime.downloads import (
    DIGEST_LIMIT,
    LIST_LIMIT,
    SHA256SUM,
    download,
    fetch,
    published_releases,
)
from appliance.runtime.egress import Egress, for_url

log = logging.getLogger(__name__)

CACHE_SECONDS = 15 * 60
ARCHIVE_LIMIT = 200 << 20
GEOFILE_LIMIT = 200 << 20
MEMBER_LIMIT = 300 << 20  # one unpacked file: a zip bomb stops here
CHUNK = 64 << 10
BIN_DIR = "bin"
BINARY_NAME = "xray"
STAGING_PREFIX = ".staging-"

# platform.machine() -> the suffix of Xray's release asset (its friendly build names).
ASSET_SUFFIXES = {
    "x86_64": "64",
    "amd64": "64",
    "aarch64": "arm64-v8a",
    "arm64": "arm64-v8a",
    "i386": "32",
    "i686": "32",
    "armv7l": "arm32-v7a",
    "armv6l": "arm32-v6",
    "riscv64": "riscv64",
    "s390x": "s390x",
}
# Geo files the panel keeps up to date, and the setting that holds each one's source.
GEOFILES = {"geoip.dat": "geoipUrl", "geosite.dat": "geositeUrl"}
# `openssl dgst -sha256` prints "SHA2-256" (OpenSSL 3) or "SHA256" (older); Xray's
# release job strips the "(file)" part, but a digest that kept it is read as well.
DGST_SHA256 = re.compile(r"^SHA2?-?256(?:\([^)]*\))?\s*=\s*([0-9a-fA-F]{64})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Release:
    tag: str
    assets: dict[str, str]  # asset name -> download URL


@dataclass(frozen=True)
class _Cached:
    url: str
    fetched_at: float
    releases: list[Release]


def installed_binary(core_dir: str) -> str | None:
    """The core binary installCore put under `core_dir`, if there is one."""
    path = os.path.join(core_dir, BIN_DIR, BINARY_NAME)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


class CoreReleases:
    """Lists, downloads and installs core releases and geo files into `<core_dir>/bin`.

    `core` is the panel's core service; this class needs three things of it: `info()`
    (its state), `restart()`, and `use_binary(path)`, which runs the core from `path` from
    now on and raises `ServiceError`, leaving the core as it was, when that fails."""

    def __init__(
        self,
        settings,
        core_dir: str,
        core,
        *,
        machine: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.bin_dir = os.path.join(core_dir, BIN_DIR)
        self.core = core
        self.machine = machine or platform.machine()
        self.clock = clock
        self._cache: _Cached | None = None
        self._busy = threading.Lock()

    # ---- versions ------------------------------------------------------------------------

    def versions(self) -> list[str]:
        """Tags of the releases that have a build for this machine, newest first."""
        asset = self.asset_name()
        return [release.tag for release in self._releases() if asset in release.assets]

    def asset_name(self) -> str:
        suffix = ASSET_SUFFIXES.get(self.machine.lower())
        if suffix is None:
            raise ServiceError(
                f"Xray publishes no build the panel knows for this machine ({self.machine}); "
                "install the core by hand and point the panel at it"
            )
        return f"Xray-linux-{suffix}.zip"

    def _releases(self) -> list[Release]:
        url = self._setting_url("coreReleaseUrl")
        cached, now = self._cache, self.clock()
        if cached and cached.url == url and now - cached.fetched_at < CACHE_SECONDS:
            return cached.releases
        try:
            raw = fetch(self._egress("coreReleaseUrl"), url, LIST_LIMIT, "the core release list")
            releases = _parse_releases(raw, url)
        except ServiceError as exc:
            if cached and cached.url == url:
                log.warning("serving the cached core release list: %s", exc.msg)
                return cached.releases
            raise
        self._cache = _Cached(url, now, releases)
        return releases

    def _release(self, version: str) -> Release:
        """The listed release named `version` ("latest": the newest with a build here)."""
        asset = self.asset_name()
        candidates = [release for release in self._releases() if asset in release.assets]
        if version == "latest":
            if not candidates:
                raise ServiceError(f"the core release list has no release with {asset}")
            return candidates[0]
        for release in candidates:
            if version in (release.tag, "v" + release.tag) or release.tag == "v" + version:
                return release
        listed = ", ".join(release.tag for release in candidates[:5]) or "none"
        raise ServiceError(
            f"no core release {version[:100]!r} with {asset} in the release list "
            f"(newest listed: {listed})"
        )

    # ---- installing the core -------------------------------------------------------------

    def install(self, version: str) -> str:
        """Download, verify and install release `version`, then run the core on it."""
        if not isinstance(version, str) or not version.strip():
            raise ServiceError("name the core version to install, like v25.1.30 or latest")
        with self._exclusive():
            release = self._release(version.strip())
            asset = self.asset_name()
            digest_url = release.assets.get(asset + ".dgst")
            if digest_url is None:
                raise ServiceError(
                    f"release {release.tag} publishes no checksum ({asset}.dgst); "
                    "an unverified core is not installed"
                )
            egress = self._egress("coreReleaseUrl")
            with self._staging() as staging:
                digest = fetch(egress, digest_url, DIGEST_LIMIT, f"{asset}.dgst")
                expected = _dgst_sha256(digest, asset)
                archive = os.path.join(staging, asset)
                download(egress, release.assets[asset], archive, ARCHIVE_LIMIT, asset, expected)
                names = _unpack(archive, staging, asset)
                found = _core_version(os.path.join(staging, BINARY_NAME), release.tag)
                # The binary moves in last, so it never runs beside geo files of the past.
                moved = self._move_in(staging, [*names[1:], names[0]])
                try:
                    self.core.use_binary(os.path.join(self.bin_dir, BINARY_NAME))
                except ServiceError as exc:
                    _put_back(moved)
                    raise ServiceError(
                        f"the core did not start on {release.tag} ({exc.msg}); "
                        "the previous core files were put back"
                    ) from None
        return f"core {found} ({release.tag}) installed; the core runs it now"

    # ---- geo files -----------------------------------------------------------------------

    def update_geofiles(self, name: str = "") -> str:
        """Download and verify geo file `name` (empty: every known one), replace them all
        at once, then restart a running core so it loads them."""
        names = [self._geofile(name)] if name else list(GEOFILES)
        with self._exclusive(), self._staging() as staging:
            for file_name in names:
                key = GEOFILES[file_name]
                url, egress = self._setting_url(key), self._egress(key)
                published = fetch(
                    egress, url + ".sha256sum", DIGEST_LIMIT, file_name, missing_ok=True
                )
                expected = _sha256sum(published, file_name) if published is not None else None
                path = os.path.join(staging, file_name)
                if download(egress, url, path, GEOFILE_LIMIT, file_name, expected) == 0:
                    raise ServiceError(f"{url} sent an empty {file_name}; nothing was replaced")
            moved = self._move_in(staging, names)
            updated = " and ".join(names)
            if self.core.info().get("state") != "running":
                return f"{updated} updated; the core loads them when it starts"
            try:
                self.core.restart()
            except ServiceError as exc:
                _put_back(moved)
                raise ServiceError(
                    f"the core did not restart with the new {updated} ({exc.msg}); "
                    "the previous files were put back"
                ) from None
        return f"{updated} updated; the core restarted to load them"

    def geofiles(self) -> list[dict]:
        """Each geo file the panel keeps: whether the core's folder holds it, its size and
        when it was last replaced (ms since the epoch), so a routing rule that needs a
        missing one can say so before the core refuses it."""
        files = []
        for name in GEOFILES:
            try:
                found = os.stat(os.path.join(self.bin_dir, name))
            except OSError:
                files.append({"name": name, "installed": False, "size": 0, "updatedAt": 0})
                continue
            updated = int(found.st_mtime * 1000)
            files.append(
                {"name": name, "installed": True, "size": found.st_size, "updatedAt": updated}
            )
        return files

    def _geofile(self, name: str) -> str:
        if name not in GEOFILES:
            raise ServiceError(
                f"fileName must be one of {', '.join(GEOFILES)} (got {name[:100]!r}); "
                "leave it out to update all of them"
            )
        return name

    # ---- files ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        if not self._busy.acquire(blocking=False):
            raise ServiceError(
                "a core or geo file download is already running; try again when it finished"
            )
        try:
            yield
        finally:
            self._busy.release()

    @contextlib.contextmanager
    def _staging(self) -> Iterator[str]:
        """A new directory beside the installed files (same file system, so `os.replace`
        is atomic), removed with whatever it holds. Called with the lock held, so staging
        directories left by a panel that died mid-download go first."""
        os.makedirs(self.bin_dir, exist_ok=True)
        for entry in os.listdir(self.bin_dir):
            if entry.startswith(STAGING_PREFIX):
                shutil.rmtree(os.path.join(self.bin_dir, entry), ignore_errors=True)
        staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.bin_dir)
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _move_in(self, staging: str, names: list[str]) -> list[tuple[str, str | None]]:
        """Replace each named file of the bin directory with its staged copy, keeping the
        old one linked in `staging`; returns (installed path, kept old copy or None)."""
        moved = []
        for name in names:
            target = os.path.join(self.bin_dir, name)
            previous = None
            if os.path.exists(target):
                previous = os.path.join(staging, name + ".previous")
                try:
                    os.link(target, previous)
                except OSError:
                    shutil.copy2(target, previous)
            os.replace(os.path.join(staging, name), target)
            moved.append((target, previous))
        return moved

    def _setting_url(self, key: str) -> str:
        url = self.settings.get(key).strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServiceError(
                f"the setting {key} must be an http:// or https:// URL (got {url[:200]!r})"
            )
        return url

    def _egress(self, key: str) -> Egress:
        """The guard for fetches on behalf of setting `key` (its URL and what it links to)."""
        return for_url(self.settings, key, self._setting_url(key))


def _put_back(moved: list[tuple[str, str | None]]) -> None:
    for target, previous in reversed(moved):
        if previous is None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(target)
        else:
            os.replace(previous, target)


# ---- release list and digests ----------------------------------------------------------------


def _parse_releases(raw: bytes, url: str) -> list[Release]:
    return [
        Release(tag, {name: asset["browser_download_url"] for name, asset in assets.items()})
        for tag, _item, assets in published_releases(raw, url, "the core release list")
    ]


def _dgst_sha256(raw: bytes, asset: str) -> str:
    match = DGST_SHA256.search(raw.decode("utf-8", "replace"))
    if match is None:
        raise ServiceError(
            f"{asset}.dgst holds no SHA2-256 line; an unverified core is not installed"
        )
    return match.group(1).lower()


def _sha256sum(raw: bytes, file_name: str) -> str:
    match = SHA256SUM.match(raw.decode("utf-8", "replace"))
    if match is None:
        raise ServiceError(f"{file_name}.sha256sum holds no SHA-256; nothing was replaced")
    return match.group(1).lower()


# ---- the archive -------------------------------------------------------------------------------


def _unpack(archive: str, staging: str, asset: str) -> list[str]:
    """Extract the core binary (first in the result) and any geo files from the root of
    `archive` into `staging`. Nothing else is extracted, so no name in the archive can
    point outside it."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = {
                info.filename.removeprefix("./"): info
                for info in bundle.infolist()
                if not info.is_dir()
            }
            if BINARY_NAME not in members:
                raise ServiceError(
                    f"{asset} holds no '{BINARY_NAME}' binary; nothing was installed"
                )
            names = [BINARY_NAME, *(name for name in GEOFILES if name in members)]
            for name in names:
                _extract(bundle, members[name], os.path.join(staging, name), asset)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise ServiceError(
            f"{asset} is not a valid zip archive ({exc}); nothing was installed"
        ) from None
    os.chmod(os.path.join(staging, BINARY_NAME), 0o755)
    return names


def _extract(bundle: zipfile.ZipFile, info: zipfile.ZipInfo, path: str, asset: str) -> None:
    if info.file_size > MEMBER_LIMIT:
        raise ServiceError(f"{info.filename} in {asset} is larger than {MEMBER_LIMIT >> 20} MB")
    size = 0
    with bundle.open(info) as source, open(path, "wb") as out:
        while chunk := source.read(CHUNK):
            size += len(chunk)
            if size > MEMBER_LIMIT:
                raise ServiceError(
                    f"{info.filename} in {asset} is larger than {MEMBER_LIMIT >> 20} MB"
                )
            out.write(chunk)


def _core_version(binary: str, tag: str) -> str:
    """The version the unpacked binary reports; it must run here and say it is a core."""
    try:
        printed = version_output(binary)
    except subprocess.TimeoutExpired:
        raise ServiceError(
            f"the core of {tag} did not answer -version within {DETECT_TIMEOUT} s; "
            "nothing was installed"
        ) from None
    except OSError as exc:
        raise ServiceError(
            f"the core of {tag} does not run on this machine ({exc.strerror}); "
            "nothing was installed"
        ) from None
    match = VERSION_LINE.search(printed)
    if match is None:
        raise ServiceError(
            f"the binary in {tag} does not report a core version; nothing was installed"
        )
    return f"{match.group(1)} {match.group(2)}"
