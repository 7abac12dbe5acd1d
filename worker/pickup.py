"""Which task a workspace runs next and which chat answers next, and the atomic claims.

Order (spec "Queue Pickup Algorithm"): only Todo / In Progress tasks; a prioritised item; else the
task with the most recently completed/failed item (finish what you started); else the most
recently updated item (LIFO, so a comment bumps a task). Tasks in error back-off wait, so do
passes paused for a CLI that is out of quota or cannot run, and so do
Todo tasks with a blocker that is not Done (tasks.models.waiting_for_blockers).

A workspace runs one task at a time, or up to its "parallel tasks" with branch per task
(`Workspace.parallel_limit`): a task that runs is never picked twice, and the claim refuses once
the workspace runs as many as its limit.
"""

import logging

from django.db import connection, transaction
from django.db.models import Case, Count, Exists, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce, NullIf
from django.utils import timezone

from agents.models import Agent
from chats.models import ChatQueueItem
from core.compiled_queries import compiled_models, compiled_rows
from runner.clis import CliType
from runner.selectors import cli_waits
from tasks.models import PassPhase, QueueStatus, TaskQueueItem, runnable_pass_q
from tasks.services import task_pass_begin
from workspaces.models import Workspace

log = logging.getLogger(__name__)


def _candidates(*, now, waits: tuple[str, ...], workspace_id: str | None = None):
    items = TaskQueueItem.objects.eligible().filter(runnable_pass_q())
    if workspace_id:
        items = items.filter(workspace_id=workspace_id)
    # A task runs one pass at a time (a pass being stopped does not count: it is ending).
    running = TaskQueueItem.objects.unstopped().filter(task_id=OuterRef("task_id"))
    items = items.exclude(Exists(running))
    if waits:  # a pass paused for a CLI (out of quota, or broken) waits (others keep running)
        items = items.exclude(waiting_for_cli__in=waits)
    return items.filter(Q(task__retry_not_before__isnull=True) | Q(task__retry_not_before__lte=now))


def _waits() -> tuple[str, ...]:
    return tuple(sorted(cli_waits()))


_LIMIT_FIELDS = ("isolation", "working_directory_mode", "parallel_tasks")


def startable() -> dict[str, tuple[int, int]]:
    """Workspace id → (how many of its tasks could start now, how many it may run at once), in
    one query (the worker asks at every wake-up)."""
    waits = _waits()

    def query(now):
        fields = [f"workspace__{name}" for name in _LIMIT_FIELDS]
        rows = _candidates(now=now, waits=waits).order_by().values("workspace_id", *fields)
        return rows.annotate(n=Count("task_id"))

    rows = compiled_rows(("startable", waits), query, now=timezone.now())
    found = {}
    for workspace_id, *limit_fields, n in rows:
        workspace = Workspace(**dict(zip(_LIMIT_FIELDS, limit_fields, strict=True)))
        found[workspace_id] = (n, workspace.parallel_limit)
    return found


def workspaces_with_work() -> dict[str, int]:
    """Workspace id → how many of its tasks could start now."""
    return {workspace_id: n for workspace_id, (n, _limit) in startable().items()}


def running_count(workspace_id: str) -> int:
    return TaskQueueItem.objects.filter(
        workspace_id=workspace_id, status=QueueStatus.IN_PROGRESS
    ).count()


def next_item(workspace_id: str) -> TaskQueueItem | None:
    """The order above in one query: prioritised first, then the task whose item finished
    last, then the most recently updated."""
    waits = _waits()

    def query(workspace_id, now):
        last_done = (
            TaskQueueItem.objects.finished()
            .filter(workspace_id=workspace_id)
            .order_by("-updated_at")
            .values("task_id")[:1]
        )
        resumed = Case(When(task_id=Subquery(last_done), then=Value(1)), default=Value(0))
        candidates = _candidates(now=now, waits=waits, workspace_id=workspace_id)
        ordered = candidates.annotate(resumed=resumed)
        return ordered.order_by("-is_priority", "-resumed", "-updated_at")[:1]

    items = compiled_models(
        ("next_item", waits), query, workspace_id=workspace_id, now=timezone.now()
    )
    return next(iter(items), None)


def shared_database() -> bool:
    """Several workers may claim from this database (PostgreSQL): claims lock what they count."""
    return connection.vendor == "postgresql"


def _claimed(item, worker_id: str | None):
    item.status, item.worker_id = QueueStatus.IN_PROGRESS, worker_id
    return item


def claim_next(
    workspace_id: str, *, limit: int = 1, worker_id: str | None = None
) -> TaskQueueItem | None:
    """Claim the workspace's next item (queued → in_progress) for `worker_id`, retrying if
    another claim won; None when nothing waits or `limit` tasks of the workspace already run."""
    if shared_database():
        return _claim_next_locked(workspace_id, limit=limit, worker_id=worker_id)
    for _attempt in range(5):
        # (One task at a time needs no count: the workspace's one runner thread claims.)
        if limit > 1 and running_count(workspace_id) >= limit:
            return None
        item = next_item(workspace_id)
        if item is None:
            return None
        claimed = _claim_and_begin(item, worker_id)
        if claimed is not None:
            return claimed
    return None


class _BeginFailed(Exception):
    pass


def _claim_and_begin(item: TaskQueueItem, worker_id: str | None) -> TaskQueueItem | None:
    """SQLite: the claim and the pass's begin in one write transaction (not two on the way to
    the CLI's start); `item.pass_begun` holds task_pass_begin's answer for TaskPass.run. A
    begin that raises rolls the claim back with it: the item is then claimed alone, and
    TaskPass.run begins again (and reports what goes wrong). None: another claim won.
    (PostgreSQL keeps them apart: its claim holds the workspace's row, which a parallel pass's
    inserts need while it holds a task row that the begin locks.)"""
    try:
        with transaction.atomic():
            if not TaskQueueItem.objects.claim(item.id, worker_id=worker_id):
                return None
            item = _claimed(item, worker_id)
            if item.phase != PassPhase.MANUAL:  # (a person's "Run checks" begins no pass)
                try:
                    item.pass_begun = task_pass_begin(item=item)
                except Exception as exc:
                    raise _BeginFailed from exc
            return item
    except _BeginFailed:
        log.warning("A pass could not begin with its claim", exc_info=True)
        if TaskQueueItem.objects.claim(item.id, worker_id=worker_id):
            return item
        return None


def _claim_next_locked(workspace_id: str, *, limit: int, worker_id: str | None):
    """Workers on several machines: the claim locks the workspace's row (SKIP LOCKED: a worker
    that finds it locked leaves the workspace to the worker claiming there), counts what the
    workspace runs, and claims, in one short transaction. So the workspace never runs more
    than `limit` tasks, whichever workers run them."""
    with transaction.atomic():
        locked = Workspace.objects.select_for_update(skip_locked=True).filter(id=workspace_id)
        if not locked.values_list("id", flat=True):
            return None
        if running_count(workspace_id) >= limit:
            return None
        item = next_item(workspace_id)
        if item is None or not TaskQueueItem.objects.claim(item.id, worker_id=worker_id):
            return None
        return _claimed(item, worker_id)


def running_counts(workspace_ids) -> dict[str, int]:
    """Workspace id → its tasks running now (on any worker)."""
    rows = (
        TaskQueueItem.objects.running()
        .filter(workspace_id__in=list(workspace_ids))
        .order_by()
        .values("workspace_id")
        .annotate(n=Count("id"))
    )
    return {row["workspace_id"]: row["n"] for row in rows}


def workspace_clis(workspace_ids) -> dict[str, set[str]]:
    """Workspace id → the CLI types its agents run (a pass needs them all)."""
    found: dict[str, set[str]] = {}
    rows = Agent.objects.filter(workspace_id__in=list(workspace_ids))
    for workspace_id, cli in rows.values_list("workspace_id", "cli_type"):
        if cli in CliType.values:
            found.setdefault(workspace_id, set()).add(cli)
    return found


def _chat_candidates():
    items = ChatQueueItem.objects.queued()
    waits = cli_waits()
    return items.exclude(waiting_for_cli__in=waits) if waits else items


def chats_queued() -> bool:
    return _chat_candidates().exists()


def _chat_cli_not_in(items, clis):
    """Replies whose participant's CLI (its override, else its agent's) is not one of `clis`;
    Malamar without an override answers on any available CLI, so it stays."""
    cli = Coalesce(NullIf("participant__cli_type", Value("")), "participant__agent__cli_type")
    return items.alias(cli=cli).filter(Q(cli__isnull=True) | ~Q(cli__in=list(clis)))


def claim_next_chat(*, worker_id: str | None = None, avoid=()) -> ChatQueueItem | None:
    """The oldest queued chat item, claimed (queued → in_progress) for `worker_id`; replies
    waiting for a CLI that is out of quota stay queued, and so do those on a CLI in `avoid`
    (unusable on this worker, usable on another)."""
    if shared_database():  # SKIP LOCKED: workers claiming at once take different items
        with transaction.atomic():
            candidates = _chat_candidates().order_by("created_at")
            if avoid:
                candidates = _chat_cli_not_in(candidates, avoid)
            item = candidates.select_for_update(skip_locked=True, of=("self",)).first()
            if item is None or not ChatQueueItem.objects.claim(item.id, worker_id=worker_id):
                return None
            return _claimed(item, worker_id)
    for item in _chat_candidates().order_by("created_at")[:20]:
        if ChatQueueItem.objects.claim(item.id, worker_id=worker_id):
            return _claimed(item, worker_id)
    return None
