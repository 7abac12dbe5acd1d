"""The `malamar` command: run everything, or `version`, `help`, `config`, `doctor`, `mcp`, and
`export`, `import`, `backup` (management commands with arguments of their own).

`malamar` (run) only supervises: it migrates in a child (malamar_site.prepare), then starts one
process that serves and runs the worker (malamar_site.server_process --with-worker) and watches
it, without ever loading Django itself (~90 MB less)."""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

from core.config import OPTIONS, Config, ConfigError, apply_flags, ensure_data_dir, load
from core.prompt_exit import exit_now
from core.version import version_text
from malamar_site.service import ACTIONS
from tasks.mcp_handshake import answer_initialize

COMMANDS = ("run", "version", "help", "config", "doctor", "set-password", "service", "mcp")
# `malamar NAME ARGS…` → `manage.py COMMAND ARGS…` (NAME: their own arguments follow).
DELEGATED = {"export": "export_workspace", "import": "import_workspace", "backup": "backup"}
STOP_GRACE_SECONDS = 3.0  # daphne and the worker stop in parallel, each in ~1 s at most


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="malamar",
        description="Malamar: an autonomous multi-agent team made of your AI coding CLIs.",
        epilog="Environment variables override flags: "
        + ", ".join(f"{o.flag} ↔ {o.env}" for o in OPTIONS if o.flag)
        + ". Environment only: "
        + ", ".join(f"{o.env} ({o.help})" for o in OPTIONS if not o.flag)
        + ". Booleans: 1/true/yes/on or 0/false/no/off.",
    )
    parser.add_argument(
        "command",
        nargs="?",
        default="run",
        choices=COMMANDS,
        help="run (default): migrate, then serve the web UI and run the worker; "
        "version; help; config (print the final configuration); doctor (check the setup); "
        "set-password (protect the web UI and API with a password); "
        "service install|uninstall|status (run in the background); "
        "export WORKSPACE [-o FILE] [--chats] [--attachments] (a workspace as a JSON file); "
        "import FILE [--title T] (create a workspace from such a file); "
        "backup DEST (copy the database and attachment files while Malamar runs); "
        "mcp --workspace ID (Malamar's tools for agent CLIs: an MCP server over stdio). "
        "`malamar export --help` etc. describe their options",
    )
    parser.add_argument(
        "action", nargs="?", choices=("install", "uninstall", "status"), help="for `service`"
    )
    parser.add_argument("--workspace", help="for `mcp`: the workspace its tools act for")
    for option in (option for option in OPTIONS if option.flag):
        kwargs = {"action": "store_const", "const": "1"} if option.switch else {}
        parser.add_argument(
            option.flag,
            dest=option.name,
            default=None,
            help=f"{option.help} ({option.env})",
            **kwargs,
        )
    return parser


def _django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")
    import django

    django.setup()


def _manage(*args: str) -> int:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    try:
        call_command(*args)
    except SystemExit as exc:
        return int(exc.code or 0)
    except CommandError as exc:  # a clear message, not a traceback
        print(f"malamar: {exc}", file=sys.stderr)
        return exc.returncode
    return 0


def delegated(command: str, argv: list[str]) -> int:
    """`malamar export|import|backup ARGS…`: global flags (e.g. --data-dir) may come first or
    among the command's own arguments; the rest goes to the management command."""
    flags = argparse.ArgumentParser(add_help=False)
    for option in (option for option in OPTIONS if option.flag):
        kwargs = {"action": "store_const", "const": "1"} if option.switch else {}
        flags.add_argument(option.flag, dest=option.name, default=None, **kwargs)
    known, rest = flags.parse_known_args(argv)
    apply_flags(vars(known))
    try:
        config = load()
    except ConfigError as exc:
        print(f"malamar: invalid configuration: {exc}", file=sys.stderr)
        return 2
    ensure_data_dir(config)
    _django_setup()
    if command != "backup" and "-h" not in rest and "--help" not in rest:
        code = _manage("migrate", "--no-input", "-v", "0")
        if code:
            return code
    return _manage(DELEGATED[command], *rest)


def _workspace_joined(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`--workspace -abc…` as `--workspace=-abc…`: an id may start with a dash (older ids do),
    which argparse would read as an option and then say the value is missing."""
    flags = set(parser._option_string_actions)
    joined, rest = [], iter(argv)
    for arg in rest:
        following = next(rest, None) if arg == "--workspace" else None
        if following is not None and following.startswith("-") and following not in flags:
            joined.append(f"--workspace={following}")
        else:
            joined.extend([arg] if following is None else [arg, following])
    return joined


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in DELEGATED:
        return delegated(argv[0], argv[1:])
    parser = build_parser()
    args = parser.parse_args(_workspace_joined(argv, parser))
    apply_flags(vars(args))
    if args.command == "help":
        parser.print_help()
        return 0
    if args.command == "version":
        print(version_text())
        return 0
    if args.command == "service":
        if not args.action:
            parser.error("service needs an action: install, uninstall or status")
        return ACTIONS[args.action]()
    try:
        config = load()
    except ConfigError as exc:
        print(f"malamar: invalid configuration: {exc}", file=sys.stderr)
        return 2
    if args.command == "run":
        return serve(config)
    if args.command == "mcp":
        return mcp(args.workspace, config)
    _django_setup()
    if args.command in ("config", "doctor"):
        return _manage(args.command)
    code = _manage("migrate", "--no-input", "-v", "0")  # set-password
    return code or _manage("set_password")


def mcp(workspace: str | None, config: Config) -> int:
    """The MCP server on stdin/stdout, without the web server or the worker. It never migrates
    (stdout is the protocol's): Malamar itself keeps the database up to date. `initialize` is
    answered before Django loads (tasks.mcp_handshake): agent CLIs wait for that answer."""
    if not workspace:
        print("malamar: mcp needs --workspace=ID (the id in a workspace's URL)", file=sys.stderr)
        return 2
    answer_initialize(config.max_json_bytes)
    _django_setup()
    from django.core.management.base import CommandError

    try:
        return _manage("mcp", f"--workspace={workspace}")
    except CommandError as exc:  # e.g. no such workspace: a message, not a traceback
        print(f"malamar: {exc}", file=sys.stderr)
        return 1


def _child(config: Config) -> list[str]:
    return [
        sys.executable,
        "-m",
        "malamar_site.server_process",  # daphne and the worker, with a prompt exit
        "--with-worker",
        "--bind",
        config.host,
        "--port",
        str(config.port),
        "malamar_site.asgi:application",
    ]


def serve(config: Config) -> int:
    """Migrate, then serve and run the worker until Ctrl-C / SIGTERM or the child dies."""
    stopping = False

    def request_stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    ensure_data_dir(config)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")
    code = subprocess.run([sys.executable, "-m", "malamar_site.prepare"]).returncode
    if code or stopping:
        return code
    child = subprocess.Popen(_child(config))
    exit_code, announced = 0, False
    while not stopping:
        if child.poll() is not None:
            print(f"malamar: the server and worker exited with {child.returncode}", file=sys.stderr)
            exit_code = child.returncode or 1
            break
        if not announced and port_answers(config.host, config.port):
            # Only now: a link printed before the server listens leads to "can't be reached".
            print(f"Malamar is running at http://{config.host}:{config.port}", flush=True)
            announced = True
        time.sleep(0.05)
    _stop(child)
    exit_now(exit_code)  # the child is gone: skip Python's slow teardown


# A server bound to every address answers on the loopback one.
LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def port_answers(host: str, port: int) -> bool:
    """Whether something accepts connections at host:port now."""
    try:
        with socket.create_connection((LOOPBACK.get(host, host), port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        print(
            f"malamar: the server and worker did not stop within {STOP_GRACE_SECONDS} s: killed",
            file=sys.stderr,
            flush=True,
        )
        child.kill()
        child.wait()


if __name__ == "__main__":
    sys.exit(main())
