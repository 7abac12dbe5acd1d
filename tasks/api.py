from datetime import datetime
from typing import Any, Literal

from django.db import transaction
from ninja import Router, Schema, Status
from pydantic import ConfigDict, Field

from core.actors import USER
from core.errors import NotFound
from core.lookups import get_or_404
from tasks import selectors, services
from tasks.models import Task
from tasks.services import SUMMARY_MAX_LENGTH
from workspaces.models import Workspace

router = Router(tags=["tasks"])


class TaskOut(Schema):
    id: str
    workspace_id: str
    summary: str
    description: str
    status: str
    is_priority: bool
    comment_count: int
    is_processing: bool
    # Error back-off: consecutive failed runs, and when the next try may start.
    failure_streak: int
    retry_not_before: datetime | None
    # Dependencies: the tasks this one waits for, and whether it waits now (Todo with a
    # blocker that is not Done: not picked up).
    blocked_by: list[str]
    is_waiting: bool
    branch_name: str = Field(
        description="Branch per task: the task's branch (malamar/…); '' when it has none."
    )
    branch_base: str = Field(description="The branch it started from and merges into.")
    created_at: datetime
    updated_at: datetime


class MergeOut(Schema):
    how: str = Field(description='"fast-forward" or "merge commit".')
    message: str
    task: TaskOut


class MergeRefusal(Schema):
    code: Literal["CONFLICT"]
    message: str
    conflicts: list[str] = Field(description="Files that conflict.")
    dirty: list[str] = Field(description="Uncommitted files in the checkout of the base.")


class MergeRefused(Schema):
    error: MergeRefusal


class TaskCreate(Schema):
    model_config = ConfigDict(extra="forbid")

    summary: str = Field(max_length=SUMMARY_MAX_LENGTH)
    description: str = ""
    blocked_by: list[str] = []


class TaskUpdate(Schema):
    model_config = ConfigDict(extra="forbid")

    summary: str | None = Field(None, max_length=SUMMARY_MAX_LENGTH)
    description: str | None = None
    status: str | None = None
    # Replaces the task's blockers (ids of tasks of the same workspace; [] = none).
    blocked_by: list[str] | None = None


class BlockerAdd(Schema):
    model_config = ConfigDict(extra="forbid")

    blocker_id: str


class TaskList(Schema):
    tasks: list[TaskOut]


class CommentOut(Schema):
    id: str
    task_id: str
    workspace_id: str
    user_id: str | None
    agent_id: str | None
    author_name: str
    author_type: str
    kind: str
    content: str
    created_at: datetime
    updated_at: datetime


class CommentCreate(Schema):
    model_config = ConfigDict(extra="forbid")

    content: str


class CommentList(Schema):
    comments: list[CommentOut]


class LogOut(Schema):
    id: str
    task_id: str
    workspace_id: str
    event_type: str
    actor_type: str
    actor_id: str | None
    metadata: dict[str, Any]
    created_at: datetime


class LogList(Schema):
    logs: list[LogOut]


class DeletedCount(Schema):
    deleted: int


def _task(task_id: str) -> Task:
    task = selectors.task_with_counts(task_id)
    if task is None:
        raise NotFound("Task not found")
    return selectors.attach_blockers([task])[0]


def _act(task_id: str, service) -> Task:
    """Run a one-step task service (prioritize, cancel, retry…) and answer the task."""
    service(task=get_or_404(Task, task_id, "Task"))
    return _task(task_id)


@router.get("/workspaces/{workspace_id}/tasks", response=TaskList)
def list_tasks(request, workspace_id: str, status: str = ""):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    tasks = Task.objects.filter(workspace=workspace).with_counts().by_recent_update()
    if status:
        tasks = tasks.filter(status=status)
    return {"tasks": selectors.attach_blockers(list(tasks))}


@router.post("/workspaces/{workspace_id}/tasks", response={201: TaskOut})
def create_task(request, workspace_id: str, payload: TaskCreate):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    task = services.task_create(workspace=workspace, **payload.model_dump())
    return Status(201, _task(task.id))


@router.delete("/workspaces/{workspace_id}/tasks/done", response=DeletedCount)
def delete_done_tasks(request, workspace_id: str):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return {"deleted": services.tasks_delete_done(workspace=workspace)}


@router.get("/tasks/{task_id}", response=TaskOut)
def get_task(request, task_id: str):
    return _task(task_id)


@router.put("/tasks/{task_id}", response=TaskOut)
def update_task(request, task_id: str, payload: TaskUpdate):
    task = get_or_404(Task, task_id, "Task")
    fields = payload.model_dump(exclude_none=True)
    blocked_by = fields.pop("blocked_by", None)
    with transaction.atomic():  # a refused blocker leaves the other changes undone too
        if blocked_by is not None:
            services.task_blockers_set(task=task, blocker_ids=blocked_by, actor=USER)
        services.task_update(task=task, actor=USER, **fields)
    return _task(task_id)


@router.post("/tasks/{task_id}/blockers", response={201: TaskOut})
def add_blocker(request, task_id: str, payload: BlockerAdd):
    """Make the task wait for another task of its workspace (refused: cycles, other workspaces)."""
    task = get_or_404(Task, task_id, "Task")
    blocker = get_or_404(Task, payload.blocker_id, "Blocker task")
    services.task_dependency_add(task=task, blocker=blocker, actor=USER)
    return Status(201, _task(task_id))


@router.delete("/tasks/{task_id}/blockers/{blocker_id}", response=TaskOut)
def remove_blocker(request, task_id: str, blocker_id: str):
    task = get_or_404(Task, task_id, "Task")
    blocker = get_or_404(Task, blocker_id, "Blocker task")
    services.task_dependency_remove(task=task, blocker=blocker, actor=USER)
    return _task(task_id)


@router.delete("/tasks/{task_id}", response={204: None})
def delete_task(request, task_id: str):
    services.task_delete(task=get_or_404(Task, task_id, "Task"))
    return Status(204, None)


@router.post("/tasks/{task_id}/prioritize", response=TaskOut)
def prioritize_task(request, task_id: str):
    return _act(task_id, services.task_prioritize_toggle)


@router.post("/tasks/{task_id}/cancel", response=TaskOut)
def cancel_task(request, task_id: str):
    return _act(task_id, services.task_cancel)


@router.post("/tasks/{task_id}/retry", response=TaskOut)
def retry_task(request, task_id: str):
    """Run a failing task now instead of waiting out its error back-off."""
    return _act(task_id, services.task_retry_now)


@router.post("/tasks/{task_id}/stop-retrying", response=TaskOut)
def stop_retrying_task(request, task_id: str):
    """Stop retrying a failing task: it waits in Todo until a comment or a retry."""
    return _act(task_id, services.task_retries_stop)


@router.post("/tasks/{task_id}/merge", response={200: MergeOut, 409: MergeRefused})
def merge_task_branch(request, task_id: str):
    """Merge an In Review or Done task's branch into its base (fast-forward when possible); the
    task moves to Done. 409 when files conflict or the checkout of the base has uncommitted
    changes (listed): nothing is changed, and the task gets a system comment with the files."""
    task = get_or_404(Task, task_id, "Task")
    result = services.task_branch_merge(task=task)
    message = services.merge_message(task, result)
    if not result.merged:
        refusal = {
            "code": "CONFLICT",
            "message": message,
            "conflicts": list(result.conflicts),
            "dirty": list(result.dirty),
        }
        return Status(409, {"error": refusal})
    return {"how": result.how, "message": message, "task": _task(task_id)}


@router.post("/tasks/{task_id}/discard", response=TaskOut)
def discard_task_branch(request, task_id: str):
    """Remove an In Review or Done task's worktree and branch (its work is thrown away)."""
    return _act(task_id, services.task_branch_discard)


@router.get("/tasks/{task_id}/comments", response=CommentList)
def list_comments(request, task_id: str):
    return {"comments": selectors.comments_for_task(get_or_404(Task, task_id, "Task"))}


@router.post("/tasks/{task_id}/comments", response={201: CommentOut})
def create_comment(request, task_id: str, payload: CommentCreate):
    task = get_or_404(Task, task_id, "Task")
    comment = services.comment_create_and_send_around(
        task=task, content=payload.content, actor=USER
    )
    comment.author_name = USER.name
    return Status(201, comment)


@router.get("/tasks/{task_id}/logs", response=LogList)
def list_logs(request, task_id: str):
    return {"logs": selectors.logs_for_task(get_or_404(Task, task_id, "Task"))}
