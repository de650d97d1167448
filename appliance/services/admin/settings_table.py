"""Every panel setting, declared once: name, default, help sentence, section, rule.

The settings API, the offline `appliance setting` command and the README's settings
reference (`python -m appliance.services.admin.settings_doc`) all read this table, so
what the panel accepts, what it documents and what it stores cannot drift apart. A
setting's type is its default's type (true/false, integer or text). Adding a setting is
one `Setting(...)` line here, plus its label in the UI.

A save checks each value it changes by its rule (settings_rules), then the whole-set
checks below that read one of them (they look at several values or the filesystem), in
their order; an imported database has all of them run on every value (import_review).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from appliance.domain.sub_formats import DEFAULT_RULES
from appliance.errors import ServiceError
from appliance.links.templates import FILE_NAMES, FORMATS
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings_rules import (
    PORT,
    OneOf,
    Range,
    Rule,
    announce_text,
    backup_schedule,
    check_cert_pair,
    check_core_template,
    check_data_centres,
    data_centres,
    host_names,
    listen_address,
    percents,
    private_destinations,
    sub_format_rules,
    sub_template,
    time_location,
    trusted_proxies,
    url_path,
    web_url,
)


@dataclass(frozen=True)
class Setting:
    """One setting. `rule` checks (and may normalise) a value on its own; `secret`
    values leave the API redacted; `restart`: a running panel uses a new value only
    after its next restart."""

    name: str
    default: bool | int | str
    help: str
    section: str
    rule: Rule | None = None
    secret: bool = False
    restart: bool = False

    @property
    def kind(self) -> type:
        return type(self.default)


# Section name -> its title, in the order the reference lists them (the UI's panels).
SECTIONS = {
    "panel": "Panel",
    "clients": "Clients and traffic",
    "subscription": "Subscription",
    "chatBot": "Chat-bot",
    "smtp": "Mail (SMTP)",
    "core": "Core and updates",
}

# Template format -> the setting that holds its template.
TEMPLATE_SETTINGS = {
    "singbox": "subTemplateSingbox",
    "clash": "subTemplateClash",
    "json": "subTemplateJson",
    "page": "subTemplatePage",
}

SETTINGS = (
    # ---- panel ---------------------------------------------------------------------------
    Setting(
        "webListen",
        "",
        "IP address the panel listens on; empty for all addresses.",
        "panel",
        listen_address,
        restart=True,
    ),
    Setting(
        "webPort",
        2053,
        "TCP port the panel listens on; appliance run --port overrides it.",
        "panel",
        PORT,
        restart=True,
    ),
    Setting(
        "webBasePath",
        "/",
        "URL path the panel is served under, like /panel/; slashes are added at both ends.",
        "panel",
        url_path,
        restart=True,
    ),
    Setting(
        "webDomain",
        "",
        "Domain name of the panel. With webAllowedHosts empty, the panel answers only to "
        "this name when it is set; behind a proxy that rewrites Host, sign-ins and "
        "WebSockets from pages at this name are accepted.",
        "panel",
    ),
    Setting(
        "webAllowedHosts",
        "",
        "Host names and IP addresses the panel answers to, comma-separated, or * for any. "
        "Empty: only webDomain when it is set, any name otherwise. localhost, loopback "
        "addresses and the listen address always work.",
        "panel",
        host_names,
    ),
    Setting(
        "webCertFile",
        "",
        "TLS certificate file (PEM) for HTTPS on the panel port, in a certificate folder; "
        "empty for plain HTTP.",
        "panel",
        restart=True,
    ),
    Setting(
        "webKeyFile",
        "",
        "Private key file (unencrypted PEM) of webCertFile.",
        "panel",
        restart=True,
    ),
    Setting(
        "sessionMaxAge",
        360,
        "How long a sign-in lasts, in minutes.",
        "panel",
        Range(1, 525_600),
    ),
    Setting(
        "auditRetentionDays",
        90,
        "Days an audit log entry is kept before it is removed.",
        "panel",
        Range(1, 3650),
    ),
    Setting(
        "metricsEnable",
        False,
        "Serve the panel's figures in the Prometheus text format at GET /metrics under the "
        "base path, to a signed-in admin or an API token of the read or admin scope.",
        "panel",
    ),
    Setting(
        "trustedProxies",
        "",
        "IP addresses or networks of reverse proxies, comma-separated, whose "
        "X-Forwarded-For and X-Forwarded-Proto headers the panel believes.",
        "panel",
        trusted_proxies,
    ),
    Setting(
        "allowPrivateDestinations",
        "",
        "Settings, comma-separated (getRemoteCertHash too), whose own host may be a "
        "loopback, private or link-local address: a mirror, Bot API server or mail relay "
        "on this machine or the local network. Empty: the panel connects to public "
        "addresses only.",
        "panel",
        private_destinations,
    ),
    Setting(
        "pageSize", 25, "Default number of rows on one page of a list.", "panel", Range(1, 200)
    ),
    Setting(
        "timeLocation",
        "Local",
        "Time zone of the panel: Local (the host's zone) or an IANA name like Europe/Berlin.",
        "panel",
        time_location,
    ),
    # ---- clients and traffic -------------------------------------------------------------
    Setting(
        "expireDiff",
        3,
        "Days before its expiry from which a client counts as expiring.",
        "clients",
        Range(0, 3650),
    ),
    Setting(
        "webhookUsagePercents",
        "80,90",
        "Shares of a client's traffic quota, in percent and comma-separated, at which "
        "webhooks raise client.usage_reached; empty for none.",
        "clients",
        percents,
    ),
    Setting(
        "trafficDiff",
        1,
        "Gigabytes of quota left below which a client counts as expiring.",
        "clients",
        Range(0, 1_000_000),
    ),
    Setting(
        "trafficInterval",
        10,
        "Seconds between two readings of the core's traffic counters.",
        "clients",
        Range(1, 3600),
        restart=True,
    ),
    Setting(
        "mtprotoDataCenters",
        "149.154.175.50:443,149.154.167.51:443,149.154.175.100:443,149.154.167.91:443,"
        "149.154.171.5:443",
        "Telegram data centres the MTProto proxies relay to: host:port of DC 1, 2, ... "
        "separated by commas. Loopback, private and link-local addresses only with "
        "mtprotoDataCenters listed in allowPrivateDestinations; the cloud metadata address "
        "never.",
        "clients",
        data_centres,
    ),
    Setting(
        "ipLimitEnable",
        False,
        "Enforce each client's IP limit: addresses beyond it are written to "
        "logs/ip-limit.log in the data directory, for fail2ban to block.",
        "clients",
    ),
    Setting(
        "hwidEnable",
        False,
        "Limit the devices of each subscription: client apps send a device id (x-hwid) "
        "with every request; a new device beyond the client's device limit gets no "
        "configuration.",
        "clients",
    ),
    Setting(
        "hwidDefaultLimit",
        0,
        "Devices a subscription may use when its client's deviceLimit is 0; 0 for no limit.",
        "clients",
        Range(0, 100_000),
    ),
    Setting(
        "hwidRequired",
        False,
        "With hwidEnable, refuse requests that send no device id; off, such a request gets "
        "the subscription and is not counted as a device.",
        "clients",
    ),
    Setting(
        "hwidAnnounce",
        "",
        "Text client apps show when a device is refused for the device limit (at most 1000 "
        "characters); empty for none.",
        "clients",
        announce_text,
    ),
    # ---- subscription --------------------------------------------------------------------
    Setting(
        "subEnable",
        True,
        "Serve subscriptions; off, every subscription address answers 404.",
        "subscription",
    ),
    Setting(
        "subListen",
        "",
        "IP address the subscription server listens on; empty for the panel's.",
        "subscription",
        listen_address,
        restart=True,
    ),
    Setting(
        "subPort",
        10882,
        "TCP port of the subscription server; appliance run --sub-port overrides it.",
        "subscription",
        PORT,
        restart=True,
    ),
    Setting(
        "subPath",
        "/sub/",
        "URL path of share-link subscriptions, followed by the subscription id.",
        "subscription",
        url_path,
    ),
    Setting(
        "subDomain",
        "",
        "Server address written into subscription links and URLs; empty for the host name "
        "the client app used.",
        "subscription",
    ),
    Setting(
        "subCertFile",
        "",
        "TLS certificate file (PEM) for HTTPS on the subscription port, in a certificate "
        "folder; empty for plain HTTP.",
        "subscription",
        restart=True,
    ),
    Setting(
        "subKeyFile",
        "",
        "Private key file (unencrypted PEM) of subCertFile.",
        "subscription",
        restart=True,
    ),
    Setting(
        "subUpdates",
        12,
        "How often client apps should refresh a subscription, in hours.",
        "subscription",
        Range(1, 8760),
    ),
    Setting(
        "subTitle",
        "",
        "Profile title client apps show; empty for the client's email, or the subscription "
        "id when it has several clients.",
        "subscription",
    ),
    Setting(
        "subSupportUrl",
        "",
        "Support page (an http or https URL) client apps offer; empty for none.",
        "subscription",
        web_url,
    ),
    Setting(
        "subProfileUrl",
        "",
        "Profile page (an http or https URL) client apps open; empty for the "
        "subscription's own info page.",
        "subscription",
        web_url,
    ),
    Setting(
        "subAnnounce",
        "",
        "Announcement text client apps show with the subscription.",
        "subscription",
    ),
    Setting(
        "subJsonEnable",
        False,
        "Serve core client configs (JSON) at subJsonPath.",
        "subscription",
    ),
    Setting(
        "subJsonPath",
        "/json/",
        "URL path of JSON subscriptions, followed by the subscription id.",
        "subscription",
        url_path,
    ),
    Setting(
        "subYamlEnable",
        False,
        "Serve Mihomo (Clash) configs (YAML) at subYamlPath.",
        "subscription",
    ),
    Setting(
        "subYamlPath",
        "/yaml/",
        "URL path of YAML subscriptions, followed by the subscription id.",
        "subscription",
        url_path,
    ),
    Setting(
        "subFormatRules",
        DEFAULT_RULES,
        "Which format the subscription path serves each client app: rules separated by ; "
        "or line breaks, as format: words, the format base64, json, clash or singbox, "
        "matched when the app's User-Agent contains one of the words (any case); the first "
        "match wins, no match gets base64 links, and ?format= in the URL overrides the rules.",
        "subscription",
        sub_format_rules,
    ),
    Setting(
        "remarkModel",
        "-ieo",
        "How links are named: a separator, then letters for the parts in order (i the "
        "inbound's remark, e the client's email, o other, like a host's remark).",
        "subscription",
    ),
    Setting(
        "subEnableRouting",
        False,
        "Send subRoutingRules to client apps with the subscription.",
        "subscription",
    ),
    Setting(
        "subRoutingRules",
        "",
        "Routing rules, one per line: sent to client apps when subEnableRouting is on, and "
        "added to YAML subscriptions.",
        "subscription",
    ),
    *(
        Setting(
            key,
            "",
            f"Template (Jinja, sandboxed) for the {FORMATS[kind]} instead of the built-in "
            f"one; empty for the built-in. The file templates/{FILE_NAMES[kind]} in the "
            "data directory seeds it when it is empty (see Subscription templates).",
            "subscription",
            sub_template(kind),
        )
        for kind, key in TEMPLATE_SETTINGS.items()
    ),
    # ---- chat-bot ------------------------------------------------------------------------
    Setting(
        "tgBotEnable",
        False,
        "Turn on the Telegram chat-bot: it tells the admin chats of sign-ins and clients near "
        "their limits, sends backups and answers /usage EMAIL there.",
        "chatBot",
    ),
    Setting("tgBotToken", "", "Token the bot got from @BotFather.", "chatBot", secret=True),
    Setting(
        "tgBotChatId",
        "",
        "Admin chats of the bot: numeric chat ids or @channel names, comma-separated.",
        "chatBot",
    ),
    Setting(
        "tgBotBackup",
        False,
        "Send a database backup to the admin chats on the tgRunTime schedule.",
        "chatBot",
    ),
    Setting(
        "tgRunTime",
        "@daily",
        "When scheduled backups are sent: @daily, @hourly, or @every N followed by h, m or "
        "s (like @every 6h).",
        "chatBot",
        backup_schedule,
    ),
    Setting(
        "tgCpuAlert",
        0,
        "Tell the admin chats when the CPU usage reaches this percent (once until it falls "
        "below again); 0 for never. Sign-ins and clients near their quota or expiry are "
        "always told while the bot is on.",
        "chatBot",
        Range(0, 100),
    ),
    Setting(
        "tgBotAPIServer",
        "",
        "Bot API server (an http or https URL); empty for Telegram's own.",
        "chatBot",
    ),
    # ---- mail ----------------------------------------------------------------------------
    Setting("smtpEnable", False, "Turn on mail through the SMTP server.", "smtp"),
    Setting("smtpHost", "", "Host name of the mail server.", "smtp"),
    Setting("smtpPort", 587, "TCP port of the mail server.", "smtp", PORT),
    Setting(
        "smtpSecurity",
        "starttls",
        "How the mail connection is secured: none, starttls (a plain connection upgraded "
        "to TLS) or tls (TLS from the start).",
        "smtp",
        OneOf(("none", "starttls", "tls")),
    ),
    Setting("smtpUsername", "", "User name at the mail server; empty to send without one.", "smtp"),
    Setting("smtpPassword", "", "Password at the mail server.", "smtp", secret=True),
    Setting(
        "smtpFrom",
        "",
        "Sender address of the panel's mail; empty for smtpUsername when that is an address.",
        "smtp",
    ),
    # ---- core and updates ----------------------------------------------------------------
    Setting(
        "coreTemplate",
        "",
        "Core config (a JSON object) the panel adds its inbounds, clients and API to; empty "
        "for the built-in template.",
        "core",
    ),
    Setting(
        "outboundTestUrl",
        "https://www.google.com/generate_204",
        "Address fetched through an outbound to test it.",
        "core",
    ),
    Setting(
        "coreReleaseUrl",
        "https://api.github.com/repos/XTLS/Xray-core/releases",
        "Where core releases are listed for installing the core, in the shape of GitHub's "
        "releases API.",
        "core",
    ),
    Setting(
        "geoipUrl",
        "https://github.com/v2fly/geoip/releases/latest/download/geoip.dat",
        "Where the core's geoip.dat file is downloaded from.",
        "core",
    ),
    Setting(
        "geositeUrl",
        "https://github.com/v2fly/domain-list-community/releases/latest/download/dlc.dat",
        "Where the core's geosite.dat file is downloaded from.",
        "core",
    ),
    Setting(
        "warpApiUrl",
        "https://api.cloudflareclient.com/v0a2158",
        "Base address of the WARP client API the WARP tunnel registers its device with.",
        "core",
        web_url,
    ),
    Setting(
        "vpnApiUrl",
        "https://api.nordvpn.com/v1",
        "Base address of the VPN provider's API (countries, servers and account keys).",
        "core",
        web_url,
    ),
    Setting(
        "panelUpdateUrl",
        "",
        "Where the panel's own releases are listed, in the shape of GitHub's releases API "
        "(a list, or one release); empty: updates are not offered.",
        "core",
    ),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}
DEFAULTS: dict[str, Any] = {setting.name: setting.default for setting in SETTINGS}
SECRET_KEYS = frozenset(setting.name for setting in SETTINGS if setting.secret)


# ---- whole-set checks: after every value passed its own rule, in this order ---------------

WholeSetCheck = Callable[[dict[str, Any], FilePlaces], None]
CERT_PAIRS = (("webCertFile", "webKeyFile"), ("subCertFile", "subKeyFile"))
# The panel's own ports, which no inbound may hold.
LISTENER_PORTS = ("webPort", "subPort")


@dataclass(frozen=True)
class CrossCheck:
    """A check of several values (or of the filesystem): `fields` are the settings it
    reads, so a save runs it when it changes one of them, and an import that fails it
    knows which values to reset."""

    fields: tuple[str, ...]
    check: WholeSetCheck


def listener_ports_differ(values: dict[str, Any], places: FilePlaces) -> None:
    if values["webPort"] == values["subPort"] and _same_listen(
        values["webListen"], values["subListen"]
    ):
        raise ServiceError(
            f"webPort and subPort are both {values['webPort']}; the panel and the "
            "subscription server need different ports"
        )


def _certificate_pair(cert_key: str, key_key: str) -> CrossCheck:
    def check(values: dict[str, Any], places: FilePlaces) -> None:
        check_cert_pair(cert_key, values[cert_key], key_key, values[key_key], places)

    return CrossCheck((cert_key, key_key), check)


def core_template_is_usable(values: dict[str, Any], places: FilePlaces) -> None:
    check_core_template(values["coreTemplate"], places)


def data_centres_are_allowed(values: dict[str, Any], places: FilePlaces) -> None:
    check_data_centres(values["mtprotoDataCenters"], values["allowPrivateDestinations"])


WHOLE_SET_CHECKS: tuple[CrossCheck, ...] = (
    CrossCheck(("webPort", "subPort", "webListen", "subListen"), listener_ports_differ),
    *(_certificate_pair(cert_key, key_key) for cert_key, key_key in CERT_PAIRS),
    CrossCheck(("coreTemplate",), core_template_is_usable),
    CrossCheck(("mtprotoDataCenters", "allowPrivateDestinations"), data_centres_are_allowed),
)


def check_listener_ports_free(changes: dict[str, Any], port_owner: Callable[[int], Any]) -> None:
    """A changed webPort or subPort that an inbound holds is refused; `port_owner(port)`
    names the inbound on `port`, or is empty. Run by the panel, which knows the inbounds."""
    for key in LISTENER_PORTS:
        if key in changes:
            owner = port_owner(changes[key])
            if owner:
                raise ServiceError(f"{key} {changes[key]} is already used by {owner}")


def validate(values: dict[str, Any], places: FilePlaces, judged: Iterable[str]) -> None:
    """Check a candidate set in place (rules may normalise values), before any write: each
    value of `judged` (the values being saved) by its rule, then the whole-set checks
    that read one of them. The other values are as stored: one of them only matters
    where a check reads it beside a judged value, and then the refusal names it."""
    judged = set(judged)
    for setting in SETTINGS:
        if setting.rule is not None and setting.name in judged:
            values[setting.name] = setting.rule(setting.name, values[setting.name])
    for cross in WHOLE_SET_CHECKS:
        if judged.intersection(cross.fields):
            _check_beside_stored(cross, values, places, judged)


def _check_beside_stored(
    cross: CrossCheck, values: dict[str, Any], places: FilePlaces, judged: set[str]
) -> None:
    stored = [name for name in cross.fields if name not in judged]
    for name in stored:
        rule = BY_NAME[name].rule
        try:
            values[name] = rule(name, values[name]) if rule else values[name]
        except ServiceError as exc:
            raise ServiceError(
                f"the stored {name} is not valid ({exc.msg}); save {name} with a valid value "
                "together with this change"
            ) from None
    try:
        cross.check(values, places)
    except ServiceError as exc:
        if not stored:
            raise
        names = " and ".join(stored)
        raise ServiceError(
            f"{exc.msg}; {names} as stored take{'s' if len(stored) == 1 else ''} part in this "
            f"check: if the stored value is the one to fix, save {names} in the same change"
        ) from None


def _same_listen(a: str, b: str) -> bool:
    return a == b or not a or not b or a in ("0.0.0.0", "::") or b in ("0.0.0.0", "::")
