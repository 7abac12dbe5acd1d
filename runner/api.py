"""Agent runs: live activity (traces), tokens and cost."""

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Prefetch
from django.utils import timezone
from ninja import Router, Schema

from chats.models import Chat
from core.lookups import get_or_404
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
