"""What an API token of each scope reaches, walked over the whole route table of a real
panel: a `read` token calls every route the table lets it, with every address field
pointed at a service on this machine and every private-address opt-in set, and the
service sees no connection, nothing stored changes, and no secret the test planted comes
back; every other route refuses it, before doing anything. The three routes that used to
answer a read token with what they found on the network are refused to it and still work
for admins. The README's scope table is the route table's.
"""

from __future__ import annotations

import base64
import re
import uuid

import pytest
import requests
from helpers import REALITY, ROOT, db_rows, free_port, ok

from appliance.services.accounts.tokens import SCOPES
from appliance.web.api import TOKEN_REFUSED
from appliance.web.redaction import REDACTED

README = ROOT / "README.md"
OPENAPI = "/panel/api/openapi.json"
TOKENS = "/panel/api/setting/apiTokens"

CLIENT_UUID = str(uuid.UUID("5c0e4b1e-6a7d-4c51-9d2b-0d4a3f3a7e11"))
CLIENT_PASSWORD = base64.b64encode(b"client-ss-password-planted-0001!").decode()
SS_SERVER_PASSWORD = base64.b64encode(b"server-ss-password-planted-0002!").decode()
SUB_ID = "plantedsubid7q2w"
REALITY_KEY = REALITY["realitySettings"]["privateKey"]
NODE_TOKEN = "apl_planted-node-token-0003"
BOT_TOKEN = "123456:planted-bot-token-0004"
SMTP_PASSWORD = "planted-smtp-password-0005"
# A WireGuard inbound's key, and the private key it keeps to show a peer its config.
WG_SERVER_KEY = base64.b64encode(b"wg-server-key-planted-000000006!").decode()
WG_PEER_KEY = base64.b64encode(b"wg-peer-private-planted-0000007!").decode()
SECRETS = (
    CLIENT_UUID,
    CLIENT_PASSWORD,
    SS_SERVER_PASSWORD,
    SUB_ID,
    REALITY_KEY,
    NODE_TOKEN,
    BOT_TOKEN,
    SMTP_PASSWORD,
    WG_SERVER_KEY,
    WG_PEER_KEY,
)
EMAIL = "watched@example.com"
# Every address the panel fetches from is the internal service, and every one may be
# private: a read token that could make the panel connect anywhere would reach it.
URL_SETTINGS = (
    "coreReleaseUrl",
    "geoipUrl",
    "geositeUrl",
    "panelUpdateUrl",
    "tgBotAPIServer",
    "outboundTestUrl",
    "warpApiUrl",
    "vpnApiUrl",
)
# Tables whose rows only a change made by a caller could alter (counters, samples and the
# audit log move by themselves, or by the refusals the test provokes).
STORED = (
    "setting",
    "admin",
    "api_token",
    "inbound",
    "fallback",
    "client",
    "client_inbound",
    "client_link",
    "client_group",
    "client_ip",
    "host",
    "node",
    "outbound_sub",
)


def bearer(panel, method: str, path: str, token: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.request(method, panel.url + path, headers=headers, timeout=30, **kwargs)


def scoped_token(api, name: str, scope: str) -> str:
    return ok(api.post(TOKENS + "/create", json={"name": name, "scope": scope}))["token"]


@pytest.fixture(scope="module")
def world(panel, internal):
    """The shared panel with secrets of every kind stored and every upstream at the
    internal service; what the walk needs to fill in paths."""
    api = panel.client()
    at = f"http://127.0.0.1:{internal.port}"
    settings = {name: f"{at}/{name}" for name in URL_SETTINGS}
    settings |= {
        "smtpHost": "127.0.0.1",
        "smtpPort": internal.port,
        "smtpPassword": SMTP_PASSWORD,
        "tgBotToken": BOT_TOKEN,
        "metricsEnable": True,
        "allowPrivateDestinations": ",".join([*URL_SETTINGS, "smtpHost", "getRemoteCertHash"]),
    }
    ok(api.post("/panel/api/setting/update", json=settings))
    vless = ok(
        api.post(
            "/panel/api/inbounds/add",
            json={
                "protocol": "vless",
                "port": free_port(),
                "settings": {"decryption": "none"},
                "streamSettings": REALITY,
            },
        )
    )
    shadowsocks = ok(
        api.post(
            "/panel/api/inbounds/add",
            json={
                "protocol": "shadowsocks",
                "port": free_port(),
                "settings": {
                    "method": "2022-blake3-aes-256-gcm",
                    "password": SS_SERVER_PASSWORD,
                    "network": "tcp,udp",
                },
            },
        )
    )
    peer = {
        "publicKey": base64.b64encode(b"wg-peer-public-key-0000000000008").decode(),
        "privateKey": WG_PEER_KEY,
        "allowedIPs": ["10.0.0.2/32"],
    }
    ok(
        api.post(
            "/panel/api/inbounds/add",
            json={
                "protocol": "wireguard",
                "port": free_port(),
                "settings": {"secretKey": WG_SERVER_KEY, "peers": [peer]},
            },
        )
    )
    client = {"email": EMAIL, "id": CLIENT_UUID, "password": CLIENT_PASSWORD, "subId": SUB_ID}
    ok(
        api.post(
            "/panel/api/clients/add",
            json={"client": client, "inboundIds": [vless["id"], shadowsocks["id"]]},
        )
    )
    # A node nothing listens for: its heartbeats fail without reaching the service.
    node = ok(
        api.post(
            "/panel/api/nodes/add",
            json={
                "name": "watched node",
                "scheme": "http",
                "address": "127.0.0.1",
                "port": free_port(),
                "apiToken": NODE_TOKEN,
                "allowPrivateAddress": True,
            },
        )
    )
    return {"api": api, "inbound": vless, "node": node, "at": at, "port": internal.port}


def operations(api) -> list[tuple[str, str, dict]]:
    """(method, path, operation) of every route a token may call at all."""
    document = api.raw("GET", OPENAPI).json()
    return [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if "x-token-scopes" in operation
    ]


def concrete(path: str, world: dict) -> str:
    """`path` with its parameters filled in with the planted records."""
    values = {
        "id": world["node"]["id"] if "/nodes/" in path else world["inbound"]["id"],
        "inboundId": world["inbound"]["id"],
        "email": EMAIL,
        "subId": SUB_ID,
        "tag": world["inbound"]["tag"],
        "metric": "cpu",
        "bucket": "30",
        "count": "10",
        "name": "watchers",
        "action": "data",
        "fileName": "geoip.dat",
        "version": "latest",
        "format": "singbox",
    }
    return re.sub(r"{(\w+)}", lambda match: str(values[match[1]]), path)


def arguments(operation: dict, world: dict) -> dict:
    """A body (JSON or form, as the route takes it) whose every address names the
    internal service and whose every private-address opt-in is on."""
    at, port = world["at"], world["port"]
    fields = {
        "scheme": "http",
        "address": "127.0.0.1",
        "port": port,
        "allowPrivateAddress": True,
        "apiToken": "apl_any",
        "allowPrivate": True,
        "url": f"{at}/sub",
        "server": f"127.0.0.1:{port}",
        "domain": "127.0.0.1",
        "ip": "127.0.0.1",
        "sni": "localhost",
        "tags": "",
        "cursor": "",
        "level": "debug",
        "syslog": False,
        "certContent": "",
        "outbound": f'{{"protocol": "freedom", "settings": {{"redirect": "127.0.0.1:{port}"}}}}',
    }
    media = operation.get("requestBody", {}).get("content", {})
    if "application/x-www-form-urlencoded" in media:
        return {
            "data": {k: str(v).lower() if isinstance(v, bool) else v for k, v in fields.items()}
        }
    return {"json": fields}


def stored(panel) -> dict:
    return {table: sorted(map(repr, db_rows(panel, f"SELECT * FROM {table}"))) for table in STORED}


def test_a_read_token_reaches_only_reads_connects_nowhere_and_sees_no_secret(
    panel, world, internal
):
    api = world["api"]
    token = scoped_token(api, "walking monitor", "read")
    routes = operations(api)
    readable = [(m, p, o) for m, p, o in routes if "read" in o["x-token-scopes"]]
    assert {o["x-effect"] for _, _, o in readable} == {"read"}
    assert len(readable) > 60
    before, connections = stored(panel), internal.connections
    for method, path, operation in readable:
        response = bearer(
            panel, method, concrete(path, world), token, **arguments(operation, world)
        )
        assert response.status_code < 500, (path, response.text)
        if response.headers.get("Content-Type", "").startswith("application/json"):
            assert response.json().get("msg") != TOKEN_REFUSED, path
        for secret in SECRETS:
            assert secret not in response.text, (path, secret)
        assert internal.connections == connections, f"{method} {path} made the panel connect"
    assert stored(panel) == before

    for method, path, operation in routes:
        if "read" in operation["x-token-scopes"]:
            continue
        response = bearer(
            panel, method, concrete(path, world), token, **arguments(operation, world)
        )
        assert response.status_code == 401, (path, response.text)
        assert response.json() == {"success": False, "msg": TOKEN_REFUSED, "obj": None}, path
        assert internal.connections == connections, f"{method} {path} made the panel connect"
    assert stored(panel) == before


@pytest.mark.parametrize(
    "path, body",
    [
        ("/panel/api/nodes/test", "json"),
        ("/panel/api/nodes/certFingerprint", "json"),
        ("/panel/api/core/outbound-subs/parse", "data"),
    ],
)
def test_routes_that_probe_the_network_are_refused_to_read_tokens_and_work_for_admins(
    panel, world, internal, path, body
):
    api = world["api"]
    fields = {
        "scheme": "https" if path.endswith("certFingerprint") else "http",
        "address": "127.0.0.1",
        "port": internal.port,
        "allowPrivateAddress": True,
        "apiToken": "apl_any",
        "url": f"{world['at']}/sub",
        "allowPrivate": "true",
    }
    reader = scoped_token(api, f"prober {path}", "read")
    before = internal.connections
    refused = bearer(panel, "POST", path, reader, **{body: fields})
    assert refused.status_code == 401
    assert refused.json() == {"success": False, "msg": TOKEN_REFUSED, "obj": None}
    assert internal.connections == before

    admin = scoped_token(api, f"admin prober {path}", "admin")
    for answer in (
        bearer(panel, "POST", path, admin, **{body: fields}).json(),
        api.post(path, **{body: fields}),
    ):
        assert answer["msg"] != TOKEN_REFUSED, answer
    assert internal.connections >= before + 2, answer


def test_redacted_answers_keep_their_shape(panel, world):
    api = world["api"]
    token = scoped_token(api, "shape monitor", "read")
    path = f"/panel/api/inbounds/get/{world['inbound']['id']}"
    seen = bearer(panel, "GET", path, token).json()["obj"]
    real = ok(api.get(path))
    assert seen["streamSettings"]["realitySettings"]["privateKey"] == REDACTED
    assert real["streamSettings"]["realitySettings"]["privateKey"] == REALITY_KEY
    assert keys_of(seen) == keys_of(real)

    mine = [c for c in ok(api.get("/panel/api/clients/list")) if c["email"] == EMAIL]
    theirs = bearer(panel, "GET", "/panel/api/clients/list", token).json()["obj"]
    theirs = [c for c in theirs if c["email"] == EMAIL]
    assert keys_of(theirs) == keys_of(mine)
    assert (theirs[0]["id"], theirs[0]["password"], theirs[0]["subId"]) == (REDACTED,) * 3
    assert theirs[0]["inboundIds"] == mine[0]["inboundIds"]

    exported = bearer(panel, "GET", "/panel/api/clients/export", token).json()
    assert exported["success"] is True
    rows = [row for row in exported["obj"] if row["client"]["email"] == EMAIL]
    assert rows[0]["client"]["id"] == REDACTED and rows[0]["client"]["subId"] == REDACTED

    config = bearer(panel, "GET", "/panel/api/server/getConfigJson", token).json()["obj"]
    clients = [
        c for inbound in config["inbounds"] for c in inbound.get("settings", {}).get("clients", [])
    ]
    assert clients and all(c.get("id", REDACTED) == REDACTED for c in clients)

    links = bearer(panel, "GET", f"/panel/api/clients/links/{EMAIL}", token).json()["obj"]
    assert links and set(flatten(links)) == {REDACTED}

    settings = bearer(panel, "POST", "/panel/api/setting/all", token).json()["obj"]
    assert settings["tgBotToken"] == settings["smtpPassword"] == REDACTED
    assert settings["webBasePath"] == "/"


def keys_of(value) -> object:
    """The shape of decoded JSON: its keys and types, not its texts."""
    if isinstance(value, dict):
        return {key: keys_of(item) for key, item in value.items()}
    if isinstance(value, list):
        return [keys_of(item) for item in value]
    return type(value).__name__


def flatten(value) -> list:
    if isinstance(value, dict):
        return [text for item in value.values() for text in flatten(item)]
    if isinstance(value, list):
        return [text for item in value for text in flatten(item)]
    return [value]


# ---- the README's table ------------------------------------------------------------------

START = "<!-- scopes:start -->"
END = "<!-- scopes:end -->"


def scope_table(routes: list[tuple[str, str, dict]]) -> str:
    """The README's table of what each token scope reaches, as the route table says."""
    lines = [START, "| Route | Effect | admin | read | node |", "|---|---|---|---|---|"]
    for method, path, operation in routes:
        reach = ["yes" if s in operation["x-token-scopes"] else "no" for s in SCOPES]
        lines.append(f"| `{method} {path}` | {operation['x-effect']} | {' | '.join(reach)} |")
    return "\n".join([*lines, END])


def test_the_readme_scope_table_is_the_route_table(world):
    text = README.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1, "README.md lost its markers"
    written = text[text.index(START) : text.index(END) + len(END)]
    expected = scope_table(operations(world["api"]))
    assert written == expected, (
        "README.md's table of token scopes differs from the route table; replace it with:\n"
        + expected
    )
