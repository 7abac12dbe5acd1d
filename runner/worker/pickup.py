"""Which task a workspace runs next and which chat answers next, and the atomic claims.

Order (spec "Queue Pickup Algorithm"): only Todo / In Progress tasks; a prioritised item; else the
task with the most recently completed/failed item (finish what you started); else the most
recently updated item (LIFO, so a comment bumps a task). Tasks in error back-off wait.

A workspace runs one task at a time, or up to its "parallel tasks" with branch per task
(`Workspace.parallel_limit`): a task that runs is never picked twice, and the claim refuses once
the workspace runs as many as its limit.
"""

from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from chats.models import ChatQueueItem
from tasks.models import RUNNABLE_STATUSES, QueueStatus, TaskQueueItem
from workspaces.models import Workspace


def _candidates(workspace_id: str | None = None, now=None):
    now = now or timezone.now()
    items = TaskQueueItem.objects.queued().filter(task__status__in=RUNNABLE_STATUSES)
    if workspace_id:
        items = items.filter(workspace_id=workspace_id)
    # A task runs one pass at a time (a pass being stopped does not count: it is ending).
    running = TaskQueueItem.objects.unstopped().filter(task_id=OuterRef("task_id"))
    items = items.exclude(Exists(running))
    return items.filter(Q(task__retry_not_before__isnull=True) | Q(task__retry_not_before__lte=now))


def workspaces_with_work() -> dict[str, int]:
    """Workspace id → how many of its tasks could start now."""
    rows = _candidates().order_by().values("workspace_id").annotate(n=Count("task_id"))
    return {row["workspace_id"]: row["n"] for row in rows}


def parallel_limits(workspace_ids) -> dict[str, int]:
    """Workspace id → how many tasks it may run at once."""
    workspaces = Workspace.objects.filter(id__in=list(workspace_ids)).only(
        "id", "isolation", "working_directory_mode", "parallel_tasks"
    )
    return {workspace.id: workspace.parallel_limit for workspace in workspaces}


def running_count(workspace_id: str) -> int:
    return TaskQueueItem.objects.filter(
        workspace_id=workspace_id, status=QueueStatus.IN_PROGRESS
    ).count()


def next_item(workspace_id: str) -> TaskQueueItem | None:
    candidates = _candidates(workspace_id)
    priority = candidates.filter(is_priority=True).order_by("-updated_at").first()
    if priority:
        return priority
    last_done = (
        TaskQueueItem.objects.finished()
        .filter(workspace_id=workspace_id)
        .order_by("-updated_at")
        .values_list("task_id", flat=True)
        .first()
    )
    if last_done:
        resumed = candidates.filter(task_id=last_done).first()
        if resumed:
            return resumed
    return candidates.order_by("-updated_at").first()


def claim_next(workspace_id: str, *, limit: int = 1) -> TaskQueueItem | None:
    """Claim the workspace's next item (queued → in_progress), retrying if another claim won;
    None when nothing waits or `limit` tasks of the workspace already run."""
    for _attempt in range(5):
        if running_count(workspace_id) >= limit:
            return None
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
