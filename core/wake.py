"""Wake the workers after a commit so new work starts in milliseconds, not at the next poll;
and, on SQLite, the event relay after a commit with events (PostgreSQL's outbox trigger
NOTIFYs it), so an event leaves at once and an idle server does not poll.

With SQLite (one worker per data dir) the worker listens on a Unix datagram socket in the data
dir and a poke is fire-and-forget. With PostgreSQL (workers on any machines) every worker
LISTENs on `malamar_work` and the commit sends a NOTIFY. If no worker listens, nothing happens
and the workers' regular poll picks the work up.

A wake-up says what it is for: TASKS (a task was queued: only the task runners need to look,
so a worker starts the task at once, without first asking about chats and jobs) or anything
else (the worker looks at everything).
"""

import contextlib
import functools
import logging
import socket
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, transaction

SOCKET_NAME = "worker.sock"
RELAY_SOCKET_NAME = "event-relay.sock"
NOTIFY_CHANNEL = "malamar_work"
TASKS = "tasks"  # what a wake-up for a queued task says (a datagram, a NOTIFY's payload)
ANYTHING = "wake"

log = logging.getLogger(__name__)


def socket_path() -> Path:
    return Path(settings.DATA_DIR) / SOCKET_NAME


def uses_notify() -> bool:
    """PostgreSQL: wake-ups are NOTIFYs, which reach workers on every machine."""
    return connection.vendor == "postgresql"


def relay_socket_path() -> Path:
    return Path(settings.DATA_DIR) / RELAY_SOCKET_NAME


def _send(path: Path, what: str) -> None:
    """Fire and forget: nobody listening (or a full queue) is no error."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(what.encode(), str(path))
    except OSError:
        pass


def _poke(what: str) -> None:
    _send(socket_path(), what)


def _poke_relay() -> None:
    _send(relay_socket_path(), ANYTHING)


def bind_datagram_socket(path: Path) -> socket.socket | None:
    """The listening end of a wake-up socket (non-blocking); None when it cannot be made (the
    listener then polls). The caller holds the lock that makes it the only listener there."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a stale socket from a previous process
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        log.warning("Wake socket unavailable; polling only", extra={"error": str(exc)})
        sock.close()
        return None
    sock.setblocking(False)
    return sock


def read_datagrams(sock: socket.socket) -> set[str]:
    """The wake-ups waiting on a socket, read to the last (what each is for)."""
    said = set()
    with contextlib.suppress(BlockingIOError):
        while datagram := sock.recv(64):
            said.add(datagram.decode("ascii", "replace"))
    return said


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


def wake_relay_on_commit() -> None:
    """SQLite: wake the event relay once the transaction commits (once per transaction)."""
    if uses_notify():
        return  # the outbox trigger NOTIFYs the relay
    if any(func is _poke_relay for _ids, func, _robust in connection.run_on_commit):
        return
    transaction.on_commit(_poke_relay)
