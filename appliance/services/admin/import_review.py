"""What an imported database may bring in: nothing the routes would refuse.

A backup may come from an older release, from a panel on another host, or from a hand
that edited it; its rows passed SQLite's checks (`store.backup`) but not the rules the
routes apply to each value. So before a checked file replaces the live data
(`Backups.restore`) or is copied into a networked database (`migrate-db`), the routes'
own rules run on it (`migrate-db` reviews a copy, as the source is only read), and each
kind of value gets the answer that suits it:

- a setting that fails its rule or a check across settings (`settings_table`, the rules
  `setting/update` runs) is reset to its default: every setting has a default that works,
  and the rest of the backup is still worth restoring;
- a core template its route refuses (not JSON, paths out of their places, an inbound on
  one of this panel's own ports) is reset to the built-in template likewise;
- a host or an outbound subscription its route refuses is left out: links then use the
  inbound's own address, and the core runs without that subscription's outbounds;
- an inbound record the inbound routes refuse (`inbound_rules`), or one on this panel's
  own ports, refuses the whole import: it cannot run here, and moving or dropping it
  would change the links its clients use in silence. Its file paths are not judged here:
  a path out of its place leaves out what needs it when the core config is built
  (`runtime.file_paths`), as for what an older release stored.

Every reset is named, with the rule's own sentence, in the import's answer and in the
panel log; the values that pass are stored as their route would store them (normalised).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from appliance.domain.inbound_rules import normalize_inbound, transports
from appliance.errors import ServiceError
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings_table import BY_NAME, DEFAULTS, WHOLE_SET_CHECKS
from appliance.services.inbounds.hosts import normalize_host
from appliance.services.inbounds.listeners import Reserved, reserved_by, template_port_problem
from appliance.services.outbounds.subscriptions import parse_form
from appliance.store import import_review_sql
from appliance.store.migrations import LATEST, current_version, migrate

log = logging.getLogger(__name__)

KIND_WORDS = {bool: "true or false", int: "an integer", str: "text"}
# The inbound columns after id, remark and tag, by the names the inbound routes take.
INBOUND_FIELDS = (
    "protocol",
    "listen",
    "port",
    "enable",
    "expiryTime",
    "total",
    "settings",
    "streamSettings",
    "sniffing",
    "nodeId",
)


def review_file(
    path: str, places: FilePlaces, reserved_ports: Callable[[], list[Reserved]] | None
) -> list[str]:
    """Refuse, or repair in place, the SQLite file at `path` (this release's schema) as
    the routes would judge its values on the panel whose own listeners `reserved_ports`
    gives (None: the panel the file's own settings describe); returns a sentence per
    reset."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        stored = import_review_sql.settings(conn)
        reserved = reserved_ports() if reserved_ports else ports_of(stored)
        refuse_inbounds_on(conn, reserved)
        writes, notes = repair_settings(stored, places, reserved)
        with import_review_sql.transaction(conn):
            for key, raw in writes.items():
                import_review_sql.write_setting(conn, key, raw)
            notes += leave_out_refused_rows(conn)
    finally:
        conn.close()
    for note in notes:
        log.warning("import: %s", note)
    return notes


def review_copy(source_path: str, scratch_dir: str, places: FilePlaces) -> tuple[str, list[str]]:
    """For `migrate-db`: a reviewed copy of the SQLite file at `source_path` (which is only
    read), upgraded to this release's schema, in `scratch_dir`, and a sentence per reset.
    A file that is missing or no panel's database is given back as it is, for the copy
    to refuse with its own words."""
    if not os.path.isfile(source_path):
        return source_path, []
    copy = os.path.join(scratch_dir, "reviewed.db")
    try:
        source = sqlite3.connect(f"file:{quote(source_path)}?mode=ro", uri=True)
        conn = sqlite3.connect(copy, isolation_level=None)
        try:
            source.backup(conn)
            if not 0 < current_version(conn, "sqlite") <= LATEST:
                return source_path, []
            migrate(conn, "sqlite")
        finally:
            conn.close()
            source.close()
        return copy, review_file(copy, places, None)
    except sqlite3.Error:
        return source_path, []


def ports_of(stored: dict[str, str]) -> list[Reserved]:
    """The listeners of the panel that `stored` settings describe, as `reserved_ports`."""

    def value(key: str) -> Any:
        setting = BY_NAME[key]
        decoded = _decoded(stored.get(key, "null"), setting.kind)
        try:
            return DEFAULTS[key] if decoded is None else setting.rule(key, decoded)
        except ServiceError:
            return DEFAULTS[key]

    web = value("webListen")
    return [
        (web, value("webPort"), "the panel itself"),
        (value("subListen") or web, value("subPort"), "the subscription server"),
    ]


def refuse_inbounds_on(conn: sqlite3.Connection, reserved: list[Reserved]) -> None:
    """An inbound the inbound routes would refuse (`inbound_rules`), or one of this host on
    a port the panel itself listens on: the import is refused, naming it."""
    for row in import_review_sql.inbound_rows(conn):
        inbound_id, remark, tag = row[:3]
        payload = dict(zip(INBOUND_FIELDS, row[3:], strict=True))
        payload["enable"] = bool(payload["enable"])
        for key in ("settings", "streamSettings", "sniffing"):
            payload[key] = _json_value(payload[key])
        name = f"the backup's inbound {inbound_id} ({remark or tag})"
        try:
            record = normalize_inbound({**payload, "remark": remark, "tag": tag})
        except ServiceError as exc:
            raise ServiceError(
                f"{name} is one the inbound routes refuse ({exc.msg}); nothing was imported. "
                "Correct it in the panel the backup comes from, then import again"
            ) from None
        if record["nodeId"] is not None or record["listen"].startswith(("/", "@")):
            continue
        what = reserved_by(record["listen"], record["port"], transports(record), reserved)
        if what:
            raise ServiceError(
                f"{name} listens on port {record['port']}/tcp, which {what} uses on this "
                "host, so it could not run here; nothing was imported. Start the panel on "
                "other ports (--port, --sub-port) or move the inbound in the panel the "
                "backup comes from, then import again"
            )


def leave_out_refused_rows(conn: sqlite3.Connection) -> list[str]:
    """Hosts and outbound subscriptions their routes would refuse are left out (deleted
    from the file): links then use the inbound's own address, and the core runs without
    that subscription's outbounds. Returns a sentence per row left out."""
    notes = []
    hosts = import_review_sql.host_rows(conn)
    for host_id, remark, address, port, security, sni, tags in hosts:
        payload = {
            "remark": remark,
            "address": address or "",
            "port": port,
            "security": security,
            "sni": sni or "",
            "tags": _json_value(tags),
        }
        reason = _refusal(normalize_host, payload)
        if reason:
            import_review_sql.delete_host(conn, host_id)
            notes.append(f"host {host_id} ({remark}) was left out ({reason})")
    subscriptions = import_review_sql.subscription_rows(conn)
    for sub_id, remark, url, prefix, interval, enabled, private, prepend in subscriptions:
        form = {
            "remark": remark or "",
            "url": url,
            "tagPrefix": prefix or "",
            "updateInterval": interval,
            "enabled": bool(enabled),
            "allowPrivate": bool(private),
            "prepend": bool(prepend),
        }
        reason = _refusal(lambda form: parse_form(form, None), form)
        if reason:
            import_review_sql.delete_subscription(conn, sub_id)
            name = f"outbound subscription {sub_id} ({remark or url})"
            notes.append(f"{name} was left out ({reason})")
    return notes


def _refusal(rule: Callable[[dict], Any], payload: dict) -> str:
    """The route's sentence when `rule` refuses `payload`, else empty."""
    try:
        rule(payload)
    except ServiceError as exc:
        return exc.msg
    return ""


def repair_settings(
    stored: dict[str, str], places: FilePlaces, reserved: list[Reserved]
) -> tuple[dict[str, str | None], list[str]]:
    """The setting rows to write (None: delete, back to the default) and a sentence per
    reset, for the stored rows `stored` (key -> JSON text). Unknown keys are left alone:
    they are the panel's internal records, which no route writes."""
    values: dict[str, Any] = {}
    writes: dict[str, str | None] = {}
    notes: list[str] = []

    def reset(key: str, reason: str) -> None:
        values.pop(key, None)
        writes[key] = None
        notes.append(f"{key} was reset to its default ({reason})")

    for key, raw in stored.items():
        setting = BY_NAME.get(key)
        if setting is None:
            continue
        value = _decoded(raw, setting.kind)
        if value is None:
            reset(key, f"the stored value is not {KIND_WORDS[setting.kind]}")
            continue
        try:
            normal = setting.rule(key, value) if setting.rule else value
        except ServiceError as exc:
            reset(key, exc.msg)
            continue
        values[key] = normal
        if normal != value:
            writes[key] = json.dumps(normal)
    for cross in WHOLE_SET_CHECKS:
        try:
            cross.check({**DEFAULTS, **values}, places)
        except ServiceError as exc:
            for key in cross.fields:
                if key in values:
                    reset(key, exc.msg)
    template = values.get("coreTemplate")
    problem = template and template_port_problem(json.loads(template), reserved)
    if problem:
        reset("coreTemplate", problem)
    return writes, notes


def _decoded(raw: str, kind: type) -> Any:
    """The stored JSON text as a value of the setting's type, None when it is not one."""
    try:
        value = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return None
    return value if type(value) is kind else None


def _json_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return raw
