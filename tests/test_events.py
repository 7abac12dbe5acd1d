"""Events: the outbox is written with the change; the relay delivers across processes."""

import pytest
from django.db import transaction
from django_eventstream.models import Event as StoredEvent

from core import events
from core.models import OutboxEvent
from core.relay import Relay, stored_outbox_id
from core.sse import dedupe_blocks
from core.wake import ANYTHING, bind_datagram_socket, relay_socket_path
from tests.databases import ON_POSTGRES
from tests.live import Server, SseClient, django_script, wait_until
from tests.stack import data_dir_from

PUBLISH = """
from core.events import publish
for seq in range({start}, {stop}):
    publish("task.updated", {{"workspace_id": "w", "task_id": "t", "seq": seq}})
"""


@pytest.mark.pg
def test_publish_is_part_of_the_callers_transaction(db):
    with pytest.raises(RuntimeError), transaction.atomic():
        events.publish("task.created", {"task_id": "x"})
        raise RuntimeError("rolled back")
    assert not OutboxEvent.objects.exists()
    events.publish("task.created", {"task_id": "y"})
    assert OutboxEvent.objects.get().payload == {"task_id": "y"}


def test_unknown_event_type_is_refused(db):
    with pytest.raises(ValueError):
        events.publish("task.exploded", {})


@pytest.mark.pg
def test_relay_step_sends_rows_in_order_once(db):
    rows = [events.publish("task.updated", {"n": n}) for n in range(3)]
    relay = Relay()
    relay.start()
    assert relay.step() == 3
    assert relay.step() == 0
    stored = StoredEvent.objects.filter(eid__gt=0).order_by("eid")
    assert [(e.type, stored_outbox_id(e.data)) for e in stored] == [
        ("task.updated", r.id) for r in rows
    ]


def test_sse_dedupe_drops_ids_not_above_the_last_sent():
    state = {"last": 0}
    first = "event: a\nid: malamar:1\ndata: {}\n\nevent: b\nid: malamar:2\ndata: {}\n\n"
    assert dedupe_blocks(first, state) == first
    replay = "event: b\nid: malamar:2\ndata: {}\n\nevent: c\nid: malamar:3\ndata: {}\n\n"
    assert dedupe_blocks(replay, state) == "event: c\nid: malamar:3\ndata: {}\n\n"
    assert dedupe_blocks("event: keep-alive\ndata:\n\n", state) == "event: keep-alive\ndata:\n\n"


def _seqs(client):
    unique = {}
    for event_id, _type, data, _at in client.of_type("task.updated"):
        unique.setdefault(event_id, data["seq"])
    return list(unique.values())


@pytest.mark.pg
@pytest.mark.live
def test_events_cross_processes_in_order_and_survive_server_restart(tmp_path, template_db):
    data_dir_from(template_db, tmp_path)  # migrated (the session's template)
    server = Server(tmp_path).start()
    try:
        client = SseClient(server.url)
        django_script(tmp_path, PUBLISH.format(start=0, stop=300))
        wait_until(lambda: len(_seqs(client)) >= 300, timeout=30, what="300 events")
        assert _seqs(client) == list(range(300))
        ids = [e[0] for e in client.of_type("task.updated")]
        assert len(ids) == len(set(ids)), "the stream sent an event id twice"
        last_id = ids[-1]
        client.close()
    finally:
        server.stop()

    # Committed while no server runs: delivered after the client reconnects with Last-Event-ID.
    django_script(tmp_path, PUBLISH.format(start=300, stop=350))
    server = Server(tmp_path, port=server.port).start()
    try:
        client = SseClient(server.url, last_event_id=last_id)
        wait_until(lambda: len(_seqs(client)) >= 50, timeout=30, what="50 replayed events")
        assert _seqs(client) == list(range(300, 350))
        client.close()
    finally:
        server.stop()


@pytest.mark.skipif(ON_POSTGRES, reason="SQLite's wake-up: PostgreSQL's outbox trigger NOTIFYs")
def test_a_transaction_with_events_wakes_the_relay_once_at_its_commit(
    transactional_db, tmp_path, settings
):
    """SQLite: one datagram per committed transaction, however many events it publishes, and
    none for one rolled back."""
    settings.DATA_DIR = tmp_path
    listening = bind_datagram_socket(relay_socket_path())
    try:
        with transaction.atomic():
            for n in range(3):
                events.publish("task.updated", {"task_id": "t", "seq": n})
            with events.batched():
                events.publish("task.updated", {"task_id": "t", "seq": 3})
            with pytest.raises(BlockingIOError):
                listening.recv(64)  # nothing before the commit
        assert listening.recv(64) == ANYTHING.encode()
        with pytest.raises(BlockingIOError):
            listening.recv(64)  # once
        with pytest.raises(RuntimeError), transaction.atomic():
            events.publish("task.updated", {"task_id": "t", "seq": 4})
            raise RuntimeError("rolled back")
        with pytest.raises(BlockingIOError):
            listening.recv(64)
    finally:
        listening.close()


@pytest.mark.live
def test_a_commit_with_events_wakes_the_relay(tmp_path, template_db):
    """SQLite: the process that commits events wakes the server's relay, which otherwise only
    looks every MALAMAR_EVENT_RELAY_POLL seconds (an idle server polled 40 times a second)."""
    data_dir_from(template_db, tmp_path)
    server = Server(tmp_path, MALAMAR_EVENT_RELAY_POLL="60").start()
    try:
        client = SseClient(server.url)
        for stop in (3, 6):  # (the first after the relay's first look, then once more)
            django_script(tmp_path, PUBLISH.format(start=stop - 3, stop=stop))
            wait_until(lambda n=stop: len(_seqs(client)) >= n, timeout=30, what="the events")
        assert _seqs(client) == list(range(6))
        client.close()
    finally:
        server.stop()


COUNT_RELAYED = """
from django_eventstream.models import Event
print(Event.objects.filter(eid__gt=0).count())
"""


@pytest.mark.pg
@pytest.mark.live
def test_the_relay_starts_with_the_server_not_with_its_first_stream(tmp_path, template_db):
    """Events committed before any page opened are relayed at once, so the first page does not
    receive them late (as a burst that refreshes what it has just rendered)."""
    data_dir_from(template_db, tmp_path)
    server = Server(tmp_path).start()
    try:
        django_script(tmp_path, PUBLISH.format(start=0, stop=5))

        def relayed():
            return int(django_script(tmp_path, COUNT_RELAYED).stdout.strip() or 0) >= 5

        # No client ever connects to /api/events here.
        wait_until(relayed, timeout=30, what="5 events relayed without a stream", interval=0.2)
    finally:
        server.stop()
