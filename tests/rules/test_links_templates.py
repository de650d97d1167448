"""The template language of subscription templates, without a server: the sandbox, the
bounds, the values each format is given and each app's parse of the result."""

from __future__ import annotations

import json

import pytest
import yaml

from appliance.errors import ServiceError
from appliance.links.templates import (
    FORMATS,
    MAX_OUTPUT_CHARS,
    check_output,
    compile_template,
    sample_values,
    to_json,
)


def render(kind: str, source: str, values: dict | None = None) -> str:
    return compile_template(kind, source).render(values or sample_values(kind))


def refusal(kind: str, source: str) -> str:
    with pytest.raises(ServiceError) as caught:
        render(kind, source)
    return caught.value.msg


@pytest.mark.parametrize(
    "source",
    [
        "{{ client.__class__ }}",
        "{{ client['__cla' ~ 'ss__'] }}",
        "{{ client | attr('__cla' ~ 'ss__') }}",
        "{% set name = '__class__' %}{{ client[name] }}",
        "{{ (client.items() | list)[0].__class__ }}",
        "{{ client.email.format_map(client) }}",
    ],
)
def test_python_internals_stay_out_of_reach_however_the_name_is_spelt(source):
    # Names built at render time pass the static check; the sandbox refuses them there.
    words = refusal("singbox", source)
    assert "attribute" in words or "unsafe" in words, words


def test_a_template_cannot_change_the_values_it_is_given():
    values = sample_values("clash")
    assert "may not read the attribute 'update'" in refusal("clash", "{{ client.update({}) }}")
    with pytest.raises(ServiceError, match=r"unsafe|undefined"):
        render(
            "clash", "{% set f = 'pop' %}{{ (proxies | map(attribute=f) | first)('name') }}", values
        )
    assert values == sample_values("clash")


def test_what_a_template_may_build_is_bounded():
    assert "at most" in refusal("page", "{{ 'x' * 100000000 }}")
    assert "exponent" in refusal("page", "{{ 10 ** 100000 }}")
    words = refusal("page", "{% for i in range(99999) %}{{ 'y' * 1000 }}{% endfor %}")
    assert f"over {MAX_OUTPUT_CHARS} characters" in words


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_every_value_a_format_is_given_can_be_read(kind):
    names = sorted(sample_values(kind))
    source = "".join(f"{{{{ {name} is defined }}}}" for name in names)
    assert render(kind, source) == "True" * len(names)


def test_tojson_writes_json_that_yaml_reads_the_same():
    awkward = {"name": "caf\u00e9 \x7f\x85\u2028 \U0001f600 \ufeff", "n": [1, 2.5, None, True]}
    text = to_json(awkward)
    assert json.loads(text) == awkward
    assert yaml.safe_load(text) == awkward


def test_the_page_escapes_values_and_the_text_formats_do_not():
    values = {**sample_values("page"), "sub_url": "<script>x</script>"}
    assert render("page", "{{ sub_url }}", values) == "&lt;script&gt;x&lt;/script&gt;"
    values = {**sample_values("clash"), "rules": ["a<b"]}
    assert render("clash", "{{ rules[0] }}", values) == "a<b"


@pytest.mark.parametrize(
    ("kind", "text", "words"),
    [
        ("singbox", "[]", "must be a JSON object"),
        (
            "singbox",
            '{"outbounds": [{"type": "direct", "tag": "a"}, {"type": "x", "tag": "a"}]}',
            "used twice",
        ),
        (
            "singbox",
            '{"outbounds": [{"type": "selector", "tag": "s", "outbounds": ["z"]}]}',
            "names 'z'",
        ),
        ("clash", "proxies: [{name: a}]", "needs a name, a type and a server"),
        (
            "clash",
            "proxies: []\nproxy-groups: [{name: g, type: select, proxies: [b]}]",
            "names 'b'",
        ),
        ("clash", "proxies: []\nrules: [{a: 1}]", "list of text lines"),
        ("clash", "a: *nowhere", "not valid YAML"),
        ("json", '[{"outbounds": [{"tag": "x"}]}]', "needs a protocol"),
    ],
)
def test_each_app_check_says_what_it_cannot_read(kind, text, words):
    with pytest.raises(ServiceError, match=words.replace("(", r"\(")):
        check_output(kind, text)
