"""A release host on loopback for the tests of the panel's own updates and of the core
releases: a threaded HTTP server that answers GET requests from a table of paths and
publishes GitHub-shaped release lists; and what it publishes for the core: zips holding a
tiny shell-script core that reports its version as Xray does, their digests, geo files
with their checksums, and the settings that point a panel at them.

Both features download from a GitHub-like host; one server class here means both test
modules exercise their clients against the same HTTP behaviour. What each release entry
carries beyond the tag, flags and assets is up to the module (`describe`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from helpers import ok

from appliance.services.control.releases import ASSET_SUFFIXES


class ReleaseHost:
    """Serves `files` (path with query -> (status, body)) on loopback, answering 404 for
    any other path, and counts the requests per path in `hits`; `redirects` (path ->
    Location) answer 302, and `stalled` paths send their headers and then nothing more
    until the host closes."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[int, bytes]] = {}
        self.redirects: dict[str, str] = {}
        self.stalled: set[str] = set()
        self.closing = threading.Event()
        self.hits: dict[str, int] = {}
        host = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                host.hits[self.path] = host.hits.get(self.path, 0) + 1
                if self.path in host.redirects:
                    self.send_response(302)
                    self.send_header("Location", host.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status, data = host.files.get(self.path, (404, b"not found"))
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.path in host.stalled:
                    self.wfile.flush()
                    host.closing.wait(60)
                    return
                # A client that stops reading at a size limit hangs up mid-body.
                with contextlib.suppress(ConnectionError):
                    self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def put(self, path: str, data: bytes, status: int = 200) -> str:
        """Serve `data` with `status` at `path`; returns its URL."""
        self.files[path] = (status, data)
        return self.url + path

    def redirect(self, path: str, location: str) -> str:
        """Answer `path` with a redirect to `location`; returns the URL of `path`."""
        self.redirects[path] = location
        return self.url + path

    def describe(self, name: str, release: dict) -> dict:
        """Fields a release entry carries besides tag, flags and assets; none here."""
        return {}

    def publish(self, name: str, releases: list[dict], single: bool = False) -> str:
        """Serve `releases` ({tag, files: {asset: bytes}, digests?: {asset: str}, draft?,
        prerelease?}) at /<name>/releases as a list, or as one object when `single` (the
        shape of `/releases/latest`); returns its URL."""
        listing = []
        for release in releases:
            assets = []
            for asset, data in release["files"].items():
                entry = {
                    "name": asset,
                    "browser_download_url": self.put(f"/{name}/{release['tag']}/{asset}", data),
                }
                if asset in release.get("digests", {}):
                    entry["digest"] = release["digests"][asset]
                assets.append(entry)
            listing.append(
                {
                    "tag_name": release["tag"],
                    **self.describe(name, release),
                    "draft": release.get("draft", False),
                    "prerelease": release.get("prerelease", False),
                    "assets": assets,
                }
            )
        body = listing[0] if single else listing
        return self.put(f"/{name}/releases", json.dumps(body).encode())

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


SERVER = "/panel/api/server"


SETTINGS = "/panel/api/setting/update"


ASSET = f"Xray-linux-{ASSET_SUFFIXES.get(platform.machine(), '64')}.zip"


GEOIP = b"geoip bytes of the release host\x00\x01"


GEOSITE = b"geosite bytes of the release host\x02\x03"


def core_script(version: str) -> bytes:
    """A core that answers `-version`/`version` like Xray, accepts any config in test
    mode and otherwise runs until it is stopped."""
    return (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  version|-version) echo "Xray {version} (Xray, Penetrates Everything.) Custom"\n'
        '    echo "A unified platform for anti-censorship."; exit 0 ;;\n'
        '  run) for arg in "$@"; do [ "$arg" = -test ] && exit 0; done; exec sleep 600 ;;\n'
        "esac\n"
        "exit 1\n"
    ).encode()


def release_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in files.items():
            bundle.writestr(name, data)
    return buffer.getvalue()


def dgst(data: bytes) -> bytes:
    """A digest file laid out like Xray's (openssl dgst lines with the file name cut)."""
    lines = [
        f"MD5= {hashlib.md5(data).hexdigest()}",
        f"SHA1= {hashlib.sha1(data).hexdigest()}",
        f"SHA2-256= {hashlib.sha256(data).hexdigest()}",
        f"SHA2-512= {hashlib.sha512(data).hexdigest()}",
    ]
    return ("\n".join(lines) + "\n").encode()


def sha256sum(data: bytes, name: str) -> bytes:
    return f"{hashlib.sha256(data).hexdigest()}  {name}\n".encode()


def good_release(tag: str, version: str) -> dict:
    archive = release_zip(
        {
            "xray": core_script(version),
            "geoip.dat": GEOIP,
            "geosite.dat": GEOSITE,
            "README.md": b"readme",
        }
    )
    return {"tag": tag, "files": {ASSET: archive, ASSET + ".dgst": dgst(archive)}}


# The release host runs on loopback: the panel is opted in to reach it, as an admin would.
PRIVATE_OK = {"allowPrivateDestinations": "coreReleaseUrl,geoipUrl,geositeUrl"}


def configure(api, **values: str) -> None:
    ok(api.post(SETTINGS, json={**PRIVATE_OK, **values}))


def bin_dir(panel) -> str:
    return os.path.join(panel.data_dir, "core", "bin")


def installed(panel, name: str = "xray") -> bytes | None:
    path = os.path.join(bin_dir(panel), name)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as fh:
        return fh.read()


def core_status(api) -> dict:
    return ok(api.get(SERVER + "/status"))["core"]


def publish_geofiles(
    host, name: str, geoip: bytes, geosite: bytes, sums: dict[str, bytes] | None = None
) -> dict:
    """Serve the two geo files and a .sha256sum for each, unless `sums` overrides it
    (empty bytes: no checksum file); returns the settings that point at them."""
    sums = sums or {}
    urls = {}
    for key, file_name, data in (("geoipUrl", "geoip", geoip), ("geositeUrl", "geosite", geosite)):
        path = f"/{name}/{file_name}.dat"
        urls[key] = host.put(path, data)
        checksum = sums.get(file_name, sha256sum(data, f"{file_name}.dat"))
        if checksum:
            host.put(path + ".sha256sum", checksum)
    return urls
