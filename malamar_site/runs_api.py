"""Agent runs: live activity (traces), tokens and cost."""

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Prefetch
from django.utils import timezone
from ninja import Router, Schema

from chats.models import Chat
from core.errors import NotFound, ValidationFailed
from core.lookups import get_or_404
from runner import changes as change_reads
from runner.models import AgentRun, TraceEvent
from runner.selectors import usage_totals
from tasks.models import Task
from workspaces.models import Workspace

router = Router(tags=["runs"])


class TraceOut(Schema):
    seq: int
    kind: str
    action_kind: str
    text: str
    detail: dict[str, Any]
    created_at: datetime


class RunOut(Schema):
    id: str
    task_id: str | None
    chat_id: str | None
    agent_id: str | None
    agent_name: str
    cli_type: str
    model: str  # reported by the CLI's stream, else the agent's setting ("": CLI default)
    status: str
    started_at: datetime
    ended_at: datetime | None
    stalled_at: datetime | None
    exit_code: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    current_action: str
    traces: list[TraceOut]


class RunList(Schema):
    runs: list[RunOut]


class UsageOut(Schema):
    days: int
    runs: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


def _runs(runs) -> dict:
    traces = Prefetch("traces", queryset=TraceEvent.objects.order_by("seq"))
    return {"runs": list(runs.order_by("started_at").prefetch_related(traces))}


@router.get("/tasks/{task_id}/runs", response=RunList)
def task_runs(request, task_id: str):
    task = get_or_404(Task, task_id, "Task")
    return _runs(AgentRun.objects.filter(task=task))


@router.get("/chats/{chat_id}/runs", response=RunList)
def chat_runs(request, chat_id: str):
    chat = get_or_404(Chat, chat_id, "Chat")
    return _runs(AgentRun.objects.filter(chat=chat))


@router.get("/workspaces/{workspace_id}/usage", response=UsageOut)
def workspace_usage(request, workspace_id: str, days: int = 30):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    since = timezone.now() - timedelta(days=max(1, min(days, 3650)))
    runs = AgentRun.objects.filter(workspace=workspace, started_at__gte=since)
    return {"days": days, **usage_totals(runs)}


@router.get("/tasks/{task_id}/usage", response=UsageOut)
def task_usage(request, task_id: str):
    task = get_or_404(Task, task_id, "Task")
    return {"days": 0, **usage_totals(AgentRun.objects.filter(task=task))}


# --- changes (snapshots of the working directory, DESIGN "Git snapshots") ----------------------


class ChangedFileOut(Schema):
    path: str
    old_path: str
    status: str  # added | modified | deleted | renamed
    binary: bool
    added: int
    removed: int


class ChangeRunOut(Schema):
    id: str
    number: int
    agent_name: str
    status: str
    files_changed: int | None
    lines_added: int | None
    lines_removed: int | None


class ChangesOut(Schema):
    task_id: str
    run_id: str | None  # None: the whole task, from its first snapshot to its latest
    working_directory: str
    branch: str
    problem: str  # why there is nothing to show ("" when the snapshots could be read)
    files_changed: int
    lines_added: int
    lines_removed: int
    files: list[ChangedFileOut]
    runs: list[ChangeRunOut]


class FileDiffOut(ChangedFileOut):
    diff: str  # the unified diff (git's), at most 1,000,000 characters
    truncated: bool


def _changes(task, run_id: str | None):
    try:
        return change_reads.task_changes(task, run_id or None)
    except change_reads.UnknownRun:
        raise NotFound("Run not found for this task") from None


def _changes_out(task, changes) -> dict:
    return {
        "task_id": task.id,
        "run_id": changes.run.id if changes.run else None,
        "working_directory": changes.working_directory,
        "branch": changes.branch,
        "problem": changes.problem,
        **changes.totals,
        "files": changes.files,
        "runs": changes.snapshot_runs,
    }


@router.get("/tasks/{task_id}/changes", response=ChangesOut)
def task_changes(request, task_id: str, run_id: str = ""):
    """What the task's agents changed in its working directory: the whole task, or one run."""
    task = get_or_404(Task, task_id, "Task")
    return _changes_out(task, _changes(task, run_id))


@router.get("/runs/{run_id}/changes", response=ChangesOut)
def run_changes(request, run_id: str):
    """What one agent run changed."""
    run = get_or_404(AgentRun.objects.filter(task__isnull=False), run_id, "Run")
    return _changes_out(run.task, _changes(run.task, run.id))


@router.get("/tasks/{task_id}/changes/file", response=FileDiffOut)
def task_change_file(request, task_id: str, path: str, run_id: str = ""):
    """One changed file with its unified diff (whole task, or one run)."""
    task = get_or_404(Task, task_id, "Task")
    changes = _changes(task, run_id)
    change = change_reads.find_file(changes, path)
    if change is None:
        raise ValidationFailed(f"{path!r} did not change in this task" + (" run" if run_id else ""))
    text, truncated = change_reads.file_patch_text(changes, change)
    return {**change.__dict__, "diff": text, "truncated": truncated}
