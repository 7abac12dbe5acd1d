"""Every way of starting the web server refuses to serve other machines without a password.

The check itself is `core.auth.remote_access_refusal(bind=...)`; this module finds the address a
server really binds to when it is not `malamar` or `manage.py runserver` (which check with their
own address): daphne's command line (`daphne -b 0.0.0.0 malamar_site.asgi:application`), read
when `malamar_site.asgi` is loaded.
"""

import re
import sys
from pathlib import Path

from core.auth import remote_access_refusal

_checked = False


def bind_checked() -> None:
    """The starter already checked its real address (runserver): asgi.py need not guess."""
    global _checked
    _checked = True


def _is_daphne(argv: list[str]) -> bool:
    program = Path(argv[0]) if argv else Path()
    return program.name == "daphne" or (
        program.name == "__main__.py" and program.parent.name == "daphne"
    )


def _endpoint_interface(endpoint: str) -> str | None:
    """The interface of a Twisted endpoint string (`tcp:port=80:interface=0.0.0.0`)."""
    kind, _, rest = endpoint.partition(":")
    if kind == "unix":
        return None  # a local socket file
    if kind in ("tcp", "tcp6", "ssl"):
        for part in re.split(r"(?<!\\):", rest):
            if part.startswith("interface="):
                return part.removeprefix("interface=").replace("\\:", ":")
        return "::" if kind == "tcp6" else "0.0.0.0"  # no interface: every interface
    return endpoint  # anything else is unknown: counted as reachable from other machines


def daphne_binds(argv: list[str]) -> list[str] | None:
    """The addresses a daphne command line listens on (as daphne decides them), or None when
    this process is not daphne's command line."""
    if not _is_daphne(argv):
        return None
    from daphne.cli import DEFAULT_HOST, CommandLineInterface

    args, _unknown = CommandLineInterface().parser.parse_known_args(argv[1:])
    binds: list[str | None] = []
    if args.host:
        binds.append(args.host)
    elif args.port is not None or not (
        args.unix_socket or args.file_descriptor is not None or args.socket_strings
    ):
        binds.append(DEFAULT_HOST)
    if args.file_descriptor is not None:
        binds.append(f"an inherited socket (fd {args.file_descriptor})")
    binds += [_endpoint_interface(endpoint) for endpoint in args.socket_strings]
    return [bind for bind in binds if bind is not None]


def refuse_unprotected_server(argv: list[str] | None = None) -> None:
    """Called when the ASGI application loads: exit (code 2, like `malamar`) with the reason
    when the server would be reachable from other machines without a password."""
    if _checked:
        return
    binds = daphne_binds(sys.argv if argv is None else argv) or [None]
    for bind in binds:
        refusal = remote_access_refusal(bind=bind)
        if refusal:
            print(refusal, file=sys.stderr, flush=True)
            raise SystemExit(2)
