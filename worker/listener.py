"""Wake-ups across machines: the worker LISTENs on PostgreSQL's `malamar_work` channel.

A dedicated autocommit psycopg connection (Django's connections are per thread and take part
in transactions; a LISTEN must stay open and idle). The worker's main loop waits on its socket
with select() next to its other wake-up sources; the poll interval stays the fallback (a lost
connection is reopened at the next wake-up or poll).
"""

import contextlib
import logging
import time
from typing import TYPE_CHECKING

from django.db import connection

from core.wake import NOTIFY_CHANNEL

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)
RECONNECT_EVERY = 5.0


def _connection_params() -> dict:
    """Django's own connection parameters, without what only Django's cursors use."""
    params = connection.get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    return params


class WorkListener:
    def __init__(self):
        self.conn: psycopg.Connection | None = None
        self.next_try = 0.0
        self.received = 0  # notifications seen (tests and the bench read it)

    @classmethod
    def connect(cls) -> "WorkListener":
        listener = cls()
        listener.open()
        return listener

    def open(self) -> None:
        # Imported here: on SQLite (no listener) the worker does without its ~20 MB.
        import psycopg

        self.next_try = time.monotonic() + RECONNECT_EVERY
        try:
            self.conn = psycopg.connect(**_connection_params(), autocommit=True)
            self.conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        except psycopg.Error as exc:
            log.warning("LISTEN unavailable; polling only", extra={"error": str(exc)})
            self.close()

    def fileno(self) -> int | None:
        if self.conn is None or self.conn.closed:
            if time.monotonic() >= self.next_try:
                self.open()
            if self.conn is None:
                return None
        return self.conn.pgconn.socket

    def drain(self) -> set[str]:
        """Read what arrived (any number of notifications is one wake-up): their payloads
        (core.wake: what each wake-up is for)."""
        if self.conn is None:
            return set()
        import psycopg  # loaded by open()

        payloads = set()
        try:
            self.conn.pgconn.consume_input()
            while (notify := self.conn.pgconn.notifies()) is not None:
                payloads.add(notify.extra.decode("utf-8", "replace"))
                self.received += 1
        except psycopg.Error:
            self.close()
            return payloads | {""}
        if self.conn.pgconn.status != psycopg.pq.ConnStatus.OK:
            self.close()
        return payloads

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None
