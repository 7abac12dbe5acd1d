"""The web server process that `malamar` starts: daphne's own command line, with its access log
written through Malamar's logging (the `text`/`json` format, one line per request, long paths
cut), then a prompt exit (see core.prompt_exit) once daphne has stopped."""

import logging
import sys
from pathlib import Path

from core.prompt_exit import exit_now

access_log = logging.getLogger("malamar.access")
MAX_LOGGED_PATH = 200


def log_action(protocol: str, action: str, details: dict) -> None:
    """daphne's action logger: HTTP requests as they complete."""
    if protocol != "http" or action != "complete":
        return
    path = details.get("path") or ""
    if len(path) > MAX_LOGGED_PATH:
        path = path[:MAX_LOGGED_PATH] + "…"
    access_log.info(
        f"{details.get('method')} {path} {details.get('status')}",
        extra={"client": details.get("client"), "bytes": details.get("size")},
    )


def main() -> None:
    import daphne
    from daphne.cli import CommandLineInterface
    from daphne.server import Server

    class LoggedServer(Server):
        def __init__(self, *args, action_logger=None, **kwargs):
            super().__init__(*args, action_logger=log_action if action_logger else None, **kwargs)

    cli = CommandLineInterface()
    cli.server_class = LoggedServer
    # asgi.py reads the bind address from daphne's command line (malamar_site.startup).
    sys.argv[0] = str(Path(daphne.__file__).parent / "__main__.py")
    code = 0
    try:
        cli.run(sys.argv[1:])
    except SystemExit as exc:  # e.g. refused to serve without a password: keep its code
        code = exc.code if isinstance(exc.code, int) else 1
    exit_now(code)


if __name__ == "__main__":
    main()
