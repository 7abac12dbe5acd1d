"""The web server process that `malamar` starts: daphne's own command line, then a prompt exit
(see core.prompt_exit) once daphne has stopped."""

import sys
from pathlib import Path


def main() -> None:
    import daphne
    from daphne.cli import CommandLineInterface

    # asgi.py reads the bind address from daphne's command line (malamar_site.startup).
    sys.argv[0] = str(Path(daphne.__file__).parent / "__main__.py")
    code = 0
    try:
        CommandLineInterface().run(sys.argv[1:])
    except SystemExit as exc:  # e.g. refused to serve without a password: keep its code
        code = exc.code if isinstance(exc.code, int) else 1
    from core.prompt_exit import exit_now

    exit_now(code)


if __name__ == "__main__":
    main()
