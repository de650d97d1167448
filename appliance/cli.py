"""Every subcommand of `appliance`: run, admin, setting, migrate-db, version.

gevent patches the standard library before anything else is imported: Pony, the
database drivers and `threading` must see the cooperative versions, or every greenlet
would share one database session.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from contextlib import contextmanager  # noqa: E402

from appliance import __version__  # noqa: E402
from appliance.config import DB_FILE, ENV, SUB_CONNECTIONS_PER_ADDRESS, resolve  # noqa: E402
from appliance.errors import ServiceError  # noqa: E402
from appliance.runtime.memory import serve_large_blocks_from_mmap  # noqa: E402
from appliance.services.admin.settings_table import BY_NAME  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except ServiceError as exc:
        # A bad database URL, a taken port, no admin yet: a sentence and a non-zero exit.
        print(f"error: {exc.msg}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="appliance", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser("run", help="serve the panel and the subscription server")
    _store_options(run)
    run.add_argument("--listen", help=f"panel listen address (env {ENV['listen']})")
    run.add_argument("--port", help=f"panel port, overrides the setting (env {ENV['port']})")
    run.add_argument(
        "--sub-port", help=f"subscription port, overrides the setting (env {ENV['sub_port']})"
    )
    run.add_argument(
        "--sub-workers",
        help="processes serving the subscription port, always: 1 for the panel's own "
        "process; auto for the panel, and a worker per core while the demand lasts "
        f"(env {ENV['sub_workers']}; default auto)",
    )
    run.add_argument(
        "--sub-connections-per-address",
        help="connections one client address may hold at once on the subscription port, "
        "in each process serving it; 0 for no cap "
        f"(env {ENV['sub_connections_per_address']}; default {SUB_CONNECTIONS_PER_ADDRESS})",
    )
    run.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help=f"panel log level (env {ENV['log_level']}; default info)",
    )
    run.add_argument(
        "--core", help=f"the core binary (env {ENV['core']}; default xray, then v2ray, on PATH)"
    )
    _cert_dir_option(run)
    run.set_defaults(handler=cmd_run)

    admin = commands.add_parser("admin", help="manage the admin account offline")
    admin_commands = admin.add_subparsers(dest="admin_command", metavar="ACTION", required=True)
    show = admin_commands.add_parser("show", help="print the admin username and 2FA state")
    _store_options(show)
    show.set_defaults(handler=cmd_admin_show)
    reset = admin_commands.add_parser(
        "reset", help="set a new username and password (generated when not given)"
    )
    _store_options(reset)
    reset.add_argument("--username", help="new username (default: generated)")
    reset.add_argument("--password", help="new password (default: generated)")
    reset.set_defaults(handler=cmd_admin_reset)
    disable = admin_commands.add_parser("disable-2fa", help="turn off two-factor sign-in")
    _store_options(disable)
    disable.set_defaults(handler=cmd_admin_disable_2fa)

    setting = commands.add_parser("setting", help="show or change panel settings offline")
    setting_commands = setting.add_subparsers(
        dest="setting_command", metavar="ACTION", required=True
    )
    show_settings = setting_commands.add_parser("show", help="print every setting")
    _store_options(show_settings)
    show_settings.set_defaults(handler=cmd_setting_show)
    set_settings = setting_commands.add_parser(
        "set",
        help="change how the panel listens, checked like the settings API",
        description="Change panel settings while the panel is stopped; they apply at its "
        "next start. Values are checked as the settings API checks them: a bad one is "
        "refused and nothing is written.",
    )
    _store_options(set_settings)
    _cert_dir_option(set_settings)
    for flag, key in SETTING_FLAGS:
        help_text = f"{key}: {BY_NAME[key].help}"
        set_settings.add_argument(flag, dest=key, metavar="VALUE", help=help_text)
    set_settings.set_defaults(handler=cmd_setting_set)

    migrate_db = commands.add_parser(
        "migrate-db",
        help="copy the SQLite database into a PostgreSQL or MySQL/MariaDB database",
        description="Copy every table of the panel's SQLite file into an empty networked "
        "database in one transaction, then compare row counts and checksums per table. "
        "The SQLite file is only read. Afterwards start the panel with --db URL.",
    )
    migrate_db.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="target database: postgresql://user:password@host[:port]/name or mysql://...",
    )
    migrate_db.add_argument(
        "--from",
        dest="source",
        metavar="PATH",
        help=f"the SQLite file to copy (default: {DB_FILE} in the data directory)",
    )
    migrate_db.add_argument(
        "--data-dir", help=f"data directory (env {ENV['data_dir']}; default per user or system)"
    )
    migrate_db.add_argument(
        "--replace", action="store_true", help="overwrite a target that already holds rows"
    )
    migrate_db.set_defaults(handler=cmd_migrate_db)

    version = commands.add_parser("version", help="print the panel version")
    version.set_defaults(handler=lambda args: print(__version__) or 0)
    return parser


# `appliance setting set` flags: the settings that decide whether the panel can be reached.
SETTING_FLAGS = (
    ("--port", "webPort"),
    ("--base-path", "webBasePath"),
    ("--listen", "webListen"),
    ("--allowed-hosts", "webAllowedHosts"),
    ("--cert-file", "webCertFile"),
    ("--key-file", "webKeyFile"),
)


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", help=f"data directory (env {ENV['data_dir']}; default per user or system)"
    )
    parser.add_argument(
        "--db", help=f"database URL or SQLite path (env {ENV['db']}; default in the data dir)"
    )


def _cert_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cert-dir",
        dest="cert_dirs",
        action="append",
        metavar="DIR",
        help=f"another directory certificate and key files may be in, besides <data dir>/certs, "
        f"/etc/letsencrypt and /etc/ssl; repeatable (env {ENV['cert_dirs']}, ':'-separated)",
    )


def cmd_run(args) -> int:
    from appliance.app import Panel
    from appliance.runtime import logbuffer

    options = resolve(args)
    logbuffer.setup_logging(options.log_file, options.log_level)
    serve_large_blocks_from_mmap()
    panel = Panel(options)
    panel.store.wait_for_server = True
    credentials = panel.open()

    def announce(urls: list[str]) -> None:
        """First-run credentials appear only once the panel really answers at `urls`."""
        if credentials:
            print_credentials("A new admin account was created", *credentials, urls)

    panel.serve(announce)
    return 0


@contextmanager
def _offline_panel(args):
    """The panel's store and services without its servers, for the admin commands.

    A SQLite file that does not exist yet is refused rather than created: the admin
    commands repair an existing panel, and a typo in --data-dir should say so."""
    from appliance.app import Panel

    panel = Panel(resolve(args))
    url = panel.store.url
    if url.kind == "sqlite" and not os.path.isfile(url.path):
        raise ServiceError(
            f"no panel database at {url.path}; start the panel once with `appliance run`, "
            "or point --data-dir / --db at the existing one"
        )
    panel.open_store()
    try:
        yield panel
    finally:
        panel.store.close()


def cmd_admin_show(args) -> int:
    with _offline_panel(args) as panel:
        admin = panel.auth.show_admin()
    print(f"username: {admin['username']}")
    print(f"two-factor: {'on' if admin['twoFactor'] else 'off'}")
    return 0


def cmd_admin_reset(args) -> int:
    with _offline_panel(args) as panel:
        username, password = panel.auth.reset_admin(args.username, args.password)
    print_credentials(
        "The admin account was reset; every session was signed out",
        username,
        password if args.password is None else "(as given)",
    )
    return 0


def cmd_admin_disable_2fa(args) -> int:
    with _offline_panel(args) as panel:
        panel.auth.disable_two_factor()
    print("two-factor sign-in is off")
    return 0


def cmd_setting_show(args) -> int:
    with _offline_panel(args) as panel:
        values = panel.settings.all()
    for key, value in values.items():
        print(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return 0


def cmd_setting_set(args) -> int:
    changes = {key: getattr(args, key) for _, key in SETTING_FLAGS}
    changes = {key: value for key, value in changes.items() if value is not None}
    if not changes:
        raise ServiceError(
            "nothing to change; give at least one of "
            + ", ".join(flag for flag, _ in SETTING_FLAGS)
        )
    with _offline_panel(args) as panel:
        changed = panel.update_settings(changes, None)
        values = {key: panel.settings.get(key) for key in changed}
    if not changed:
        print("nothing changed: the settings already have these values")
        return 0
    for key, value in values.items():
        print(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    print("saved; a running panel uses them after its next restart")
    return 0


def cmd_migrate_db(args) -> int:
    import tempfile

    from appliance.runtime.file_paths import FilePlaces
    from appliance.services.admin.import_review import review_copy
    from appliance.store.transfer import format_report, migrate_database
    from appliance.store.urls import parse_db_url

    options = resolve(args)
    target = parse_db_url(args.to)
    source = parse_db_url(args.source or os.path.join(options.data_dir, DB_FILE))
    if source.kind != "sqlite":
        raise ServiceError("--from must be a SQLite file (a path or sqlite:///path)")
    places = FilePlaces(options.data_dir, options.cert_dirs)
    with tempfile.TemporaryDirectory(prefix="appliance-migrate-") as scratch:
        reviewed, resets = review_copy(source.path, scratch, places)
        copies = migrate_database(reviewed, target, replace=args.replace)
    for reset in resets:
        print(f"reset, as the panel refuses it: {reset}")
    print(format_report(copies))
    total = sum(copy.source_rows for copy in copies)
    print(
        f"copied {total} rows from {source.path} into {target.redacted()}; all tables match.\n"
        f"Start the panel on it with --db URL (or {ENV['db']}=URL)."
    )
    return 0


def print_credentials(title: str, username: str, password: str, urls: Sequence[str] = ()) -> None:
    """Credentials go to stdout once, never into the log, with every address a browser
    can sign in at (one a line, lined up under the first)."""
    line = "=" * 60
    where = "".join(
        f"  {'sign in at:' if index == 0 else ' ' * 11} {url}\n" for index, url in enumerate(urls)
    )
    print(
        f"{line}\n{title}.\n  username: {username}\n  password: {password}\n{where}{line}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
