"""Scheduled housekeeping: old queue items, expired Done tasks, old events, worktrees of
deleted tasks, snapshots no run refers to."""

import logging
from datetime import timedelta

from django.utils import timezone
from django_eventstream.models import Event

from chats.models import ChatQueueItem
from core.models import OutboxEvent
from runner import snapshots
from runner.selectors import snapshot_trees_by_store
from tasks import branches
from tasks.models import Task, TaskQueueItem
from tasks.services import tasks_delete_expired

log = logging.getLogger(__name__)
KEEP_FINISHED_ITEMS = timedelta(days=7)
KEEP_EVENTS = timedelta(days=7)


def cleanup(*, now=None) -> dict:
    now = now or timezone.now()
    cutoff = now - KEEP_FINISHED_ITEMS
    counts = {
        "task_queue_items": TaskQueueItem.objects.prune_finished(before=cutoff),
        "chat_queue_items": ChatQueueItem.objects.prune_finished(before=cutoff),
        "done_tasks": tasks_delete_expired(now=now),
        "outbox_events": OutboxEvent.objects.filter(created_at__lt=now - KEEP_EVENTS).delete()[0],
        "stream_events": Event.objects.filter(created__lt=now - KEEP_EVENTS, eid__gt=0).delete()[0],
    }
    counts["orphan_worktrees"] = _orphan_worktrees_remove()
    # Read after the deletions above: the trees of tasks deleted now are not kept.
    pruned = snapshots.prune(snapshot_trees_by_store())
    counts.update({f"snapshot_{key}": value for key, value in pruned.items()})
    log.info("Cleanup finished", extra=counts)
    return counts


def _orphan_worktrees_remove() -> int:
    """Worktree folders whose task is gone (a removal that failed, a crash in between)."""
    found = branches.leftover_task_ids()
    known = set(Task.objects.filter(id__in=found).values_list("id", flat=True)) if found else set()
    branches.leftovers_remove(found - known)
    return len(found - known)
