from datetime import datetime
from typing import Any, Literal

from django.db import transaction
from ninja import Router, Schema, Status
from pydantic import ConfigDict, Field

from core.actors import USER
from core.errors import NotFound, ValidationFailed
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
    merged_at: datetime | None = Field(
        description="When its branch reached its base (merged by Malamar, or found in it)."
    )
    merge_commit: str = Field(description="The base's commit after the merge ('' if none).")
    is_unmerged: bool = Field(
        description="Done with its branch not merged (finished without merging): it can still "
        "be merged (POST /api/tasks/{id}/merge)."
    )
    is_paused: bool = Field(
        description="Todo with no pass queued or running (imported work, stopped retries): "
        "POST /api/tasks/{id}/resume starts it."
    )
    checks_status: str = Field(
        description='The workspace\'s checks: "" (not run), "passed", "failed" (the agents '
        'are fixing it) or "failing" (In Review after the set number of failed rounds).'
    )
    checks_result: list[dict] = Field(
        description="The last round: [{name, command, status, exit_code, duration, run_id}]."
    )
    checks_at: datetime | None
    created_at: datetime
    updated_at: datetime


class MergeOut(Schema):
    how: str = Field(description='"fast-forward", "merge commit" or "already merged".')
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
    description_base: str | None = Field(
        None,
        description="The description your edit started from: if the task's description is no "
        "longer that text (another tab saved meanwhile), the save is refused with 409 "
        "DESCRIPTION_CHANGED and both texts (`current_description`, `your_description`).",
    )
    status: str | None = None
    merge: bool | None = Field(
        None,
        description='With status "done" on a task whose branch holds work its base lacks '
        "(Done means merged): true merges the branch into its base and finishes only if that "
        "worked (409 with the files otherwise); false finishes without merging and keeps the "
        "branch (the task reads unmerged). Without it such a move answers 409 "
        "MERGE_CHOICE_REQUIRED. `merge: true` goes with `status` alone.",
    )
    # Replaces the task's blockers (ids of tasks of the same workspace; [] = none).
    blocked_by: list[str] | None = None


class BlockerAdd(Schema):
    model_config = ConfigDict(extra="forbid")

    blocker_id: str


class TaskList(Schema):
    tasks: list[TaskOut]


class LineAnchorOut(Schema):
    path: str = Field(description="The file, as the Changes tab lists it.")
    line: int = Field(description="First line (1-based).")
    end_line: int = Field(description="Last line (inclusive).")
    side: Literal["new", "old"] = Field(
        description='"new": lines as the run left them; "old": as they were before the changes.'
    )
    run_id: str = Field(description="The run whose changes were shown ('' = the whole task's).")
    tree: str = Field(description="The snapshot (git tree) the comment was made on.")
    code: str = Field(description="The lines quoted, as they read then.")
    outdated: bool = Field(description="Later runs changed these lines.")


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
    verdict: Literal["", "approve", "request_changes", "comment"] = Field(
        description="The review verdict it was sent with ('' = an ordinary comment). "
        '"comment": a note the agents read on their next pass without starting one.'
    )
    line: LineAnchorOut | None = Field(description="A line comment's place in the changes.")
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_line(obj) -> dict | None:
        if not obj.anchor_path:
            return None
        return {
            "path": obj.anchor_path,
            "line": obj.anchor_start_line,
            "end_line": obj.anchor_end_line,
            "side": obj.anchor_side,
            "run_id": obj.anchor_run_id,
            "tree": obj.anchor_tree,
            "code": obj.anchor_code,
            "outdated": getattr(obj, "outdated", False),
        }


class CommentCreate(Schema):
    model_config = ConfigDict(extra="forbid")

    content: str


class CommentList(Schema):
    comments: list[CommentOut]


class LineCommentIn(Schema):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="A file the task's changes list (as the Changes tab shows it).")
    line: int = Field(description="The first line (1-based) on `side`.")
    end_line: int | None = Field(None, description="The last line (default: `line`).")
    side: Literal["new", "old"] = Field(
        "new",
        description='"new": lines as the runs left them; "old": lines as they were before '
        "(a removed line).",
    )
    body: str = Field(description="What you say about those lines (markdown).")
    run_id: str = Field(
        "", description="The run whose changes you looked at ('' = the whole task's)."
    )


class ReviewIn(Schema):
    model_config = ConfigDict(extra="forbid")

    verdict: Literal["approve", "request_changes", "comment"] = Field(
        description='"request_changes": post the comments and send the task back to the '
        'agents. "comment": a note they read on their next pass; the task stays In Review. '
        '"approve": Done (a branch task merges first, see `merge`).'
    )
    body: str = Field("", description="The review's comment (markdown; may be empty).")
    line_comments: list[LineCommentIn] = Field(
        [], description="Comments on lines of the task's changes (at most 100)."
    )
    merge: bool | None = Field(
        None,
        description="Approve on a task whose branch holds work its base lacks: true merges it "
        "and finishes only if the merge worked; false finishes without merging (branch kept). "
        "Without it: 409 MERGE_CHOICE_REQUIRED.",
    )


class MergeDone(Schema):
    how: str = Field(description='"fast-forward", "merge commit" or "already merged".')
    commit: str = Field(description="The base's commit after the merge.")
    message: str


class ReviewOut(Schema):
    verdict: str
    task: TaskOut
    comments: list[CommentOut]
    merge: MergeDone | None


class ResumedCount(Schema):
    resumed: int


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
    tasks = Task.objects.filter(workspace=workspace).with_counts().with_pause_state()
    tasks = tasks.by_recent_update()
    if status:
        tasks = tasks.filter(status=status)
    return {"tasks": selectors.attach_blockers(list(tasks))}


@router.post("/workspaces/{workspace_id}/tasks", response={201: TaskOut})
def create_task(request, workspace_id: str, payload: TaskCreate):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    task = services.task_create(workspace=workspace, **payload.model_dump())
    return Status(201, _task(task.id))


@router.delete("/workspaces/{workspace_id}/tasks/done", response=DeletedCount)
def delete_done_tasks(request, workspace_id: str, confirm: bool = False):
    """Delete the workspace's Done tasks; 409 UNMERGED_BRANCHES (naming them) when some were
    finished without merging their branch, unless `?confirm=true`."""
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return {"deleted": services.tasks_delete_done(workspace=workspace, confirm_unmerged=confirm)}


@router.get("/tasks/{task_id}", response=TaskOut)
def get_task(request, task_id: str):
    return _task(task_id)


@router.put("/tasks/{task_id}", response=TaskOut)
def update_task(request, task_id: str, payload: TaskUpdate):
    """Edit a task or move it. Moving a task whose branch holds unmerged work to Done needs
    `merge` (Done means merged); an edit of the description with `description_base` is refused
    (409 DESCRIPTION_CHANGED, both texts in the error) when another save came first."""
    task = get_or_404(Task, task_id, "Task")
    fields = payload.model_dump(exclude_none=True)
    blocked_by = fields.pop("blocked_by", None)
    merge = fields.pop("merge", None)
    if merge is not None:
        _check_merge_choice(fields, merge=merge, others=blocked_by is not None)
        fields.pop("status")
    if merge:  # git writes: outside any transaction, with nothing else to undo
        services.task_finish(task=task, merge=True, actor=USER)
        return _task(task_id)
    with transaction.atomic():  # a refused blocker leaves the other changes undone too
        if blocked_by is not None:
            services.task_blockers_set(task=task, blocker_ids=blocked_by, actor=USER)
        services.task_update(task=task, actor=USER, **fields)
        if merge is False:
            services.task_finish(task=task, merge=False, actor=USER)
    return _task(task_id)


def _check_merge_choice(fields: dict, *, merge: bool, others: bool) -> None:
    if fields.get("status") != "done":
        raise ValidationFailed('merge goes with status "done"', field="merge")
    if merge and (others or set(fields) != {"status"}):
        raise ValidationFailed(
            'merge: true goes with status "done" alone (send the other changes first)',
            field="merge",
        )


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
def delete_task(request, task_id: str, confirm: bool = False):
    """Delete a task. One whose branch holds work its base lacks answers 409
    UNMERGED_BRANCHES (naming the branch in `branches`) unless `?confirm=true`."""
    services.task_delete(task=get_or_404(Task, task_id, "Task"), confirm_unmerged=confirm)
    return Status(204, None)


@router.post("/tasks/{task_id}/resume", response=TaskOut)
def resume_task(request, task_id: str):
    """Start a paused task (Todo with no pass queued: imported work, stopped retries)."""
    return _act(task_id, services.task_resume)


@router.post("/workspaces/{workspace_id}/tasks/resume", response=ResumedCount)
def resume_tasks(request, workspace_id: str):
    """Start every paused task of the workspace (an import's tasks start paused)."""
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return {"resumed": services.tasks_resume(workspace=workspace)}


@router.post("/tasks/{task_id}/review", response=ReviewOut)
def review_task(request, task_id: str, payload: ReviewIn):
    """Review an In Review task: approve, request changes, or comment, with a comment and
    comments on lines of its changes (DESIGN "Review verdicts"). 400: bad input (a line that is
    not in the changes, an empty request for changes…). 409: the task is not In Review; a merge
    git refused (`conflicts`, `dirty`: nothing changed, the task stays In Review); Approve on
    a task with unmerged work without `merge` (MERGE_CHOICE_REQUIRED)."""
    task = get_or_404(Task.objects.select_related("workspace"), task_id, "Task")
    review = services.task_review_submit(
        task=task,
        verdict=payload.verdict,
        body=payload.body,
        line_comments=[item.model_dump() for item in payload.line_comments],
        merge=payload.merge,
        actor=USER,
    )
    for comment in review.comments:
        comment.author_name = USER.name
    merge = None
    if review.merge is not None:
        merge = {
            "how": review.merge.how,
            "commit": review.merge.commit,
            "message": services.merge_message(review.task, review.merge),
        }
    return {
        "verdict": review.verdict,
        "task": _task(task_id),
        "comments": review.comments,
        "merge": merge,
    }


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


@router.post("/tasks/{task_id}/checks/run", response=TaskOut)
def run_task_checks(request, task_id: str):
    """Run the workspace's checks on an In Review task by hand; the result lands in
    checks_status / checks_result (409 when it is not In Review, has no checks, or they run)."""
    return _act(task_id, services.task_checks_run)


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
    """Oldest first; line comments carry `line` (their place, and whether later runs changed
    those lines)."""
    return {"comments": selectors.comments_with_anchors(get_or_404(Task, task_id, "Task"))}


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
