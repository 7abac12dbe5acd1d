"""Leave a Malamar process promptly once its work is stopped.

After SIGTERM the server, the worker and `malamar` itself have nothing left to do, yet Python's
own teardown of a process that loaded Django, daphne and Twisted (freeing every module and
object) took 0.5 to 1.2 s on a loaded 2-core machine: most of the time `malamar` needed to stop.
So: close this thread's database connections (SQLite checkpoints its WAL), flush the logs and the
standard streams, and end the process at once."""

import contextlib
import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    if "django.db" in sys.modules:  # not in `malamar`'s supervisor, which never loads Django
        with contextlib.suppress(Exception):  # never keep a stopping process alive over this
            from django.db import connections

            connections.close_all()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
