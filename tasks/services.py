"""Every write to tasks, comments, activity logs and the task queue.

Each function is one transaction that also writes its activity log, queue item,
workspace `last_activity_at` bump and events, so a rule lives in exactly one place for the
API, the pages, the runner and chat actions.
"""

import functools
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from core import events
from core.actors import SYSTEM, USER, Actor, agent_actor
from core.errors import Conflict, NotFound, ValidationFailed, require_text
from core.fields import max_length_of
from core.wake import wake_worker_on_commit
from notifications.services import notify_task_error, notify_task_in_review
from runner.models import QueueStatus
from runner.plans import Wait, cli_for_run
from runner.selectors import cli_states
from runner.services import agent_runs_forget_snapshots, cli_broken_set, cli_limit_set
from tasks import branches, selectors
from tasks.models import (
    KEEPS_GOING,
    RUNNABLE_STATUSES,
    CommentKind,
    Task,
    TaskComment,
    TaskDependency,
    TaskLog,
    TaskQueueItem,
    TaskStatus,
)
from tasks.moves import MOVES
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
    entry.save(force_insert=True)
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
    now = timezone.now()
    item = TaskQueueItem.objects.queued().filter(task=task).first()
    if item:
        TaskQueueItem.objects.filter(id=item.id).update(updated_at=now)
        item.updated_at = now
    else:
        item = TaskQueueItem.objects.create(
            task=task,
            workspace_id=task.workspace_id,
            is_priority=task.is_priority,
            created_at=now,
            updated_at=now,
        )
    wake_worker_on_commit()
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
        raise Conflict(
            f"{who} cannot move a task from {TaskStatus(old).label} to {TaskStatus(status).label}",
            field="status",
        )
    _move(task, status, actor)
    return task


def _move(task: Task, status: str, actor: Actor) -> None:
    """The write of a status move that task_status_set allowed (or a service decided)."""
    old = task.status
    now = timezone.now()
    with transaction.atomic(savepoint=False):  # validated above: nothing to roll back alone
        task.status, task.updated_at = status, now
        Task.objects.filter(id=task.id).update(status=status, updated_at=now)  # one UPDATE
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
        task.save(force_insert=True)
        queue_item_ensure(task=task)
        log_add(task=task, event_type="task_created", actor=actor)
        _links_add(task, blockers, actor, now)
        workspace_touch(workspace.id, now=now)
        events.publish("task.created", task_payload(task, status=task.status))
    return task


def task_update(
    *,
    task: Task,
    summary: str | None = None,
    description: str | None = None,
    status: str | None = None,
    actor: Actor = USER,
) -> Task:
    with transaction.atomic():
        changes = {}
        if summary is not None:
            changes["summary"] = _clean_summary(summary)
        if description is not None:
            changes["description"] = description
        if changes:
            for field, value in changes.items():
                setattr(task, field, value)
            Task.objects.filter(id=task.id).update(**changes)
            _touch(task, timezone.now())
            events.publish("task.updated", task_payload(task))
        if status is not None:
            task_status_set(task=task, status=status, actor=actor)
    return task


def comment_create(
    *, task: Task, content: str, actor: Actor, kind: str | None = None
) -> TaskComment:
    """A comment, and only that: its row, activity log, the task's and workspace's activity and
    `task.comment_added`. It sends nothing around (comment_create_and_send_around does, for a
    comment that asks the agents; a pass's end counts its own agents' comments). `kind` is the
    author's type, or "error" for a system comment that reports a failed run."""
    content = require_text(content, field="content", label="Comment")
    kind = kind or actor.type
    if kind != actor.type and not (kind == CommentKind.ERROR and actor.type == "system"):
        raise ValidationFailed(f"A {actor.type} comment cannot be of kind {kind!r}", field="kind")
    now = timezone.now()
    with transaction.atomic(savepoint=False):  # validated above: nothing to roll back alone
        comment = TaskComment.objects.create(
            task=task,
            workspace_id=task.workspace_id,
            user_id=actor.id if actor.is_user else None,
            agent_id=actor.id if actor.is_agent else None,
            content=content,
            kind=kind,
            created_at=now,
            updated_at=now,
        )
        log_add(task=task, event_type="comment_added", actor=actor)
        _touch(task, now)
        events.publish(
            "task.comment_added",
            task_payload(
                task, comment_id=comment.id, author_name=actor.name, author_type=actor.type
            ),
        )
    return comment


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
    entry.save(force_insert=True)
    events.publish(
        "agent.execution_started",
        task_payload(task, agent_id=actor.id, agent_name=actor.name, run_id=run_id),
    )
    return entry


def task_agent_finished(
    *, task: Task, actor: Actor, action_type: str, touch_workspace: bool = True
) -> TaskLog | None:
    """An agent's run ended ("error" when it failed, "limited" or "waiting" when its CLI ran out
    of quota or could not run: the error comment or the wait says the rest): its activity log,
    the workspace's activity (unless the caller bumped it moments ago) and
    `agent.execution_finished`."""
    entry = None
    if action_type not in ("error", "waiting", "limited"):
        entry = log_add(
            task=task,
            event_type="agent_finished",
            actor=actor,
            metadata={"agent_name": actor.name, "action_type": action_type},
        )
        if touch_workspace:
            workspace_touch(task.workspace_id)
    events.publish(
        "agent.execution_finished",
        task_payload(task, agent_id=actor.id, agent_name=actor.name, action_type=action_type),
    )
    return entry


# --- a task pass: its rules, once (DESIGN "Retries", "No lost comment", "One run pipeline") ---
#
# The worker orchestrates a pass (runner/worker/pipeline.py): it claims the item, runs each
# agent's CLI and calls these in its transactions. When does a task reach In Review? Only in
# `_to_review`, from an agent's in_review answer (task_step_answered) or a pass in which
# nobody commented (task_pass_end), and never while a comment waits for the agents. What
# happens when a run fails? task_pass_failed.


def task_pass_begin(*, item: TaskQueueItem) -> tuple[Task, bool] | None:
    """A claimed pass begins: the task → In Progress, the workspace's other In Progress tasks
    back to Todo (queued). Returns (task, whether it moved); None when the task is gone or
    waits for the user (the item is then finished). One read: the task together with the
    workspace's In Progress tasks. Only the task rows are locked, and not against key reads:
    locking the workspace row too (select_related) deadlocked on PostgreSQL with a parallel
    pass that held its task row and inserted a row referencing the workspace (CI, parallel
    tasks in one workspace)."""
    with transaction.atomic(), events.batched():
        rows = list(
            Task.objects.select_for_update(no_key=True, of=("self",))
            .select_related("workspace")
            .filter(
                Q(id=item.task_id)
                | Q(workspace_id=item.workspace_id, status=TaskStatus.IN_PROGRESS)
            )
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
) -> tuple[TaskLog | None, bool]:
    """An agent answered (runner.schemas.TaskOutcome): the comments its input contained
    (`read`) are delivered, its comments written, and the task asks for review when it said so
    and no comment waits for the agents (one that came while it worked: the agents go around
    again instead, from the first). `retried`: this agent's run had failed, so the failure
    streak ends; `last_step`: no agent comes after it, so the pass ends. Inside the step's
    finish transaction. Returns (its agent_finished log, whether the pass ended)."""
    actor = agent_actor(agent)
    comments_delivered(comments=read)
    if retried:
        task_run_succeeded(task=task)
    review = answer.in_review and not task.comments.undelivered().exists()
    for content in answer.comments:
        comment_create(task=task, content=content, actor=actor)
    finished = task_agent_finished(
        task=task, actor=actor, action_type=answer.action_type, touch_workspace=touch_workspace
    )
    if review:
        _to_review(task, actor, settings)
        TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)
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


def task_pass_end(*, task: Task, item: TaskQueueItem, pass_started, settings=None) -> None:
    """Every agent had its turn. A pass in which somebody commented (or that left a comment no
    agent has read) makes the agents go around again, from the first; one where all skipped
    puts the task In Review. Either way the failure streak ends: the whole pass ran."""
    task_run_succeeded(task=task)
    if _comments_keep_going(task, pass_started):
        _next_pass(task, item)
        return
    _to_review(task, SYSTEM, settings)
    TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)


def _comments_keep_going(task: Task, pass_started) -> bool:
    """A person's or an agent's comment written during the pass, or one no agent has read."""
    since = Q(created_at__gte=pass_started) if pass_started else Q()
    comments = task.comments.filter(kind__in=KEEPS_GOING)
    return comments.filter(since | Q(delivered_at__isnull=True)).exists()


def _next_pass(task: Task, item: TaskQueueItem) -> None:
    TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)
    queue_item_ensure(task=task)


def _to_review(task: Task, actor: Actor, settings: dict | None) -> None:
    """An agent or the system (never the user) puts the task In Review: the only place, with
    its one notification."""
    task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=actor)
    last = functools.partial(selectors.last_agent_comment, task)  # read if there is a recipient
    notify_task_in_review(task=task, last_comment=last, settings=settings)


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
    recoverer or a new claim got there first."""
    with transaction.atomic(), events.batched():
        if stopped:
            return TaskQueueItem.objects.requeue(item, stopped=True)
        TaskQueueItem.objects.queued().filter(task_id=item.task_id).delete()
        if not TaskQueueItem.objects.requeue(item, stopped=False):
            return False
        task = Task.objects.filter(id=item.task_id).first()
        name = Agent.objects.filter(id=item.resume_agent_id).values_list("name", flat=True)
        name = name.first() if item.resume_agent_id else None
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


def task_delete(*, task: Task) -> None:
    """Delete a task in any status; a running CLI is killed by the worker (its rows vanish).
    Its worktree goes too, and its branch unless merged (once the delete is committed). Tasks
    that waited for it are told in their activity log, and start if it was their last open
    blocker."""
    with transaction.atomic():
        payload = task_payload(task)
        _remove_branch_on_commit(task, keep_merged=True)
        agent_runs_forget_snapshots(runs=task.runs.all())
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


def tasks_delete_done(*, workspace: Workspace) -> int:
    with transaction.atomic():
        done = list(Task.objects.filter(workspace=workspace, status=TaskStatus.DONE))
        for task in done:
            task_delete(task=task)
    return len(done)


def tasks_delete_expired(*, now=None) -> int:
    """Done tasks older than their workspace's retention (when auto-delete is on)."""
    now = now or timezone.now()
    deleted = 0
    workspaces = Workspace.objects.filter(auto_delete_done_tasks=True, retention_days__gt=0)
    for workspace in workspaces:
        cutoff = now - timezone.timedelta(days=workspace.retention_days)
        expired = Task.objects.filter(
            Q(workspace=workspace) & Q(status=TaskStatus.DONE) & Q(updated_at__lt=cutoff)
        )
        for task in expired:
            task_delete(task=task)
            deleted += 1
    return deleted


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


def task_branch_commit_log(*, task: Task, actor: Actor, commit: str) -> None:
    log_add(
        task=task,
        event_type="branch_committed",
        actor=actor,
        metadata={"agent_name": actor.name, "commit": commit, "branch": task.branch_name},
    )


def task_setup_log(*, task: Task, command: str, exit_code: int | None, output: str) -> None:
    log_add(
        task=task,
        event_type="setup_ran",
        actor=SYSTEM,
        metadata={"command": command, "exit_code": exit_code, "output": output},
    )


BRANCH_ACTION_STATUSES = (TaskStatus.IN_REVIEW, TaskStatus.DONE)


def _require_branch(task: Task, what: str) -> None:
    if not task.branch_name:
        raise Conflict(f"This task has no branch to {what}", field="branch")
    if task.status not in BRANCH_ACTION_STATUSES:
        raise Conflict(
            f"Only an In Review or Done task's branch can be {what}d (wait for the agents)",
            field="status",
        )


def task_branch_merge(*, task: Task) -> branches.MergeResult:
    """Merge the task's branch into its base ("Merge into <base>"). Merged: the task moves to
    Done. Refused (conflicts, a dirty checkout of the base): nothing changes in git, the task
    stays where it is and a system comment lists the files. Raises Conflict when git cannot."""
    _require_branch(task, "merge")
    try:
        result = branches.merge(task, task.workspace)
    except branches.BranchProblem as exc:
        with transaction.atomic():
            task_note_add(task=task, content=str(exc))
        raise Conflict(str(exc), field="branch") from exc
    with transaction.atomic():
        if result.merged:
            log_add(
                task=task,
                event_type="branch_merged",
                actor=USER,
                metadata={"branch": task.branch_name, "base": task.branch_base, "how": result.how},
            )
            task_note_add(task=task, content=merge_message(task, result))
            if task.status != TaskStatus.DONE:
                task_status_set(task=task, status=TaskStatus.DONE, actor=USER)
        else:
            task_note_add(task=task, content=merge_message(task, result))
    return result


def merge_message(task: Task, result: branches.MergeResult) -> str:
    branch, base = task.branch_name, task.branch_base
    if result.merged:
        return f"Merged `{branch}` into `{base}` ({result.how})."
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
