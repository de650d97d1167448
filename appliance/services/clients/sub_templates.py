"""Subscription templates: where they are kept, compiled once, checked, previewed.

A template replaces the built-in sing-box profile, Mihomo/Clash document, Xray JSON or
subscription page (appliance.links.templates has the language and the checks). Each
format's template is one setting (`subTemplateSingbox`, `subTemplateClash`,
`subTemplateJson`, `subTemplatePage`; empty: the built-in), so a worker process, another
panel on the same database and a backup carry it like any other setting.

Files in `<data dir>/templates/` (`singbox.json.j2`, `clash.yaml.j2`, `xray.json.j2`,
`page.html.j2`) are the admin's own defaults, for templates kept in a repository or put
in place by provisioning. The one rule: a file fills its setting whenever the setting is
empty, at start and on reset; a setting that holds a template is never overwritten by a
file. A file is read only from that folder (a link out of it is refused, see
runtime.file_paths) and goes through the same checks as a save; one that fails is logged
and left out.

`TemplateCache` keeps each format's compiled form, keyed by the setting's text, so the
cold subscription path pays only the render; a settings change (the change notice's
"settings" kind, through `Subscriptions.invalidate`) drops it, and a worker that reloads
its settings finds a changed text and compiles that.

A save checks the template three ways: the sandbox compiles it, its render for a sample
client parses for its app (links.templates.check_output), and then the app itself reads
it where the panel has it: the installed core's `-test` for Xray JSON, and `sing-box
check` when a sing-box binary is on the panel's PATH. A preview renders a template (the
one typed, or the stored one) for a chosen client's subscription and runs the same checks.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from urllib.parse import quote

from markupsafe import Markup

from appliance.core.process import CoreMissing
from appliance.errors import ServiceError
from appliance.links.templates import (
    COMMON_VALUES,
    FILE_NAMES,
    FORMATS,
    VALUES,
    CompiledTemplate,
    check_output,
    compile_template,
    page_usage,
    sample_values,
)
from appliance.runtime.environment import child_environment
from appliance.runtime.file_paths import confined
from appliance.services.admin.settings_table import TEMPLATE_SETTINGS

log = logging.getLogger(__name__)

TEMPLATES_DIR = "templates"
SING_BOX_TIMEOUT = 30
# The subscription's format -> the template format that replaces it.
TEMPLATE_OF = {"singbox": "singbox", "yaml": "clash", "json": "json"}
# What `Subscriptions.preview` is asked for to get the share links of the page.
TEMPLATE_LINKS = "links"


class TemplateCache:
    """Each format's compiled template from its setting; None where the setting is empty
    or holds a template that no longer compiles (an older release stored it)."""

    def __init__(self, settings):
        self.settings = settings
        self._compiled: dict[str, tuple[str, CompiledTemplate | None]] = {}

    def clear(self) -> None:
        self._compiled = {}

    def get(self, kind: str) -> CompiledTemplate | None:
        source = self.settings.get(TEMPLATE_SETTINGS[kind])
        if not source:
            return None
        entry = self._compiled.get(kind)
        if entry is None or entry[0] != source:
            entry = (source, _compiled_or_none(kind, source))
            self._compiled[kind] = entry
        return entry[1]


def _compiled_or_none(kind: str, source: str) -> CompiledTemplate | None:
    try:
        return compile_template(kind, source)
    except ServiceError as exc:
        log.warning("the stored %s template is not used: %s", kind, exc.msg)
        return None


def client_values(clients) -> list[dict]:
    """The public fields of the subscription's clients (ClientRecord), the only client
    data a template sees beside what the proxies carry."""
    return [
        {
            "email": client.email,
            "remark": client.comment,
            "up": client.up,
            "down": client.down,
            "used": client.up + client.down,
            "total": client.total_bytes,
            "expiry": client.expiry_time,
        }
        for client in clients
    ]


def page_values(
    *,
    usage,
    expire_text: str,
    links: list[str],
    sub_url: str,
    json_url: str,
    yaml_url: str,
    apps: list[tuple[str, str]],
    copy_script: str,
) -> dict:
    """What a page template is given beside COMMON_VALUES: `qr(text)` draws a QR code
    as inline SVG, `copy_script` is the page's one allowed script (copy buttons read
    `data-copy`)."""
    return {
        "usage": page_usage(usage.upload, usage.download, usage.total, expire_text),
        "links": links,
        "sub_url": sub_url,
        "json_url": json_url,
        "yaml_url": yaml_url,
        "apps": [{"name": name, "href": href} for name, href in apps],
        "qr": _qr,
        "copy_script": Markup(f"<script>{copy_script}</script>") if copy_script else "",
    }


def _qr(text) -> Markup:
    import segno

    return Markup(segno.make(str(text), error="m").svg_inline(scale=3))


def import_links(title: str, sub_url: str, yaml_url: str) -> list[tuple[str, str]]:
    """(app, deep link) pairs the usual client apps register for importing a remote
    subscription; Clash-family apps get the YAML address when it is served, else the
    subscription URL, which answers them in YAML by their User-Agent."""
    url = quote(sub_url, safe="")
    name = quote(title, safe="")
    apps = [
        ("v2rayNG", f"v2rayng://install-config?url={url}"),
        ("v2RayTun", f"v2raytun://import/{sub_url}"),
        ("Streisand", f"streisand://import/{sub_url}#{name}"),
        ("Hiddify", f"hiddify://import/{sub_url}#{name}"),
        ("sing-box", f"sing-box://import-remote-profile?url={url}#{name}"),
    ]
    clash_url = quote(yaml_url or sub_url, safe="")
    apps.append(("Clash / Mihomo", f"clash://install-config?url={clash_url}"))
    return apps


def expiry_text(seconds: int) -> str:
    """An expiry in unix seconds as the page shows it."""
    if not seconds:
        return "never"
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


class SubTemplates:
    """The templates API: list, save, preview and reset one format's template."""

    def __init__(
        self,
        settings,
        subscriptions,
        data_dir: str,
        core_test: Callable[[dict], None],
        sub_url: Callable[[str, str], str],
        which: Callable[[str], str | None] = shutil.which,
    ):
        self.settings = settings
        self.subscriptions = subscriptions
        self.folder = os.path.join(data_dir, TEMPLATES_DIR)
        self.core_test = core_test
        self.sub_url = sub_url
        self.which = which

    def list(self) -> list[dict]:
        return [self._entry(kind) for kind in FORMATS]

    def _entry(self, kind: str) -> dict:
        return {
            "format": kind,
            "title": FORMATS[kind],
            "setting": TEMPLATE_SETTINGS[kind],
            "template": self.settings.get(TEMPLATE_SETTINGS[kind]),
            "file": os.path.join(self.folder, FILE_NAMES[kind]),
            "fileFound": os.path.isfile(os.path.join(self.folder, FILE_NAMES[kind])),
            "values": sorted({*COMMON_VALUES, *VALUES[kind]}),
        }

    def save(self, kind: str, body: dict) -> dict:
        """Store `body.template` as the template of `kind` once every check passes; an
        empty one means the built-in format."""
        kind = _format(kind)
        source = body.get("template")
        if not isinstance(source, str):
            raise ServiceError("template must be text (empty for the built-in format)")
        if source.strip():
            self._check(kind, compile_template(kind, source), sample_values(kind))
        self._write(kind, source)
        return self._entry(kind)

    def reset(self, kind: str) -> dict:
        """Back to the file's template when there is a usable one, else the built-in."""
        kind = _format(kind)
        self._write(kind, self._file_template(kind))
        return self._entry(kind)

    def seed(self) -> None:
        """Fill each empty template setting from its file (at start)."""
        for kind, key in TEMPLATE_SETTINGS.items():
            if not self.settings.get(key):
                source = self._file_template(kind)
                if source:
                    self._write(kind, source)

    def preview(self, kind: str, body: dict, address: str) -> dict:
        """The body `body.email`'s subscription would get by the template of `body`
        (or the stored one), checked like a save: `{format, body, checked}`."""
        kind = _format(kind)
        email = body.get("email")
        if not isinstance(email, str) or not email.strip():
            raise ServiceError("email must name the client whose subscription to preview")
        source = body.get("template")
        if source is None:
            source = self.settings.get(TEMPLATE_SETTINGS[kind])
        if not isinstance(source, str):
            raise ServiceError("template must be text (empty for the built-in format)")
        compiled = compile_template(kind, source) if source.strip() else None
        lookup = self.subscriptions.preview_lookup(email.strip())
        if kind == "page":
            text = self._page(lookup, compiled, address)
        else:
            text = self.subscriptions.preview(kind, lookup, address, compiled)
        if compiled is not None:
            check_output(kind, text)
            self._app_check(kind, text)
        return {"format": kind, "body": text, "custom": compiled is not None}

    def _page(self, lookup, compiled: CompiledTemplate | None, address: str) -> str:
        if compiled is None:
            raise ServiceError(
                "the built-in page has no preview here: open the subscription URL in a browser"
            )
        links = self.subscriptions.preview(TEMPLATE_LINKS, lookup, address, None)
        sub_url = self.sub_url(lookup.sub_id, address)
        values = self.subscriptions.common_values(lookup, frozenset())
        values.update(
            page_values(
                usage=lookup.usage,
                expire_text=expiry_text(lookup.usage.expire),
                links=links.split("\n") if links else [],
                sub_url=sub_url,
                json_url="",
                yaml_url="",
                apps=import_links(values["subscription"]["title"], sub_url, ""),
                copy_script="",
            )
        )
        return compiled.render(values)

    # ---- checks and storage ---------------------------------------------------------

    def _check(self, kind: str, compiled: CompiledTemplate, values: dict) -> str:
        text = compiled.render(values)
        check_output(kind, text)
        self._app_check(kind, text)
        return text

    def _app_check(self, kind: str, text: str) -> None:
        """The app's own reading of `text`, where the panel has the app."""
        if kind == "json":
            parsed = json.loads(text)
            for config in parsed if isinstance(parsed, list) else [parsed]:
                try:
                    self.core_test(config)
                except CoreMissing:
                    return
        elif kind == "singbox":
            binary = self.which("sing-box")
            if binary:
                _sing_box_check(binary, text)

    def _write(self, kind: str, source: str) -> None:
        changes = self.settings.check({TEMPLATE_SETTINGS[kind]: source})
        if changes:
            self.settings.write(changes)

    def _file_template(self, kind: str) -> str:
        """The template file of `kind` when it is in its folder and passes the checks;
        "" otherwise (a file that fails is logged)."""
        path = os.path.join(self.folder, FILE_NAMES[kind])
        if not os.path.isfile(path):
            return ""
        try:
            confined(path, [self.folder], f"the {kind} template file")
            with open(path, encoding="utf-8") as file:
                source = file.read(1 << 20)
            if source.strip():
                self._check(kind, compile_template(kind, source), sample_values(kind))
            return source.strip()
        except (ServiceError, OSError, UnicodeError) as exc:
            log.warning("template file %s is not used: %s", path, getattr(exc, "msg", exc))
            return ""


def _format(kind: str) -> str:
    if kind not in FORMATS:
        raise ServiceError(f"unknown template format '{kind}': use {', '.join(FORMATS)}")
    return kind


def _sing_box_check(binary: str, text: str) -> None:
    """sing-box's own verdict on the profile `text`; ServiceError with its words."""
    with tempfile.TemporaryDirectory(prefix="sing-box-check-") as folder:
        path = os.path.join(folder, "profile.json")
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)
        try:
            result = subprocess.run(
                [binary, "check", "-c", path],
                capture_output=True,
                text=True,
                timeout=SING_BOX_TIMEOUT,
                env=child_environment(),
                cwd=folder,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceError(f"sing-box could not check the profile: {exc}") from None
    if result.returncode != 0:
        words = " ".join((result.stderr or result.stdout).replace(path, "profile").split())
        raise ServiceError(f"sing-box refused the profile: {words[:500]}")
