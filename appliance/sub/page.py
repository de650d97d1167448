"""The subscription's info page: what a person sees opening the subscription URL in a browser.

It shows the usage and expiry, the subscription URL and every link with a QR code to
scan from a phone and a copy button, and buttons that hand the subscription to the common
client apps by their import deep links. The page is one self-contained document: styles
inline, QR codes drawn here as inline SVG (by `segno`), nothing loaded from elsewhere, so
it works offline and leaks the subscription URL to no third party. Its one script is the
fixed `COPY_SCRIPT`, which the server's Content-Security-Policy allows by its hash
(`SCRIPT_HASH`) and nothing else: every value from the database or the request is
HTML-escaped, and a script that slipped through anyway would not run.

The copy buttons work where the browser offers no clipboard API (a page on plain HTTP at
an address other than localhost): they fall back to selecting the text and the browser's
copy command, and when that fails too they leave the text selected and say to press
Ctrl+C.

With device limits on, the page lists the devices the subscription was served to, each
with a remove button: a plain form that POSTs `?deleteDevice=<hwid>` to the page's own
address (the subscription id is the credential), which answers 303 back to the page.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
from html import escape
from urllib.parse import quote

from appliance.domain.units import human_bytes
from appliance.services.clients.sub_templates import expiry_text, import_links
from appliance.services.clients.subscriptions import Usage

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
main{max-width:860px;margin:0 auto;padding:24px}
h1{font-size:1.4rem;margin:0 0 16px}
section{background:#fff;border-radius:8px;padding:16px;margin-bottom:16px;
box-shadow:0 1px 2px rgba(0,0,0,.08)}
dl{display:grid;grid-template-columns:max-content 1fr;gap:6px 16px;margin:0}
dt{color:#5b6478}dd{margin:0;font-variant-numeric:tabular-nums}
.apps a{display:inline-block;margin:4px 8px 4px 0;padding:8px 14px;border-radius:6px;
background:#2f6fed;color:#fff;text-decoration:none}
.link{display:flex;gap:16px;align-items:center;border-top:1px solid #e6e8ee;padding:12px 0}
.link:first-of-type{border-top:0}
.bars{display:flex;align-items:flex-end;gap:2px;height:80px;margin-top:8px}
.bar{flex:1;background:#2f6fed;border-radius:2px 2px 0 0;min-width:3px}
.link code{word-break:break-all;font-size:.85rem}
.link svg{flex:none;background:#fff}
input{width:100%;box-sizing:border-box;padding:6px;font-family:monospace}
.copy{display:flex;gap:8px;align-items:center}
.copy button{flex:none;padding:6px 12px;border:1px solid #c6cbd6;border-radius:6px;background:#fff}
.sub-qr{display:flex;gap:16px;align-items:center;flex-wrap:wrap}
"""
# Copies the text of the button's data-copy attribute: by the clipboard API where there is
# one, else by selecting it in a hidden text area; if both fail, the text stays selected in
# its field for Ctrl+C. The button's label says which happened.
COPY_SCRIPT = """
document.addEventListener("click", function (event) {
  var button = event.target.closest("button[data-copy]");
  if (!button) return;
  var text = button.getAttribute("data-copy");
  var say = function (words) { button.textContent = words; };
  var bySelection = function () {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var done = false;
    try { done = document.execCommand("copy"); } catch (error) { done = false; }
    area.remove();
    if (done) return say("Copied");
    var field = button.parentNode.querySelector("input, code");
    if (field && field.select) field.select();
    else if (field) window.getSelection().selectAllChildren(field);
    say("Press Ctrl+C");
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(function () { say("Copied"); }, bySelection);
  } else {
    bySelection();
  }
});
"""
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(COPY_SCRIPT.encode()).digest()).decode()


def info_page(
    *,
    title: str,
    usage: Usage,
    month: dict,
    links: list[str],
    sub_url: str,
    json_url: str,
    yaml_url: str,
    devices: list[dict] | None = None,
) -> bytes:
    """The whole HTML document; `json_url`/`yaml_url` are empty when those formats are
    off; `devices` is None when device limits are."""
    # Imported on the first page a browser asks for: client apps, nearly every request
    # here, never need a QR code, and the encoder's tables stay out of an idle panel.
    import segno

    used = usage.upload + usage.download
    rows = [
        ("Uploaded", human_bytes(usage.upload)),
        ("Downloaded", human_bytes(usage.download)),
        ("Used", human_bytes(used)),
        ("Quota", human_bytes(usage.total) if usage.total else "unlimited"),
        ("Remaining", human_bytes(max(usage.total - used, 0)) if usage.total else "unlimited"),
        ("Expires", expiry_text(usage.expire)),
    ]
    usage_html = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows)
    usage_html = f"<dl>{usage_html}</dl>{_month_bars(month)}"
    urls = [("Subscription", sub_url), ("JSON", json_url), ("Mihomo (YAML)", yaml_url)]
    url_html = "".join(
        f'<p>{escape(label)}<span class="copy"><input readonly aria-label="{escape(label)}" '
        f'value="{escape(url)}">{_copy_button(label, url)}</span></p>'
        for label, url in urls
        if url
    )
    sub_qr = (
        f'<div class="sub-qr">{segno.make(sub_url, error="m").svg_inline(scale=3)}'
        "<p>Scan this code in a client app to add the subscription.</p></div>"
    )
    links_html = (
        "".join(
            f'<div class="link">{segno.make(link, error="m").svg_inline(scale=3)}'
            f'<span class="copy"><code>{escape(link)}</code>'
            f"{_copy_button(f'link {number}', link)}</span></div>"
            for number, link in enumerate(links, 1)
        )
        or "<p>No links.</p>"
    )
    apps_html = "".join(
        f'<a href="{escape(href)}">{escape(name)}</a>'
        for name, href in import_links(title, sub_url, yaml_url)
    )
    return (
        "<!DOCTYPE html>"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="robots" content="noindex">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><main><h1>{escape(title)}</h1>"
        f"<section>{usage_html}</section>"
        f'<section class="apps"><h2>Import</h2>{apps_html}{url_html}{sub_qr}</section>'
        f"<section><h2>Links</h2>{links_html}</section>"
        f"{_devices_html(devices)}"
        f"</main><script>{COPY_SCRIPT}</script></body></html>"
    ).encode()


def _devices_html(devices: list[dict] | None) -> str:
    if devices is None:
        return ""
    rows = "".join(
        f'<div class="link"><span>{escape(device["model"] or "unknown device")} '
        f"{escape(device['os'])} {escape(device['osVersion'])}<br>"
        f"<code>{escape(device['hwid'])}</code><br>{escape(device['userAgent'])}</span>"
        f'<form method="post" action="?deleteDevice={escape(quote(device["hwid"], safe=""))}">'
        "<button>Remove</button></form></div>"
        for device in devices
    )
    return f"<section><h2>Devices</h2>{rows or '<p>No devices yet.</p>'}</section>"


def _copy_button(label: str, text: str) -> str:
    return (
        f'<button type="button" data-copy="{escape(text)}" aria-label="Copy {escape(label)}">'
        "Copy</button>"
    )


def _month_bars(month: dict) -> str:
    """This month's usage as one bar a day, drawn with CSS alone (the page runs no
    script but its copy buttons); each bar's title tells the day and the bytes."""
    days = month["days"]
    most = max((day["up"] + day["down"] for day in days), default=0) or 1
    bars = "".join(
        f'<span class="bar" title="{escape(_day(day["at"]))}: '
        f'{escape(human_bytes(day["up"] + day["down"]))}" '
        f'style="height:{max(2, round(100 * (day["up"] + day["down"]) / most))}%"></span>'
        for day in days
    )
    total = human_bytes(month["up"] + month["down"])
    return (
        f'<h2>Your usage this month</h2><p class="month-total">{escape(total)}</p>'
        f'<div class="bars" aria-label="Usage by day this month">{bars}</div>'
    )


def _day(millis: int) -> str:
    return datetime.datetime.fromtimestamp(millis // 1000, datetime.UTC).strftime("%Y-%m-%d")
