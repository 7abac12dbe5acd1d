"""The relay on any database: ids skipped by the cursor (commits out of id order on PostgreSQL)
are relayed when they appear, the cursor and the recent window survive a takeover through the
shared storage, one relay holds the lock; and a server's listener hands stored events to its
streams once each, in id order (core.fanout)."""

import json
import threading
from contextlib import contextmanager
from datetime import timedelta

import django_eventstream
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_eventstream.event import Event
from django_eventstream.models import Event as StoredEvent
from django_eventstream.views import get_listener_manager

from core import events, fanout, relay
from core.fanout import Listener
from core.models import OutboxEvent
from core.relay import TRIM_SECONDS, AdvisoryLock, Relay, stored_outbox_id
from malamar_site.news import news_for
from tests.databases import postgres_only
from tests.live import wait_until

pytestmark = pytest.mark.pg

on_postgres = postgres_only("PostgreSQL only (commit order, advisory lock, NOTIFY)")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stored_ids() -> list[int]:
    """The outbox ids of the stored events, in event id order."""
    datas = StoredEvent.objects.filter(eid__gt=0).order_by("eid").values_list("data", flat=True)
    return [stored_outbox_id(data) for data in datas]


@pytest.fixture
def sent(settings, tmp_path):
    """The outbox ids the relay has sent (stored), in order."""
    settings.DATA_DIR = tmp_path
    return stored_ids


def _row(outbox_id: int) -> OutboxEvent:
    return OutboxEvent.objects.create(id=outbox_id, type="task.updated", payload={})


def _relay_from(first: int, **kwargs) -> Relay:
    """A relay that sent everything before `first` (PostgreSQL's sequence outlives the rolled
    back rows of earlier tests: ids below `first` would be gaps otherwise)."""
    started = Relay(**kwargs)
    started.start()
    started.cursor = first - 1
    return started


def test_a_skipped_id_is_relayed_when_its_row_appears(db, sent):
    first = events.publish("task.updated", {}).id
    _row(first + 2)
    relay = _relay_from(first, clock=Clock())
    assert relay.step() == 2
    assert list(relay.gaps) == [first + 1]
    assert relay.step() == 0  # still waiting: nothing sent twice

    _row(first + 1)  # the slower transaction commits
    assert relay.step() == 1
    assert sent() == [first, first + 2, first + 1]
    assert relay.gaps == {}
    assert relay.step() == 0


def stored_datas() -> list[dict]:
    datas = StoredEvent.objects.filter(eid__gt=0).order_by("eid").values_list("data", flat=True)
    return [json.loads(fanout.decoded(data)) for data in datas]


def test_an_event_goes_with_the_news_the_site_words_for_it(db, settings, sent):
    review = {"workspace_id": "W", "task_id": "T", "task_summary": "Fix it", "actor_type": "agent"}
    first = events.publish("task.status_changed", {**review, "new_status": "in_review"}).id
    events.publish("task.updated", {"workspace_id": "W", "task_id": "T"})
    _relay_from(first, clock=Clock()).step()
    news, quiet = stored_datas()
    assert news["news"] == news_for("task.status_changed", news) != []  # malamar_site/news.py
    assert news["news"][0]["message"] == "Ready for your review"
    assert "news" not in quiet  # no news: no field
    settings.EVENT_NEWS = ""  # no site layer to word them (core alone)
    events.publish("task.status_changed", {**review, "new_status": "in_review"})
    _relay_from(first + 2, clock=Clock()).step()
    assert "news" not in stored_datas()[-1]


def test_a_gap_that_never_fills_expires(db, sent):
    first = events.publish("task.updated", {}).id
    _row(first + 3)
    clock = Clock()
    relay = _relay_from(first, gap_seconds=60, clock=clock)
    relay.step()
    assert sorted(relay.gaps) == [first + 1, first + 2]
    clock.now += 61  # rolled back: the ids never commit
    assert relay.step() == 0
    assert relay.gaps == {}
    _row(first + 1)  # too late to be told apart from an old row: left alone
    assert relay.step() == 0


def test_the_gaps_are_bounded(db, sent, monkeypatch):
    monkeypatch.setattr(relay, "MAX_GAPS", 3)
    first = events.publish("task.updated", {}).id
    _row(first + 10)
    tracker = _relay_from(first, clock=Clock())
    tracker.step()
    assert list(tracker.gaps) == [first + 7, first + 8, first + 9]


def test_a_batch_costs_the_same_statements_whatever_its_size(db, sent):
    """The relay stores a step's rows in one batch (django-eventstream's own storage writes 7
    statements per event, and a relay behind under load stayed behind)."""
    relay = _relay_from(events.publish("task.updated", {}).id + 1)

    def statements_for(count: int) -> int:
        for n in range(count):
            events.publish("task.updated", {"n": n})
        with CaptureQueriesContext(connection) as queries:
            assert relay.step() == count
        return len(queries)

    statements_for(1)  # the first batch creates the channel's counter
    assert statements_for(2) == statements_for(40)
    assert len(sent()) == 1 + 2 + 40


def test_the_relay_trims_day_old_stored_events_once_a_minute(db, sent):
    clock = Clock()
    relay = _relay_from(events.publish("task.updated", {}).id, clock=clock)
    day_old = timezone.now() - timedelta(days=2)

    def old_event() -> int:
        event = StoredEvent.objects.create(channel="malamar", type="x", data="{}", eid=10**9)
        StoredEvent.objects.filter(id=event.id).update(created=day_old)
        return event.id

    first = old_event()
    assert relay.step() == 1
    assert not StoredEvent.objects.filter(id=first).exists()
    second = old_event()
    events.publish("task.updated", {})
    assert relay.step() == 1
    assert StoredEvent.objects.filter(id=second).exists()  # not yet: once a minute
    clock.now += TRIM_SECONDS
    events.publish("task.updated", {})
    assert relay.step() == 1
    assert not StoredEvent.objects.filter(id=second).exists()


class StreamStandIn:
    """What django-eventstream's listener manager hands a stream's queue to (a stream of this
    server), without an event loop."""

    def __init__(self):
        self.channels = {"malamar"}
        self.channel_items = {}
        self.overflow = False
        self.wakes = 0

    def wake_threadsafe(self):
        self.wakes += 1


def test_the_relay_hands_stored_events_to_this_servers_streams_in_order(db, sent):
    stream = StreamStandIn()
    manager = get_listener_manager()
    manager.add_listener(stream)
    try:
        rows = [events.publish("task.updated", {"n": n}).id for n in range(3)]
        relay = _relay_from(rows[0])
        assert relay.step() == 3
    finally:
        manager.remove_listener(stream)
    handed = stream.channel_items["malamar"]
    stored = list(StoredEvent.objects.filter(eid__gt=0).order_by("eid"))
    assert [e.id for e in handed] == [e.eid for e in stored]
    assert [json.loads(e.data) for e in handed] == [
        {"n": n, "type": "task.updated", "outbox_id": row} for n, row in enumerate(rows)
    ]
    assert [fanout.decoded(e.data) for e in stored] == [e.data for e in handed]


def test_stored_events_carry_the_outbox_id_through_the_double_encoding(db):
    django_eventstream.send_event("malamar", "task.updated", {"outbox_id": 42})
    stored = StoredEvent.objects.filter(eid__gt=0).get()
    assert stored_outbox_id(stored.data) == 42
    assert stored_outbox_id("not json") == 0


def test_a_new_relay_resumes_from_the_shared_storage_and_recovers_the_window(
    db, settings, tmp_path
):
    """Another machine takes over: no cursor file there, the cursor comes from the stored
    events; a row below it that no stored event carries is relayed, the others are not."""
    settings.DATA_DIR = tmp_path / "first"
    settings.DATA_DIR.mkdir()
    rows = [events.publish("task.updated", {"n": n}).id for n in range(3)]
    first = Relay()
    first.start()
    first.step()
    # The middle row committed after the dead relay had moved past it.
    middle = StoredEvent.objects.filter(eid__gt=0).order_by("eid")[1]
    assert stored_outbox_id(middle.data) == rows[1]
    middle.delete()

    settings.DATA_DIR = tmp_path / "second"
    settings.DATA_DIR.mkdir()
    second = Relay()
    second.start()
    assert second.cursor == rows[-1]
    assert list(second.gaps) == [rows[1]]
    assert second.step() == 1
    relayed = [stored_outbox_id(e.data) for e in StoredEvent.objects.filter(eid__gt=0)]
    assert sorted(relayed) == rows
    assert second.step() == 0


@contextmanager
def publish_held_open(payload: dict):
    """Publish an event in another session whose transaction stays open for the block, and
    commits when it ends; yields the event's (already taken) outbox id."""
    inserted, commit, ids = threading.Event(), threading.Event(), []

    def held_open():
        try:
            with transaction.atomic():
                ids.append(events.publish("task.updated", payload).id)
                inserted.set()
                commit.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=held_open)
    thread.start()
    try:
        assert inserted.wait(10), "the other session never inserted its event"
        yield ids[0]
    finally:
        commit.set()
        thread.join(10)


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_postgres_lower_id_committed_last_is_relayed_once(sent):
    relay = _relay_from(events.publish("task.updated", {}).id + 1)
    with publish_held_open({"who": "slow"}) as slow_id:
        fast = events.publish("task.updated", {"who": "fast"}).id
        assert slow_id < fast
        assert relay.step() == 1  # only the committed one
        assert slow_id in relay.gaps
    assert relay.step() == 1
    assert relay.step() == 0
    assert sent() == [fast, slow_id]


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_postgres_one_relay_holds_the_lock_until_its_connection_goes():
    holder, other = AdvisoryLock(), AdvisoryLock()
    assert holder.acquire() and holder.held()
    results = []

    def in_another_session(action):
        try:
            results.append(action())
        finally:
            connection.close()

    def attempt(action=other.acquire):
        thread = threading.Thread(target=in_another_session, args=(action,))
        thread.start()
        thread.join(10)
        return results.pop()

    def backend_gone() -> bool:  # (PostgreSQL ends a closed session's backend a moment later)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [holder.backend_pid])
            return cursor.fetchone() is None

    assert attempt() is False
    connection.close()  # the holding server's connection is gone (killed, network)
    assert not holder.held()
    wait_until(lambda: attempt(backend_gone), timeout=30, what="the closed session to end")
    assert attempt() is True


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_postgres_relay_sleeps_until_an_outbox_insert_commits():
    lock = AdvisoryLock(fallback_poll=0.2)
    assert lock.acquire()
    while lock.wait(0):  # notifications of earlier inserts
        pass
    with publish_held_open({}):
        assert lock.wait(0) is False  # not committed: no notification yet
    lock.fallback_poll = 10
    assert lock.wait(0) is True
    for n in range(3):  # three commits: one wake-up, one step relays their rows
        events.publish("task.updated", {"n": n})
    assert lock.wait(0) is True
    lock.fallback_poll = 0.2
    assert lock.wait(0) is False
    lock.release()


def _store(count: int) -> None:
    for n in range(count):
        django_eventstream.send_event("malamar", "task.updated", {"n": n})


def _stored(eid: int) -> Event:
    return Event("malamar", "task.updated", "{}", id=eid)


def test_the_listener_hands_each_event_once_in_order_filling_gaps_from_storage(db):
    _store(6)
    handed = []
    listener = Listener(hand=lambda event: handed.append(event.id))
    listener.start_at(1)
    listener.deliver(_stored(4))  # 2 and 3 were missed: read from the storage first
    listener.deliver(_stored(3))  # late duplicate
    listener.deliver(_stored(4))
    listener.deliver(_stored(5))
    assert handed == [2, 3, 4, 5]
    listener.catch_up()  # the message for 6 was lost: the tick reads it
    assert handed == [2, 3, 4, 5, 6]
    first_filled = listener.last
    assert first_filled == 6


def test_the_listener_hands_stored_data_as_the_streams_expect_it(db):
    _store(2)
    handed = []
    listener = Listener(hand=handed.append)
    listener.start_at(0)
    listener.catch_up()
    assert [(e.id, e.type, e.data) for e in handed] == [
        (1, "task.updated", '{"n": 0}'),
        (2, "task.updated", '{"n": 1}'),
    ]
