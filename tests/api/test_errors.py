"""Every failure is the envelope with a sentence a person can act on: unknown routes, wrong
methods, oversized, malformed or mistyped bodies. Never a 500, never a traceback."""

from __future__ import annotations

import json
import socket

import pytest
from core_panel import wait_until

LIMIT = 1 << 20
ADD = "/panel/api/inbounds/add"
LIST = "/panel/api/inbounds/list"


def envelope_error(response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"].startswith("application/json")
    reply = response.json()
    assert reply["success"] is False and reply["obj"] is None
    assert isinstance(reply["msg"], str) and len(reply["msg"]) > 10
    assert "Traceback" not in reply["msg"]
    return reply["msg"]


@pytest.fixture
def inbounds_unchanged(api):
    before = api.get(LIST)["obj"]
    yield
    assert api.get(LIST)["obj"] == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("POST", "/panel/api/nope"),
        ("GET", "/panel/api/inbounds/get"),
        ("GET", "/panel/api/server/history/cpu"),
        ("DELETE", "/panel/api/inbounds/list/extra"),
    ],
)
def test_unknown_routes_are_404(api, method, path):
    msg = envelope_error(api.raw(method, path), 404)
    assert "no such route" in msg and path in msg


def test_unknown_routes_are_404_without_sign_in(panel):
    msg = envelope_error(panel.client(login=False).raw("GET", "/panel/api/nope"), 404)
    assert "no such route" in msg


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/panel/api/inbounds/add", "POST"),
        ("POST", "/panel/api/inbounds/list", "GET"),
        ("PUT", "/panel/api/server/status", "GET"),
        ("DELETE", "/panel/api/setting/all", "POST"),
        ("GET", "/login", "POST"),
    ],
)
def test_wrong_methods_are_405_naming_the_allowed_one(api, method, path, allowed):
    response = api.raw(method, path)
    msg = envelope_error(response, 405)
    assert f"use {allowed}" in msg and method in msg
    assert allowed in response.headers.get("Allow", allowed)


def test_body_over_the_limit_with_content_length(api, inbounds_unchanged):
    msg = envelope_error(
        api.raw("POST", ADD, data=b" " * (LIMIT + 1), headers={"Content-Type": "application/json"}),
        413,
    )
    assert str(LIMIT) in msg


def test_body_over_the_limit_on_a_route_that_ignores_bodies(api):
    response = api.raw("POST", "/panel/api/setting/all", data=b"x" * (LIMIT + 1))
    assert str(LIMIT) in envelope_error(response, 413)


def test_body_over_the_limit_chunked(api, inbounds_unchanged):
    def chunks():
        piece = b" " * 65536
        for _ in range(LIMIT // len(piece) + 2):
            yield piece

    response = api.raw("POST", ADD, data=chunks(), headers={"Content-Type": "application/json"})
    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert str(LIMIT) in envelope_error(response, 413)


def test_chunked_body_within_the_limit_is_read(api):
    payload = json.dumps({"name": "chunked-token"}).encode()
    response = api.raw(
        "POST",
        "/panel/api/setting/apiTokens/create",
        data=iter([payload[:5], payload[5:]]),
        headers={"Content-Type": "application/json"},
    )
    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert response.json()["success"] is True
    assert response.json()["obj"]["name"] == "chunked-token"


def test_smaller_route_limit_applies(panel):
    client = panel.client(login=False)
    response = client.raw(
        "POST", "/login", data=b" " * 20000, headers={"Content-Type": "application/json"}
    )
    assert "8192" in envelope_error(response, 413)


BAD_JSON = [
    (b"{bad", "not valid JSON"),
    (b'{"port": 1,}', "not valid JSON"),
    (b'{"port": NaN}', "NaN"),
    (b'{"port": 1e999}', "too large"),
    (b'{"port": ' + b"9" * 5000 + b"}", "5000 digits is too large"),
    (b"[" * 100000, "nested too deeply"),
    (b'{"remark": "\xff\xfe"}', "not UTF-8"),
]


@pytest.mark.parametrize(("raw", "words"), BAD_JSON, ids=lambda v: repr(v)[:30])
def test_malformed_json_is_a_clear_error(api, inbounds_unchanged, raw, words):
    response = api.raw("POST", ADD, data=raw, headers={"Content-Type": "application/json"})
    assert words in envelope_error(response, 200)


@pytest.mark.parametrize(
    "path",
    [
        "/panel/api/setting/apiTokens/create",
        "/panel/api/setting/update",
        "/panel/api/inbounds/bulkDel",
        "/panel/api/server/logs/10",
        "/login",
    ],
)
@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"42", b"null"])
def test_non_object_bodies_are_a_clear_error(api, path, raw):
    response = api.raw("POST", path, data=raw, headers={"Content-Type": "application/json"})
    assert "JSON object" in envelope_error(response, 200)


def test_json_array_for_an_inbound(api, inbounds_unchanged):
    response = api.raw("POST", ADD, json=[{"protocol": "socks", "port": 32150}])
    assert "JSON object" in envelope_error(response, 200)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/xml", "application/octet-stream", "image/png"]
)
def test_wrong_content_types_are_refused(api, inbounds_unchanged, content_type):
    payload = json.dumps({"protocol": "socks", "port": 32151, "settings": {"auth": "noauth"}})
    response = api.raw("POST", ADD, data=payload, headers={"Content-Type": content_type})
    msg = envelope_error(response, 415)
    assert content_type in msg and "application/json" in msg


def test_non_utf8_form_is_a_clear_error(api, inbounds_unchanged):
    response = api.raw(
        "POST",
        "/panel/api/inbounds/import",
        data=b"data=\xff\xfe",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert "not UTF-8" in envelope_error(response, 200)


def test_non_utf8_percent_escape_in_a_form(api, inbounds_unchanged):
    response = api.raw(
        "POST",
        "/panel/api/inbounds/import",
        data=b"data=%ff%fe",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert "not UTF-8" in envelope_error(response, 200)


@pytest.mark.parametrize(
    "content_type", ["multipart/form-data", "multipart/form-data; boundary=zzz"]
)
def test_malformed_multipart_is_a_clear_error(api, inbounds_unchanged, content_type):
    response = api.raw(
        "POST",
        "/panel/api/inbounds/import",
        data=b"garbage",
        headers={"Content-Type": content_type},
    )
    assert "multipart" in envelope_error(response, 200)


def test_forms_work_both_ways(api):
    inbound = {"protocol": "socks", "settings": {"auth": "noauth"}}
    urlencoded = api.post(
        "/panel/api/inbounds/import", data={"data": json.dumps({**inbound, "port": 32152})}
    )
    multipart = api.post(
        "/panel/api/inbounds/import",
        files={"data": (None, json.dumps({**inbound, "port": 32153}))},
    )
    assert urlencoded["success"] is True and urlencoded["obj"]["port"] == 32152
    assert multipart["success"] is True and multipart["obj"]["port"] == 32153


def test_a_form_framed_as_a_browser_frames_it_is_read(api):
    """Browsers write the boundary in mixed case; it must be matched as sent."""
    boundary = "----WebKitFormBoundaryQx7TmZ2aBcDeFgHi"
    inbound = json.dumps({"protocol": "socks", "settings": {"auth": "noauth"}, "port": 32154})
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="data"\r\n\r\n'
        f"{inbound}\r\n--{boundary}--\r\n"
    ).encode()
    reply = api.raw(
        "POST",
        "/panel/api/inbounds/import",
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    ).json()
    assert reply["success"] is True and reply["obj"]["port"] == 32154, reply


def test_malformed_chunked_framing(panel, api):
    host, port = panel.url.split("//")[1].split("/")[0].split(":")
    request = (
        b"POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/json\r\nConnection: close\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert not head.startswith(b"HTTP/1.1 5")
    reply = json.loads(body)
    assert reply["success"] is False and "could not be read" in reply["msg"]


def test_missing_csrf_token_is_403(panel, api):
    client = panel.client()
    del client.http.headers["X-CSRF-Token"]
    assert "X-CSRF-Token" in envelope_error(client.raw("POST", ADD, json={}), 403)


def test_unauthenticated_is_401(panel):
    msg = envelope_error(panel.client(login=False).raw("POST", ADD, json={}), 401)
    assert "sign in" in msg


def test_no_traceback_in_the_panel_output(panel, api):
    """Runs last in this module: everything above left no traceback behind."""
    assert api.get("/panel/api/server/status")["success"] is True
    assert "Traceback" not in panel.output()
    assert " 500 " not in panel.output()


@pytest.mark.parametrize(
    "path", ["/panel/api/clients/import", "/panel/api/inbounds/import"], ids=["clients", "inbounds"]
)
def test_import_data_nested_too_deeply_is_an_envelope_error(panel, path):
    """The import routes parse JSON text from a field themselves; nesting deep enough to
    exhaust the parser is refused like any other JSON that cannot be read."""
    api = panel.client()
    reply = api.post(path, {"data": "[" * 100_000 + "]" * 100_000})
    assert reply["success"] is False
    assert "data is not valid JSON" in reply["msg"]
    assert "Traceback" not in panel.output()


def raw_exchange(url: str, request: bytes) -> bytes:
    """Send `request` over a fresh socket and read the answer until the server closes. The
    server may stop reading early and close: whatever it answered first is kept."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    answer = b""
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        try:
            conn.sendall(request)
            while chunk := conn.recv(65536):
                answer += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass
    return answer


OVERSIZED_HEADERS = {
    "one 100 kB line": b"X-Big: " + b"a" * 100_000 + b"\r\n",
    "5000 headers": b"".join(b"X-Many-%d: v\r\n" % n for n in range(5000)),
}


@pytest.mark.parametrize("headers", OVERSIZED_HEADERS.values(), ids=OVERSIZED_HEADERS.keys())
@pytest.mark.parametrize("door", ["url", "sub_url"])
def test_oversized_headers_get_431_and_no_traceback(panel, headers, door):
    request = b"GET /csrf-token HTTP/1.1\r\nHost: x\r\n" + headers + b"Connection: close\r\n\r\n"
    answer = raw_exchange(getattr(panel, door), request)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer[:200]
    assert answer.endswith(b"\r\n\r\nthe request's headers are too large\n")
    wait_until(lambda: "its headers are too large" in panel.output(), "the refusal's log line")
    assert "Traceback" not in panel.output()
    # The server is still there for the next request.
    assert panel.client(login=False).raw("GET", "/csrf-token").status_code == 401
