"""Which task a workspace runs next and which chat answers next, and the atomic claims.

Order (spec "Queue Pickup Algorithm"): only Todo / In Progress tasks; a prioritised item; else the
task with the most recently completed/failed item (finish what you started); else the most
recently updated item (LIFO, so a comment bumps a task). Tasks in error back-off wait.
"""

from django.db.models import Case, Q, Subquery, Value, When
from django.utils import timezone

from chats.models import ChatQueueItem
from tasks.models import RUNNABLE_STATUSES, QueueStatus, TaskQueueItem


def _candidates(workspace_id: str | None = None, now=None):
    now = now or timezone.now()
    items = TaskQueueItem.objects.queued().filter(task__status__in=RUNNABLE_STATUSES)
    if workspace_id:
        items = items.filter(workspace_id=workspace_id)
    return items.filter(Q(task__retry_not_before__isnull=True) | Q(task__retry_not_before__lte=now))


def workspaces_with_work() -> set[str]:
    return set(_candidates().values_list("workspace_id", flat=True).distinct())


def next_item(workspace_id: str) -> TaskQueueItem | None:
    """The order above in one query: prioritised first, then the task whose item finished
    last, then the most recently updated."""
    last_done = (
        TaskQueueItem.objects.finished()
        .filter(workspace_id=workspace_id)
        .order_by("-updated_at")
        .values("task_id")[:1]
    )
    resumed = Case(When(task_id=Subquery(last_done), then=Value(1)), default=Value(0))
    candidates = _candidates(workspace_id).annotate(resumed=resumed)
    return candidates.order_by("-is_priority", "-resumed", "-updated_at").first()


def claim_next(workspace_id: str) -> TaskQueueItem | None:
    """Claim the workspace's next item (queued → in_progress), retrying if another claim won."""
    for _attempt in range(5):
        item = next_item(workspace_id)
        if item is None:
            return None
        if TaskQueueItem.objects.claim(item.id):
            item.status = QueueStatus.IN_PROGRESS
            return item
    return None


def chats_queued() -> bool:
    return ChatQueueItem.objects.queued().exists()


def claim_next_chat() -> ChatQueueItem | None:
    """The oldest queued chat item, claimed (queued → in_progress)."""
    for item in ChatQueueItem.objects.queued().order_by("created_at")[:20]:
        if ChatQueueItem.objects.claim(item.id):
            item.status = QueueStatus.IN_PROGRESS
            return item
    return None
