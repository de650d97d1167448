"""The OpenAPI document: generated from the route table, complete, and true to what runs."""

from __future__ import annotations

import re

import pytest
from spec_routes import SPEC_ROUTES

OPENAPI = "/panel/api/openapi.json"
MISSING_ID = "987654"
PARAM_VALUES = {
    "id": MISSING_ID,
    "metric": "cpu",
    "bucket": "30",
    "count": "10",
    "email": "nobody@example.invalid",
    "name": "no-such-group",
    "subId": "no-such-sub",
    "inboundId": MISSING_ID,
    "tag": "direct",
    "action": "data",
    "format": "singbox",
}
# Bodies that leave the shared panel usable: ids that do not exist, names of their own.
BODIES = {
    ("POST", "/login"): {"username": "nobody", "password": "wrong"},
    ("POST", "/panel/api/inbounds/add"): {
        "protocol": "socks",
        "port": 32290,
        "settings": {"auth": "noauth"},
    },
    ("POST", "/panel/api/inbounds/bulkDel"): {"ids": [int(MISSING_ID)]},
    ("POST", "/panel/api/inbounds/setEnable/{id}"): {"enable": True},
    ("POST", "/panel/api/inbounds/{id}/fallbacks"): {"fallbacks": []},
    ("POST", "/panel/api/server/logs/{count}"): {"level": "info", "syslog": False},
    ("POST", "/panel/api/setting/update"): {},
    ("POST", "/panel/api/setting/updateUser"): {},
    ("POST", "/panel/api/setting/apiTokens/create"): {"name": "openapi-probe"},
    ("POST", "/panel/api/setting/apiTokens/setEnabled/{id}"): {"enabled": True},
}
FORMS = {
    ("POST", "/panel/api/inbounds/import"): {
        "data": '{"protocol": "socks", "port": 32291, "settings": {"auth": "noauth"}}'
    },
}
# Called elsewhere on a panel of its own: it would restart the shared one.
# restartPanel would end the shared panel; the release routes download from the
# internet by default (tests/core/test_core_releases.py drives them against a local server).
NOT_CALLED = {
    ("POST", "/panel/api/setting/restartPanel"),
    ("GET", "/panel/api/server/getCoreVersion"),
    ("POST", "/panel/api/server/installCore/{version}"),
    ("POST", "/panel/api/server/updateGeofile"),
    ("POST", "/panel/api/server/updateGeofile/{fileName}"),
    # File downloads, not envelopes: tests/api/test_backup_api.py reads them.
    ("GET", "/panel/api/server/getDb"),
    ("GET", "/panel/api/server/getMigration"),
    # JSON lines, not an envelope: tests/api/test_audit_api.py reads it.
    ("GET", "/panel/api/audit/export"),
}
# The spec gives this reply a `stage` besides the envelope's keys.
STAGED = {("POST", "/panel/api/setting/testSmtp")}
# Called on a client of their own, since they end the session that calls them.
OWN_SESSION = {("POST", "/logout")}


def openapi_path(path: str) -> str:
    return re.sub(r":([A-Za-z_]\w*)", r"{\1}", path)


@pytest.fixture(scope="module")
def document(panel):
    response = panel.client().raw("GET", OPENAPI)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return response.json()


def test_document_is_openapi_3(document):
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] and document["info"]["version"]
    assert "bearer" in document["components"]["securitySchemes"]
    assert "session" in document["components"]["securitySchemes"]


def test_document_needs_sign_in(panel):
    response = panel.client(login=False).raw("GET", OPENAPI)
    assert response.status_code == 401
    assert response.json()["success"] is False


def test_document_is_readable_with_a_bearer_token(panel):
    admin = panel.client()
    token = admin.post("/panel/api/setting/apiTokens/create", json={"name": "openapi-bearer"})
    client = panel.client(login=False)
    client.http.headers["Authorization"] = f"Bearer {token['obj']['token']}"
    assert client.raw("GET", OPENAPI).json()["openapi"].startswith("3.")


@pytest.mark.parametrize(("method", "path"), SPEC_ROUTES, ids=lambda v: str(v))
def test_spec_route_is_documented(document, method, path):
    documented = document["paths"].get(openapi_path(path), {})
    assert method.lower() in documented, f"{method} {path} is missing from the document"
    operation = documented[method.lower()]
    assert operation["summary"]
    names = re.findall(r":([A-Za-z_]\w*)", path)
    parameters = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
    assert parameters == names


def test_public_routes_say_so(document):
    assert document["paths"]["/login"]["post"]["security"] == []
    assert "security" not in document["paths"]["/panel/api/server/status"]["get"]


def test_every_operation_says_its_effect_and_the_rest_follows(document):
    effects = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            effect = effects[(method.upper(), path)] = operation["x-effect"]
            assert effect in ("read", "write", "egress"), (path, effect)
            assert operation["x-audited"] is (effect != "read"), path
            if "read" in operation.get("x-token-scopes", []):
                assert effect == "read", path
    assert effects[("GET", "/panel/api/server/getCoreVersion")] == "egress"
    assert effects[("POST", "/panel/api/nodes/test")] == "egress"
    assert effects[("POST", "/panel/api/clients/onlines")] == "read"
    assert effects[("POST", "/panel/api/clients/add")] == "write"


def test_operation_ids_are_unique(document):
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def documented_operations(document) -> list[tuple[str, str]]:
    return [(method.upper(), path) for path, item in document["paths"].items() for method in item]


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PARAM_VALUES[m.group(1)], path)


def test_every_documented_route_answers(panel, document):
    api = panel.client()
    answered = []
    for method, path in documented_operations(document):
        key = (method, path)
        if key in NOT_CALLED:
            continue
        client = panel.client() if key in OWN_SESSION else api
        options = {}
        if key in FORMS:
            options["data"] = FORMS[key]
        elif method == "POST":
            options["json"] = BODIES.get(key, {})
        response = client.raw(method, concrete(path), **options)
        assert response.status_code not in (404, 405, 500), (method, path, response.text)
        if path != OPENAPI:
            reply = response.json()
            keys = {"success", "msg", "obj"} | ({"stage"} if key in STAGED else set())
            assert set(reply) == keys, (method, path, reply)
            if not reply["success"]:
                assert reply["msg"], (method, path)
        answered.append(key)
    assert len(answered) >= len(SPEC_ROUTES) - len(NOT_CALLED)


def test_documented_routes_are_served_and_nothing_else(panel, document):
    """An undocumented path is a 404: the document is the whole API surface."""
    api = panel.client()
    response = api.raw("GET", "/panel/api/server/notInTheDocument")
    assert response.status_code == 404
    assert "/panel/api/server/notInTheDocument" not in document["paths"]
