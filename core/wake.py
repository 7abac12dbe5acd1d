"""Poke the worker after a commit so new work starts in milliseconds, not at the next poll.

The worker listens on a Unix datagram socket in the data dir; a poke is fire-and-forget.
If the worker is not running (or the path is too long for a socket), nothing happens and the
worker's regular poll picks the work up.
"""

import socket
from pathlib import Path

from django.conf import settings
from django.db import transaction

SOCKET_NAME = "worker.sock"


def socket_path() -> Path:
    return Path(settings.DATA_DIR) / SOCKET_NAME


def _poke() -> None:
    path = str(socket_path())
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(b"wake", path)
    except OSError:
        pass


def wake_worker_on_commit() -> None:
    transaction.on_commit(_poke)
