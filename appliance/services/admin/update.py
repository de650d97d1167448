"""The panel updating itself: `server/getPanelUpdateInfo` and `server/updatePanel`.

Why this module exists: a panel installed as one binary on a VPS should move to a new
release from its own page, the way the core does through installCore. Releases are read
from the `panelUpdateUrl` setting, which answers like GitHub's releases API (a list,
newest first, or the single object of `/releases/latest`); drafts and prereleases are
not offered. A release carries one binary per platform, named
`appliance-linux-<arch>` (amd64, arm64, ...), and its SHA-256 either in the asset's
`digest` field (`sha256:<hex>`, as GitHub publishes it) or in an `<asset>.sha256` asset
in sha256sum form; a release with neither is refused.

Only a frozen panel (the PyInstaller binary, `sys.frozen`) replaces itself: a panel that
runs from a Python package belongs to pip, and overwriting the interpreter it runs on
would break it. The new binary is downloaded and verified by the same helpers that
install the core (`runtime.downloads.download_verified`), written beside the running one,
made executable, asked for its `version` (it must run here and name the release), and
only then moved over the old path with `os.replace`, which is atomic on one file
system. Any failure before that removes the download and leaves the old binary as it
was. The restart that follows re-executes the same path, so the new release starts.
The release list and everything it links to are fetched through the egress guard on
behalf of `panelUpdateUrl`.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from appliance import __version__
from appliance.core.process import child_environment
from appliance.errors import ServiceError
from appliance.runtime.downloads import LIST_LIMIT, download_verified, fetch, published_releases
from appliance.runtime.egress import for_url

BINARY_LIMIT = 300 << 20
VERSION_TIMEOUT = 30  # a onefile binary unpacks itself before it answers
ASSET_PREFIX = "appliance-linux-"
ARCHITECTURES = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "armv7",
    "i386": "386",
    "i686": "386",
    "riscv64": "riscv64",
    "s390x": "s390x",
}
DIGEST_FIELD = re.compile(r"^sha256:([0-9a-fA-F]{64})$")
NOT_FROZEN = "the panel runs from a Python package; upgrade it with pip"


@dataclass(frozen=True)
class PanelRelease:
    tag: str
    name: str
    url: str
    published_at: str
    notes: str
    assets: dict[str, tuple[str, str]]  # asset name -> (download URL, digest field)


class PanelUpdate:
    def __init__(
        self,
        settings,
        restart: Callable[[], None],
        *,
        binary: str | None = None,
        frozen: bool | None = None,
        machine: str | None = None,
        version: str = __version__,
    ):
        """`restart` re-executes the panel; `binary` is the file an update replaces (the
        running executable unless given) and `frozen` whether this panel is a binary."""
        self.settings = settings
        self.restart = restart
        self.binary = binary or sys.executable
        self.frozen = getattr(sys, "frozen", False) if frozen is None else frozen
        self.machine = machine or platform.machine()
        self.version = version
        self._busy = threading.Lock()

    def info(self) -> dict:
        """The newest release and whether it is newer than this panel."""
        release = self._latest()
        asset = self.asset_name()
        newer = _version_key(release.tag) > _version_key(self.version)
        return {
            "currentVersion": self.version,
            "latestVersion": release.tag,
            "updateAvailable": newer,
            "name": release.name,
            "url": release.url,
            "publishedAt": release.published_at,
            "notes": release.notes,
            "asset": asset if asset in release.assets else "",
            "canSelfUpdate": bool(self.frozen) and asset in release.assets,
        }

    def asset_name(self) -> str:
        arch = ARCHITECTURES.get(self.machine.lower(), self.machine.lower())
        return ASSET_PREFIX + arch

    def update(self) -> str:
        """Install the newest release over the running binary, then restart."""
        if not self.frozen:
            raise ServiceError(NOT_FROZEN)
        if not self._busy.acquire(blocking=False):
            raise ServiceError("a panel update is already running")
        try:
            release = self._latest()
            if _version_key(release.tag) <= _version_key(self.version):
                raise ServiceError(
                    f"the panel is at {self.version} and the newest release is {release.tag}; "
                    "there is nothing newer to install"
                )
            self._install(release)
        finally:
            self._busy.release()
        self.restart()
        return f"panel {release.tag} installed; the panel restarts now"

    def _install(self, release: PanelRelease) -> None:
        asset = self.asset_name()
        if asset not in release.assets:
            raise ServiceError(
                f"release {release.tag} has no build for this machine ({asset}); "
                "the panel was not changed"
            )
        url, digest = release.assets[asset]
        match = DIGEST_FIELD.match(digest)
        checksum = release.assets.get(asset + ".sha256", ("", ""))[0]
        directory = os.path.dirname(os.path.abspath(self.binary))
        handle, staged = tempfile.mkstemp(prefix=".update-", dir=directory)
        os.close(handle)
        try:
            download_verified(
                for_url(self.settings, "panelUpdateUrl", self._source()),
                url,
                staged,
                BINARY_LIMIT,
                asset,
                expected=match.group(1) if match else "",
                digest_url=checksum,
            )
            os.chmod(staged, _executable_mode(self.binary))
            _check_runs(staged, release.tag)
            os.replace(staged, self.binary)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(staged)

    def _latest(self) -> PanelRelease:
        url = self._source()
        egress = for_url(self.settings, "panelUpdateUrl", url)
        releases = _parse_releases(fetch(egress, url, LIST_LIMIT, "the panel release list"), url)
        if not releases:
            raise ServiceError(f"the panel release list at {url} holds no published release")
        return max(releases, key=lambda release: _version_key(release.tag))

    def _source(self) -> str:
        """The panelUpdateUrl setting, checked to be an http(s) URL."""
        url = self.settings.get("panelUpdateUrl").strip()
        if not url:
            raise ServiceError(
                "no panel release source is set: put a releases URL in the panelUpdateUrl setting"
            )
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServiceError(
                f"the setting panelUpdateUrl must be an http:// or https:// URL (got {url[:200]!r})"
            )
        return url


def _parse_releases(raw: bytes, url: str) -> list[PanelRelease]:
    releases = []
    for tag, item, assets in published_releases(raw, url, "the panel release list"):
        if not _version_key(tag):
            continue
        releases.append(
            PanelRelease(
                tag=tag,
                name=_text(item.get("name")) or tag,
                url=_text(item.get("html_url")),
                published_at=_text(item.get("published_at")),
                notes=_text(item.get("body"))[:20000],
                assets={
                    name: (asset["browser_download_url"], _text(asset.get("digest")))
                    for name, asset in assets.items()
                },
            )
        )
    return releases


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _version_key(tag: str) -> tuple[int, ...]:
    """1.2.10 > 1.2.9: the numbers of `v1.2.10`, before any `-suffix`."""
    return tuple(int(part) for part in re.findall(r"\d+", tag.split("-", 1)[0])[:4])


def _executable_mode(binary: str) -> int:
    """The running binary's permission bits (0755 when it cannot be read), executable."""
    try:
        mode = stat.S_IMODE(os.stat(binary).st_mode)
    except OSError:
        mode = 0o755
    return mode | stat.S_IXUSR


def _check_runs(path: str, tag: str) -> None:
    """The new binary must start here and report the release's version."""
    try:
        result = subprocess.run(
            [path, "version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=VERSION_TIMEOUT,
            env=child_environment(),
        )
    except subprocess.TimeoutExpired:
        raise ServiceError(
            f"the binary of {tag} did not answer `version` within {VERSION_TIMEOUT} s; "
            "the panel was not changed"
        ) from None
    except OSError as exc:
        raise ServiceError(
            f"the binary of {tag} does not run on this machine ({exc.strerror}); "
            "the panel was not changed"
        ) from None
    printed = result.stdout.decode(errors="replace").strip()
    if result.returncode != 0 or _version_key(printed) != _version_key(tag):
        raise ServiceError(
            f"the binary of {tag} reports version {printed[:100]!r}, not {tag}; "
            "the panel was not changed"
        )
