from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Exists, OuterRef, Subquery
from django.db.models.functions import Substr
from django.utils import timezone

from agents.models import Agent
from core.actors import author_name
from runner.models import AgentRun, RunStatus
from runner.selectors import usage_totals
from tasks.models import (
    RUNNABLE_STATUSES,
    Task,
    TaskComment,
    TaskLog,
    TaskQueueItem,
    TaskStatus,
)
from tasks.moves import USER_MOVES

# Cards rendered per column; the rest sit behind "Show all N" (2,000 tasks stay fast).
COLUMN_LIMIT = 50
USAGE_DAYS = 30


def task_with_counts(task_id: str) -> Task | None:
    return Task.objects.with_counts().filter(id=task_id).first()


def agent_names(workspace_id: str) -> dict[str, str]:
    return dict(Agent.objects.filter(workspace_id=workspace_id).values_list("id", "name"))


def comments_for_task(task: Task) -> list[TaskComment]:
    """Oldest first, each with `author_name` ("(Deleted Agent)" when its agent is gone)."""
    names = agent_names(task.workspace_id)
    comments = list(task.comments.order_by("created_at", "id"))
    for comment in comments:
        comment.author_name = author_name(comment.author_type, comment.agent_id, names)
    return comments


def collapse_repeated_errors(comments: list[TaskComment]) -> list[TaskComment]:
    """Identical consecutive error comments as one: the latest of them, with `repeat_count`
    and `first_created_at` (a run failing the same way 50 times reads "50 times, last at …").
    Every comment gets both attributes (1 and its own time when it stands alone)."""
    collapsed: list[TaskComment] = []
    for comment in comments:
        comment.repeat_count, comment.first_created_at = 1, comment.created_at
        previous = collapsed[-1] if collapsed else None
        if (
            previous is not None
            and comment.is_error
            and previous.is_error
            and comment.content == previous.content
        ):
            comment.repeat_count = previous.repeat_count + 1
            comment.first_created_at = previous.first_created_at
            collapsed[-1] = comment
        else:
            collapsed.append(comment)
    return collapsed


def logs_for_task(task: Task) -> list[TaskLog]:
    return list(task.logs.order_by("created_at", "id"))


# --- board ----------------------------------------------------------------------------------


@dataclass
class Column:
    status: str
    label: str
    total: int
    tasks: list[Task] = field(default_factory=list)
    show_all: bool = False

    @property
    def hidden(self) -> int:
        return max(0, self.total - len(self.tasks))


ERROR_TEXT_CHARS = 300


def with_error_state(queryset):
    """Annotate what a failing task's card and popup show: the start of its latest error comment
    (`last_error`) and whether a retry is queued (`retry_queued`)."""
    latest_error = (
        TaskComment.objects.errors()
        .filter(task_id=OuterRef("pk"))
        .order_by("-created_at", "-id")
        .values("content")[:1]
    )
    return queryset.annotate(
        last_error=Substr(Subquery(latest_error), 1, ERROR_TEXT_CHARS),
        retry_queued=Exists(TaskQueueItem.objects.queued().filter(task_id=OuterRef("pk"))),
    )


@dataclass
class ErrorState:
    """A task whose runs keep failing, in words for its card and popup."""

    failures: int
    headline: str  # the first line of the latest error
    retry_at: datetime | None = None  # when the next try may start (None: not waiting)
    retrying: bool = False  # a retry is queued or running
    running: bool = False


def error_state(task: Task) -> ErrorState | None:
    """None unless the task is Todo / In Progress and its last runs failed. Needs the
    `with_counts()` and `with_error_state()` annotations."""
    if not task.failure_streak or task.status not in RUNNABLE_STATUSES:
        return None
    text = (getattr(task, "last_error", None) or "").strip()
    headline = text.splitlines()[0].strip() if text else "The last run failed"
    running = bool(getattr(task, "is_processing", False))
    queued = bool(getattr(task, "retry_queued", False))
    retry_at = task.retry_not_before if queued and not running else None
    if retry_at is not None and retry_at <= timezone.now():
        retry_at = None
    return ErrorState(
        failures=task.failure_streak,
        headline=headline,
        retry_at=retry_at,
        retrying=queued or running,
        running=running,
    )


def _card_queryset():
    return with_error_state(Task.objects.with_counts().by_recent_update())


def running_runs(workspace_id: str) -> dict[str, AgentRun]:
    """The newest running agent run of each task of the workspace (what the agent does now)."""
    runs = AgentRun.objects.filter(
        workspace_id=workspace_id, task_id__isnull=False, status=RunStatus.RUNNING
    ).order_by("started_at")
    return {run.task_id: run for run in runs.only("id", "task_id", "agent_name", "current_action")}


def _attach_runs(tasks: list[Task], runs: dict[str, AgentRun]) -> None:
    for task in tasks:
        task.current_run = runs.get(task.id) if task.is_processing else None
        task.error_state = error_state(task)


def board_column(workspace, status: str, *, show_all: bool = False, runs=None) -> Column:
    total = Task.objects.filter(workspace=workspace, status=status).count()
    return _column(workspace, status, total, show_all=show_all, runs=runs)


def _column(workspace, status, total, *, show_all, runs) -> Column:
    queryset = _card_queryset().filter(workspace=workspace, status=status)
    if not show_all:
        queryset = queryset[:COLUMN_LIMIT]
    tasks = list(queryset)
    _attach_runs(tasks, runs if runs is not None else running_runs(workspace.id))
    return Column(status, TaskStatus(status).label, total, tasks, show_all)


def board(workspace, *, show_all: tuple[str, ...] = ()) -> dict:
    """The four columns (most recently updated first), in a fixed number of queries."""
    counts = dict(
        Task.objects.filter(workspace=workspace)
        .order_by()
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    runs = running_runs(workspace.id)
    columns = [
        _column(workspace, status, counts.get(status, 0), show_all=status in show_all, runs=runs)
        for status in TaskStatus.values
    ]
    return {"columns": columns, "total": sum(counts.values())}


# --- usage ----------------------------------------------------------------------------------


def usage_summary(runs) -> dict | None:
    """Tokens and cost of some agent runs, or None when no run reported any."""
    totals = usage_totals(runs)
    totals["tokens"] = totals["input_tokens"] + totals["output_tokens"]
    return totals if totals["tokens"] or totals["cost_usd"] else None


def workspace_usage(workspace, days: int = USAGE_DAYS) -> dict | None:
    since = timezone.now() - timedelta(days=days)
    return usage_summary(AgentRun.objects.filter(workspace=workspace, started_at__gte=since))


def task_usage(task: Task) -> dict | None:
    return usage_summary(AgentRun.objects.filter(task=task))


# --- task detail ----------------------------------------------------------------------------


def comments_for_detail(task: Task) -> list[TaskComment]:
    """Oldest first, with `author_name`; identical consecutive errors collapsed into one."""
    return collapse_repeated_errors(comments_for_task(task))


def task_for_detail(task_id: str) -> Task | None:
    tasks = with_error_state(Task.objects.with_counts().select_related("workspace"))
    return tasks.filter(id=task_id).first()


def current_run(task: Task) -> AgentRun | None:
    if not getattr(task, "is_processing", False):
        return None
    runs = AgentRun.objects.filter(task=task, status=RunStatus.RUNNING)
    return runs.order_by("-started_at").first()


# The popup's action buttons per status (SPECS "Task Actions").
def task_actions(task: Task) -> dict:
    moves = USER_MOVES.get(task.status, set())
    return {
        "cancel": task.status == TaskStatus.IN_PROGRESS,
        "to_review": TaskStatus.IN_REVIEW in moves,
        "to_todo": TaskStatus.TODO in moves,
        "to_done": TaskStatus.DONE in moves,
        # Same rule as task_prioritize_toggle: only runnable tasks gain a priority.
        "prioritize": task.status in RUNNABLE_STATUSES or task.is_priority,
        # Branch per task: merge or discard the task's branch once it waits for the user.
        "branch": bool(task.branch_name) and task.status in (TaskStatus.IN_REVIEW, TaskStatus.DONE),
    }


def _status_label(value: str) -> str:
    try:
        return TaskStatus(value).label
    except ValueError:
        return value or "?"


def _branch_texts(actor: str, meta: dict) -> dict[str, str]:
    """Branch per task's activity entries, by event type."""
    branch, base = meta.get("branch", ""), meta.get("base", "")
    code = meta.get("exit_code")
    return {
        "branch_created": f"{actor} made branch {branch} from {base}",
        "branch_committed": f"{actor} committed {str(meta.get('commit', ''))[:8]} on {branch}",
        "branch_merged": f"{actor} merged {branch} into {base} ({meta.get('how', '')})",
        "branch_discarded": f"{actor} discarded branch {branch}",
        "setup_ran": (
            f"Setup command `{meta.get('command', '')}` "
            + ("succeeded" if code == 0 else f"failed (exit code {code})")
        ),
    }


def activity_entries(task: Task) -> list[dict]:
    """The task's activity log in words, oldest first ("Reviewer finished: comment")."""
    names = agent_names(task.workspace_id)
    entries = []
    for log in logs_for_task(task):
        meta = log.metadata or {}
        actor = author_name(log.actor_type, log.actor_id, names)
        if log.actor_type == "agent":  # the name it had then, if the log recorded it
            actor = meta.get("agent_name") or actor
        text = {
            "task_created": f"{actor} created the task",
            "status_changed": f"{actor} moved to {_status_label(meta.get('new_status', ''))}",
            "comment_added": f"{actor} commented",
            "agent_started": f"{actor} started",
            "agent_finished": (
                f"{actor} finished: {meta.get('action_type', '').replace('_', ' ')}"
            ),
            "task_cancelled": f"{actor} cancelled the task",
            "task_prioritized": f"{actor} prioritized the task",
            "task_deprioritized": f"{actor} removed the priority",
            "retry_requested": f"{actor} retried the failing task now",
            "retries_stopped": f"{actor} stopped the retries",
            **_branch_texts(actor, meta),
        }.get(log.event_type, f"{actor}: {log.event_type.replace('_', ' ')}")
        entry = {"log": log, "text": text, "actor_type": log.actor_type}
        if log.event_type == "setup_ran":
            entry["output"] = meta.get("output") or "(no output)"
        entries.append(entry)
    return entries
