"""Subscription templates: an admin's template for each format reaches the app that asks.

A real panel (Xray as its core, so a saved Xray template meets Xray's own `-test`; the
official sing-box binary on its PATH, so a sing-box template meets `sing-box check`)
serves a client on two inbounds. Each format's template is saved through the API and the
body an app gets is read back by that app's parser: `sing-box check` for the profile, the
YAML safe loader and our Mihomo proxy reader for Clash, `json` and Xray for the Xray
configs, the page in HTML. Every module test runs twice, on a panel that serves the
subscription port itself and on one whose two worker processes serve it, so both render
the same templates. Templates that reach for a file, a Python attribute or a value they
are not given are refused at save, and the stored template stays as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import requests
import sing_box
import xray_cli
import yaml
from helpers import create_inbound, free_port, ok, refused
from panels import start_panel, stop_and_drop
from sing_box import check_profile

from appliance.links.import_links import read_clash_proxy

TEMPLATES = "/panel/api/sub/templates"
CLIENTS = "/panel/api/clients"
SINGBOX = """{
  "log": {"level": "error"},
  "dns": {"servers": [{"type": "udp", "tag": "templated-dns", "server": "9.9.9.9"}]},
  "outbounds": [
    {"type": "selector", "tag": "pick", "outbounds": {{ tags | tojson }}},
    {% for outbound in outbounds %}{{ outbound | tojson }},{% endfor %}
    {"type": "direct", "tag": "direct"}
  ],
  "route": {
    "rules": [{"domain_suffix": ["templated.example"], "outbound": "direct"}],
    "final": "pick"
  }
}
"""
CLASH = """mixed-port: 7891
mode: rule
proxies: {{ proxies | tojson }}
proxy-groups:
  - name: Templated for {{ client.email }}
    type: select
    proxies: {{ (proxy_names + ["DIRECT"]) | tojson }}
rules:
  - DOMAIN-SUFFIX,templated.example,DIRECT
  - MATCH,Templated for {{ client.email }}
"""
XRAY = """[{% for server in servers %}{% if not loop.first %},{% endif %}
{"remarks": {{ ("templated " ~ server.remark) | tojson }},
 "log": {"loglevel": "warning"},
 "inbounds": [{"tag": "socks", "listen": "127.0.0.1", "port": 10900, "protocol": "socks",
               "settings": {"udp": true}}],
 "outbounds": [{{ server.outbound | tojson }},
               {"tag": "direct", "protocol": "freedom", "settings": {}}],
 "routing": {"rules": [{"type": "field", "domain": ["domain:templated.example"],
                        "outboundTag": "direct"}]}}{% endfor %}]
"""
PAGE = """<!DOCTYPE html><html><head><title>{{ subscription.title }}</title></head>
<body><h1 id="templated">{{ client.email }}</h1>
<p>{{ usage.used_text }} of {{ usage.total_text }}</p>
<p id="url">{{ sub_url }}</p>
{% for link in links %}<div class="templated-link">{{ qr(link) }}<code>{{ link }}</code></div>
{% endfor %}
{{ copy_script }}</body></html>
"""
REACHING = [
    ('{% include "/etc/passwd" %}', "may not include, import or extend"),
    ('{% import "/etc/hostname" as host %}{"outbounds": []}', "may not include, import or extend"),
    ('{% extends "base.j2" %}', "may not include, import or extend"),
    ("{{ client.__class__.__mro__ }}", "may not read the attribute '__"),
    ("{{ lipsum.__globals__.os.popen('id').read() }}", "may not read the attribute"),
    ("{{ cycler.__init__.__globals__ }}", "may not read the attribute '__"),
    ("{{ client['__class__'] }}", "may not read the attribute '__class__'"),
    ("{{ client | attr('__class__') }}", "may not read the attribute '__class__'"),
    ("{{ tags.append('x') }}", "may not read the attribute 'append'"),
    ("{{ open('/etc/passwd').read() }}", "reads open, which it is not given"),
    ("{{ config }}", "reads config, which it is not given"),
    ("{{ self._TemplateReference__context }}", "may not read the attribute"),
]


@pytest.fixture(scope="module", params=["1", "2"], ids=["panel-serves", "two-workers"])
def panel(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("templates")
    tools = folder / "bin"
    tools.mkdir()
    (tools / "sing-box").symlink_to(sing_box.binary())
    env = {
        "APPLIANCE_SUB_WORKERS": request.param,
        "APPLIANCE_CORE": str(xray_cli.install(folder)),
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
    }
    server = start_panel(folder, env=env)
    yield server
    stop_and_drop(server)


@pytest.fixture(scope="module")
def api(panel):
    return panel.client()


@pytest.fixture(scope="module")
def client(api) -> dict:
    """A client on a VLESS and a VMess inbound: its email and subId."""
    ids = [
        create_inbound(
            api,
            {
                "protocol": protocol,
                "remark": f"templates-{protocol}",
                "port": free_port(),
                "settings": settings,
                "streamSettings": {"network": "tcp", "security": "none"},
            },
        )["id"]
        for protocol, settings in (("vless", {"decryption": "none"}), ("vmess", {}))
    ]
    record = {"email": f"{uuid.uuid4().hex[:8]}@templates", "subId": uuid.uuid4().hex[:16]}
    ok(api.post(f"{CLIENTS}/add", {"client": record, "inboundIds": ids}))
    return record


@pytest.fixture
def restore(api):
    yield
    for kind in ("singbox", "clash", "json", "page"):
        ok(api.post(f"{TEMPLATES}/save/{kind}", {"template": ""}))


def fetch(panel, path: str, **headers) -> requests.Response:
    # A new connection per request, as a client app polls: with workers, any may answer.
    response = requests.get(
        panel.sub_url + path, headers={"Connection": "close", **headers}, timeout=20
    )
    assert response.status_code == 200, response.text
    return response


def stored(api, kind: str) -> str:
    return next(entry for entry in ok(api.get(f"{TEMPLATES}/list")) if entry["format"] == kind)[
        "template"
    ]


def test_a_sing_box_template_reaches_sing_box(panel, api, client, restore, tmp_path):
    ok(api.post(f"{TEMPLATES}/save/singbox", {"template": SINGBOX}))
    profile = json.loads(fetch(panel, f"/sub/{client['subId']}?format=singbox").text)
    assert profile["dns"]["servers"][0]["tag"] == "templated-dns"
    assert profile["route"]["rules"][0]["domain_suffix"] == ["templated.example"]
    servers = [outbound for outbound in profile["outbounds"] if "server" in outbound]
    assert [outbound["type"] for outbound in servers] == ["vless", "vmess"]
    assert profile["outbounds"][0]["outbounds"] == [outbound["tag"] for outbound in servers]
    check_profile(profile, tmp_path)


def test_a_clash_template_reaches_mihomo_as_yaml(panel, api, client, restore):
    ok(api.post(f"{TEMPLATES}/save/clash", {"template": CLASH}))
    document = yaml.safe_load(
        fetch(panel, f"/sub/{client['subId']}", **{"User-Agent": "mihomo/1"}).text
    )
    assert document["mixed-port"] == 7891
    group = f"Templated for {client['email']}"
    assert document["proxy-groups"][0]["name"] == group
    assert document["rules"] == ["DOMAIN-SUFFIX,templated.example,DIRECT", f"MATCH,{group}"]
    plans = [read_clash_proxy(proxy) for proxy in document["proxies"]]
    assert [plan.protocol for plan in plans] == ["vless", "vmess"]


def test_an_xray_template_reaches_xray(panel, api, client, restore, tmp_path):
    ok(api.post(f"{TEMPLATES}/save/json", {"template": XRAY}))
    configs = json.loads(fetch(panel, f"/sub/{client['subId']}?format=json").text)
    assert [config["outbounds"][0]["protocol"] for config in configs] == ["vless", "vmess"]
    assert all(config["remarks"].startswith("templated ") for config in configs)
    binary = xray_cli.install(tmp_path)
    for number, config in enumerate(configs):
        path = tmp_path / f"config-{number}.json"
        path.write_text(json.dumps(config))
        result = subprocess.run(
            [str(binary), "run", "-test", "-c", str(path)], capture_output=True, timeout=60
        )
        assert result.returncode == 0, result.stdout


def test_a_page_template_is_the_page_a_browser_gets(panel, api, client, restore):
    ok(api.post("/panel/api/setting/update", {"subTitle": "<b>Shop</b>"}))
    try:
        ok(api.post(f"{TEMPLATES}/save/page", {"template": PAGE}))
        response = fetch(panel, f"/sub/{client['subId']}", Accept="text/html")
    finally:
        ok(api.post("/panel/api/setting/update", {"subTitle": ""}))
    page = response.text
    assert response.headers["Content-Type"].startswith("text/html")
    assert f'<h1 id="templated">{client["email"]}</h1>' in page
    assert "<title>&lt;b&gt;Shop&lt;/b&gt;</title>" in page
    assert page.count('class="templated-link"><svg') == 2
    assert "vless://" in page and "vmess://" in page
    assert "Content-Security-Policy" in response.headers


@pytest.mark.parametrize(("template", "words"), REACHING, ids=[w for w, _ in REACHING])
def test_a_template_reaching_beyond_its_values_is_refused(api, restore, template, words):
    ok(api.post(f"{TEMPLATES}/save/clash", {"template": CLASH}))
    refused(api.post(f"{TEMPLATES}/save/singbox", {"template": template}), words)
    refused(api.post(f"{TEMPLATES}/save/clash", {"template": template}), words)
    assert stored(api, "clash") == CLASH.strip()
    assert stored(api, "singbox") == ""


@pytest.mark.parametrize(
    ("kind", "template", "words"),
    [
        ("singbox", '{"outbounds": [}', "not valid JSON"),
        (
            "singbox",
            '{"outbounds": [{"type": "direct", "tag": "d"}], "route": {"final": "x"}}',
            "route.final names 'x'",
        ),
        (
            "singbox",
            '{"outbounds": [{"type": "direct", "tag": "d", "bogus": 1}]}',
            "sing-box refused",
        ),
        ("clash", "proxies: [\n  - {name: a", "not valid YAML"),
        ("clash", "mode: rule", "needs a list of proxies"),
        ("json", '{"outbounds": [{"protocol": "nonsense"}]}', "the core refused"),
        ("json", "[]", "empty list"),
        ("page", "{% for x in links %}", "not valid"),
        ("nonsense", "x", "unknown template format"),
    ],
)
def test_a_template_whose_result_its_app_cannot_read_is_refused(
    api, restore, kind, template, words
):
    refused(api.post(f"{TEMPLATES}/save/{kind}", {"template": template}), words)
    if kind != "nonsense":
        assert stored(api, kind) == ""


def test_a_preview_shows_a_clients_body_by_the_typed_template(api, client):
    shown = ok(
        api.post(f"{TEMPLATES}/preview/clash", {"email": client["email"], "template": CLASH})
    )
    assert shown["custom"] is True
    assert f"Templated for {client['email']}" in shown["body"]
    assert stored(api, "clash") == ""  # a preview stores nothing
    built_in = ok(api.post(f"{TEMPLATES}/preview/singbox", {"email": client["email"]}))
    assert built_in["custom"] is False
    assert json.loads(built_in["body"])["route"]["final"] == "proxy"
    page = ok(api.post(f"{TEMPLATES}/preview/page", {"email": client["email"], "template": PAGE}))
    assert page["body"].count("templated-link") == 2
    refused(api.post(f"{TEMPLATES}/preview/clash", {"email": "nobody@x"}), "no client")
    refused(
        api.post(
            f"{TEMPLATES}/preview/clash", {"email": client["email"], "template": "{{ nope }}"}
        ),
        "reads nope",
    )


def test_a_file_in_the_data_directory_fills_an_empty_template_on_reset(panel, api, restore):
    folder = Path(panel.data_dir) / "templates"
    folder.mkdir(exist_ok=True)
    (folder / "clash.yaml.j2").write_text(CLASH)
    entry = ok(api.post(f"{TEMPLATES}/reset/clash"))
    assert entry["template"] == CLASH.strip()
    assert entry["fileFound"] is True
    # A file that is a link out of its folder is not read: the built-in format comes back.
    (folder / "clash.yaml.j2").unlink()
    outside = folder.parent / "outside.j2"
    outside.write_text(CLASH)
    (folder / "clash.yaml.j2").symlink_to(outside)
    assert ok(api.post(f"{TEMPLATES}/reset/clash"))["template"] == ""
    # One its checks refuse is left out too.
    (folder / "clash.yaml.j2").unlink()
    (folder / "clash.yaml.j2").write_text("{{ client.__class__ }}")
    assert ok(api.post(f"{TEMPLATES}/reset/clash"))["template"] == ""
    (folder / "clash.yaml.j2").unlink()


def test_the_settings_api_refuses_what_the_template_route_refuses(api):
    refused(
        api.post("/panel/api/setting/update", {"subTemplateSingbox": "{{ tags.__class__ }}"}),
        "may not read the attribute '__class__'",
    )
    assert stored(api, "singbox") == ""


def test_a_file_fills_an_empty_template_at_start_and_never_a_stored_one(tmp_path):
    server = start_panel(tmp_path)
    try:
        folder = Path(server.data_dir) / "templates"
        folder.mkdir()
        (folder / "singbox.json.j2").write_text(SINGBOX)
        (folder / "clash.yaml.j2").write_text("{% include 'clash.yaml.j2' %}")
        server.stop()
        server.start()
        api = server.client()
        assert stored(api, "singbox") == SINGBOX.strip()
        assert stored(api, "clash") == ""
        assert any("clash.yaml.j2 is not used" in line for line in server.lines)
        ok(api.post(f"{TEMPLATES}/save/singbox", {"template": SINGBOX.replace("pick", "chosen")}))
        server.stop()
        server.start()
        assert "chosen" in stored(server.client(), "singbox")
    finally:
        stop_and_drop(server)
