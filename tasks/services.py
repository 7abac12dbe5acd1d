"""Every write to tasks, comments, activity logs and the task queue.

Each function is one transaction that also writes its activity log, queue item,
workspace `last_activity_at` bump and events, so a rule lives in exactly one place for the
API, the pages, the runner and chat actions.
"""

import dataclasses
import functools
import re
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from core import events
from core.actors import SYSTEM, USER, Actor, agent_actor
from core.compiled_queries import compiled_models, insert, update_row
from core.errors import Conflict, NotFound, ValidationFailed, require_text
from core.fields import max_length_of
from core.wake import wake_worker_on_commit
from notifications.cli_states import cli_broken_set, cli_limit_set
from notifications.services import notify_task_error, notify_task_in_review
from runner.models import QueueStatus
from runner.plans import Wait, cli_for_run
from runner.selectors import cli_states
from runner.services import agent_runs_lock
from tasks import anchors, branches, selectors
from tasks.models import (
    RUNNABLE_STATUSES,
    ChecksStatus,
    CommentKind,
    LineCommentDraft,
    LineSide,
    PassPhase,
    Task,
    TaskComment,
    TaskDependency,
    TaskLog,
    TaskQueueItem,
    TaskStatus,
    Verdict,
)
from tasks.moves import MOVES, user_refusal
from workspaces.models import Workspace
from workspaces.services import workspace_touch

CANCEL_MESSAGE = "Task cancelled by user"
# Retry back-off (DESIGN "Retries"): a task whose last n runs failed waits
# min(5 s · 2^(n-1), 10 min) before it runs again.
BACKOFF_BASE_SECONDS = 5
BACKOFF_MAX_SECONDS = 600

SUMMARY_MAX_LENGTH = max_length_of(Task, "summary")


def _clean_summary(summary) -> str:
    return require_text(summary, field="summary", label="Summary", max_length=SUMMARY_MAX_LENGTH)


def task_payload(task: Task, **extra) -> dict:
    return {
        "task_id": task.id,
        "task_summary": task.summary,
        "workspace_id": task.workspace_id,
        **extra,
    }


def log_add(*, task: Task, event_type: str, actor: Actor, metadata: dict | None = None) -> TaskLog:
    entry = _log_entry(task=task, event_type=event_type, actor=actor, metadata=metadata)
    insert([entry])
    return entry


def _log_entry(*, task: Task, event_type: str, actor: Actor, metadata: dict | None = None):
    return TaskLog(
        task=task,
        workspace_id=task.workspace_id,
        event_type=event_type,
        actor_type=actor.type,
        actor_id=actor.id,
        metadata=metadata or {},
        created_at=timezone.now(),
    )


def _touch(task: Task, now) -> None:
    task.updated_at = now
    Task.objects.filter(id=task.id).update(updated_at=now)
    workspace_touch(task.workspace_id, now=now)


def queue_item_ensure(*, task: Task) -> TaskQueueItem:
    """Create the task's `queued` item, or bump the one that exists (never two)."""
    item = TaskQueueItem.objects.queued().filter(task=task).first()
    if item is None:
        return _queue_item_add(task)
    # A person's "Run checks" that had not started becomes the pass it now is.
    now, phase = timezone.now(), "" if item.phase == PassPhase.MANUAL else item.phase
    TaskQueueItem.objects.filter(id=item.id).update(updated_at=now, phase=phase)
    item.updated_at, item.phase = now, phase
    wake_worker_on_commit(task_queued=True)
    return item


def _queue_item_add(task: Task) -> TaskQueueItem:
    """The task's `queued` item, where it has none (a new task: no query to look)."""
    now = timezone.now()
    item = TaskQueueItem(
        task=task,
        workspace_id=task.workspace_id,
        is_priority=task.is_priority,
        created_at=now,
        updated_at=now,
    )
    insert([item])  # (its id is made here, not by the database)
    wake_worker_on_commit(task_queued=True)
    return item


def _request_stop(task: Task, now) -> None:
    """Ask the worker to stop (and discard) the task's running pass, if any."""
    TaskQueueItem.objects.unstopped().filter(task=task).update(stop_requested_at=now)
    wake_worker_on_commit()


def _set_priority(task: Task, value: bool) -> None:
    task.is_priority = value
    Task.objects.filter(id=task.id).update(is_priority=value)
    TaskQueueItem.objects.queued().filter(task=task).update(is_priority=value)


def task_status_set(*, task: Task, status: str, actor: Actor) -> Task:
    """Move a task, enforcing who may make which move. Same status = no change."""
    if status not in TaskStatus.values:
        raise ValidationFailed(
            f"status must be one of {', '.join(TaskStatus.values)}", field="status"
        )
    old = task.status
    if status == old:
        return task
    allowed = MOVES[actor.type]
    if status not in allowed.get(old, set()):
        who = {"user": "You", "agent": "Agents", "system": "The runner"}[actor.type]
        why = user_refusal(old, status) if actor.is_user else ""
        raise Conflict(
            f"{who} cannot move a task from {TaskStatus(old).label} to {TaskStatus(status).label}"
            + (f": {why}" if why else ""),
            field="status",
        )
    if status != TaskStatus.DONE:
        _move(task, status, actor)
        return task
    with transaction.atomic():
        _finish_checked(task)  # Done means merged, or finished without merging by choice
        _move(task, status, actor)
    return task


def _move(task: Task, status: str, actor: Actor) -> None:
    """The write of a status move that task_status_set allowed (or a service decided)."""
    old = task.status
    now = timezone.now()
    with transaction.atomic(savepoint=False):  # validated above: nothing to roll back alone
        task.status, task.updated_at = status, now
        update_row(Task, task.id, status=status, updated_at=now)
        if status not in RUNNABLE_STATUSES and task.is_priority:
            _set_priority(task, False)
        if old == TaskStatus.IN_PROGRESS and actor.type != "system":
            _request_stop(task, now)
        if status == TaskStatus.TODO and actor.is_user:
            queue_item_ensure(task=task)
        if status == TaskStatus.DONE:
            task.retry_not_before = None
            Task.objects.filter(id=task.id).update(failure_streak=0, retry_not_before=None)
            _release_dependents(task, now)
        elif old == TaskStatus.DONE:
            _reblock_dependents(task)
            if task.merged_at is not None:
                _branch_forget(task)
        log_add(
            task=task,
            event_type="status_changed",
            actor=actor,
            metadata={"old_status": old, "new_status": status},
        )
        workspace_touch(task.workspace_id, now=now)
        events.publish(
            "task.status_changed",
            task_payload(task, old_status=old, new_status=status, actor_type=actor.type),
        )


def _branch_forget(task: Task) -> None:
    """A merged task opened again starts a new branch from its base (which holds the merged
    work) when it next runs."""
    task.branch_name = task.branch_base = task.merge_commit = ""
    task.merged_at = None
    Task.objects.filter(id=task.id).update(
        branch_name="", branch_base="", merge_commit="", merged_at=None
    )


def task_create(
    *,
    workspace: Workspace,
    summary: str,
    description: str = "",
    blocked_by=(),
    actor: Actor = USER,
) -> Task:
    """A new Todo task, queued at once; `blocked_by` (task ids of the same workspace) makes it
    wait until each of those is Done; `actor`: who created it (the user, or an agent via MCP)."""
    summary = _clean_summary(summary)
    now = timezone.now()
    with transaction.atomic():
        task = Task(workspace=workspace, summary=summary, description=description or "")
        blockers = _clean_blockers(task, blocked_by)  # a new task has no dependents: no cycle
        task.created_at = task.updated_at = now
        insert([task])
        _queue_item_add(task)
        log_add(task=task, event_type="task_created", actor=actor)
        _links_add(task, blockers, actor, now)
        workspace_touch(workspace.id, now=now)
        events.publish("task.created", task_payload(task, status=task.status))
    return task


class DescriptionChanged(Conflict):
    """A description save made from a text that is no longer the task's (another tab, the
    Malamar agent): refused, with both texts, so nothing is lost."""

    code = "DESCRIPTION_CHANGED"


def task_update(
    *,
    task: Task,
    summary: str | None = None,
    description: str | None = None,
    status: str | None = None,
    actor: Actor = USER,
    description_base: str | None = None,
) -> Task:
    """Edit the summary or description, or move the task. `description_base`: the text the
    editor started from; when the task's description is no longer that, the save is refused
    (DescriptionChanged, with the current text and the one sent) instead of overwriting."""
    with transaction.atomic():
        changes = {}
        if summary is not None:
            changes["summary"] = _clean_summary(summary)
        if description is not None:
            changes["description"] = description
            if description_base is not None:
                _description_unchanged_since(task, description_base, description)
        if changes:
            for name, value in changes.items():
                setattr(task, name, value)
            Task.objects.filter(id=task.id).update(**changes)
            _touch(task, timezone.now())
            events.publish("task.updated", task_payload(task))
        if status is not None:
            task_status_set(task=task, status=status, actor=actor)
    return task


def _description_unchanged_since(task: Task, base: str, yours: str) -> None:
    """Inside the save's transaction: the stored description is still `base` (locked until the
    save commits, so two saves from the same text cannot both pass)."""
    current = (
        Task.objects.select_for_update()
        .filter(id=task.id)
        .values_list("description", flat=True)
        .first()
    )
    if current is not None and current != base and current != yours:
        raise DescriptionChanged(
            "The description was changed meanwhile (in another tab or by an agent): your "
            "text was not saved. Both texts are kept here; merge them and save again.",
            field="description",
            details={"current_description": current, "your_description": yours},
        )


def comment_create(
    *, task: Task, content: str, actor: Actor, kind: str | None = None
) -> TaskComment:
    """A comment, and only that: its row, activity log, the task's and workspace's activity and
    `task.comment_added`. It sends nothing around (comment_create_and_send_around does, for a
    comment that asks the agents; a pass's end counts its own agents' comments). `kind` is the
    author's type, or "error" for a system comment that reports a failed run."""
    comment, entry = _comment_entry(task=task, content=content, actor=actor, kind=kind)
    _comment_save(task=task, comment=comment, entry=entry, actor=actor)
    return comment


def _comment_entry(
    *, task: Task, content: str, actor: Actor, kind: str | None = None
) -> tuple[TaskComment, TaskLog]:
    """A comment and its comment_added log, validated, not saved yet."""
    content = require_text(content, field="content", label="Comment")
    kind = kind or actor.type
    system_kinds = (CommentKind.ERROR, CommentKind.CHECKS)
    if kind != actor.type and not (kind in system_kinds and actor.type == "system"):
        raise ValidationFailed(f"A {actor.type} comment cannot be of kind {kind!r}", field="kind")
    now = timezone.now()
    comment = TaskComment(
        task=task,
        workspace_id=task.workspace_id,
        user_id=actor.id if actor.is_user else None,
        agent_id=actor.id if actor.is_agent else None,
        content=content,
        kind=kind,
        created_at=now,
        updated_at=now,
    )
    return comment, _log_entry(task=task, event_type="comment_added", actor=actor)


def _comment_save(*, task: Task, comment: TaskComment, entry: TaskLog, actor: Actor) -> None:
    with transaction.atomic(savepoint=False):  # validated before: nothing to roll back alone
        comment.save(force_insert=True)
        insert([entry])
        _touch(task, timezone.now())  # (later than any write the comment was built before)
        events.publish(
            "task.comment_added",
            task_payload(
                task, comment_id=comment.id, author_name=actor.name, author_type=actor.type
            ),
        )


def comment_create_and_send_around(*, task: Task, content: str, actor: Actor) -> TaskComment:
    """A comment for the agents (a person's, or an agent's through Malamar's MCP server), which
    sends the task around again (DESIGN "No lost comment"): an In Review task goes back to
    Todo whoever wrote it, the next pass is queued (unless the task is Done), and a person's
    comment ends the error back-off. The task's status is read again under its row lock, so a
    pass that ends at this moment either sees the comment or is sent back by it."""
    with transaction.atomic():
        _lock_current_status(task)
        comment = comment_create(task=task, content=content, actor=actor)
        _send_around(task, actor)
    return comment


def _lock_current_status(task: Task) -> None:
    """Inside a transaction: the task's row locked (PostgreSQL; SQLite's write transaction
    already excludes every other writer) and `task.status` as committed now."""
    status = (
        Task.objects.select_for_update(no_key=True)
        .filter(id=task.id)
        .values_list("status", flat=True)
        .first()
    )
    if status is None:
        raise NotFound("Task not found")
    task.status = status


def _send_around(task: Task, actor: Actor) -> None:
    if task.status == TaskStatus.IN_REVIEW:
        _move(task, TaskStatus.TODO, actor)  # whoever commented: the agents must read it
    if actor.is_user and task.retry_not_before:
        # The user stepped in: don't make them wait out the error back-off.
        task.retry_not_before = None
        Task.objects.filter(id=task.id).update(retry_not_before=None)
    if task.status != TaskStatus.DONE:
        queue_item_ensure(task=task)


def comments_delivered(*, comments) -> None:
    """An agent answered an input that contained these comments: they no longer keep the task
    going by themselves. Part of the step's finish; no statement when all were delivered."""
    waiting = [comment for comment in comments if comment.delivered_at is None]
    if not waiting:
        return
    now = timezone.now()
    TaskComment.objects.filter(id__in=[c.id for c in waiting], delivered_at__isnull=True).update(
        delivered_at=now
    )
    for comment in waiting:
        comment.delivered_at = now


def retry_delay(failures: int) -> timedelta:
    """Back-off before a task whose last `failures` runs failed may run again."""
    seconds = min(BACKOFF_BASE_SECONDS * 2 ** max(failures - 1, 0), BACKOFF_MAX_SECONDS)
    return timedelta(seconds=seconds)


def task_run_succeeded(*, task: Task) -> None:
    """The task's failure streak (and the error state shown on its card) ends: the agent that
    failed answered, or a whole pass ran through. `task` is read in the caller's transaction:
    a task without a streak costs no write."""
    if not task.failure_streak and task.retry_not_before is None:
        return
    with transaction.atomic(savepoint=False):
        cleared = (
            Task.objects.filter(id=task.id)
            .filter(Q(failure_streak__gt=0) | Q(retry_not_before__isnull=False))
            .update(failure_streak=0, retry_not_before=None)
        )
        task.failure_streak, task.retry_not_before = 0, None
        if cleared:
            events.publish("task.updated", task_payload(task))


def task_agent_started_log(*, task: Task, actor: Actor) -> TaskLog:
    """The agent_started log of a run about to start, not saved yet: the agent's input shows
    it, and task_agent_started saves this same row once the CLI runs."""
    return _log_entry(
        task=task, event_type="agent_started", actor=actor, metadata={"agent_name": actor.name}
    )


def task_agent_started(
    *, task: Task, actor: Actor, run_id: str, entry: TaskLog | None = None
) -> TaskLog:
    """An agent's CLI runs for the task (the run step's start): its activity log (`entry`, from
    task_agent_started_log, or a new one) and `agent.execution_started`. Returns the log row."""
    entry = entry or task_agent_started_log(task=task, actor=actor)
    insert([entry])
    events.publish(
        "agent.execution_started",
        task_payload(task, agent_id=actor.id, agent_name=actor.name, run_id=run_id),
    )
    return entry


def task_agent_finished(
    *,
    task: Task,
    actor: Actor,
    action_type: str,
    touch_workspace: bool = True,
    entry: TaskLog | None = None,
) -> TaskLog | None:
    """An agent's run ended ("error" when it failed, "limited" or "waiting" when its CLI ran out
    of quota or could not run: the error comment or the wait says the rest): its activity log
    (`entry` when it was built before: StepRows), the workspace's activity (unless the caller
    bumped it moments ago) and `agent.execution_finished`."""
    if action_type not in ("error", "waiting", "limited"):
        entry = entry or _finished_entry(task, actor, action_type)
        insert([entry])
        if touch_workspace:
            workspace_touch(task.workspace_id)
    else:
        entry = None
    events.publish(
        "agent.execution_finished",
        task_payload(task, agent_id=actor.id, agent_name=actor.name, action_type=action_type),
    )
    return entry


def task_agent_finished_log(*, task: Task, actor: Actor) -> TaskLog:
    """An agent_finished log made before the agent answers (as its run works, for the next
    agent's input: worker.pipeline.InputAhead), not saved: task_step_rows stamps it with the
    answer's action and the time."""
    return _finished_entry(task, actor, "")


def _finished_entry(task: Task, actor: Actor, action_type: str) -> TaskLog:
    metadata = {"agent_name": actor.name, "action_type": action_type}
    return _log_entry(task=task, event_type="agent_finished", actor=actor, metadata=metadata)


# --- a task pass: its rules, once (DESIGN "Retries", "No lost comment", "One run pipeline") ---
#
# The worker orchestrates a pass (worker/pipeline.py): it claims the item, runs each
# agent's CLI and calls these in its transactions. When does a task reach In Review? Only in
# `_to_review`, from an agent's in_review answer (task_step_answered) or a pass in which
# nobody commented (task_pass_end), and never while a comment waits for the agents. What
# happens when a run fails? task_pass_failed.


def _pass_begin_rows(task_id, workspace_id):
    """task_pass_begin's one read (its SQL compiled once: building it cost more than running
    it, at every pickup)."""
    return (
        Task.objects.select_for_update(no_key=True, of=("self",))
        .select_related("workspace")
        .filter(Q(id=task_id) | Q(workspace_id=workspace_id, status=TaskStatus.IN_PROGRESS))
    )


def task_pass_begin(*, item: TaskQueueItem) -> tuple[Task, bool] | None:
    """A claimed pass begins: the task → In Progress, the workspace's other In Progress tasks
    back to Todo (queued). Returns (task, whether it moved); None when the task is gone or
    waits for the user (the item is then finished). One read: the task together with the
    workspace's In Progress tasks. Only the task rows are locked, and not against key reads:
    locking the workspace row too (select_related) deadlocked on PostgreSQL with a parallel
    pass that held its task row and inserted a row referencing the workspace (CI, parallel
    tasks in one workspace). On SQLite it joins the claim's transaction (worker.pickup),
    without a savepoint."""
    with transaction.atomic(savepoint=False), events.batched():
        rows = compiled_models(
            ("task_pass_begin",),
            _pass_begin_rows,
            task_id=item.task_id,
            workspace_id=item.workspace_id,
        )
        task = next((row for row in rows if row.id == item.task_id), None)
        if task is None:
            return None
        if task.status not in RUNNABLE_STATUSES:
            TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)
            return None
        # Parallel tasks (branch per task) keep running; a task that waits goes back to Todo.
        others = [row for row in rows if row.id != task.id]
        running = set()
        if others:
            running = set(
                TaskQueueItem.objects.filter(
                    task_id__in=[other.id for other in others], status=QueueStatus.IN_PROGRESS
                ).values_list("task_id", flat=True)
            )
        for other in others:
            if other.id not in running:
                task_status_set(task=other, status=TaskStatus.TODO, actor=SYSTEM)
                queue_item_ensure(task=other)
        moved = task.status == TaskStatus.TODO
        if moved:
            task_status_set(task=task, status=TaskStatus.IN_PROGRESS, actor=SYSTEM)
    return task, moved


@dataclass
class StepRows:
    """The rows an agent's answer adds to its task (its branch commit's log, its comments with
    their logs, its agent_finished log), built before the step's finish writes them: the next
    agent may start first, with an input that shows them (worker.pipeline's early go)."""

    commit_log: TaskLog | None
    comments: list[tuple[TaskComment, TaskLog]]
    finished: TaskLog

    def shown(self) -> tuple[list[TaskComment], list[TaskLog]]:
        """(comments, logs) in the order the finish writes them."""
        logs = [entry for _comment, entry in self.comments]
        if self.commit_log is not None:
            logs.insert(0, self.commit_log)
        return [comment for comment, _entry in self.comments], [*logs, self.finished]


def task_step_rows(
    *, task: Task, agent, answer, commit: str | None = None, finished: TaskLog | None = None
) -> StepRows:
    """What task_step_answered (and task_branch_commit_log for `commit`) will write for this
    answer, not saved yet; `finished`: its agent_finished log, made ahead
    (task_agent_finished_log), stamped now. Raises ValidationFailed for a comment it would
    refuse."""
    actor = agent_actor(agent)
    commit_log = _commit_entry(task, actor, commit) if commit else None
    comments = [_comment_entry(task=task, content=text, actor=actor) for text in answer.comments]
    if finished is None:
        finished = _finished_entry(task, actor, answer.action_type)
    else:
        finished.metadata["action_type"] = answer.action_type
        finished.created_at = timezone.now()
    return StepRows(commit_log, comments, finished)


def task_step_answered(
    *,
    task: Task,
    item: TaskQueueItem,
    agent,
    answer,
    pass_started,
    read: list[TaskComment],
    retried: bool,
    last_step: bool,
    settings: dict | None = None,
    touch_workspace: bool = True,
    rows: StepRows | None = None,
) -> tuple[TaskLog | None, bool]:
    """An agent answered (runner.schemas.TaskOutcome): the comments its input contained
    (`read`) are delivered, its comments written, and the task asks for review when it said so
    and no comment waits for the agents (one that came while it worked: the agents go around
    again instead, from the first). `retried`: this agent's run had failed, so the failure
    streak ends; `last_step`: no agent comes after it, so the pass ends; `rows`: what it writes,
    built before (task_step_rows). Inside the step's finish transaction. Returns (its
    agent_finished log, whether the pass ended)."""
    actor = agent_actor(agent)
    rows = rows or task_step_rows(task=task, agent=agent, answer=answer)
    comments_delivered(comments=read)
    if retried:
        task_run_succeeded(task=task)
    review = answer.in_review and not task.comments.undelivered().exists()
    for comment, entry in rows.comments:
        _comment_save(task=task, comment=comment, entry=entry, actor=actor)
    finished = task_agent_finished(
        task=task,
        actor=actor,
        action_type=answer.action_type,
        touch_workspace=touch_workspace,
        entry=rows.finished,
    )
    if review:
        _review_or_checks(task, item, actor, settings)
        return finished, True
    if answer.in_review:  # asked too soon: a comment arrived after its input was written
        log_add(
            task=task,
            event_type="review_postponed",
            actor=actor,
            metadata={"agent_name": agent.name},
        )
        _next_pass(task, item)
        return finished, True
    if last_step:
        task_pass_end(task=task, item=item, pass_started=pass_started, settings=settings)
        return finished, True
    return finished, False


def task_pass_continues_at(*, item: TaskQueueItem, agent, process: dict | None = None) -> None:
    """A step's finish with another agent next: the pass goes on at that agent if its worker
    dies before that agent's process is recorded (whose record says it again). Without it a
    worker killed between the two resumed at the agent that had just answered: a paid run
    again. `process`: that agent's process, made ready at its gate while this step's agent
    worked (pid, pgid, process_started_at), recorded here before its go, or as it already runs
    (its early go: it was the item's next process, recorded by this step's start, until now).
    Inside the step's finish transaction."""
    nothing = {"next_pid": None, "next_pgid": None, "next_process_started_at": None}
    TaskQueueItem.objects.continue_at(item, resume_agent_id=agent.id, **nothing, **(process or {}))


def task_pass_end(*, task: Task, item: TaskQueueItem, pass_started, settings=None) -> None:
    """Every agent had its turn. A pass in which somebody commented (or that left a comment no
    agent has read) makes the agents go around again, from the first; one where all skipped
    puts the task In Review. Either way the failure streak ends: the whole pass ran."""
    task_run_succeeded(task=task)
    if _comments_keep_going(task, pass_started):
        _next_pass(task, item)
        return
    _review_or_checks(task, item, SYSTEM, settings)


def _comments_keep_going(task: Task, pass_started) -> bool:
    """A person's or an agent's comment written during the pass, or one no agent has read (a
    review note neither: it waits for the next pass without starting one)."""
    since = Q(created_at__gte=pass_started) if pass_started else Q()
    comments = task.comments.keeping_going()
    return comments.filter(since | Q(delivered_at__isnull=True)).exists()


def _next_pass(task: Task, item: TaskQueueItem) -> None:
    TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)
    queue_item_ensure(task=task)


def _to_review(task: Task, actor: Actor, settings: dict | None, *, note: str = "") -> None:
    """An agent or the system (never the user) puts the task In Review: the only place, with
    its one notification (quoting `note`, else the agents' last comment)."""
    task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=actor)
    last = note or functools.partial(selectors.last_agent_comment, task)  # read if needed
    notify_task_in_review(task=task, last_comment=last, settings=settings)


def _review_or_checks(task: Task, item: TaskQueueItem, actor: Actor, settings) -> None:
    """The pass would put the task In Review. With checks in its workspace they run first
    (DESIGN "Checks"): the pass stays in progress in its checks phase, which the worker runs
    next (and a restart runs again); tasks_checks_ended decides. Without, In Review now."""
    if not task.workspace.checks:
        _to_review(task, actor, settings)
        TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)
        return
    item.phase, item.resume_agent_id = PassPhase.CHECKS, None
    TaskQueueItem.objects.owned(item).update(phase=PassPhase.CHECKS, resume_agent_id=None)
    names = [check.get("name") for check in task.workspace.checks]
    log_add(task=task, event_type="checks_started", actor=SYSTEM, metadata={"checks": names})
    events.publish("task.updated", task_payload(task))


# --- checks (issue 30; DESIGN "Checks") -------------------------------------------------------

CHECKS_NAME = "Checks"


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in `text` (output may hold fences)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def checks_failure_text(failure: dict) -> str:
    """The "Checks" comment of a failed check: which, how, and the end of its output."""
    name, command = failure["name"], failure["command"]
    if failure.get("timed_out"):
        minutes = failure.get("timeout_minutes")
        head = f'Check "{name}" timed out after {minutes:g} min (killed)'
    elif failure.get("start_error"):
        head = f'Check "{name}" could not start: {failure["start_error"]}'
    else:
        head = f'Check "{name}" failed (exit code {failure.get("exit_code")})'
    lines = [f"**{head}**", "", f"Command: `{command}`", ""]
    tail = failure.get("tail") or ""
    if tail:
        shown = failure.get("tail_lines") or len(tail.splitlines())
        link = f"[full output](/runs/{failure['run_id']}/output)" if failure.get("run_id") else ""
        lines += [f"The last {shown} lines of its output{f' ({link})' if link else ''}:", ""]
        fence = _fence(tail)
        lines += [f"{fence}text", tail.rstrip("\n"), fence, ""]
    lines.append("Fix the cause so that this check passes; the checks run again at the end.")
    return "\n".join(lines)


def _checks_by_hand_ended(task: Task, item, results: list[dict], failure, now) -> None:
    """A person's "Run checks" ended: its result and badge, nothing else (no comment, no
    move: the person reads the result and decides)."""
    status = ChecksStatus.PASSED if failure is None else ChecksStatus.FAILING
    _checks_record(task, checks_status=status, checks_result=results, checks_at=now)
    metadata = {"passed": failure is None, "name": (failure or {}).get("name")}
    log_add(task=task, event_type="checks_run_by_hand", actor=SYSTEM, metadata=metadata)
    events.publish("task.updated", task_payload(task))
    TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)


def task_checks_run(*, task: Task, actor: Actor = USER) -> Task:
    """A person runs the workspace's checks on an In Review task by hand ("Run checks"): one
    pass of the checks only, queued for the worker; the result shows on the task."""
    with transaction.atomic():
        _lock_current_status(task)
        if task.status != TaskStatus.IN_REVIEW:
            raise Conflict("Checks run by hand on an In Review task", field="status")
        if not task.workspace.checks:
            raise Conflict("This workspace has no checks: add them in its settings")
        if (
            TaskQueueItem.objects.filter(task=task)
            .exclude(status__in=[QueueStatus.COMPLETED, QueueStatus.FAILED])
            .exists()
        ):
            raise Conflict("The checks are already running for this task")
        now = timezone.now()
        TaskQueueItem.objects.create(
            task=task,
            workspace_id=task.workspace_id,
            phase=PassPhase.MANUAL,
            created_at=now,
            updated_at=now,
        )
        log_add(task=task, event_type="checks_requested", actor=actor)
        _touch(task, now)
        events.publish("task.updated", task_payload(task))
        wake_worker_on_commit()
    return task


def task_check_started(*, task: Task, name: str) -> None:
    """One check's command runs for the task (inside its start transaction): open boards and
    popups show it working, as they do an agent's run."""
    events.publish("agent.execution_started", task_payload(task, agent_id=None, agent_name=name))


def _checks_record(task: Task, **fields) -> None:
    for name, value in fields.items():
        setattr(task, name, value)
    Task.objects.filter(id=task.id).update(**fields)


def task_checks_ended(
    *, task: Task, item: TaskQueueItem, results: list[dict], failure: dict | None, settings=None
) -> None:
    """A round of the workspace's checks ended (the pass's checks phase; inside its finish
    transaction). `results`: each check run ({name, command, status, exit_code, duration,
    run_id}), in order, up to the first failure; `failure`: that one with its output's tail.
    All passed: In Review, "Checks passed". One failed: a comment by "Checks" (it keeps the
    task going: the agents read it) and the agents go around again from the first; after the
    workspace's attempts in a row, In Review anyway marked "Checks failing", one notification."""
    now = timezone.now()
    summary = [{"name": r["name"], "duration": r.get("duration")} for r in results]
    if item.phase == PassPhase.MANUAL:
        _checks_by_hand_ended(task, item, results, failure, now)
        return
    if failure is None and task.comments.undelivered().exists():
        # A comment came while the checks ran (DESIGN "No lost comment"): the agents first.
        _checks_record(
            task, checks_status=ChecksStatus.PASSED, checks_result=results, checks_at=now
        )
        _next_pass(task, item)
        return
    if failure is None:
        _checks_record(
            task,
            checks_status=ChecksStatus.PASSED,
            checks_failed_rounds=0,
            checks_result=results,
            checks_at=now,
        )
        log_add(task=task, event_type="checks_passed", actor=SYSTEM, metadata={"checks": summary})
        _to_review(task, SYSTEM, settings)
        TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)
        return
    rounds = task.checks_failed_rounds + 1
    text = checks_failure_text(failure)
    comment_create(task=task, content=text, actor=SYSTEM, kind=CommentKind.CHECKS)
    metadata = {"name": failure["name"], "rounds": rounds, "run_id": failure.get("run_id")}
    if rounds >= task.workspace.checks_attempts:
        _checks_record(
            task,
            checks_status=ChecksStatus.FAILING,
            checks_failed_rounds=0,
            checks_result=results,
            checks_at=now,
        )
        log_add(task=task, event_type="checks_failing", actor=SYSTEM, metadata=metadata)
        note = f"Checks failing after {rounds} rounds: the agents could not make them pass.\n\n"
        _to_review(task, SYSTEM, settings, note=note + text)
        TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)
        return
    _checks_record(
        task,
        checks_status=ChecksStatus.FAILED,
        checks_failed_rounds=rounds,
        checks_result=results,
        checks_at=now,
    )
    log_add(task=task, event_type="checks_failed", actor=SYSTEM, metadata=metadata)
    _next_pass(task, item)


def task_pass_failed(
    *,
    task: Task,
    item: TaskQueueItem,
    agent=None,
    message: str,
    pass_started=None,
    settings: dict | None = None,
    cli: str = "",
    cannot_run: str | None = None,
) -> None:
    """A run of the pass failed (or the pass could not run an agent: no worktree, a failed
    setup, a bug): the one failure rule (DESIGN "Retries").

    `cannot_run`: the CLI (`cli`, a health key) cannot run at all: it is marked broken with
    why (one notification), and the pass waits for it at this agent (or runs on the agent's
    fallback CLI at once), no error comment, no back-off, no streak: a timer would only fail
    again. Any other failure: one more failure in the streak, the back-off before the next
    try, the error comment (the next input shows it), `task.error_occurred`, one notification
    per streak, and the pass continues at the agent that failed (`agent`; None: from the
    first) once the back-off is over: the agents before it are not run again."""
    if cannot_run and agent is not None:
        cli_broken_set(cli_type=cli, reason=cannot_run)
        task_agent_finished(task=task, actor=agent_actor(agent), action_type="waiting")
        _wait_for_cli(task, item, agent, pass_started, reason=cannot_run)
        return
    now = timezone.now()
    failures = (
        Task.objects.filter(id=task.id).values_list("failure_streak", flat=True).first() or 0
    ) + 1
    task.failure_streak = failures
    task.retry_not_before = now + retry_delay(failures)
    Task.objects.filter(id=task.id).update(
        failure_streak=failures, retry_not_before=task.retry_not_before
    )
    comment_create(task=task, content=message, actor=SYSTEM, kind=CommentKind.ERROR)
    extra = {"agent_name": agent.name} if agent is not None else {}
    events.publish(
        "task.error_occurred",
        task_payload(
            task,
            error_message=message,
            failure_streak=failures,
            retry_not_before=task.retry_not_before.isoformat(),
            **extra,
        ),
    )
    if agent is not None:
        task_agent_finished(task=task, actor=agent_actor(agent), action_type="error")
    TaskQueueItem.objects.finish(item, QueueStatus.FAILED)
    TaskQueueItem.objects.queued().filter(task_id=task.id).delete()  # this pass continues
    TaskQueueItem.objects.create(
        task=task,
        workspace_id=task.workspace_id,
        is_priority=task.is_priority,
        resume_agent_id=agent.id if agent is not None else None,
        pass_started_at=pass_started if agent is not None else None,
        created_at=now,
        updated_at=now,
    )
    notify_task_error(task=task, message=message, failure_streak=failures, settings=settings)


def _wait_for_cli(task: Task, item: TaskQueueItem, agent, pass_started, *, reason="") -> None:
    """The agent's CLI may not run now (out of quota, or broken): the pass waits for it at this
    agent, or, when the agent's fallback CLI may run, goes on at once on that one."""
    states = cli_states()
    choice = cli_for_run(agent, limited=states.limited, broken=states.broken)
    waits_for = choice.cli if isinstance(choice, Wait) else ""
    task_pass_pause(
        task=task, item=item, agent=agent, cli_type=waits_for, pass_started=pass_started
    )
    if waits_for and reason:
        metadata = {"agent_name": agent.name, "cli": waits_for, "reason": reason}
        log_add(task=task, event_type="waits_for_cli", actor=SYSTEM, metadata=metadata)


def task_pass_limited(
    *, task: Task, item: TaskQueueItem, agent, cli: str, limit, pass_started
) -> None:
    """The agent's run ended on its CLI's usage limit (DESIGN "Usage limits"): not an error (no
    comment, no email) and the end of a failure streak (the CLI started and answered: its card
    says it waits for the CLI, not "failed, retry pending"). The CLI is limited (one
    notification for all waiting work) and the pass waits for it at this agent, or goes on
    at once on the agent's fallback CLI."""
    cli_limit_set(cli_type=cli, limit=limit)
    task_run_succeeded(task=task)
    task_agent_finished(task=task, actor=agent_actor(agent), action_type="limited")
    _wait_for_cli(task, item, agent, pass_started)


def task_pass_pause(*, task: Task, item, agent, cli_type: str, pass_started) -> None:
    """A pass waits for `cli_type` ("" = it runs again at once, on the agent's fallback CLI)
    and continues at `agent` with the same pass start. A newer item of the same task (queued
    by a comment during this pass) gives way: this pass's end counts that comment."""
    TaskQueueItem.objects.queued().filter(task_id=task.id).delete()
    TaskQueueItem.objects.pause(
        item, cli_type=cli_type, resume_agent_id=agent.id, pass_started_at=pass_started
    )
    payload = task_payload(task, agent_id=agent.id, agent_name=agent.name)
    events.publish("task.updated", {**payload, "waiting_for_cli": cli_type})


def task_pass_interrupted(*, item: TaskQueueItem, stopped: bool) -> bool:
    """After a crash or a restart: the pass its worker left runs again, at the agent it was
    interrupted at (the item records it when each agent starts), and the activity log says so.
    A newer item of the task gives way (the pass's end counts the comment that queued it).
    `stopped`: the user stopped it meanwhile, so it ends (failed). False when another
    recoverer or a new claim got there first. The task's row is locked first, as a comment
    locks it before it queues a pass: on PostgreSQL a comment written meanwhile found no queued
    item (this re-queue not committed yet), inserted one and failed on the one-queued-item
    rule (a 500 for the person) once this committed; now one waits for the other."""
    with transaction.atomic(), events.batched():
        task = Task.objects.select_for_update(no_key=True).filter(id=item.task_id).first()
        if stopped:
            return TaskQueueItem.objects.requeue(item, stopped=True)
        TaskQueueItem.objects.queued().filter(task_id=item.task_id).delete()
        if not TaskQueueItem.objects.requeue(item, stopped=False):
            return False
        name = Agent.objects.filter(id=item.resume_agent_id).values_list("name", flat=True)
        name = name.first() if item.resume_agent_id else None
        if item.phase == PassPhase.CHECKS:  # the agents were done: the checks run again
            name = CHECKS_NAME
        if task is not None and name:
            log_add(
                task=task,
                event_type="pass_resumed",
                actor=SYSTEM,
                metadata={"agent_name": name, "after": "restart"},
            )
            events.publish("task.updated", task_payload(task))
    return True


def _require_failing(task: Task, what: str) -> None:
    if task.status not in RUNNABLE_STATUSES or not task.failure_streak:
        raise Conflict(
            f"Only a Todo or In Progress task whose runs fail can {what}", field="status"
        )


def task_retry_now(*, task: Task) -> Task:
    """Run a failing task again without waiting out its back-off (the worker picks it up at
    once). Also restarts a task whose retries were stopped."""
    _require_failing(task, "be retried now")
    now = timezone.now()
    with transaction.atomic():
        task.retry_not_before = None
        Task.objects.filter(id=task.id).update(retry_not_before=None)
        running = TaskQueueItem.objects.unstopped().filter(task=task)
        if not running.exists():
            queue_item_ensure(task=task)
        log_add(task=task, event_type="retry_requested", actor=USER)
        _touch(task, now)
        events.publish("task.updated", task_payload(task))
    wake_worker_on_commit()
    return task


def task_retries_stop(*, task: Task) -> Task:
    """Stop retrying a failing task: a running try is stopped and discarded, the queued retry
    dropped, and the task waits in Todo (a comment or "Retry now" runs it again). The failure
    streak stays, so the card still says what failed."""
    _require_failing(task, "stop retrying")
    now = timezone.now()
    with transaction.atomic():
        if task.status == TaskStatus.IN_PROGRESS:
            # Not a move users may make in general (USER_MOVES): only to stop the retries.
            _move(task, TaskStatus.TODO, USER)  # stops a running try
        TaskQueueItem.objects.queued().filter(task=task).delete()
        task.retry_not_before = None
        Task.objects.filter(id=task.id).update(retry_not_before=None)
        log_add(task=task, event_type="retries_stopped", actor=USER)
        _touch(task, now)
        events.publish("task.updated", task_payload(task))
    return task


def task_prioritize_toggle(*, task: Task) -> Task:
    """Prioritize (only Todo / In Progress; at most one per workspace) or remove priority."""
    now = timezone.now()
    with transaction.atomic():
        if task.is_priority:
            _set_priority(task, False)
            log_add(task=task, event_type="task_deprioritized", actor=USER)
        else:
            if task.status not in RUNNABLE_STATUSES:
                raise Conflict("Only Todo or In Progress tasks can be prioritized", field="status")
            others = Task.objects.filter(workspace_id=task.workspace_id, is_priority=True).exclude(
                id=task.id
            )
            for other in others:
                _set_priority(other, False)
                log_add(task=other, event_type="task_deprioritized", actor=USER)
                events.publish("task.updated", task_payload(other))
            _set_priority(task, True)
            log_add(task=task, event_type="task_prioritized", actor=USER)
            wake_worker_on_commit()
        _touch(task, now)
        events.publish("task.updated", task_payload(task))
    return task


def task_cancel(*, task: Task) -> Task:
    """Stop the running loop: the worker kills the CLI; the task waits in In Review."""
    if task.status != TaskStatus.IN_PROGRESS:
        raise Conflict("Only an In Progress task can be cancelled", field="status")
    with transaction.atomic():
        task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=USER)
        comment_create(task=task, content=CANCEL_MESSAGE, actor=SYSTEM)
        log_add(task=task, event_type="task_cancelled", actor=USER)
    return task


def task_delete(*, task: Task, confirm_unmerged: bool = False) -> None:
    """Delete a task in any status; a running CLI is killed by the worker (its rows vanish).
    Its worktree goes too, and its branch unless merged (once the delete is committed). Tasks
    that waited for it are told in their activity log, and start if it was their last open
    blocker. A branch with work its base lacks is refused (UnmergedBranches) unless
    `confirm_unmerged`."""
    if not confirm_unmerged:
        unmerged = selectors.unmerged_branch_tasks(Task.objects.filter(id=task.id))
        if unmerged:
            raise branches.unmerged_refusal(unmerged, "this task")
    with transaction.atomic():
        agent_runs_lock(task_id=task.id)
        payload = task_payload(task)
        _remove_branch_on_commit(task, keep_merged=True)
        dependents = list(Task.objects.filter(blocker_links__blocker=task))
        for dependent in dependents:
            log_add(
                task=dependent,
                event_type="blocker_deleted",
                actor=SYSTEM,
                metadata={"blocker_id": task.id, "blocker_summary": task.summary},
            )
        task.delete()
        if task.status != TaskStatus.DONE:  # a Done blocker blocked nobody
            _announce_unblocked(dependents, timezone.now(), cause=payload["task_summary"])
        workspace_touch(payload["workspace_id"])
        events.publish("task.deleted", payload)
        wake_worker_on_commit()


def tasks_delete_done(*, workspace: Workspace, confirm_unmerged: bool = False) -> int:
    done = Task.objects.filter(workspace=workspace, status=TaskStatus.DONE)
    if not confirm_unmerged:
        unmerged = selectors.unmerged_branch_tasks(done)
        if unmerged:
            raise branches.unmerged_refusal(unmerged, "the Done tasks")
    with transaction.atomic():
        rows = list(done)
        for task in rows:
            task_delete(task=task, confirm_unmerged=True)
    return len(rows)


def tasks_delete_expired(*, now=None) -> int:
    """Done tasks older than their workspace's retention (when auto-delete is on). A task
    finished without merging keeps its branch, and so is kept (the person deletes it)."""
    now = now or timezone.now()
    deleted = 0
    workspaces = Workspace.objects.filter(auto_delete_done_tasks=True, retention_days__gt=0)
    for workspace in workspaces:
        cutoff = now - timezone.timedelta(days=workspace.retention_days)
        expired = Task.objects.filter(
            Q(workspace=workspace) & Q(status=TaskStatus.DONE) & Q(updated_at__lt=cutoff)
        ).exclude(Q(merged_at__isnull=True) & ~Q(branch_name=""))
        for task in expired:
            task_delete(task=task, confirm_unmerged=True)
            deleted += 1
    return deleted


# --- paused tasks ---------------------------------------------------------------------------


def _require_paused(task: Task) -> None:
    if not Task.objects.paused().filter(id=task.id).exists():
        raise Conflict(
            "Only a paused Todo task (imported, or whose retries were stopped) can be resumed",
            field="status",
        )


def task_resume(*, task: Task, actor: Actor = USER) -> Task:
    """A paused task (Todo with no pass queued: imported work, stopped retries) joins the
    queue again."""
    _require_paused(task)
    now = timezone.now()
    with transaction.atomic():
        task.retry_not_before = None
        Task.objects.filter(id=task.id).update(retry_not_before=None)
        queue_item_ensure(task=task)
        log_add(task=task, event_type="task_resumed", actor=actor)
        _touch(task, now)
        events.publish("task.updated", task_payload(task))
    return task


def tasks_resume(*, workspace: Workspace, actor: Actor = USER) -> int:
    """Resume every paused task of the workspace (e.g. all of an import at once)."""
    with transaction.atomic():
        paused = list(Task.objects.filter(workspace=workspace).paused().order_by("created_at"))
        for task in paused:
            task_resume(task=task, actor=actor)
    return len(paused)


# --- dependencies ---------------------------------------------------------------------------

BLOCKERS_FIELD = "blocked_by"


def _blocker_map(workspace_id: str) -> dict[str, set[str]]:
    """Each task of the workspace → the tasks it waits for (one query)."""
    edges: dict[str, set[str]] = {}
    links = TaskDependency.objects.filter(workspace_id=workspace_id)
    for task_id, blocker_id in links.values_list("task_id", "blocker_id"):
        edges.setdefault(task_id, set()).add(blocker_id)
    return edges


def _waits_for(edges: dict[str, set[str]], start: str, target: str) -> bool:
    """Does `start` wait for `target`, directly or through other tasks?"""
    seen, todo = set(), [start]
    while todo:
        current = todo.pop()
        if current == target:
            return True
        if current not in seen:
            seen.add(current)
            todo.extend(edges.get(current, ()))
    return False


def _clean_blockers(task: Task, blocker_ids) -> list[Task]:
    """The blockers named by `blocker_ids` (in order, without repeats), refused with a message
    for: a non-list, an unknown id, the task itself, another workspace's task, a cycle."""
    if isinstance(blocker_ids, str) or not isinstance(blocker_ids, list | tuple | set):
        raise ValidationFailed("blocked_by must be a list of task ids", field=BLOCKERS_FIELD)
    ids = list(dict.fromkeys(blocker_ids))
    if not all(isinstance(i, str) and i for i in ids):
        raise ValidationFailed("blocked_by must be a list of task ids", field=BLOCKERS_FIELD)
    if task.id in ids:
        raise ValidationFailed("A task cannot wait for itself", field=BLOCKERS_FIELD)
    found = Task.objects.in_bulk(ids)
    missing = [i for i in ids if i not in found]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        shown = missing[0] if len(missing[0]) <= 100 else f"{missing[0][:100]}…"
        raise ValidationFailed(f"No task with id {shown}{more}", field=BLOCKERS_FIELD)
    blockers = [found[i] for i in ids]
    for blocker in blockers:
        if blocker.workspace_id != task.workspace_id:
            raise ValidationFailed(
                f"“{blocker.summary}” belongs to another workspace: a task can only wait for "
                "tasks of its own workspace",
                field=BLOCKERS_FIELD,
            )
    if task.id and blockers:
        edges = _blocker_map(task.workspace_id)
        edges.pop(task.id, None)  # the task's own links are being replaced
        for blocker in blockers:
            if _waits_for(edges, blocker.id, task.id):
                raise ValidationFailed(
                    f"“{blocker.summary}” already waits for this task (directly or through "
                    "other tasks): waiting for it would make a cycle",
                    field=BLOCKERS_FIELD,
                )
    return blockers


def _links_add(task: Task, blockers: list[Task], actor: Actor, now) -> None:
    # One microsecond apart: links added together keep the order they were given in.
    TaskDependency.objects.bulk_create(
        TaskDependency(
            workspace_id=task.workspace_id,
            task=task,
            blocker=b,
            created_at=now + timedelta(microseconds=i),
        )
        for i, b in enumerate(blockers)
    )
    for blocker in blockers:
        log_add(
            task=task,
            event_type="blocker_added",
            actor=actor,
            metadata={"blocker_id": blocker.id, "blocker_summary": blocker.summary},
        )


def _is_waiting(task_id: str) -> bool:
    return TaskDependency.objects.open_for(task_id).exists()


def task_blockers_set(*, task: Task, blocker_ids, actor: Actor = USER) -> Task:
    """Make the task wait for exactly these tasks (ids of the same workspace, no cycles). A
    Todo task waits until each is Done; an In Progress one goes on (it has started)."""
    now = timezone.now()
    with transaction.atomic():
        blockers = _clean_blockers(task, blocker_ids)
        was_waiting = _is_waiting(task.id)
        current = dict(
            TaskDependency.objects.filter(task=task).values_list("blocker_id", "blocker__summary")
        )
        wanted = {b.id for b in blockers}
        removed = [i for i in current if i not in wanted]
        TaskDependency.objects.filter(task=task, blocker_id__in=removed).delete()
        for blocker_id in removed:
            log_add(
                task=task,
                event_type="blocker_removed",
                actor=actor,
                metadata={"blocker_id": blocker_id, "blocker_summary": current[blocker_id]},
            )
        _links_add(task, [b for b in blockers if b.id not in current], actor, now)
        if not removed and len(wanted) == len(current):
            return task
        _touch(task, now)
        events.publish("task.updated", task_payload(task))
        if was_waiting and task.status == TaskStatus.TODO and not _is_waiting(task.id):
            _announce_unblocked([task], now, cause="")
    return task


def task_dependency_add(*, task: Task, blocker: Task, actor: Actor = USER) -> Task:
    current = list(TaskDependency.objects.filter(task=task).values_list("blocker_id", flat=True))
    return task_blockers_set(task=task, blocker_ids=[*current, blocker.id], actor=actor)


def task_dependency_remove(*, task: Task, blocker: Task, actor: Actor = USER) -> Task:
    current = TaskDependency.objects.filter(task=task).values_list("blocker_id", flat=True)
    remaining = [i for i in current if i != blocker.id]
    return task_blockers_set(task=task, blocker_ids=remaining, actor=actor)


def _announce_unblocked(candidates: list[Task], now, *, cause: str) -> None:
    """Of these tasks, the Todo ones with no open blocker left may start: each gets an
    activity-log line and `task.unblocked`, and its queued pass joins the queue as a fresh one
    (the chain goes on right after its blocker)."""
    ids = [t.id for t in candidates if t.status == TaskStatus.TODO]
    still_waiting = set(
        TaskDependency.objects.filter(task_id__in=ids)
        .exclude(blocker__status=TaskStatus.DONE)
        .values_list("task_id", flat=True)
    )
    released = [t for t in candidates if t.id in ids and t.id not in still_waiting]
    if not released:
        return
    TaskQueueItem.objects.queued().filter(task__in=released).update(updated_at=now)
    for task in released:
        log_add(task=task, event_type="unblocked", actor=SYSTEM, metadata={"blocker": cause})
        events.publish("task.unblocked", task_payload(task, blocker_summary=cause))
    wake_worker_on_commit()


def _release_dependents(blocker: Task, now) -> None:
    """`blocker` just reached Done: tasks that waited only for it may start."""
    dependents = list(Task.objects.filter(blocker_links__blocker=blocker))
    _announce_unblocked(dependents, now, cause=blocker.summary)


def _reblock_dependents(blocker: Task) -> None:
    """`blocker` left Done: Todo tasks that wait for it (not started yet) wait again."""
    dependents = Task.objects.filter(blocker_links__blocker=blocker, status=TaskStatus.TODO)
    for task in dependents:
        log_add(
            task=task,
            event_type="blocked_again",
            actor=SYSTEM,
            metadata={"blocker_id": blocker.id, "blocker_summary": blocker.summary},
        )
        events.publish("task.blocked", task_payload(task, blocker_summary=blocker.summary))


# --- branch per task ------------------------------------------------------------------------


def _remove_branch_on_commit(task: Task, *, keep_merged: bool) -> None:
    if not task.branch_name and not branches.worktree_path(task.id).exists():
        return
    remove = functools.partial(
        branches.remove,
        repo_path=task.workspace.working_directory_path or "",
        task_id=task.id,
        branch=task.branch_name,
        base=task.branch_base,
        keep_merged=keep_merged,
    )  # the values of now: the caller may clear the task's branch next
    transaction.on_commit(remove)


def task_note_add(*, task: Task, content: str) -> TaskComment:
    """A system comment that informs without sending the task around again (unlike
    comment_create): branch notes, merge refusals."""
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        comment = TaskComment.objects.create(
            task=task,
            workspace_id=task.workspace_id,
            content=content,
            kind=CommentKind.SYSTEM,
            created_at=now,
            updated_at=now,
        )
        log_add(task=task, event_type="comment_added", actor=SYSTEM)
        _touch(task, now)
        events.publish(
            "task.comment_added",
            task_payload(
                task, comment_id=comment.id, author_name=SYSTEM.name, author_type="system"
            ),
        )
    return comment


def task_branch_record(*, task: Task, worktree: branches.Worktree) -> None:
    """The worker made the task's worktree: remember its branch and base (and say why, when
    it had to make it again)."""
    with transaction.atomic():
        task.branch_name, task.branch_base = worktree.branch, worktree.base
        Task.objects.filter(id=task.id).update(
            branch_name=worktree.branch, branch_base=worktree.base
        )
        log_add(
            task=task,
            event_type="branch_created",
            actor=SYSTEM,
            metadata={"branch": worktree.branch, "base": worktree.base},
        )
        if worktree.note:
            task_note_add(task=task, content=worktree.note)


def task_branch_commit_log(
    *, task: Task, actor: Actor, commit: str, entry: TaskLog | None = None
) -> None:
    """`entry`: the log built before (StepRows.commit_log)."""
    insert([entry or _commit_entry(task, actor, commit)])


def _commit_entry(task: Task, actor: Actor, commit: str) -> TaskLog:
    metadata = {"agent_name": actor.name, "commit": commit, "branch": task.branch_name}
    return _log_entry(task=task, event_type="branch_committed", actor=actor, metadata=metadata)


def task_setup_log(*, task: Task, command: str, exit_code: int | None, output: str) -> None:
    log_add(
        task=task,
        event_type="setup_ran",
        actor=SYSTEM,
        metadata={"command": command, "exit_code": exit_code, "output": output},
    )


BRANCH_ACTION_STATUSES = (TaskStatus.IN_REVIEW, TaskStatus.DONE)


class MergeChoiceRequired(Conflict):
    """Done means merged: a task whose branch holds work its base lacks needs the person's
    choice, merge and finish or finish without merging (DESIGN "Review verdicts")."""

    code = "MERGE_CHOICE_REQUIRED"


def _merge_choice_required(task: Task) -> MergeChoiceRequired:
    branch, base = task.branch_name, task.branch_base
    return MergeChoiceRequired(
        f"“{task.summary}” has work on {branch} that {base} does not have yet: choose to merge "
        f"it into {base} and finish, or to finish without merging (the branch is kept)",
        field="merge",
        details={"branch": branch, "base": base},
    )


def _when(moment) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else ""


def _already_merged(task: Task) -> Conflict:
    commit = f"{task.merge_commit[:7]}, " if task.merge_commit else ""
    return Conflict(
        f"{task.branch_name} is already merged into {task.branch_base} "
        f"({commit}{_when(task.merged_at)})",
        field="branch",
        details={"merge_commit": task.merge_commit, "merged_at": task.merged_at.isoformat()},
    )


def _require_branch(task: Task, what: str) -> None:
    if not task.branch_name:
        raise Conflict(f"This task has no branch to {what}", field="branch")
    if task.merged_at is not None:
        raise _already_merged(task)
    if task.status not in BRANCH_ACTION_STATUSES:
        raise Conflict(
            f"Only an In Review or Done task's branch can be {what}d (wait for the agents)",
            field="status",
        )


def _merge_in_git(task: Task) -> branches.MergeResult:
    """The git side of a merge (outside any transaction). A merge git refused (conflicts, a
    dirty checkout) changed nothing; a system comment lists the files. Raises Conflict when
    git cannot merge at all (it says why in a system comment too)."""
    try:
        result = branches.merge(task, task.workspace)
    except branches.BranchProblem as exc:
        with transaction.atomic():
            task_note_add(task=task, content=str(exc))
        raise Conflict(str(exc), field="branch") from exc
    if not result.merged:
        with transaction.atomic():
            task_note_add(task=task, content=merge_message(task, result))
    return result


def _record_merge(task: Task, result: branches.MergeResult, actor: Actor) -> None:
    """Inside a transaction: the branch reached its base. Recorded once (a second merge that
    raced this one is refused); the worktree goes, and the branch unless the workspace keeps
    merged branches (once committed)."""
    now = timezone.now()
    recorded = Task.objects.filter(id=task.id, merged_at__isnull=True).update(
        merged_at=now, merge_commit=result.commit
    )
    if not recorded:
        raise _already_merged(Task.objects.get(id=task.id))
    task.merged_at, task.merge_commit = now, result.commit
    log_add(
        task=task,
        event_type="branch_merged",
        actor=actor,
        metadata={
            "branch": task.branch_name,
            "base": task.branch_base,
            "how": result.how,
            "commit": result.commit,
        },
    )
    task_note_add(task=task, content=merge_message(task, result))
    _remove_branch_on_commit(task, keep_merged=task.workspace.keep_merged_branches)


def _keep_branch(task: Task, actor: Actor) -> None:
    """Inside a transaction: the person finishes the task without merging its branch."""
    log_add(
        task=task,
        event_type="branch_kept",
        actor=actor,
        metadata={"branch": task.branch_name, "base": task.branch_base},
    )
    task_note_add(
        task=task,
        content=(
            f"Finished without merging: `{task.branch_name}` is kept, unmerged; merge it into "
            f"`{task.branch_base}` later from this task."
        ),
    )


def _finish_checked(task: Task) -> None:
    """Before a task moves to Done: refuse without the person's merge choice when its branch
    holds work its base lacks; a branch its base already holds counts as merged."""
    state = branches.branch_state(task, task.workspace)
    if state == branches.BranchState.UNMERGED:
        raise _merge_choice_required(task)
    if state == branches.BranchState.IN_BASE:
        commit = branches.base_commit(task, task.workspace)
        _record_merge(task, branches.MergeResult(how=branches.ALREADY_MERGED, commit=commit), USER)


def task_finish(*, task: Task, merge: bool, actor: Actor = USER) -> branches.MergeResult | None:
    """Move an In Review task to Done with the person's choice for its branch ("Move to Done"
    on a branch task): `merge` merges it into its base first and finishes only if that worked
    (a refused merge raises Conflict with the files and leaves the task In Review); otherwise
    the task finishes and its branch is kept, unmerged. A task without work on a branch of its
    own just finishes. Returns the merge's result when one ran."""
    if task.status != TaskStatus.IN_REVIEW:
        raise Conflict(
            f"Only an In Review task can be finished (this one is {task.get_status_display()})",
            field="status",
        )
    if branches.branch_state(task, task.workspace) != branches.BranchState.UNMERGED:
        with transaction.atomic():
            _finish_checked(task)
            _move(task, TaskStatus.DONE, actor)
        return None
    if merge:
        result = task_branch_merge(task=task, actor=actor)
        if not result.merged:
            raise merge_refusal(task, result)
        return result
    with transaction.atomic():
        _keep_branch(task, actor)
        _move(task, TaskStatus.DONE, actor)
    return None


def merge_refusal(task: Task, result: branches.MergeResult) -> Conflict:
    """A merge git refused, as the API's 409: the message and the files."""
    details = {"conflicts": list(result.conflicts), "dirty": list(result.dirty)}
    return Conflict(merge_message(task, result), field="merge", details=details)


def task_branch_merge(*, task: Task, actor: Actor = USER) -> branches.MergeResult:
    """Merge the task's branch into its base ("Merge into <base>"; later, for a Done task
    finished without merging). Merged: the task moves to Done, its worktree (and branch, unless
    kept) go. Refused (conflicts, a dirty checkout of the base): nothing changes in git, the task
    stays where it is and a system comment lists the files. Raises Conflict when git cannot, and
    for a branch merged already (no second merge)."""
    _require_branch(task, "merge")
    result = _merge_in_git(task)
    if result.merged:
        with transaction.atomic():
            _record_merge(task, result, actor)
            if task.status != TaskStatus.DONE:
                _move(task, TaskStatus.DONE, actor)
    return result


def merge_message(task: Task, result: branches.MergeResult) -> str:
    branch, base = task.branch_name, task.branch_base
    if result.how == branches.ALREADY_MERGED:
        return f"`{base}` already holds everything on `{branch}`: nothing to merge."
    if result.merged:
        commit = f", now at {result.commit[:7]}" if result.commit else ""
        return f"Merged `{branch}` into `{base}` ({result.how}{commit})."
    if result.conflicts:
        files = "\n".join(f"- `{name}`" for name in result.conflicts)
        return (
            f"`{branch}` cannot be merged into `{base}`: these files conflict. Nothing was "
            f"changed; resolve the conflicts (or ask the agents to), then merge again.\n\n{files}"
        )
    files = "\n".join(f"- `{name}`" for name in result.dirty)
    return (
        f"`{branch}` was not merged: the checkout of `{base}` has uncommitted changes, which a "
        f"merge could overwrite. Commit or stash them, then merge again.\n\n{files}"
    )


def task_branch_discard(*, task: Task) -> Task:
    """Throw the task's work away: its worktree and branch are removed."""
    _require_branch(task, "discard")
    branch = task.branch_name
    with transaction.atomic():
        _remove_branch_on_commit(task, keep_merged=False)
        task.branch_name, task.branch_base = "", ""
        Task.objects.filter(id=task.id).update(branch_name="", branch_base="")
        log_add(task=task, event_type="branch_discarded", actor=USER, metadata={"branch": branch})
        task_note_add(task=task, content=f"Discarded branch `{branch}` and its worktree.")
    return task


# --- review verdicts (DESIGN "Review verdicts") ---------------------------------------------

LINE_COMMENT_KEYS = {"path", "line", "end_line", "side", "body", "run_id"}


@dataclass(frozen=True)
class LineCommentIn:
    """A line comment as asked for, its shape checked (its anchor is checked against the
    task's snapshots by tasks.anchors.resolve)."""

    path: str
    start_line: int
    end_line: int
    side: str
    body: str
    run_id: str


@dataclass
class ReviewResult:
    task: Task
    verdict: str
    comments: list[TaskComment] = dataclasses.field(default_factory=list)
    merge: branches.MergeResult | None = None


def _whole_number(value, field_name: str, label: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationFailed(f"{label} must be a line number (1 or more)", field=field_name)
    return value


def _text_or_empty(value, field_name: str, label: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationFailed(f"{label} must be text", field=field_name)
    if "\x00" in value:
        raise ValidationFailed(f"{label} contains a NUL character", field=field_name)
    return value.strip()


def _line_comment_in(raw, index: int) -> LineCommentIn:
    where = f"line_comments.{index}"
    if not isinstance(raw, dict):
        raise ValidationFailed("A line comment must be an object", field=where)
    unknown = sorted(set(raw) - LINE_COMMENT_KEYS)
    if unknown:
        raise ValidationFailed(f"{unknown[0]!r} is not a line comment field", field=where)
    path = _text_or_empty(raw.get("path"), f"{where}.path", "path")
    if not path:
        raise ValidationFailed("path is required (a file of the task's changes)", f"{where}.path")
    start = _whole_number(raw.get("line"), f"{where}.line", "line")
    end = raw.get("end_line")
    end = start if end is None else _whole_number(end, f"{where}.end_line", "end_line")
    if end < start:
        raise ValidationFailed(
            f"end_line ({end}) must not come before line ({start})", field=f"{where}.end_line"
        )
    side = raw.get("side") or LineSide.NEW
    if side not in LineSide.values:
        raise ValidationFailed("side must be 'new' or 'old'", field=f"{where}.side")
    body = _text_or_empty(raw.get("body"), f"{where}.body", "body")
    if not body:
        raise ValidationFailed("A line comment needs a body", field=f"{where}.body")
    run_id = _text_or_empty(raw.get("run_id"), f"{where}.run_id", "run_id")
    return LineCommentIn(path, start, end, side, body, run_id)


def _line_comments_in(raw) -> list[LineCommentIn]:
    raw = [] if raw is None else raw
    if not isinstance(raw, list | tuple):
        raise ValidationFailed("line_comments must be a list", field="line_comments")
    if len(raw) > anchors.LINE_COMMENTS_MAX:
        raise ValidationFailed(
            f"At most {anchors.LINE_COMMENTS_MAX} line comments go with one review",
            field="line_comments",
        )
    return [_line_comment_in(item, index) for index, item in enumerate(raw)]


def _anchored(task: Task, items: list[LineCommentIn]) -> list[tuple[str, anchors.Anchor]]:
    """Each line comment's text and anchor (git reads; one change set per run shown)."""
    change_sets: dict[str, object] = {}
    found = []
    for index, item in enumerate(items):
        where = f"line_comments.{index}"
        if item.run_id not in change_sets:
            change_sets[item.run_id] = anchors.change_set(task, item.run_id, where)
        anchor = anchors.resolve(
            task,
            path=item.path,
            side=item.side,
            start_line=item.start_line,
            end_line=item.end_line,
            run_id=item.run_id,
            field=where,
            changes=change_sets[item.run_id],
        )
        found.append((item.body, anchor))
    return found


def _review_comments_add(
    task: Task, actor: Actor, verdict: str, body: str, anchored: list, now
) -> list[TaskComment]:
    """The review's comments (its body first, then its line comments in order), written
    without the side effects of comment_create: the verdict decides what happens next."""
    texts = ([(body, {})] if body else []) + [(text, a.fields()) for text, a in anchored]
    rows = [
        TaskComment(
            task=task,
            workspace_id=task.workspace_id,
            user_id=actor.id if actor.is_user else None,
            agent_id=actor.id if actor.is_agent else None,
            content=text,
            kind=actor.type,
            verdict=verdict,
            created_at=now + timedelta(microseconds=index),  # they read in the order given
            updated_at=now,
            **anchor_fields,
        )
        for index, (text, anchor_fields) in enumerate(texts)
    ]
    TaskComment.objects.bulk_create(rows)
    for comment in rows:
        events.publish(
            "task.comment_added",
            task_payload(
                task, comment_id=comment.id, author_name=actor.name, author_type=actor.type
            ),
        )
    return rows


def _send_back(task: Task, actor: Actor) -> None:
    """Request changes: back to Todo, a pass queued (today's "a comment re-queues")."""
    _move(task, TaskStatus.TODO, actor)
    queue_item_ensure(task=task)
    if task.retry_not_before:  # the person stepped in: no error back-off to wait out
        task.retry_not_before = None
        Task.objects.filter(id=task.id).update(retry_not_before=None)


def line_comment_draft_create(
    *, task: Task, path: str, side: str, line: int, end_line: int, run_id: str, body: str
) -> LineCommentDraft:
    """A line comment drafted in the Changes tab of an In Review task, kept until a verdict of
    the composer sends it (task_review_submit with_drafts). Its shape is checked now, its
    lines when it is sent (the snapshot it was made on may change meanwhile)."""
    _require_in_review(task)
    raw = {"path": path, "side": side, "line": line, "end_line": end_line}
    item = _line_comment_in({**raw, "run_id": run_id, "body": body}, 0)
    if task.line_comment_drafts.count() >= anchors.LINE_COMMENTS_MAX:
        raise ValidationFailed(
            f"At most {anchors.LINE_COMMENTS_MAX} line comments go with one review", field="body"
        )
    return LineCommentDraft.objects.create(
        task=task,
        path=item.path,
        side=item.side,
        start_line=item.start_line,
        end_line=item.end_line,
        run_id=item.run_id,
        body=item.body,
    )


def line_comment_draft_delete(*, draft: LineCommentDraft) -> None:
    draft.delete()


def task_review_submit(
    *,
    task: Task,
    verdict: str,
    body: str = "",
    line_comments=(),
    with_drafts: bool = False,
    merge: bool | None = None,
    actor: Actor = USER,
) -> ReviewResult:
    """The person's review of an In Review task, with a comment (`body`) and line comments
    (dicts: path, line, end_line, side "new"/"old", body, run_id ""/a run whose changes were
    shown). Request changes: the comments are posted and the task goes back to the agents.
    Comment: a note the agents read on their next pass; it does not start one (the task stays
    In Review). Approve: Done; a branch with work its base lacks needs `merge`: True merges it
    first and finishes only if that worked, False finishes without merging (branch kept).
    Refusals: ValidationFailed (bad input), Conflict (not In Review; a merge git refused, with
    the files), MergeChoiceRequired. The activity log records the verdict. `with_drafts`: the
    task's drafted line comments go too (the composer's verdicts), and are gone once sent."""
    drafts = selectors.line_comment_drafts(task) if with_drafts else []
    if drafts and isinstance(line_comments, list | tuple):  # (anything else is refused below)
        line_comments = [*line_comments, *(draft.as_line_comment() for draft in drafts)]
    if verdict not in Verdict.values:
        raise ValidationFailed(
            f"verdict must be one of {', '.join(Verdict.values)}", field="verdict"
        )
    body = _text_or_empty(body, "body", "body")
    items = _line_comments_in(line_comments)
    if merge is not None and not isinstance(merge, bool):
        raise ValidationFailed("merge must be true or false", field="merge")
    if verdict != Verdict.APPROVE and not body and not items:
        label = Verdict(verdict).label
        raise ValidationFailed(
            f"{label} needs a comment: a body, line comments, or both", field="body"
        )
    _require_in_review(task)
    anchored = _anchored(task, items)
    state = branches.BranchState.NONE
    result = None
    if verdict == Verdict.APPROVE:
        state = branches.branch_state(task, task.workspace)
        if state == branches.BranchState.UNMERGED and merge is None:
            raise _merge_choice_required(task)
        if state == branches.BranchState.UNMERGED and merge:
            result = _merge_in_git(task)
            if not result.merged:
                raise merge_refusal(task, result)
    now = timezone.now()
    with transaction.atomic():
        if result is None:  # (a merge ran: its git side is done, its record must follow)
            _lock_current_status(task)  # as a comment: a pass ending now sees the verdict
            _require_in_review(task)
        comments = _review_comments_add(task, actor, verdict, body, anchored, now)
        # (Only those sent: one drafted meanwhile waits for the next verdict.)
        LineCommentDraft.objects.filter(id__in=[draft.id for draft in drafts]).delete()
        log_add(
            task=task,
            event_type="review_submitted",
            actor=actor,
            metadata={
                "verdict": verdict,
                "comments": len(comments),
                "line_comments": len(anchored),
                **({"merge": merge} if verdict == Verdict.APPROVE and merge is not None else {}),
            },
        )
        if verdict == Verdict.REQUEST_CHANGES:
            _send_back(task, actor)
        elif verdict == Verdict.APPROVE:
            if result is not None:
                _record_merge(task, result, actor)
            elif state == branches.BranchState.UNMERGED:
                _keep_branch(task, actor)
            else:
                _finish_checked(task)  # (a branch its base already holds counts as merged)
            _move(task, TaskStatus.DONE, actor)
        _touch(task, now)
        events.publish("task.reviewed", task_payload(task, verdict=verdict, actor_type=actor.type))
    return ReviewResult(task=task, verdict=verdict, comments=comments, merge=result)


def _require_in_review(task: Task) -> None:
    if task.status != TaskStatus.IN_REVIEW:
        raise Conflict(
            "Only an In Review task can be reviewed (this one is "
            f"{TaskStatus(task.status).label}): wait for the agents, or comment instead",
            field="status",
        )
