"""The one way anything emits a live event.

`publish()` inserts an outbox row inside the caller's transaction. Nothing here talks to
clients: the server's relay (core.relay) forwards committed rows to the SSE stream.
"""

from django.db import transaction

from core.models import OutboxEvent

# Spec events plus the ones the UI needs (DESIGN "Events beyond the spec's list").
EVENT_TYPES = frozenset(
    {
        "task.created",
        "task.updated",
        "task.deleted",
        "task.status_changed",
        "task.comment_added",
        "task.error_occurred",
        "agent.execution_started",
        "agent.execution_finished",
        "chat.message_added",
        "chat.processing_started",
        "chat.processing_finished",
        "chat.updated",
        "chat.deleted",
        "workspace.created",
        "workspace.updated",
        "workspace.deleted",
        "agents.changed",
        "cli.health_changed",
        "settings.updated",
        "run.trace",
        "run.stalled",
    }
)


def publish(event_type: str, payload: dict) -> OutboxEvent:
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    with transaction.atomic():
        return OutboxEvent.objects.create(type=event_type, payload=payload)
