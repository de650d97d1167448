"""Property-based fuzzing of every documented route: no input may earn a 5xx.

The routes and their body fields come from the panel's own `openapi.json`, so a route
added to the table is fuzzed without anyone remembering to. Hypothesis draws, for each
operation, path parameters and bodies that are partly shaped like the declared fields and
partly hostile: wrong types, huge and negative numbers, NaN, control characters, right to
left text, SQL and markup, long strings, deep nesting, bodies that are not objects, form
bodies where JSON is expected and bytes that are not text. Every answer must be below 500,
carry the envelope where the route answers one, and the panel's log must stay free of
tracebacks.

A CI run draws FUZZ_EXAMPLES bodies per operation (default 25) from a fixed seed, so it
fails the same way every time. Before a release, run it longer and with a random seed:

    FUZZ_EXAMPLES=1000 FUZZ_SEED=random tests/run tests/api/test_fuzz_api.py
"""

from __future__ import annotations

import json
import os
import re

import pytest
import requests
from helpers import free_port
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

OPENAPI = "/panel/api/openapi.json"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
SEED = os.environ.get("FUZZ_SEED", "20261125")
# Calls that end the panel under test or download from the internet are not fuzzed here:
# restartPanel restarts the process; the release routes fetch from public hosts by
# default (their inputs are covered by tests/core/test_core_releases.py).
NOT_FUZZED = {
    ("POST", "/panel/api/setting/restartPanel"),
    ("GET", "/panel/api/server/getCoreVersion"),
    ("POST", "/panel/api/server/installCore/{version}"),
    ("POST", "/panel/api/server/updateGeofile"),
    ("POST", "/panel/api/server/updateGeofile/{fileName}"),
    ("POST", "/panel/api/server/updatePanel"),
}
# Settings that move the panel away from the fuzzer (its port, path and TLS) are left as
# they are; every other key is fair game.
KEPT_SETTINGS = ("webPort", "webBasePath", "webListen", "webCertFile", "webKeyFile")
# Bodies the panel accepts, for routes whose validation a random body rarely gets past:
# the fuzzer also sends each with one field replaced by a hostile value, so the checks
# behind the first one (lengths, nesting, the database's own limits) are reached too.
VALID_BODIES = {
    ("POST", "/panel/api/inbounds/add"): {
        "remark": "fuzz",
        "protocol": "vless",
        "port": 0,
        "settings": {"decryption": "none"},
        "streamSettings": {"network": "tcp", "security": "none"},
        "sniffing": {"enabled": False},
    },
    ("POST", "/panel/api/clients/add"): {"client": {"email": "fuzz"}, "inboundIds": []},
    ("POST", "/panel/api/clients/groups/create"): {"name": "fuzz"},
    ("POST", "/panel/api/setting/apiTokens/create"): {"name": "fuzz"},
    ("POST", "/panel/api/core/update"): {"coreSetting": "{}"},
    ("POST", "/panel/api/webhooks/add"): {
        "name": "fuzz",
        "url": "http://127.0.0.1:9/hook",
        "secret": "fuzz-secret-of-16-chars",
        "allowPrivate": True,
    },
}
RAW_ROUTES = re.compile(r"/(getDb|getMigration|openapi\.json)$|^/ws$|^/$")

HOSTILE_TEXTS = [
    "",
    " ",
    "'; DROP TABLE client; --",
    '<img src=x onerror="alert(1)">',
    "\u202eevil\u202c",
    "\x00",
    "a\r\nSet-Cookie: x=1",
    "../../../../etc/passwd",
    "/etc/shadow",
    "%00",
    "ÄäＡ",
    "${jndi:ldap://x}",
    "x" * 70_000,
    "127.0.0.1",
    "http://127.0.0.1:1/",
    "javascript:alert(1)",
    "9" * 400,
    "x" * 256,
    "[" * 10_000 + "]" * 10_000,
    '{"log":' * 3000 + "{}" + "}" * 3000,
]
HOSTILE_NUMBERS = [
    0,
    -1,
    2**31,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**30,
    float("nan"),
    float("inf"),
    1.5,
]
HOSTILE_TEXT = st.sampled_from(HOSTILE_TEXTS)
HOSTILE_NUMBER = st.sampled_from(HOSTILE_NUMBERS)
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    HOSTILE_NUMBER,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    HOSTILE_TEXT,
)
JSON_VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
PATH_VALUE = st.one_of(
    st.integers(min_value=-5, max_value=5).map(str),
    st.sampled_from(["987654", "99999999999999999999999", "-1", "0x10", "1e3", "NaN"]),
    st.sampled_from(["..", "%2e%2e%2f", "%00", "a%0d%0ab", "%E2%80%AE", "x" * 300]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20).map(
        lambda text: requests.utils.quote(text, safe="")
    ),
)


def deep(depth: int) -> str:
    """JSON text nested `depth` levels, built as text so the fuzzer itself never recurses."""
    return "[" * depth + "]" * depth


def typed_value(kind: str) -> st.SearchStrategy:
    """A value shaped like a declared field, or a hostile one in its place."""
    shaped = {
        "integer": st.one_of(st.integers(min_value=-3, max_value=70_000), HOSTILE_NUMBER),
        "boolean": st.booleans(),
        "number": st.one_of(st.floats(), HOSTILE_NUMBER),
        "string": st.one_of(st.text(max_size=30), HOSTILE_TEXT),
        "array": st.lists(JSON_VALUE, max_size=5),
        "object": st.dictionaries(st.text(max_size=12), JSON_VALUE, max_size=5),
    }.get(kind, JSON_VALUE)
    return st.one_of(shaped, JSON_VALUE) if kind else JSON_VALUE


def places(valid: dict) -> list[tuple[str, ...]]:
    """Every field of `valid`, at the top or one level down."""
    return [(key,) for key in valid] + [
        (key, inner) for key, value in valid.items() if isinstance(value, dict) for inner in value
    ]


def one_field_off(valid: dict, place: tuple[str, ...], value) -> dict:
    """`valid` with the field at `place` replaced by `value`."""
    body = json.loads(json.dumps(valid))
    # Unique where the panel wants it unique, so the hostile field is what is judged.
    if "port" in body:
        body["port"] = free_port()
    if isinstance(body.get("client"), dict):
        body["client"]["email"] = f"fuzz{free_port()}"
    target = body
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = value
    return body


def one_field_off_strategy(valid: dict) -> st.SearchStrategy:
    hostile = st.one_of(HOSTILE_TEXT, HOSTILE_NUMBER, JSON_VALUE)
    return st.tuples(st.sampled_from(places(valid)), hostile).map(
        lambda pair: one_field_off(valid, *pair)
    )


def body_strategy(schema: dict | None) -> st.SearchStrategy:
    """A JSON object with some of the declared fields, plus stray keys, or something that
    is not an object at all."""
    properties = (schema or {}).get("properties", {})
    fields = {name: typed_value(spec.get("type", "")) for name, spec in properties.items()}
    declared = st.fixed_dictionaries({}, optional=fields) if fields else st.just({})
    with_strays = st.tuples(
        declared, st.dictionaries(st.text(max_size=12), JSON_VALUE, max_size=3)
    ).map(lambda pair: {**pair[1], **pair[0]})
    return st.one_of(with_strays, with_strays, with_strays, JSON_VALUE)


def encoded(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def without_kept_settings(value):
    if isinstance(value, dict):
        return {key: item for key, item in value.items() if key not in KEPT_SETTINGS}
    return value


def request_strategy(method: str, path: str, operation: dict) -> st.SearchStrategy:
    names = re.findall(r"\{(\w+)\}", path)
    params = st.fixed_dictionaries({name: PATH_VALUE for name in names})
    if method == "GET":
        return st.tuples(params, st.just(None))
    content = operation.get("requestBody", {}).get("content", {})
    form = "application/x-www-form-urlencoded" in content
    schema = next(iter(content.values()), {}).get("schema") if content else None
    json_body = body_strategy(schema)
    if (method, path) in VALID_BODIES:
        valid = VALID_BODIES[(method, path)]
        json_body = st.one_of(json_body, one_field_off_strategy(valid))
    if path.endswith("/setting/update"):
        json_body = json_body.map(without_kept_settings)
    json_body = json_body.map(lambda value: ("application/json", encoded(value)))
    form_body = st.dictionaries(st.text(max_size=10), st.text(max_size=30), max_size=4).map(
        lambda fields: (
            "application/x-www-form-urlencoded",
            requests.models.RequestEncodingMixin._encode_params(fields).encode(),
        )
    )
    odd_body = st.one_of(
        st.sampled_from([deep(10_000), deep(200), '{"a":' * 5000, "{", "null", '"x"']).map(
            lambda text: ("application/json", text.encode())
        ),
        st.binary(max_size=64).map(lambda data: ("application/json", data)),
        st.binary(max_size=64).map(lambda data: ("application/octet-stream", data)),
    )
    bodies = [json_body, json_body, form_body, odd_body]
    if form:
        bodies = [form_body, form_body, json_body, odd_body]
    return st.tuples(params, st.one_of(*bodies))


def concrete(path: str, params: dict) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: params[m.group(1)], path)


@pytest.fixture(scope="module")
def fuzz_target(panel):
    """The panel with a token of its own: sign-in state cannot be fuzzed away."""
    admin = panel.client()
    token = admin.post("/panel/api/setting/apiTokens/create", json={"name": "fuzz"})["obj"]
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token['token']}"
    document = session.get(panel.url + OPENAPI, timeout=30).json()
    return panel, session, document, token["id"]


def operations(document: dict) -> list[tuple[str, str, dict]]:
    return [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if (method.upper(), path) not in NOT_FUZZED
    ]


def fuzz_operation(panel, session, method: str, path: str, operation: dict, own_token: int):
    failures: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=list(HealthCheck),
    )
    @given(request_strategy(method, path, operation))
    def run(drawn):
        params, body = drawn
        if "apiTokens" in path and params.get("id") == str(own_token):
            return
        headers = {}
        data = None
        if body is not None:
            headers["Content-Type"], data = body
        url = panel.url + concrete(path, params)
        response = session.request(method, url, data=data, headers=headers, timeout=60)
        shown = {name: value[:40] for name, value in params.items()}
        where = f"{method} {path} {shown} {(data or b'')[:120]!r}"
        if RAW_ROUTES.search(path):
            if response.status_code >= 500:
                failures.append(f"{response.status_code} on {where}: {response.text[:300]}")
            return
        problem = check_answer(response, where)
        if problem:
            failures.append(problem)

    if SEED != "random":
        run = seed(int(SEED))(run)
    run()
    return failures


def test_no_route_answers_5xx_to_any_input(panel, fuzz_target):
    server, session, document, own_token = fuzz_target
    failures: list[str] = []
    for method, path, operation in operations(document):
        failures += fuzz_operation(server, session, method, path, operation, own_token)
    assert not failures, "\n".join(failures[:60])
    assert session.get(server.url + "/panel/api/server/status", timeout=30).json()["success"]
    assert "Traceback" not in server.output(), server.output()[-4000:]


def check_answer(response: requests.Response, where: str) -> str | None:
    """What is wrong with an answer, or None: no 5xx, and the envelope where JSON comes."""
    if response.status_code >= 500:
        return f"{response.status_code} on {where}: {response.text[:300]}"
    if not response.headers.get("Content-Type", "").startswith("application/json"):
        return None
    reply = response.json()
    if not isinstance(reply, dict) or "success" not in reply:
        return f"no envelope on {where}: {response.text[:300]}"
    return None


@pytest.mark.parametrize(("method", "path"), sorted(VALID_BODIES))
def test_every_field_refuses_every_hostile_value(fuzz_target, method, path):
    """Each field of a body the panel accepts, replaced in turn by each hostile value: the
    answer is an envelope below 500, whatever the field's checks or the column's limits."""
    server, session, _, _ = fuzz_target
    valid = VALID_BODIES[(method, path)]
    failures = []
    for place in places(valid):
        for value in (*HOSTILE_TEXTS, *HOSTILE_NUMBERS):
            body = encoded(one_field_off(valid, place, value))
            response = session.request(
                method,
                server.url + path,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=60,
            )
            problem = check_answer(response, f"{method} {path} {'.'.join(place)}={value!r:.60}")
            if problem:
                failures.append(problem)
    assert not failures, "\n".join(failures[:60])
