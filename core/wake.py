"""Wake the workers after a commit so new work starts in milliseconds, not at the next poll.

With SQLite (one worker per data dir) the worker listens on a Unix datagram socket in the data
dir and a poke is fire-and-forget. With PostgreSQL (workers on any machines) every worker
LISTENs on `malamar_work` and the commit sends a NOTIFY. If no worker listens, nothing happens
and the workers' regular poll picks the work up.

A wake-up says what it is for: TASKS (a task was queued: only the task runners need to look,
so a worker starts the task at once, without first asking about chats and jobs) or anything
else (the worker looks at everything).
"""

import functools
import logging
import socket
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, transaction

SOCKET_NAME = "worker.sock"
NOTIFY_CHANNEL = "malamar_work"
TASKS = "tasks"  # what a wake-up for a queued task says (a datagram, a NOTIFY's payload)
ANYTHING = "wake"

log = logging.getLogger(__name__)


def socket_path() -> Path:
    return Path(settings.DATA_DIR) / SOCKET_NAME


def uses_notify() -> bool:
    """PostgreSQL: wake-ups are NOTIFYs, which reach workers on every machine."""
    return connection.vendor == "postgresql"


def _poke(what: str) -> None:
    path = str(socket_path())
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(what.encode(), path)
    except OSError:
        pass


def _notify(what: str) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {NOTIFY_CHANNEL}, '{what}'")  # (one of two constants)
    except DatabaseError:  # a wake-up is a courtesy: the workers' poll finds the work anyway
        log.warning("Could not notify the workers", exc_info=True)


def wake_worker_on_commit(*, task_queued: bool = False) -> None:
    """Wake the workers once the transaction commits; `task_queued`: it is for a task that
    was queued (the only thing it asks of them)."""
    what = TASKS if task_queued else ANYTHING
    transaction.on_commit(functools.partial(_notify if uses_notify() else _poke, what))
