"""The one way anything emits a live event.

`publish()` inserts an outbox row inside the caller's transaction. Nothing here talks to
clients: the deployment's one relay (core.relay, in a server process) forwards committed rows
to the SSE streams. The transport behind it is chosen by configuration, never by the caller:
- no `REDIS_URL` (one server): the relay stores the events (Last-Event-ID replay) and wakes
  the streams of its own process;
- `REDIS_URL` (several servers): the relay stores the event and sends it through the Redis
  channel layer to a listener in every server process (core.fanout), which feeds that server's
  streams in id order and reads anything it missed from the shared storage.

The outbox row stays with Redis, on purpose: sending to Redis from inside the caller's
transaction would announce changes that may still roll back, and sending after commit would
lose the event when the process dies in between. The row makes an event exist exactly when its
change commits, from any process (the worker too), and gives the relay a durable queue to
resume from; the stored events give every server the same replay log.
"""

import contextlib
import threading

from core.compiled_queries import insert
from core.models import OutboxEvent
from core.wake import wake_relay_on_commit

_batch = threading.local()

# Spec events plus the ones the UI needs (DESIGN "Events beyond the spec's list").
EVENT_TYPES = frozenset(
    {
        "task.created",
        "task.updated",
        "task.deleted",
        "task.status_changed",
        "task.comment_added",
        "task.error_occurred",
        "task.changes_updated",
        "task.unblocked",
        "task.blocked",
        "task.reviewed",
        "agent.execution_started",
        "agent.execution_finished",
        "chat.message_added",
        "chat.processing_started",
        "chat.processing_finished",
        "chat.updated",
        "chat.deleted",
        "chat.seen",
        "workspace.created",
        "workspace.updated",
        "workspace.deleted",
        "agents.changed",
        "cli.health_changed",
        "cli.limited",
        "cli.resumed",
        "settings.updated",
        "run.trace",
        "run.stalled",
    }
)


def publish(event_type: str, payload: dict) -> OutboxEvent:
    """One outbox row, in the caller's transaction (a single INSERT needs no savepoint of its
    own); inside `batched()` it waits for the block's one bulk insert."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    event = OutboxEvent(type=event_type, payload=payload)
    pending = getattr(_batch, "events", None)
    if pending is not None:
        pending.append(event)
        return event
    event.save(force_insert=True)
    wake_relay_on_commit()
    return event


@contextlib.contextmanager
def batched():
    """Every event published in the block is inserted in one statement at its end (still inside
    the caller's transaction, in publishing order); nothing is inserted if the block raises.
    A nested block joins the outer one."""
    if getattr(_batch, "events", None) is not None:
        yield
        return
    _batch.events = pending = []
    try:
        yield
    finally:
        _batch.events = None
    if pending:
        insert(pending)  # (bulk_create's SQL, built once)
        wake_relay_on_commit()
