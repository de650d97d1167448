"""Small HTTP servers shaped like the public APIs the tunnel and VPN providers call.

`ProviderApi` answers on loopback with whatever the test put in `answers[(method, path)]`
(a status and a JSON-able body, raw bytes, or `ENDLESS`: a body that never ends), and
keeps every request it got (method, path with query, headers, parsed JSON body), so a test
asserts what the panel sent as well as what it made of the answer. `HOSTILE` holds the
shapes of answer a server can send to hurt its reader, for any of the upstreams the panel
calls (providers, release lists, the Bot API, nodes). The bodies in `warp_registration`
and `nord_*` follow the shapes those services document: field names and nesting, with
values of the test's making.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENDLESS = object()
# Each hostile body with the words the reader's refusal holds.
HOSTILE = {
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "deep-object": (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
    "not-utf8": (b'{"ok": "\xff\xfe\xfd"}', "not UTF-8"),
    "nan": (b'{"ok": NaN, "success": true}', "NaN is not a JSON number"),
    "infinity": (b'{"ok": -Infinity, "success": true}', "Infinity is not a JSON number"),
    "digits": (b'{"ok": ' + b"9" * 5000 + b', "success": true}', "5000 digits is too large"),
    "not-json": (b"<html>internal-secret-7f3a</html>", "not valid JSON"),
    "wrong-top": (b'"a string"', "is a string, not"),
    "empty": (b"", "is empty"),
}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: object


@dataclass
class ProviderApi:
    answers: dict[tuple[str, str], tuple[int, object]] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                owner.requests.append(
                    Seen(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
                status, reply = owner.answers.get((self.command, self.path), (404, {"error": "no"}))
                if reply is ENDLESS:
                    return self._endless(status)
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _endless(self, status: int) -> None:
                """A JSON array whose elements keep coming until the reader hangs up."""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                try:
                    self.wfile.write(b"[")
                    while True:
                        self.wfile.write(b"1," * 4096)
                except OSError:
                    pass

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


WARP_CLIENT_ID = "AQID"  # base64 of bytes 1, 2, 3: WARP's reserved bytes
WARP_PEER_KEY = "bmXOC+F1FxEMF9dyiK2H5/1SUtzH0JuVo51h2wPfgyo="


def warp_registration(device_id: str, token: str, public_key: str, endpoint: str) -> dict:
    """An answer of POST /reg (and GET /reg/<id>) as the WARP client API shapes it."""
    return {
        "id": device_id,
        "type": "a",
        "model": "PC",
        "key": public_key,
        "account": {
            "id": "account-1",
            "account_type": "free",
            "warp_plus": True,
            "premium_data": 0,
            "quota": 0,
            "license": "LICENSE-free-1",
        },
        "config": {
            "client_id": WARP_CLIENT_ID,
            "peers": [
                {
                    "public_key": WARP_PEER_KEY,
                    "endpoint": {
                        "v4": "162.159.192.1:0",
                        "v6": "[2606:4700:d0::a29f:c001]:0",
                        "host": endpoint,
                    },
                }
            ],
            "interface": {"addresses": {"v4": "172.16.0.2", "v6": "2606:4700:110:8a36::1"}},
            "services": {"http_proxy": "172.16.0.1:2480"},
        },
        "token": token,
        "warp_enabled": False,
        "waitlist_enabled": False,
        "tos": "2024-01-01T00:00:00.000Z",
        "locale": "en_US",
    }


def nord_countries() -> list[dict]:
    return [
        {"id": 81, "name": "Germany", "code": "DE", "serverCount": 2, "cities": []},
        {"id": 228, "name": "United States", "code": "US", "serverCount": 1, "cities": []},
    ]


def nord_server(number: int, station: str, public_key: str | None) -> dict:
    technologies = [{"id": 3, "name": "OpenVPN UDP", "identifier": "openvpn_udp", "metadata": []}]
    if public_key:
        technologies.append(
            {
                "id": 35,
                "name": "Wireguard",
                "identifier": "wireguard_udp",
                "metadata": [{"name": "public_key", "value": public_key}],
            }
        )
    return {
        "id": 900 + number,
        "name": f"Germany #{number}",
        "station": station,
        "hostname": f"de{number}.nordvpn.com",
        "load": 10 + number,
        "status": "online",
        "locations": [{"country": {"id": 81, "name": "Germany", "code": "DE"}}],
        "technologies": technologies,
    }


# RFC 7748 6.1: Alice's private key and the public key that goes with it.
ALICE_PRIVATE = base64.b64encode(
    bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
).decode()


ALICE_PUBLIC = base64.b64encode(
    bytes.fromhex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
).decode()


SERVERS_PATH = (
    "/v1/servers/recommendations?filters[country_id]=81"
    "&filters[servers_technologies][identifier]=wireguard_udp&limit=20"
)
