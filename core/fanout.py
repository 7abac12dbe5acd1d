"""Live events on every server process, through the channel layer (Redis), when `REDIS_URL` is set.

The one relay of the deployment (core.relay) stores each event in django-eventstream's database
storage (the replay log every server reads for `Last-Event-ID`) and sends the batch to a
channel-layer group. Every server process runs one listener (a daemon thread with its own event
loop, started with the server like the relay) that hands each event to its local SSE
streams, exactly once and in storage-id order: an event at or below the last one handed over
is a duplicate and dropped; one further ahead means messages were missed (a restart, a Redis
hiccup, a takeover), so the missing ones are read from the shared storage first. A slow tick
re-joins the group (Redis may have restarted) and catches up from the storage, so a message
lost at the end of a burst is delivered too.

Without `CHANNEL_LAYERS` (no `REDIS_URL`) nothing here runs: the relay hands the events it stored
to the streams of its own (single) server.
"""

import asyncio
import concurrent.futures
import json
import logging
import threading
import time

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections
from django_eventstream.event import Event
from django_eventstream.models import Event as StoredEvent
from django_eventstream.utils import get_storage
from django_eventstream.views import get_listener_manager

log = logging.getLogger(__name__)
GROUP = "malamar-events"
TICK_SECONDS = 5.0
SEND_TIMEOUT = 2.0
PAUSE_AFTER_FAILURE = 5.0  # while Redis is down the relay does not wait on it for every batch
FILL_BATCH = 500

_listener = None
_listener_lock = threading.Lock()


def enabled() -> bool:
    return bool(getattr(settings, "CHANNEL_LAYERS", None))


def decoded(stored_data: str) -> str:
    """A stored event's data as `send_event` hands it to streams (JSON text): django-eventstream's
    database storage encodes the (already JSON) data once more."""
    data = json.loads(stored_data)
    return data if isinstance(data, str) else json.dumps(data)


def stored_events_between(after: int, before: int | None) -> list[Event]:
    """Stored events with `after < id < before` (no upper bound when None), in id order."""
    rows = StoredEvent.objects.filter(channel=settings.EVENTS_CHANNEL, eid__gt=after)
    if before is not None:
        rows = rows.filter(eid__lt=before)
    return [
        Event(row.channel, row.type, decoded(row.data), id=row.eid)
        for row in rows.order_by("eid")[:FILL_BATCH]
    ]


def _to_local_streams(event: Event) -> None:
    get_listener_manager().add_to_queues(event.channel, event)


class Listener:
    """Hands events to this process's SSE streams once each, in id order (see the module)."""

    def __init__(self, hand=None):
        self.hand = hand or _to_local_streams
        self.lock = threading.Lock()
        self.last: int | None = None  # storage id of the last event handed to the streams
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.layer = None
        self.channel_name = None
        self.send_paused_until = 0.0
        self.failing: set[str] = set()  # what is failing now: logged once, not every second
        # One thread for the database work of the loop (Django refuses it inside a loop).
        self.db = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="malamar-fanout-db")

    # delivery (any thread) ---------------------------------------------------------------
    def start_at(self, last: int) -> None:
        with self.lock:
            if self.last is None:
                self.last = last
        self.ready.set()

    def deliver(self, event: Event) -> None:
        with self.lock:
            if self.last is None or event.id <= self.last:
                return
            if event.id > self.last + 1:
                self._fill(event.id)
            if event.id > self.last:
                self._hand(event)

    def catch_up(self) -> None:
        """Everything the storage holds past the last event handed over."""
        with self.lock:
            if self.last is not None:
                self._fill(None)

    def _fill(self, before: int | None) -> None:
        while True:
            missing = stored_events_between(self.last, before)
            for event in missing:
                self._hand(event)
            if len(missing) < FILL_BATCH:
                return

    def _hand(self, event: Event) -> None:
        self.hand(event)
        self.last = event.id

    # the channel layer -------------------------------------------------------------------
    def broadcast(self, events: list[Event]) -> None:
        """Send events (already stored) to every server; a failure only delays them: each
        listener reads what it missed from the storage."""
        if self.loop is None or time.monotonic() < self.send_paused_until:
            return
        message = {
            "type": "malamar.events",
            "events": [[event.id, event.type, event.data] for event in events],
        }
        future = asyncio.run_coroutine_threadsafe(self.layer.group_send(GROUP, message), self.loop)
        try:
            future.result(SEND_TIMEOUT)
        except Exception:
            future.cancel()
            self.send_paused_until = time.monotonic() + PAUSE_AFTER_FAILURE
            self._failed("send", "the other servers get the events from the storage meanwhile")
        else:
            self._recovered("send")

    def _failed(self, what: str, consequence: str) -> None:
        if what not in self.failing:
            self.failing.add(what)
            log.warning("Live events: the channel layer failed (%s); %s", what, consequence)

    def _recovered(self, what: str) -> None:
        if what in self.failing:
            self.failing.discard(what)
            log.info("Live events: the channel layer works again (%s)", what)

    def run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.layer = get_channel_layer()
        self.loop.run_until_complete(self._serve())

    async def _in_db(self, func, *args):
        def call():
            close_old_connections()  # a connection lost meanwhile is replaced, not an error
            return func(*args)

        return await self.loop.run_in_executor(self.db, call)

    async def _serve(self) -> None:
        self.channel_name = await self.layer.new_channel()
        await self._join()  # before reading where the storage stands: nothing falls between
        while self.last is None:
            try:
                current = await self._in_db(get_storage().get_current_id, settings.EVENTS_CHANNEL)
            except Exception:
                log.warning("Live events: reading the event storage failed", exc_info=True)
                await asyncio.sleep(1)
                continue
            self.start_at(current)
        self.loop.create_task(self._tick())
        while True:
            try:
                message = await self.layer.receive(self.channel_name)
            except Exception:
                self._failed("receive", "reading the events from the storage meanwhile")
                await asyncio.sleep(1)
                continue
            self._recovered("receive")
            events = [Event(settings.EVENTS_CHANNEL, t, d, id=i) for i, t, d in message["events"]]
            await self._in_db(self._deliver_all, events)

    def _deliver_all(self, events: list[Event]) -> None:
        for event in events:
            self.deliver(event)

    async def _join(self) -> None:
        try:
            await self.layer.group_add(GROUP, self.channel_name)
        except Exception:
            self._failed("join", "retrying")
        else:
            self._recovered("join")

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            await self._join()
            try:
                await self._in_db(self.catch_up)
            except Exception:
                log.warning("Live events: catching up from the storage failed", exc_info=True)


def listener() -> Listener:
    """This process's listener, started on first use."""
    global _listener
    with _listener_lock:
        if _listener is None:
            _listener = Listener()
            thread = threading.Thread(target=_run, name="malamar-event-listener", daemon=True)
            thread.start()
    return _listener


def _run() -> None:
    try:
        _listener.run()
    except Exception:
        log.exception("Live events listener stopped")


def ensure_started(timeout: float = 10) -> None:
    """Start this process's listener and wait until it knows where the stream stands."""
    listener().ready.wait(timeout)
