"""A task whose runs failed, recorded the way the worker records it: its pass claimed, then
failed through tasks.services.task_pass_failed (the one failure rule)."""

from django.db import transaction

from tasks.models import QueueStatus, TaskQueueItem
from tasks.services import queue_item_ensure, task_pass_failed


def fail_task(task, message: str, *, agent=None, pass_started=None) -> int:
    """One failed attempt of `task` (at `agent`, None: before any agent ran); returns the
    failure streak. Its pass continues later (a queued item), as after a real failure."""
    with transaction.atomic():
        item = TaskQueueItem.objects.queued().filter(task=task).first()
        item = item or queue_item_ensure(task=task)
        TaskQueueItem.objects.filter(id=item.id).update(status=QueueStatus.IN_PROGRESS)
        item.status = QueueStatus.IN_PROGRESS
        task_pass_failed(
            task=task, item=item, agent=agent, message=message, pass_started=pass_started
        )
    return task.failure_streak
