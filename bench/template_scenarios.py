"""What an admin's subscription template costs on the cold path, against the built-in.

On `subs_10k` (bench/sub_scenarios.py), for each templated format (the sing-box profile,
the Mihomo YAML, the Xray JSON configs) a cold pass (the body cache emptied, every one of
the 10,000 subIds requested once, 50 connections, wrk) runs with the built-in format and
then with a template that builds the same kind of document around the same proxies
(`TEMPLATES`). `ratio` is the median over runs of custom rps / built-in rps, each pair
measured back to back; the target is at least 0.90.
"""

from __future__ import annotations

import statistics

from harness import BenchError, Context, scenario
from sub_scenarios import CLIENT_COUNT, DATASET, EVERY_SUB_ONCE, SEED, _sub_url, _wrk

TARGET = 0.90
TEMPLATES = {
    "singbox": """{"log": {"level": "warn"},
"dns": {"servers": [{"type": "https", "tag": "remote", "server": "9.9.9.9", "detour": "proxy"},
 {"type": "local", "tag": "local"}], "final": "remote"},
"inbounds": [{"type": "mixed", "tag": "mixed-in", "listen": "127.0.0.1", "listen_port": 2080}],
"outbounds": [{"type": "selector", "tag": "proxy", "outbounds": {{ tags | tojson }}},
 {% for outbound in outbounds %}{{ outbound | tojson }},{% endfor %}
 {"type": "direct", "tag": "direct"}],
"route": {"rules": [{"action": "sniff"}, {"ip_is_private": true, "outbound": "direct"}],
 "final": "proxy", "default_domain_resolver": "local"}}""",
    "clash": """mixed-port: 7890
mode: rule
proxies: {{ proxies | tojson }}
proxy-groups:
  - name: PROXY
    type: select
    proxies: {{ (proxy_names + ["DIRECT"]) | tojson }}
rules:
  - GEOIP,private,DIRECT
  - MATCH,PROXY
""",
    "json": """[{% for server in servers %}{% if not loop.first %},{% endif %}
{"remarks": {{ server.remark | tojson }}, "log": {"loglevel": "warning"},
 "inbounds": [{"tag": "socks", "listen": "127.0.0.1", "port": 10808, "protocol": "socks",
               "settings": {"udp": true}}],
 "outbounds": [{{ server.outbound | tojson }},
               {"tag": "direct", "protocol": "freedom", "settings": {}}]}{% endfor %}]""",
}
# Template format -> the `?format=` that asks for it.
QUERIES = {"singbox": "singbox", "clash": "clash", "json": "json"}
REQUEST = """
local function sub_request(index)
  return wrk.format("GET", "/sub/" .. string.format("sub%%05d", index) .. "?format=%s")
end
"""


@scenario("sub_templates", dataset=DATASET, mutates=True)
def sub_templates(ctx: Context) -> dict:
    """The cold subscription path at 10,000 clients with an admin's template for the
    sing-box, Mihomo and Xray JSON formats against the built-in ones: req/s and p99 of
    each, and the ratio custom/built-in (target >= 0.90)."""
    client = ctx.panel.client()
    sub_url = _sub_url(ctx.panel.lines)
    host = client.call("GET", "/panel/api/hosts/get/1")
    passes: dict[str, list[tuple[dict, dict]]] = {kind: [] for kind in TEMPLATES}
    for run in range(ctx.runs):
        for kind, template in TEMPLATES.items():
            served = {}
            for variant, text in (("built_in", ""), ("custom", template)):
                client.call("POST", f"/panel/api/sub/templates/save/{kind}", {"template": text})
                # The same values again: nothing changes but the caches the panel empties.
                client.call("POST", "/panel/api/hosts/update/1", host)
                script = ctx.bench.workdir / f"templates-{kind}-{variant}-{run}.lua"
                done = ctx.bench.workdir / f"templates-{kind}-{variant}-{run}.done"
                once = EVERY_SUB_ONCE % (CLIENT_COUNT, SEED + run, done)
                script.write_text(REQUEST % QUERIES[kind] + once)
                served[variant] = _wrk(sub_url + "/", script=str(script), until=done)
                if served[variant]["requests"] < CLIENT_COUNT:
                    raise BenchError(f"cold {kind} {variant}: too few replies")
            passes[kind].append((served["built_in"], served["custom"]))
        for kind in TEMPLATES:
            client.call("POST", f"/panel/api/sub/templates/save/{kind}", {"template": ""})
    figures = {}
    for kind, pairs in passes.items():
        ratio = statistics.median(custom["rps"] / built["rps"] for built, custom in pairs)
        figures[f"{kind}_cold_template"] = {
            "built_in_rps": round(statistics.median(built["rps"] for built, _ in pairs)),
            "custom_rps": round(statistics.median(custom["rps"] for _, custom in pairs)),
            "built_in_p99_ms": round(statistics.median(b["p99_ms"] for b, _ in pairs), 2),
            "custom_p99_ms": round(statistics.median(c["p99_ms"] for _, c in pairs), 2),
            "connections": 50,
            "tool": "wrk",
            "ratio": round(ratio, 3),
            "target": f"custom rps >= {TARGET * 100:.0f} % of built-in's (cold, paired)",
            "met": ratio >= TARGET,
        }
    return figures
