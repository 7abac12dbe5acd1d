"""One pass of a task through the workspace's agents (one queue item = one pass).

Per agent: fetch it just before it runs (so edits and reorders apply at once), write the input
file, run its CLI, read the answer, execute the actions. A comment queues the next pass (the
comment service does that); "in_review" ends the loop; a pass where nobody commented moves the
task to In Review; an error writes a system comment (which queues the retry) and ends the pass.

A stopped run (cancel, delete, the user moved the task, shutdown) is discarded: no comment, no
action, no error. Every write after a run re-checks that its rows still exist.
"""

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from agents.models import Agent
from core import events
from core.activity import workspace_touch
from core.actors import SYSTEM, agent_actor
from notifications.services import notify_task_error, notify_task_in_review
from runner import execution, prompts
from runner.files import (
    fresh_output_path,
    task_input_path,
    working_directory,
    write_private,
)
from runner.models import RunStatus
from runner.recorder import RunRecorder, stall_limits
from runner.schemas import InvalidOutput, parse_task_output, task_schema
from tasks import selectors as task_selectors
from tasks import services as task_services
from tasks.models import (
    RUNNABLE_STATUSES,
    QueueStatus,
    Task,
    TaskComment,
    TaskQueueItem,
    TaskStatus,
)

log = logging.getLogger(__name__)
retry_delay = task_services.retry_delay  # the back-off rule lives with the task services


class Stopped(Exception):
    """The run was stopped or its rows are gone: discard everything."""


@dataclass
class PassContext:
    item_id: str
    stop: threading.Event


def _check_wanted(ctx: PassContext, task_id: str) -> Task:
    """Inside a transaction: the item still runs and the task is still In Progress."""
    wanted = TaskQueueItem.objects.filter(
        id=ctx.item_id, status=QueueStatus.IN_PROGRESS, stop_requested_at__isnull=True
    ).exists()
    task = Task.objects.filter(id=task_id, status=TaskStatus.IN_PROGRESS).first()
    if ctx.stop.is_set() or not wanted or task is None:
        raise Stopped
    return task


def _finish_item(item_id: str, status: str) -> None:
    TaskQueueItem.objects.filter(id=item_id, status=QueueStatus.IN_PROGRESS).update(
        status=status, pid=None, pgid=None, updated_at=timezone.now()
    )


def _begin(task: Task) -> Task:
    """Task → In Progress; the workspace's other In Progress tasks go back to Todo (queued)."""
    with transaction.atomic():
        task = Task.objects.select_for_update().get(id=task.id)
        others = Task.objects.filter(
            workspace_id=task.workspace_id, status=TaskStatus.IN_PROGRESS
        ).exclude(id=task.id)
        for other in others:
            task_services.task_status_set(task=other, status=TaskStatus.TODO, actor=SYSTEM)
            task_services.queue_item_ensure(task=other)
        if task.status == TaskStatus.TODO:
            task_services.task_status_set(task=task, status=TaskStatus.IN_PROGRESS, actor=SYSTEM)
    return task


def _agent_payload(task: Task, agent: Agent, **extra) -> dict:
    return task_services.task_payload(task, agent_id=agent.id, agent_name=agent.name, **extra)


def _input_text(task: Task, agent: Agent, output_path: Path) -> str:
    agents = list(
        Agent.objects.filter(workspace_id=task.workspace_id).in_order().values_list("id", "name")
    )
    names = dict(agents)
    comments = [
        prompts.comment_row(c, task_services.comment_author_name(c, names))
        for c in task_selectors.collapse_repeated_errors(
            list(task.comments.order_by("created_at", "id"))
        )
    ]
    logs = [prompts.log_row(entry) for entry in task.logs.order_by("created_at", "id")]
    ordered = [name for _id, name in agents]
    return prompts.task_input(
        workspace=task.workspace,
        agent=agent,
        agent_names=ordered,
        task=task,
        comments=comments,
        logs=logs,
        output_path=str(output_path),
    )


def _record_process(item_id: str):
    def on_started(started) -> None:
        TaskQueueItem.objects.filter(id=item_id).update(
            pid=started.pid, pgid=started.pgid, process_started_at=started.create_time
        )

    return on_started


def _run_agent(task: Task, agent: Agent, ctx: PassContext):
    """Run one agent; returns its TaskOutcome, or an error message (str)."""
    with transaction.atomic():
        task = _check_wanted(ctx, task.id)
        task_services.log_add(
            task=task,
            event_type="agent_started",
            actor=agent_actor(agent),
            metadata={"agent_name": agent.name},
        )
        workspace_touch(task.workspace_id)
        recorder = RunRecorder(
            cli_type=agent.cli_type,
            workspace_id=task.workspace_id,
            agent_id=agent.id,
            agent_name=agent.name,
            task_id=task.id,
            **stall_limits(task.workspace),
        )
        events.publish(
            "agent.execution_started", _agent_payload(task, agent, run_id=recorder.run.id)
        )
    try:
        return _execute_agent(task, agent, ctx, recorder)
    finally:
        recorder.finish(status=recorder.status, exit_code=recorder.exit_code)


def _execute_agent(task: Task, agent: Agent, ctx: PassContext, recorder: RunRecorder):
    cwd, problem = working_directory(task.workspace, f"malamar_task_{task.id}")
    if cwd is None:
        recorder.status = RunStatus.FAILED
        return problem
    output_path = fresh_output_path()
    input_path = write_private(task_input_path(task.id), _input_text(task, agent, output_path))
    run = execution.execute(
        cli_type=agent.cli_type,
        input_path=input_path,
        output_path=output_path,
        schema=task_schema(),
        schema_kind="task",
        cwd=cwd,
        stop=ctx.stop,
        include_dirs=(str(input_path.parent),),
        on_started=_record_process(ctx.item_id),
        recorder=recorder,
    )
    recorder.note(run)
    if run.stopped or ctx.stop.is_set():
        raise Stopped
    if run.error:
        return run.error
    try:
        outcome = parse_task_output(run.data)
    except InvalidOutput as exc:
        recorder.status = RunStatus.FAILED
        return f"CLI output structure was invalid: {exc}"
    return outcome


def _apply_outcome(task: Task, agent: Agent, outcome, ctx: PassContext) -> None:
    actor = agent_actor(agent)
    with transaction.atomic():
        task = _check_wanted(ctx, task.id)
        for content in outcome.comments:
            task_services.comment_create(task=task, content=content, actor=actor)
        if outcome.in_review:
            task_services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=actor)
            notify_task_in_review(task=task, last_comment=_last_agent_comment(task))
        task_services.log_add(
            task=task,
            event_type="agent_finished",
            actor=actor,
            metadata={"agent_name": agent.name, "action_type": outcome.action_type},
        )
        task_services.task_run_succeeded(task=task)
        events.publish(
            "agent.execution_finished", _agent_payload(task, agent, action_type=outcome.action_type)
        )


def _apply_error(task: Task, agent: Agent, message: str, ctx: PassContext) -> None:
    with transaction.atomic():
        task = _check_wanted(ctx, task.id)
        failures = task_services.task_run_failed(task=task, message=message, agent_name=agent.name)
        notify_task_error(task=task, message=message, failure_streak=failures)
        events.publish("agent.execution_finished", _agent_payload(task, agent, action_type="error"))
        _finish_item(ctx.item_id, QueueStatus.FAILED)


def _last_agent_comment(task: Task) -> str:
    comment = (
        TaskComment.objects.filter(task=task, agent_id__isnull=False)
        .order_by("-created_at")
        .first()
    )
    return comment.content if comment else ""


def _end_pass(task: Task, pass_started, ctx: PassContext) -> None:
    with transaction.atomic():
        task = _check_wanted(ctx, task.id)
        commented = TaskComment.objects.filter(task=task, created_at__gte=pass_started).exists()
        if not commented:
            task_services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=SYSTEM)
            notify_task_in_review(task=task, last_comment=_last_agent_comment(task))
        _finish_item(ctx.item_id, QueueStatus.COMPLETED)


def run_pass(item: TaskQueueItem, *, stop: threading.Event, shutdown: threading.Event) -> None:
    """Process one claimed queue item. Never raises for CLI or agent trouble.

    `stop` ends this run (set by the worker's stop watcher or at shutdown); at shutdown the item
    stays in progress so that startup recovery re-queues it."""
    ctx = PassContext(item_id=item.id, stop=stop)
    task = Task.objects.select_related("workspace").filter(id=item.task_id).first()
    if task is None:
        return
    if task.status not in RUNNABLE_STATUSES:
        _finish_item(item.id, QueueStatus.COMPLETED)
        return
    try:
        task = _begin(task)
        pass_started = timezone.now()
        order = None
        while (agent := Agent.objects.next_after(task.workspace_id, order)) is not None:
            order = agent.order
            task = Task.objects.select_related("workspace").get(id=task.id)  # fresh, one query
            outcome = _run_agent(task, agent, ctx)
            if isinstance(outcome, str):
                _apply_error(task, agent, outcome, ctx)
                return
            _apply_outcome(task, agent, outcome, ctx)
            if outcome.in_review:
                _finish_item(item.id, QueueStatus.COMPLETED)
                return
        _end_pass(task, pass_started, ctx)
    except Stopped:
        if not shutdown.is_set():
            _finish_item(item.id, QueueStatus.FAILED)
    except Exception as exc:  # a bug must not leave the task stuck without a word
        log.exception("Task pass failed", extra={"task_id": task.id})
        _record_internal_error(task, exc, ctx)


def internal_error_message(exc: Exception) -> str:
    return (
        f"Malamar hit an internal error ({type(exc).__name__}: {exc}). "
        "The details are in the worker log."
    )


def _record_internal_error(task: Task, exc: Exception, ctx: PassContext) -> None:
    """Same path as a CLI error: a system comment (which queues the retry) and back-off."""
    with transaction.atomic():
        task = Task.objects.filter(id=task.id).first()
        if task is None:
            return
        task_services.task_run_failed(task=task, message=internal_error_message(exc))
        _finish_item(ctx.item_id, QueueStatus.FAILED)
