"""Forward committed outbox rows to django-eventstream, in id order, from the server process.

One relay per data dir (a file lock), started lazily by the SSE view. It resumes from the larger
of its saved cursor and the outbox id carried by the newest stored event, so a kill -9 between
sending and saving the cursor never re-sends events under new ids.
"""

import atexit
import fcntl
import json
import logging
import os
import threading
import time
from pathlib import Path

import django_eventstream
from django.conf import settings
from django.db import connection

from core.models import OutboxEvent

log = logging.getLogger(__name__)
BATCH = 500

_started = False
_start_lock = threading.Lock()


def _cursor_path() -> Path:
    return Path(settings.DATA_DIR) / "event-relay.cursor"


def _read_cursor() -> int:
    try:
        return int(_cursor_path().read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _save_cursor(value: int) -> None:
    path = _cursor_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(value))
    os.replace(tmp, path)


def _newest_relayed_outbox_id() -> int:
    from django_eventstream.models import Event

    newest = (
        Event.objects.filter(channel=settings.EVENTS_CHANNEL, eid__gt=0).order_by("-eid").first()
    )
    if not newest:
        return 0
    try:
        return int(json.loads(newest.data).get("outbox_id", 0))
    except (ValueError, AttributeError):
        return 0


def _has_new_rows(cursor: int) -> bool:
    # A raw, tiny query: the relay polls ~40 times a second and must cost next to nothing idle.
    with connection.cursor() as c:
        c.execute("SELECT 1 FROM event_outbox WHERE id > %s LIMIT 1", [cursor])
        return c.fetchone() is not None


class Relay:
    def __init__(self):
        self.cursor = 0
        self.saved = 0

    def start(self) -> None:
        self.cursor = max(_read_cursor(), _newest_relayed_outbox_id())
        self.saved = self.cursor
        atexit.register(self.save)

    def save(self) -> None:
        if self.cursor != self.saved:
            _save_cursor(self.cursor)
            self.saved = self.cursor

    def step(self) -> int:
        """Relay every committed row after the cursor; returns how many were sent."""
        if not _has_new_rows(self.cursor):
            return 0
        rows = list(OutboxEvent.objects.filter(id__gt=self.cursor).order_by("id")[:BATCH])
        for row in rows:
            data = {**row.payload, "type": row.type, "outbox_id": row.id}
            django_eventstream.send_event(settings.EVENTS_CHANNEL, row.type, data)
            self.cursor = row.id
        self.save()
        return len(rows)


def _lock_or_wait() -> object:
    """Hold the data dir's relay lock for the life of the process (one relay per data dir)."""
    handle = open(Path(settings.DATA_DIR) / "event-relay.lock", "a")  # noqa: SIM115
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            time.sleep(1)


def _run() -> None:
    _lock_handle = _lock_or_wait()  # kept referenced: closing it would drop the lock
    relay = Relay()
    relay.start()
    pause = settings.EVENT_RELAY_POLL_SECONDS
    while True:
        try:
            if not relay.step():
                time.sleep(pause)
        except Exception:
            log.exception("Event relay step failed; retrying")
            connection.close()
            time.sleep(1)


def ensure_started() -> None:
    global _started
    with _start_lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_run, name="malamar-event-relay", daemon=True).start()
