"""Admin templates around a subscription's proxies: compiled in a sandbox, checked per app.

Marzban and Remnawave let an admin shape what each app receives; here the sing-box
profile, the Mihomo/Clash document, the Xray JSON configs and the subscription page may
each be replaced by a template in Jinja's language. The approach is Jinja2's
`ImmutableSandboxedEnvironment` with no loader: a template sees only the plain values
handed to it (dicts, lists, strings, numbers: the rendered proxies as data, the clients'
public fields, the share links), may not change them, and cannot include, import or
extend anything, since there is nothing to load from. `StrictUndefined` makes a misspelt
name an error instead of an empty string in an app's config.

A template is refused before it is stored (`compile_template`) when it names an
attribute that starts with "_" or one the sandbox would refuse (`__class__`,
`__globals__`, `mro`, a method that changes a value ...), uses include/import/extends,
or reads a value not given to its format: the sandbox would refuse those only when a
render reaches them, and a branch the sample client does not take would slip through.
Sizes are bounded: the template's text, what `*` and `**` may build, and the rendered
output (`MAX_OUTPUT_CHARS`), which is counted while it is produced.

`check_output` is the parse an app would make of the result: JSON with outbounds whose
groups name existing tags (sing-box), YAML by the safe loader with a list of proxies whose
groups name existing proxies (Mihomo), JSON configs with outbounds (Xray). A sample
subscription (`sample_values`) lets a save check a template without a client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import yaml
from jinja2 import StrictUndefined, meta, nodes
from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError
from jinja2.sandbox import (
    UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
    UNSAFE_COROUTINE_ATTRIBUTES,
    UNSAFE_FUNCTION_ATTRIBUTES,
    UNSAFE_GENERATOR_ATTRIBUTES,
    UNSAFE_METHOD_ATTRIBUTES,
    ImmutableSandboxedEnvironment,
)

from appliance.domain.units import human_bytes
from appliance.errors import ServiceError
from appliance.links.clash import GROUP_NAME, parse_rules
from appliance.links.names import with_unique_names
from appliance.links.singbox import RESERVED_TAGS

# Format -> what it is, for messages and the UI.
FORMATS = {
    "singbox": "sing-box profile (JSON)",
    "clash": "Mihomo/Clash profile (YAML)",
    "json": "Xray JSON configs",
    "page": "subscription page (HTML)",
}
# The file in <data dir>/templates that holds each format's template.
FILE_NAMES = {
    "singbox": "singbox.json.j2",
    "clash": "clash.yaml.j2",
    "json": "xray.json.j2",
    "page": "page.html.j2",
}
COMMON_VALUES = ("subscription", "client", "clients", "links")
# Format -> the names its templates may read, beside COMMON_VALUES.
VALUES = {
    "singbox": ("outbounds", "tags"),
    "clash": ("proxies", "proxy_names", "rules"),
    "json": ("servers", "configs"),
    "page": ("usage", "sub_url", "json_url", "yaml_url", "apps", "qr", "copy_script"),
}
MAX_TEMPLATE_CHARS = 64 * 1024
MAX_OUTPUT_CHARS = 8 << 20
# What `*` may repeat into (a string or list) and the largest exponent `**` takes.
MAX_REPEAT = 1 << 20
MAX_EXPONENT = 64
# Names the static check refuses, beside those starting with "_": what the sandbox
# refuses on functions, methods, generators, and what changes a list, dict or set.
MUTATING = frozenset(
    {
        "append",
        "clear",
        "extend",
        "insert",
        "pop",
        "popitem",
        "remove",
        "reverse",
        "setdefault",
        "sort",
        "update",
        "add",
        "discard",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
    }
)
UNSAFE_NAMES = (
    UNSAFE_FUNCTION_ATTRIBUTES
    | UNSAFE_METHOD_ATTRIBUTES
    | UNSAFE_GENERATOR_ATTRIBUTES
    | UNSAFE_COROUTINE_ATTRIBUTES
    | UNSAFE_ASYNC_GENERATOR_ATTRIBUTES
    | {"mro", "format_map"}
    | MUTATING
)
# Characters json.dumps leaves raw that YAML forbids unescaped (DEL, C1 controls, BOM)
# or reads as line breaks (NEL, the line and paragraph separators); escaped, the text
# stays the same JSON and becomes valid YAML flow too.
YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")
CLASH_SPECIAL = frozenset({"DIRECT", "REJECT", "REJECT-DROP", "PASS", "COMPATIBLE", "GLOBAL"})
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Sandbox(ImmutableSandboxedEnvironment):
    """The sandbox with `*` and `**` bounded, so no expression builds gigabytes."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator, left, right):
        if operator == "**" and isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
            raise SecurityError(f"an exponent over {MAX_EXPONENT} is not allowed")
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                repeats = isinstance(seq, str | list | tuple) and isinstance(count, int)
                if repeats and len(seq) * count > MAX_REPEAT:
                    raise SecurityError(f"'*' may build at most {MAX_REPEAT} items")
        return super().call_binop(context, operator, left, right)


def to_json(value) -> str:
    """Compact JSON, readable as YAML flow as well (see YAML_UNSAFE)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if YAML_UNSAFE.search(text):
        text = YAML_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return text


def _environment(html: bool) -> Sandbox:
    environment = Sandbox(undefined=StrictUndefined, autoescape=html, keep_trailing_newline=True)
    if not html:
        # The page keeps Jinja's own tojson, which escapes for HTML.
        environment.filters["tojson"] = to_json
    return environment


TEXT_ENVIRONMENT = _environment(html=False)
HTML_ENVIRONMENT = _environment(html=True)


@dataclass(frozen=True)
class CompiledTemplate:
    """One format's template, compiled once; `uses`: the given values it reads, so a
    render builds only those."""

    kind: str
    source: str
    template: object
    uses: frozenset[str]

    def render(self, values: dict) -> str:
        """The text for `values`; ServiceError with Jinja's words when it fails."""
        try:
            return _bounded(self.template.generate(values))
        except (TemplateError, ArithmeticError, TypeError, ValueError) as exc:
            raise ServiceError(f"the {self.kind} template failed: {_words(exc)}") from None


def compile_template(kind: str, source: str) -> CompiledTemplate:
    """`source` compiled for format `kind`, or ServiceError saying what is refused."""
    if kind not in FORMATS:
        raise ServiceError(f"unknown template format '{kind}': use {', '.join(FORMATS)}")
    if not isinstance(source, str):
        raise ServiceError(f"the {kind} template must be text")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise ServiceError(
            f"the {kind} template is {len(source)} characters; at most "
            f"{MAX_TEMPLATE_CHARS} are allowed"
        )
    environment = HTML_ENVIRONMENT if kind == "page" else TEXT_ENVIRONMENT
    try:
        tree = environment.parse(source)
    except TemplateSyntaxError as exc:
        raise ServiceError(
            f"the {kind} template is not valid: {exc.message} (line {exc.lineno})"
        ) from None
    _refuse_reaches(kind, tree)
    given = {*COMMON_VALUES, *VALUES[kind]}
    unknown = sorted(meta.find_undeclared_variables(tree) - given - set(environment.globals))
    if unknown:
        raise ServiceError(
            f"the {kind} template reads {', '.join(unknown)}, which it is not given; it may "
            f"read {', '.join(sorted(given))}"
        )
    try:
        template = environment.from_string(tree)
    except TemplateError as exc:
        raise ServiceError(f"the {kind} template is not valid: {_words(exc)}") from None
    uses = frozenset(meta.find_undeclared_variables(tree) & given)
    return CompiledTemplate(kind, source, template, uses)


def _refuse_reaches(kind: str, tree: nodes.Template) -> None:
    """Refuse what reaches beyond the values given, wherever it sits in the template."""
    for node in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        raise ServiceError(
            f"the {kind} template may not include, import or extend other templates "
            f"(line {node.lineno}): it sees only the values given to it"
        )
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter)):
        if isinstance(node, nodes.Filter):
            name = _constant(node.args[0]) if node.name == "attr" and node.args else None
        else:
            name = node.attr if isinstance(node, nodes.Getattr) else _constant(node.arg)
        if isinstance(name, str) and (name.startswith("_") or name in UNSAFE_NAMES):
            raise ServiceError(
                f"the {kind} template may not read the attribute '{name}' (line "
                f"{node.lineno}): only the values given to it and their keys"
            )


def _constant(node: nodes.Node):
    return node.value if isinstance(node, nodes.Const) else None


def _bounded(pieces: Iterator[str]) -> str:
    out = []
    size = 0
    for piece in pieces:
        size += len(piece)
        if size > MAX_OUTPUT_CHARS:
            raise ValueError(f"its output is over {MAX_OUTPUT_CHARS} characters")
        out.append(piece)
    return "".join(out)


def _words(exc: BaseException) -> str:
    return str(getattr(exc, "message", None) or exc)[:300]


# ---------------------------------------------------------------------------------------
# What each app would make of the result
# ---------------------------------------------------------------------------------------


def check_output(kind: str, text: str) -> object:
    """The parsed result when the app of `kind` could read `text`; else ServiceError
    with the parser's words. The page is HTML, which any browser reads."""
    return CHECKS[kind](text) if kind in CHECKS else text


def check_singbox(text: str) -> dict:
    profile = _json(text, "sing-box profile")
    if not isinstance(profile, dict):
        raise ServiceError("the sing-box profile must be a JSON object")
    outbounds = profile.get("outbounds")
    if not isinstance(outbounds, list) or not outbounds:
        raise ServiceError("the sing-box profile needs a non-empty list of outbounds")
    tags = []
    for index, outbound in enumerate(outbounds):
        if not isinstance(outbound, dict) or not isinstance(outbound.get("type"), str):
            raise ServiceError(f"sing-box outbounds[{index}] needs a type")
        tag = outbound.get("tag")
        if tag in tags:
            raise ServiceError(f"sing-box outbounds[{index}]: the tag '{tag}' is used twice")
        tags.append(tag)
    for outbound in outbounds:
        for member in outbound.get("outbounds") or []:
            if member not in tags:
                raise ServiceError(
                    f"sing-box outbound '{outbound.get('tag')}' names '{member}', which is "
                    "no outbound's tag"
                )
    route = profile.get("route")
    final = route.get("final") if isinstance(route, dict) else None
    if final is not None and final not in tags:
        raise ServiceError(f"sing-box route.final names '{final}', which is no outbound's tag")
    return profile


def check_clash(text: str) -> dict:
    try:
        document = yaml.load(text, Loader=LOADER)
    except yaml.YAMLError as exc:
        raise ServiceError(f"the Clash profile is not valid YAML: {_yaml_words(exc)}") from None
    if not isinstance(document, dict):
        raise ServiceError("the Clash profile must be a YAML mapping")
    proxies = document.get("proxies")
    if not isinstance(proxies, list):
        raise ServiceError("the Clash profile needs a list of proxies")
    names = set()
    for index, proxy in enumerate(proxies):
        if not isinstance(proxy, dict) or not all(k in proxy for k in ("name", "type", "server")):
            raise ServiceError(f"Clash proxies[{index}] needs a name, a type and a server")
        names.add(proxy["name"])
    groups = document.get("proxy-groups") or []
    if not isinstance(groups, list):
        raise ServiceError("Clash proxy-groups must be a list")
    known = names | CLASH_SPECIAL | {g.get("name") for g in groups if isinstance(g, dict)}
    for index, group in enumerate(groups):
        if not isinstance(group, dict) or "name" not in group or "type" not in group:
            raise ServiceError(f"Clash proxy-groups[{index}] needs a name and a type")
        for member in group.get("proxies") or []:
            if member not in known:
                raise ServiceError(
                    f"Clash group '{group['name']}' names '{member}', which is no proxy or group"
                )
    rules = document.get("rules", [])
    if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
        raise ServiceError("Clash rules must be a list of text lines")
    return document


def check_xray(text: str) -> list[dict]:
    parsed = _json(text, "Xray JSON")
    configs = parsed if isinstance(parsed, list) else [parsed]
    if not configs:
        raise ServiceError("the Xray JSON is an empty list: it needs at least one config")
    for index, config in enumerate(configs):
        outbounds = config.get("outbounds") if isinstance(config, dict) else None
        if not isinstance(outbounds, list) or not outbounds:
            raise ServiceError(f"Xray config [{index}] needs a non-empty list of outbounds")
        for number, outbound in enumerate(outbounds):
            if not isinstance(outbound, dict) or not isinstance(outbound.get("protocol"), str):
                raise ServiceError(f"Xray config [{index}] outbounds[{number}] needs a protocol")
    return configs


CHECKS: dict[str, Callable[[str], object]] = {
    "singbox": check_singbox,
    "clash": check_clash,
    "json": check_xray,
}


def _json(text: str, what: str):
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ServiceError(f"the {what} is not valid JSON: {exc}") from None


def _yaml_words(exc: yaml.YAMLError) -> str:
    return " ".join(str(exc).split())[:300]


# ---------------------------------------------------------------------------------------
# The values of each format
# ---------------------------------------------------------------------------------------


def singbox_values(outbounds: list[dict]) -> dict:
    """`outbounds` (from `singbox_outbound`) with unique tags, as the built-in profile
    names them, and those tags."""
    servers = with_unique_names(outbounds, "tag", "server", RESERVED_TAGS)
    return {"outbounds": servers, "tags": [server["tag"] for server in servers]}


def clash_values(proxies: list[dict], routing_rules: str) -> dict:
    """`proxies` (from `clash_proxy`) with unique names, those names, and the rule lines
    of the `subRoutingRules` setting."""
    named = with_unique_names(proxies, "name", "proxy", {GROUP_NAME, "DIRECT", "REJECT"})
    return {
        "proxies": named,
        "proxy_names": [proxy["name"] for proxy in named],
        "rules": parse_rules(routing_rules),
    }


def xray_values(configs: list[dict]) -> dict:
    """The built-in configs (from `client_config`) and, per config, its remark and its
    proxy outbound (the first)."""
    servers = [
        {"remark": config.get("remarks", ""), "outbound": config["outbounds"][0]}
        for config in configs
    ]
    return {"servers": servers, "configs": configs}


def page_usage(upload: int, download: int, total: int, expire_text: str) -> dict:
    """The usage the page shows, in bytes and as text."""
    used = upload + download
    return {
        "upload": upload,
        "download": download,
        "used": used,
        "total": total,
        "upload_text": human_bytes(upload),
        "download_text": human_bytes(download),
        "used_text": human_bytes(used),
        "total_text": human_bytes(total) if total else "unlimited",
        "remaining_text": human_bytes(max(total - used, 0)) if total else "unlimited",
        "expire_text": expire_text,
    }


# ---------------------------------------------------------------------------------------
# A sample subscription, for a save without a client
# ---------------------------------------------------------------------------------------

SAMPLE_UUID = "0b8bd1b6-6a5c-4d2f-9d3e-2d2f1c4b5a6e"
SAMPLE_SERVER = "sample.example.com"


def sample_values(kind: str) -> dict:
    """Every value format `kind` is given, for one sample client with one server."""
    client = {
        "email": "sample",
        "remark": "",
        "up": 1024,
        "down": 2048,
        "used": 3072,
        "total": 0,
        "expiry": 0,
    }
    common = {
        "subscription": {
            "title": "sample",
            "upload": 1024,
            "download": 2048,
            "total": 0,
            "expire": 0,
        },
        "client": client,
        "clients": [client],
        "links": [f"vless://{SAMPLE_UUID}@{SAMPLE_SERVER}:443?security=tls#sample"],
    }
    if kind == "singbox":
        outbound = {
            "type": "vless",
            "tag": "sample",
            "server": SAMPLE_SERVER,
            "server_port": 443,
            "uuid": SAMPLE_UUID,
            "tls": {"enabled": True, "server_name": SAMPLE_SERVER},
        }
        return {**common, **singbox_values([outbound])}
    if kind == "clash":
        proxy = {
            "name": "sample",
            "type": "vless",
            "server": SAMPLE_SERVER,
            "port": 443,
            "uuid": SAMPLE_UUID,
            "tls": True,
            "servername": SAMPLE_SERVER,
        }
        return {**common, **clash_values([proxy], "")}
    if kind == "json":
        outbound = {
            "tag": "proxy",
            "protocol": "vless",
            "settings": {
                "vnext": [
                    {
                        "address": SAMPLE_SERVER,
                        "port": 443,
                        "users": [{"id": SAMPLE_UUID, "encryption": "none"}],
                    }
                ]
            },
            "streamSettings": {
                "network": "tcp",
                "security": "tls",
                "tlsSettings": {"serverName": SAMPLE_SERVER},
            },
        }
        config = {"remarks": "sample", "outbounds": [outbound]}
        return {**common, **xray_values([config])}
    return {
        **common,
        "usage": page_usage(1024, 2048, 0, "never"),
        "sub_url": "https://sample.example.com/sub/sample",
        "json_url": "",
        "yaml_url": "",
        "apps": [{"name": "sing-box", "href": "sing-box://import-remote-profile?url=x"}],
        "qr": lambda text: "",
        "copy_script": "",
    }
