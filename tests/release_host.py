"""A release host on loopback for the tests of the panel's own updates and of the core
releases: a threaded HTTP server that answers GET requests from a table of paths and
publishes GitHub-shaped release lists.

Both features download from a GitHub-like host; one server class here means both test
modules exercise their clients against the same HTTP behaviour. What each release entry
carries beyond the tag, flags and assets is up to the module (`describe`).
"""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
