"""The bounded reader of answers from outside (`appliance/runtime/reader.py`), fed every
hostile shape a server can send: nesting a hundred thousand levels deep, bytes that are
not UTF-8, NaN and Infinity, numbers of thousands of digits, text that is not JSON, a
top level of the wrong type, a body that never ends, and YAML that is nested too deeply
or swollen by aliases. Each is refused with a sentence of the reader's own words (never
the sender's bytes), and nothing recurses: given to the plain parsers, the deep
documents raise RecursionError, or in libyaml's case end the process.
"""

from __future__ import annotations

import base64

import pytest
from provider_apis import ENDLESS, HOSTILE, ProviderApi

from appliance.errors import ServiceError
from appliance.links.import_links import LinkError, read_link
from appliance.links.outbound_feed import read_feed
from appliance.runtime.egress import Egress, FetchFailed
from appliance.runtime.reader import Unreadable, parse_json, parse_yaml, read_json

LIMIT = 1 << 20


@pytest.fixture(scope="module")
def server():
    api = ProviderApi()
    yield api
    api.close()


def loopback(server: ProviderApi) -> Egress:
    return Egress("a test server", ("127.0.0.1", server.port), True)


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_every_hostile_shape_is_refused_with_the_readers_words(shape):
    body, words = HOSTILE[shape]
    with pytest.raises(Unreadable) as refused:
        parse_json(body, LIMIT, dict)
    assert words in refused.value.msg
    assert "internal-secret" not in refused.value.msg
    assert refused.value.msg.startswith("the answer ")


def test_a_top_level_of_another_type_is_named():
    with pytest.raises(Unreadable, match="the answer is an array, not an object"):
        parse_json(b"[1, 2]", LIMIT, dict)
    with pytest.raises(Unreadable, match="is null, not an object or an array"):
        parse_json(b"null", LIMIT, (dict, list))
    assert parse_json(b'{"a": [1, {"b": 2.5}]}', LIMIT, dict) == {"a": [1, {"b": 2.5}]}
    assert parse_json(b"[]", LIMIT, (dict, list)) == []


def test_an_answer_over_the_limit_is_refused():
    with pytest.raises(Unreadable, match="at most 100 are read"):
        parse_json(b"[" + b"1," * 100 + b"1]", 100)


def test_an_answer_read_from_a_server_is_bounded_in_size(server):
    server.answers[("GET", "/endless")] = (200, ENDLESS)
    with (
        pytest.raises(FetchFailed, match="larger than the limit of 1 MB"),
        loopback(server).request(f"http://127.0.0.1:{server.port}/endless") as reply,
    ):
        read_json(reply, LIMIT)


def test_a_deep_answer_read_from_a_server_is_refused(server):
    server.answers[("GET", "/deep")] = (200, HOSTILE["deep"][0])
    server.answers[("GET", "/good")] = (200, {"success": True, "obj": [1]})
    egress = loopback(server)
    with (
        pytest.raises(Unreadable, match="nested too deeply"),
        egress.request(f"http://127.0.0.1:{server.port}/deep") as reply,
    ):
        read_json(reply, LIMIT, dict)
    with egress.request(f"http://127.0.0.1:{server.port}/good") as reply:
        assert read_json(reply, LIMIT, dict) == {"success": True, "obj": [1]}


# ---- YAML ------------------------------------------------------------------------------------


def alias_bomb(levels: int = 9) -> str:
    """Nine lists of nine aliases of the list before: 9**9 (387 million) strings."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        aliases = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{aliases}]")
    return "\n".join(lines) + f"\nproxies: [*a{levels - 1}]\n"


def test_an_alias_bomb_is_refused_before_it_is_composed():
    with pytest.raises(Unreadable, match="more than 200000 values once its aliases"):
        parse_yaml(alias_bomb(), LIMIT)


def test_yaml_nested_deeply_is_refused_without_recursing():
    with pytest.raises(Unreadable, match="nested more than 64 levels"):
        parse_yaml("proxies: " + "[" * 100_000 + "]" * 100_000, 1 << 22)


def test_aliases_count_their_own_depth():
    deep = "a: &a " + "[" * 40 + "1" + "]" * 40 + "\n"
    with pytest.raises(Unreadable, match="nested more than 64 levels"):
        parse_yaml(deep + "b: " + "[" * 30 + "*a" + "]" * 30 + "\n", LIMIT)


def test_ordinary_yaml_with_anchors_is_read():
    text = "base: &base {type: ss, port: 1}\nproxies:\n  - {<<: *base, name: one}\n  - *base\n"
    assert parse_yaml(text, LIMIT) == {
        "base": {"type": "ss", "port": 1},
        "proxies": [{"type": "ss", "port": 1, "name": "one"}, {"type": "ss", "port": 1}],
    }
    with pytest.raises(Unreadable, match="not valid YAML"):
        parse_yaml("proxies: [unclosed", LIMIT)


def test_a_hostile_clash_profile_is_refused_with_the_reason():
    with pytest.raises(ServiceError, match="nested more than 64 levels"):
        read_feed(("proxies: " + "[" * 100_000 + "]" * 100_000).encode())
    with pytest.raises(ServiceError, match="aliases are expanded"):
        read_feed(alias_bomb().encode())


def test_share_links_with_hostile_json_are_refused_as_links():
    deep = base64.b64encode(b'{"add":' * 10_000 + b"1" + b"}" * 10_000).decode()
    with pytest.raises(LinkError, match="not base64 of a JSON object"):
        read_link(f"vmess://{deep}")
    extra = "[" * 10_000 + "]" * 10_000
    link = f"vless://{'1' * 8}-1111-1111-1111-{'1' * 12}@example.com:443?type=xhttp&extra={extra}"
    with pytest.raises(LinkError, match="nested too deeply"):
        read_link(link)
