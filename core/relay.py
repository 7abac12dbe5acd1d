"""Forward committed outbox rows to django-eventstream, from the server process.

One relay for the whole deployment, started with the server (malamar_site/asgi.py; never in
`migrate` or the worker): on SQLite a file lock in the data dir (one machine), on PostgreSQL a
session advisory lock on the relay thread's own connection, so when the holding server dies its
connection closes, the lock frees and another server's relay takes over within a second.
Each relay sleeps until an outbox insert commits, with a slow poll as a fallback: on SQLite the
committing process wakes it with a datagram (core.wake; the poll every EVENT_RELAY_POLL_SECONDS),
on PostgreSQL a trigger NOTIFYs it (LISTEN/NOTIFY).

Each step stores its rows as one batch in django-eventstream's database storage (the
Last-Event-ID replay log): one transaction that locks the channel's counter once and inserts
every event in one statement (its own `append_event`, behind `send_event()`, takes 7 statements
per event, and a relay that fell behind under load stayed behind). The stored events then go to
this process's streams through django-eventstream's listener manager, as `send_event()` does,
and with Redis to the other servers as one message (core.fanout).

The cursor is the highest outbox id relayed. It resumes from the larger of the local cursor
file and the outbox id carried by the newest stored event (the shared storage), so a kill -9
between sending and saving, or a takeover by a server on another machine, never re-sends events
under new ids.

Ids are not commit order on PostgreSQL: a transaction can take id 7, another id 8 and commit
first. Reading `id > cursor` alone would skip 7 for ever, so every id the cursor jumps over is
remembered as a gap for `EVENT_RELAY_GAP_SECONDS` and relayed when its row appears (under a
fresh event id, so each client still sees ids increase). Gaps that never fill (a rolled-back
transaction) expire. On start, the ids of the recent window that no stored event carries are
gaps too: rows committed while no relay ran, or ids below a dead relay's cursor not yet
committed when it died.
"""

import atexit
import fcntl
import json
import logging
import os
import select
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string
from django_eventstream.event import Event
from django_eventstream.models import Event as StoredEvent
from django_eventstream.models import EventCounter
from django_eventstream.utils import get_storage
from django_eventstream.views import get_listener_manager

from core import fanout
from core.models import OutboxEvent
from core.wake import bind_datagram_socket, read_datagrams, relay_socket_path

log = logging.getLogger(__name__)
BATCH = 500
MAX_GAPS = 10_000  # bounded: a flood of rolled-back ids must not make each poll heavy
ADVISORY_LOCK_KEY = 0x6D616C616D6172  # "malamar": one relay per PostgreSQL database
LOCK_RETRY_SECONDS = 1.0
WAKE_COALESCE_SECONDS = 0.025  # SQLite: after a wake-up, before the relay reads
NOTIFY_CHANNEL = "malamar_events"  # an outbox insert notifies it on commit (core migration 0003)
FALLBACK_POLL_SECONDS = 1.0  # PostgreSQL: a poll between notifications, for expiring gaps
TRIM_SECONDS = 60.0  # stored events older than django-eventstream's day go this often

_started = False
_start_lock = threading.Lock()
_current: dict = {}  # the running relay, whose cursor is saved at exit (SIGTERM)


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


def stored_outbox_id(stored_data: str) -> int:
    """The outbox id in a stored event's data (0 when it carries none)."""
    try:
        return int(json.loads(fanout.decoded(stored_data)).get("outbox_id", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _stored_events():
    return StoredEvent.objects.filter(channel=settings.EVENTS_CHANNEL, eid__gt=0)


def _newest_relayed_outbox_id() -> int:
    newest = _stored_events().order_by("-eid").only("data").first()
    return stored_outbox_id(newest.data) if newest else 0


def _relayed_since(when) -> set[int]:
    datas = _stored_events().filter(created__gte=when).values_list("data", flat=True)
    return {stored_outbox_id(data) for data in datas.iterator()}


def _has_new_rows(cursor: int, gaps) -> bool:
    # A raw, tiny query: on SQLite the relay polls ~40 times a second and must cost next to
    # nothing idle.
    late = list(gaps)
    where = "id > %s" + (f" OR id IN ({', '.join(['%s'] * len(late))})" if late else "")
    with connection.cursor() as c:
        c.execute(f"SELECT 1 FROM event_outbox WHERE {where} LIMIT 1", [cursor, *late])
        return c.fetchone() is not None


def _news(event_type: str, payload: dict) -> list:
    """What the pages say about the event (settings.EVENT_NEWS words it: the site layer)."""
    words = getattr(settings, "EVENT_NEWS", "")
    return import_string(words)(event_type, payload) if words else []


def _event_data(row: OutboxEvent) -> dict:
    data = {**row.payload, "type": row.type, "outbox_id": row.id}
    if news := _news(row.type, row.payload):
        data["news"] = news  # toasts and notifications, worded once on the server
    return data


def store_events(rows: list[OutboxEvent]) -> list[Event]:
    """The rows as stored events with the next ids of the channel, in order, in one transaction
    (the counter row locked once, one INSERT, one UPDATE). Each event's data is the row's
    payload with its type, outbox id and news, as JSON text (stored encoded once more, as
    django-eventstream's own storage does)."""
    channel = settings.EVENTS_CHANNEL
    encoded = [json.dumps(_event_data(row), cls=DjangoJSONEncoder) for row in rows]
    with transaction.atomic():
        counter = EventCounter.objects.select_for_update().filter(name=channel).first()
        if counter is None:
            counter = EventCounter.objects.create(name=channel)
        # The storage reads from the event an id names: a stream that starts at 0 needs one.
        stored = [StoredEvent(channel=channel, eid=0)] if counter.value == 0 else []
        events = [
            Event(channel, row.type, data, id=counter.value + n)
            for n, (row, data) in enumerate(zip(rows, encoded, strict=True), start=1)
        ]
        stored += [
            StoredEvent(channel=channel, type=e.type, data=json.dumps(e.data), eid=e.id)
            for e in events
        ]
        StoredEvent.objects.bulk_create(stored)
        counter.value = events[-1].id
        counter.save(update_fields=["value", "updated"])
    return events


def _deliver(events: list[Event]) -> None:
    """Stored events to this server's streams and, with Redis, to the other servers."""
    if not fanout.enabled():
        manager = get_listener_manager()
        for event in events:
            manager.add_to_queues(event.channel, event)
        return
    listener = fanout.listener()
    for event in events:
        listener.deliver(event)
    listener.broadcast(events)


class Relay:
    def __init__(self, gap_seconds: float | None = None, clock=time.monotonic):
        self.cursor = 0
        self.saved = 0
        self.gap_seconds = settings.EVENT_RELAY_GAP_SECONDS if gap_seconds is None else gap_seconds
        self.clock = clock
        self.gaps: dict[int, float] = {}  # outbox id → when to stop waiting for it (in order)
        self.next_trim = 0.0

    def start(self) -> None:
        self.cursor = max(_read_cursor(), _newest_relayed_outbox_id())
        self.saved = self.cursor
        self._recover_recent()

    def _recover_recent(self) -> None:
        """Ids at or below the cursor in the recent window that no stored event carries."""
        since = timezone.now() - timedelta(seconds=self.gap_seconds)
        recent = set(
            OutboxEvent.objects.filter(id__lte=self.cursor, created_at__gte=since).values_list(
                "id", flat=True
            )
        )
        # Stored events are written after their rows: look back twice as far for them.
        relayed = _relayed_since(since - timedelta(seconds=self.gap_seconds))
        known = recent | (relayed - {0})
        if not known:
            return
        for missing in range(max(min(known), self.cursor - MAX_GAPS + 1), self.cursor + 1):
            if missing not in relayed:
                self._add_gap(missing)

    def save(self) -> None:
        if self.cursor != self.saved:
            _save_cursor(self.cursor)
            self.saved = self.cursor

    def _add_gap(self, outbox_id: int) -> None:
        self.gaps[outbox_id] = self.clock() + self.gap_seconds
        while len(self.gaps) > MAX_GAPS:
            self.gaps.pop(next(iter(self.gaps)))

    def _expire_gaps(self) -> None:
        now = self.clock()
        for outbox_id, deadline in list(self.gaps.items()):
            if deadline > now:
                break  # added in deadline order
            del self.gaps[outbox_id]

    def step(self, *, notified: bool = False) -> int:
        """Relay the rows committed since the last step; returns how many were sent. `notified`:
        an insert committed (PostgreSQL told so), no need for the cheap look first."""
        self._expire_gaps()
        if not notified and not _has_new_rows(self.cursor, self.gaps):
            return 0
        wanted = Q(id__gt=self.cursor) | Q(id__in=list(self.gaps))
        rows = list(OutboxEvent.objects.filter(wanted).order_by("id")[:BATCH])
        if not rows:
            return 0
        events = store_events(rows)
        for row in rows:
            if self.gaps.pop(row.id, None) is not None:
                continue  # late: a lower id committed after the cursor passed it
            for skipped in range(max(self.cursor + 1, row.id - MAX_GAPS), row.id):
                self._add_gap(skipped)
            self.cursor = row.id
        self.save()
        _deliver(events)
        self._trim()
        return len(events)

    def _trim(self) -> None:
        """What django-eventstream's `append_event` does after each event, once a minute."""
        if self.clock() >= self.next_trim:
            get_storage().trim_event_log()
            self.next_trim = self.clock() + TRIM_SECONDS


class FileLock:
    """SQLite: one relay per data dir (the database lives there), held for the process's life."""

    def __init__(self):
        self.handle = None
        self.wakes: socket.socket | None = None  # where committing processes wake the relay

    def acquire(self) -> bool:
        handle = open(Path(settings.DATA_DIR) / "event-relay.lock", "a")  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self.handle = handle  # kept referenced: closing it would drop the lock
        self.wakes = bind_datagram_socket(relay_socket_path())
        return True

    def held(self) -> bool:
        return self.handle is not None

    def release(self) -> None:
        """Nothing to do: the file lock cannot be lost while the process lives."""

    def wait(self, pause: float) -> bool:
        """Until a commit with events wakes the relay (True) or `pause` passes (False)."""
        if self.wakes is None:
            time.sleep(pause)
            return False
        woken, _, _ = select.select([self.wakes], [], [], pause)
        if not (woken and read_datagrams(self.wakes)):
            return False
        # The commits of one burst go together (a step's end and the next agent's start), and
        # the relay's own write does not take SQLite's one write lock while the worker writes.
        time.sleep(WAKE_COALESCE_SECONDS)
        read_datagrams(self.wakes)
        return True


class AdvisoryLock:
    """PostgreSQL: one relay per database. The session lock lives on this thread's connection;
    it is gone the moment that connection is (server killed, connection closed)."""

    def __init__(self, fallback_poll: float = FALLBACK_POLL_SECONDS):
        self.backend_pid = None
        self.fallback_poll = fallback_poll

    def _backend_pid(self):
        raw = connection.connection
        return None if raw is None or raw.closed else raw.info.backend_pid

    def acquire(self) -> bool:
        with connection.cursor() as c:
            c.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
            if not c.fetchone()[0]:
                return False
            c.execute(f"LISTEN {NOTIFY_CHANNEL}")
        self.backend_pid = self._backend_pid()
        return True

    def wait(self, pause: float) -> bool:
        """Until an outbox insert commits (True) or the fallback poll is due (False). Takes
        every notification already received: one step relays all of their rows."""
        woken = False
        for _ in connection.connection.notifies(timeout=self.fallback_poll, stop_after=1):
            woken = True
        return woken

    def held(self) -> bool:
        return self.backend_pid is not None and self._backend_pid() == self.backend_pid

    def release(self) -> None:
        self.backend_pid = None
        connection.close()  # ends the session, and with it the lock


def relay_lock() -> FileLock | AdvisoryLock:
    return AdvisoryLock() if connection.vendor == "postgresql" else FileLock()


def _run() -> None:
    lock = relay_lock()
    relay = None
    pause = settings.EVENT_RELAY_POLL_SECONDS
    notified = False
    while True:
        try:
            if not lock.held():
                if relay is not None:
                    log.warning("Event relay: lost the relay lock (database connection gone)")
                    relay = None
                if not lock.acquire():
                    time.sleep(LOCK_RETRY_SECONDS)
                    continue
                log.info("Event relay started in this process")
                relay = _current["relay"] = Relay()
                relay.start()
            # After a batch more may have come: the cheap look says. Idle: wait to be told.
            notified = False if relay.step(notified=notified) else lock.wait(pause)
        except Exception:
            log.exception("Event relay step failed; retrying")
            if relay is not None:
                relay.save()
            lock.release()
            connection.close()
            time.sleep(1)


def _save_at_exit() -> None:
    if relay := _current.get("relay"):
        relay.save()


def ensure_started() -> None:
    global _started
    with _start_lock:
        if _started:
            return
        _started = True
    atexit.register(_save_at_exit)
    threading.Thread(target=_run, name="malamar-event-relay", daemon=True).start()
