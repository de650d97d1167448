"""Published files fetched and checked: release lists, digests and the files they name.

Why this module exists: the core's installer (services/control/releases.py) and the
panel's own update (services/admin/update.py) both read a list that answers like GitHub's
releases API and download what it links to, and both must do it the same careful way.
Every fetch goes through the egress guard handed in (on behalf of the setting that named
the source), is bounded in time and size, and reports an error status as such, never
with what the server sent along. A download is streamed to a file and checked against
the SHA-256 its publisher put beside it before a caller moves it anywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from appliance.errors import ServiceError
from appliance.runtime.egress import Egress, FetchFailed, Reply
from appliance.runtime.reader import Unreadable, parse_json

CONNECT_TIMEOUT = 10
READ_TIMEOUT = 60
DOWNLOAD_SECONDS = 600  # a whole download, however slowly the bytes trickle in
LIST_LIMIT = 8 << 20
DIGEST_LIMIT = 64 << 10
HEADERS = {"Accept": "application/vnd.github+json", "User-Agent": "appliance-panel"}
# The first hash of a sha256sum-style file ("<hex>  <file name>").
SHA256SUM = re.compile(r"^\s*([0-9a-fA-F]{64})\b")


@contextlib.contextmanager
def _get(
    egress: Egress, url: str, label: str, *, missing_ok: bool = False
) -> Iterator[Reply | None]:
    """The answer to a GET of `url` through `egress` (None: a 404 with `missing_ok`); a
    failure, also one while the body is read inside the block, becomes a `ServiceError`
    that names the status or the reason, never what the server sent."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServiceError(f"{label} has no http(s) download URL (got {url[:200]!r})")
    try:
        with egress.request(
            url,
            headers=HEADERS,
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
            total_timeout=DOWNLOAD_SECONDS,
        ) as reply:
            if reply.status == 404 and missing_ok:
                yield None
                return
            if reply.status != 200:
                raise ServiceError(
                    f"downloading {label} from {url} failed: HTTP {reply.status}, where "
                    f"200 with {label} was expected"
                )
            yield reply
    except FetchFailed as exc:
        raise ServiceError(f"downloading {label} from {url} failed: {exc.msg}") from None


def fetch(
    egress: Egress, url: str, limit: int, label: str, *, missing_ok: bool = False
) -> bytes | None:
    """A small document (a release list, a digest) in memory, bounded like every
    download here (None: a 404 with `missing_ok`)."""
    with _get(egress, url, label, missing_ok=missing_ok) as reply:
        return None if reply is None else reply.read(limit)


def download(
    egress: Egress, url: str, path: str, limit: int, label: str, expected: str | None
) -> int:
    """Stream `url` into `path`, checking its SHA-256 against `expected` (None: no
    published checksum); returns the size."""
    digest, size = hashlib.sha256(), 0
    with _get(egress, url, label) as reply, open(path, "wb") as out:
        for chunk in reply.chunks(limit):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
    if expected is not None and digest.hexdigest() != expected:
        raise ServiceError(
            f"the SHA-256 of the downloaded {label} ({digest.hexdigest()}) does not match the "
            f"published one ({expected}); nothing was replaced"
        )
    return size


def download_verified(
    egress: Egress,
    url: str,
    path: str,
    limit: int,
    label: str,
    *,
    expected: str = "",
    digest_url: str = "",
) -> int:
    """Stream `url` into `path` and check it against the hex SHA-256 `expected`, or else
    against the first hash in the sha256sum-style file at `digest_url`; returns the size.
    A file with neither is refused: nothing unverified is installed."""
    if not expected:
        if not digest_url:
            raise ServiceError(f"{label} has no published SHA-256; it is not installed unverified")
        raw = fetch(egress, digest_url, DIGEST_LIMIT, f"the checksum of {label}")
        match = SHA256SUM.match(raw.decode("utf-8", "replace"))
        if match is None:
            raise ServiceError(
                f"the checksum file of {label} holds no SHA-256; nothing was replaced"
            )
        expected = match.group(1)
    return download(egress, url, path, limit, label, expected.lower())


def published_releases(raw: bytes, url: str, what: str) -> list[tuple[str, dict, dict]]:
    """(tag, release object, {asset name: asset object}) of each published release in a
    GitHub releases-API answer (a list, or one release), in the order listed (GitHub:
    newest first). Drafts and prereleases are left out: what the list offers is what
    GitHub calls a release. `what` names the list in errors ("the core release list")."""
    try:
        data = parse_json(raw, LIST_LIMIT)
    except Unreadable as exc:
        raise ServiceError(f"{what} at {url} is not JSON the panel can read: {exc.msg}") from None
    items = [data] if isinstance(data, dict) and "tag_name" in data else data
    if not isinstance(items, list):
        raise ServiceError(f"{what} at {url} is not a release or a list of them")
    releases = []
    for item in items:
        if not isinstance(item, dict) or item.get("draft") or item.get("prerelease"):
            continue
        tag = item.get("tag_name")
        if not isinstance(tag, str) or not tag:
            continue
        assets = {
            asset["name"]: asset
            for asset in item.get("assets") or []
            if isinstance(asset, dict)
            and isinstance(asset.get("name"), str)
            and isinstance(asset.get("browser_download_url"), str)
        }
        releases.append((tag, item, assets))
    return releases
