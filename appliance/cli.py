"""Every subcommand of `appliance`: run, admin, version.

gevent patches the standard library before anything else is imported: Pony, the
database drivers and `threading` must see the cooperative versions, or every greenlet
would share one database session.
"""

from gevent import monkey

monkey.patch_all()

from appliance.core.api import init_for_gevent  # noqa: E402

init_for_gevent()

import argparse  # noqa: E402
import ctypes  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from contextlib import contextmanager  # noqa: E402

from appliance import __version__  # noqa: E402
from appliance.config import ENV, resolve  # noqa: E402
from appliance.services.errors import ServiceError  # noqa: E402


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
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help=f"panel log level (env {ENV['log_level']}; default info)",
    )
    run.add_argument(
        "--core", help=f"the core binary (env {ENV['core']}; default xray, then v2ray, on PATH)"
    )
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

    version = commands.add_parser("version", help="print the panel version")
    version.set_defaults(handler=lambda args: print(__version__) or 0)
    return parser


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", help=f"data directory (env {ENV['data_dir']}; default per user or system)"
    )
    parser.add_argument(
        "--db", help=f"database URL or SQLite path (env {ENV['db']}; default in the data dir)"
    )


def cmd_run(args) -> int:
    from appliance import logbuffer
    from appliance.app import Panel

    options = resolve(args)
    logbuffer.setup_logging(options.log_file, options.log_level)
    release_freed_memory()
    panel = Panel(options)
    credentials = panel.open()

    def announce(url: str) -> None:
        """First-run credentials appear only once the panel really answers at `url`."""
        if credentials:
            print_credentials("A new admin account was created", *credentials, url)

    panel.serve(announce)
    return 0


def release_freed_memory() -> None:
    """Make glibc serve large blocks (scrypt's 16 MiB per sign-in) straight from mmap, so
    they go back to the system when freed instead of staying in the heap: an idle panel
    keeps its small footprint after the first sign-in. Other C libraries need nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_mmap_threshold = -3
    libc.mallopt(m_mmap_threshold, 128 * 1024)


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


def print_credentials(title: str, username: str, password: str, url: str = "") -> None:
    """Credentials go to stdout once, never into the log."""
    line = "=" * 60
    where = f"  sign in at: {url}\n" if url else ""
    print(
        f"{line}\n{title}.\n  username: {username}\n  password: {password}\n{where}{line}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
