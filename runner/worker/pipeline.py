"""One run pipeline: a task pass and a chat reply are the same thing to the worker.

A run step builds the input from what its owner already read, starts the CLI
(`execution.execute`) and, once the CLI runs, records the run's start in one transaction: the
process record (which is also the "still wanted" check), the run row, the activity log and the
events. It streams the output through the recorder, reads the result, and applies it through
the owning app's services together with the run's final record (a second transaction). Events of
each transaction go to the outbox in one insert. Settings, agents and the input's comments and
logs are read once per pass (re-read only when the rows a step reads anyway say they changed).
A task pass is a loop of steps over the workspace's agents; a chat reply is one step.

A stopped run (cancel, delete, the user moved the task, chat stop, shutdown) is discarded: no
comment, no action, no error. Every write after a run re-checks that its rows still exist.
"""

import contextlib
import functools
import logging
import os
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import CUSTOM_CLI, Agent, custom_health_key
from chats.actions import execute_actions, failure_summary
from chats.cli_notes import no_cli_message
from chats.malamar_agent import knowledge_base_dir, malamar_instruction
from chats.models import Chat, ChatQueueItem
from chats.selectors import MALAMAR_NAME, participant_cli_type
from chats.services import (
    chat_message_add_agent,
    chat_message_add_system,
    chat_run_finished,
    chat_run_started,
)
from core import events
from core.actors import SYSTEM, agent_actor, author_name
from core.settings_store import mailgun_configured, settings_get
from notifications.services import notify_task_error, notify_task_in_review
from runner import prompts
from runner.clis.base import Command, RunOptions
from runner.files import (
    fresh_output_path,
    task_input_path,
    temp_dir,
    working_directory,
    write_private,
)
from runner.limits import Limit
from runner.models import HEALTH_MARKS, QueueStatus, RunStatus
from runner.recorder import RunRecorder, stall_limits
from runner.schemas import (
    AGENT_CHAT_ACTION_TYPES,
    MALAMAR_CHAT_ACTION_TYPES,
    InvalidOutput,
    chat_schema,
    parse_task_output,
    task_schema,
)
from runner.selectors import cli_health_all, cli_health_marked, cli_limited
from runner.services import cli_health_run_succeeded, cli_limit_set
from runner.worker import execution, process
from runner.worker.snapshotting import PassSnapshots, RunSnapshots
from tasks import branches
from tasks import selectors as task_selectors
from tasks import services as task_services
from tasks.models import (
    RUNNABLE_STATUSES,
    Task,
    TaskComment,
    TaskLog,
    TaskQueueItem,
    TaskStatus,
)

log = logging.getLogger(__name__)
ACTIVITY_EVERY = 60.0  # seconds: how often a pass's quiet steps bump the workspace's activity


SETUP_TIMEOUT_SECONDS = 30 * 60
SETUP_OUTPUT_CHARS = 20_000


def _setup_output(done) -> str:
    """The end of what a setup command printed (stdout, then stderr)."""
    text = "\n".join(part.rstrip() for part in (done.stdout, done.stderr) if part.strip())
    return text[-SETUP_OUTPUT_CHARS:]


class Stopped(Exception):
    """The run was stopped or its rows are gone: discard everything."""


@dataclass(frozen=True)
class Failure:
    """A run that failed, with the message users see (an error comment or system message)."""

    message: str


@dataclass(frozen=True)
class Paused:
    """A run that ended on its CLI's usage limit (DESIGN "Usage limits"): not an error; the
    owner waits for the CLI and continues at the same agent."""

    cli_type: str
    limit: Limit


def internal_error_message(exc: Exception) -> str:
    return (
        f"Malamar hit an internal error ({type(exc).__name__}: {exc}). "
        "The details are in the worker log."
    )


class StartFailed(Exception):
    """The start transaction failed (a bug or the database): the CLI was stopped."""


def _starter(owner, recorder: RunRecorder):
    """The hook `execution.execute` calls once the CLI runs: the step's start transaction. A
    run nobody wants any more (or whose start could not be written) is stopped at once."""

    def on_started(started) -> None:
        try:
            with transaction.atomic(), events.batched():
                process = {"pid": started.pid, "pgid": started.pgid}
                recorded = owner.queue.objects.record_process(
                    owner.item, **process, started_at=started.create_time
                )
                if not recorded:
                    raise Stopped
                owner.start(recorder)
        except Stopped:
            owner.stop.set()
        except Exception as exc:
            log.exception("Could not record a run's start", extra={"item": owner.item.id})
            recorder.start_error = exc
            owner.stop.set()

    return on_started


# the step ----------------------------------------------------------------------------------


def run_step(owner):
    """Run one agent for `owner` (a TaskPass or a ChatReply): returns what the owner read from
    the CLI (its outcome or a Failure), already applied. Raises Stopped when discarded."""
    recorder = owner.recorder()
    try:
        result = _run_cli(owner, recorder)
    except BaseException:
        with contextlib.suppress(Exception):  # stopped: keep what the agent did so far
            owner.after_run()
        _close(recorder)
        raise
    result = owner.after_run() or result
    try:
        with transaction.atomic(), events.batched():
            wanted = owner.still_wanted()
            if wanted and not recorder.started:  # the CLI never ran: the run still counts
                owner.start(recorder)
            if recorder.started:
                recorder.finish_writes()
            if wanted:
                owner.apply(result)
    except Exception:
        _close(recorder)  # the run's record must end even when applying its result failed
        raise
    run = recorder.run
    key = custom_health_key(run.agent_id) if run.cli_type == CUSTOM_CLI else run.cli_type
    if recorder.status == RunStatus.COMPLETED and key in owner.health_marked:
        cli_health_run_succeeded(cli_type=key)  # the CLI works after all
    if not wanted:
        raise Stopped
    return result


def _close(recorder: RunRecorder) -> None:
    """The run ended without a result to apply (stopped, or a bug): save its final record."""
    if recorder.started:
        with transaction.atomic(), events.batched():
            recorder.finish_writes()


def _run_cli(owner, recorder: RunRecorder):
    cwd, problem = owner.run_directory()
    if cwd is None:
        recorder.status = RunStatus.FAILED
        return Failure(problem)
    output_path = fresh_output_path(owner.output_prefix)
    input_path = owner.write_input(output_path)
    cli_type = recorder.run.cli_type
    snapshots = RunSnapshots(recorder, cwd, owner.snapshots)
    snapshots.take_before()
    run = execution.execute(
        cli_type=cli_type,
        input_path=input_path,
        output_path=output_path,
        schema=owner.schema,
        schema_kind=owner.schema_kind,
        cwd=cwd,
        stop=owner.stop,
        include_dirs=owner.include_dirs(input_path),
        on_started=_starter(owner, recorder),
        recorder=recorder,
        options=owner.run_options,
        cli_conf=owner.settings["cli_settings"].get(cli_type),
        mcp=execution.mcp_server_for(owner.workspace),
    )
    snapshots.take_after()  # a stopped run may have changed files too
    if recorder.start_error is not None:
        raise StartFailed(str(recorder.start_error)) from recorder.start_error
    recorder.note(run)
    if run.stopped or owner.stop.is_set():
        raise Stopped
    if run.limit:
        return Paused(cli_type=recorder.run.cli_type, limit=run.limit)
    if run.error:
        return Failure(run.error)
    result = owner.read(run.data)
    if isinstance(result, Failure) and owner.invalid_output_fails_run:
        recorder.status = RunStatus.FAILED
    return result


# task passes -------------------------------------------------------------------------------


def task_input_text(
    task: Task,
    agent: Agent,
    output_path: Path,
    agents=None,
    history=None,
    *,
    isolated: bool = False,
) -> str:
    """The input file of one agent step; `agents` = the workspace's (id, name) in order,
    `history` = tasks.selectors.task_history(task) (both read now when not given);
    `isolated`: the task works on its branch (agents are told which)."""
    if agents is None:
        agents = list(
            Agent.objects.filter(workspace_id=task.workspace_id)
            .in_order()
            .values_list("id", "name")
        )
    comments, logs = history if history is not None else task_selectors.task_history(task)
    names = dict(agents)
    comments = [
        prompts.comment_row(
            c,
            author_name(c.author_type, c.agent_id, names),
            task_selectors.line_comment_text(c) if c.is_line_comment else None,
        )
        for c in task_selectors.collapse_repeated_errors(
            task_selectors.mark_outdated(task.id, comments)
        )
    ]
    return prompts.task_input(
        workspace=task.workspace,
        agent=agent,
        agent_names=[name for _id, name in agents],
        task=task,
        comments=comments,
        logs=[prompts.log_row(entry) for entry in logs],
        output_path=str(output_path),
        branch=(task.branch_name, task.branch_base) if isolated and task.branch_name else None,
    )


def _begin_task(item: TaskQueueItem) -> tuple[Task | None, bool]:
    """Task → In Progress; the workspace's other In Progress tasks go back to Todo (queued).
    Returns (task, whether it moved); None when the task is gone, or waits for the user (the
    item is then finished). One read: the task together with the workspace's In Progress
    tasks. Only the task rows are locked, and not against key reads: locking the workspace row
    too (select_related) deadlocked on PostgreSQL with a parallel pass that held its task row
    and inserted a row referencing the workspace (CI, parallel tasks in one workspace)."""
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
            return None, False
        if task.status not in RUNNABLE_STATUSES:
            TaskQueueItem.objects.finish(item, QueueStatus.COMPLETED)
            return None, False
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
                task_services.task_status_set(task=other, status=TaskStatus.TODO, actor=SYSTEM)
                task_services.queue_item_ensure(task=other)
        moved = task.status == TaskStatus.TODO
        if moved:
            task_services.task_status_set(task=task, status=TaskStatus.IN_PROGRESS, actor=SYSTEM)
    return task, moved


class TaskPass:
    """One pass of a task through the workspace's agents (one queue item = one pass).

    Read once per pass: the settings, the CLIs' health marks, the agents and the input's
    comments and logs. Each step's finish reads the task and its workspace anyway (the "still
    wanted" check); when the workspace's `updated_at` moved (its agents or limits changed) the
    agents are read again before the next agent, so edits and reorders apply at once; when the
    task's `updated_at` moved (a comment, a move, an edit: every writer of its comments and
    logs moves it, see tasks.services) the comments and logs are read again. The pass's own
    agent_started/agent_finished logs are added to them as they are written.

    A comment queues the next pass (the comment service does that); "in_review" ends the pass;
    a pass where nobody commented moves the task to In Review (in the last step's finish); an
    error writes an error comment (which queues the retry) and ends the pass."""

    queue = TaskQueueItem
    schema_kind = "task"
    output_prefix = "malamar_output"
    invalid_output_fails_run = True

    def __init__(self, item: TaskQueueItem, *, stop: threading.Event, shutdown: threading.Event):
        self.item, self.stop, self.shutdown = item, stop, shutdown
        self.task: Task | None = None
        self.agent: Agent | None = None
        self.agents: list[tuple[str, str]] = []
        self.workspace_agents: list[Agent] = []
        self.agents_read_at = None  # the workspace's updated_at when its agents were read
        self.history: tuple[list, list] | None = None
        self.history_read_at = None  # the task's updated_at when its history was read
        self.schema = task_schema()
        self.worktree: branches.Worktree | None = None
        self.commit: str | None = None
        self.ended = False  # the item is finished (error, In Review, or the pass's end)
        self.snapshots = PassSnapshots()  # one snapshot between two runs, the first trees
        self.started_log = None  # the next run's agent_started log, shown in its input
        self.activity_at: float | None = None  # when this pass last bumped the workspace

    # the pass --------------------------------------------------------------------------------
    def run(self) -> None:
        """Never raises for CLI or agent trouble. At shutdown the item stays in progress so that
        startup recovery re-queues it."""
        try:
            self.task, moved = _begin_task(self.item)
            if self.task is None or not self._prepare_worktree():
                return
            if moved:  # the move bumped the workspace's activity
                self.activity_at = time.monotonic()
            self.settings = settings_get()
            # Read once per pass (a CLI limited meanwhile pauses the pass at its own run).
            self.limited = cli_limited()
            # A pass paused on a usage limit continues where it stopped.
            self.pass_started = self.item.pass_started_at or timezone.now()
            order = None
            while (agent := self._next_agent(order)) is not None:
                order, self.agent = agent.order, agent
                if not self._choose_cli():
                    return  # its CLI is out of quota: the item waits for it
                run_step(self)
                if self.ended:
                    return  # apply() finished (or paused) the item
            self._end_pass()
        except Stopped:
            if not self.shutdown.is_set():
                TaskQueueItem.objects.finish(self.item, QueueStatus.FAILED)
        except Exception as exc:  # a bug must not leave the task stuck without a word
            log.exception("Task pass failed", extra={"task_id": self.item.task_id})
            self._internal_error(exc)

    # branch per task ---------------------------------------------------------------------------
    def _prepare_worktree(self) -> bool:
        """Branch per task: the task's worktree (made on first use, its setup command run until
        it succeeds once). False when there is none to be had: the pass ended with an error
        comment saying why (and the usual retry)."""
        workspace = self.task.workspace
        if not workspace.isolated:
            return True
        try:
            worktree = branches.prepare(self.task, workspace)
        except branches.BranchProblem as exc:
            self._fail_pass(str(exc))
            return False
        if worktree.created:
            with transaction.atomic(), events.batched():
                task_services.task_branch_record(task=self.task, worktree=worktree)
        problem = self._setup(worktree, workspace.setup_command)
        if problem:
            self._fail_pass(problem)
            return False
        self.worktree = worktree
        return True

    def _setup(self, worktree: branches.Worktree, command: str) -> str:
        """Run the workspace's setup command in a new worktree; its output goes to the Activity
        tab. Returns the error message when it failed ("" when it worked or had nothing to do)."""
        if not command.strip() or branches.setup_done(self.task.id):
            return ""
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return f"The setup command cannot be read: {exc}"
        done = process.run(
            Command(argv),
            cwd=str(worktree.path),
            env=dict(os.environ),
            stop=self.stop,
            timeout=SETUP_TIMEOUT_SECONDS,
        )
        if done.stopped:
            raise Stopped
        output = _setup_output(done)
        with transaction.atomic(), events.batched():
            task_services.task_setup_log(
                task=self.task, command=command, exit_code=done.exit_code, output=output
            )
        if done.start_error or done.timed_out or done.exit_code != 0:
            why = done.start_error or (
                "timed out" if done.timed_out else f"exit code {done.exit_code}"
            )
            return f"The setup command `{command}` failed ({why}):\n\n```\n{output}\n```"
        branches.setup_mark_done(self.task.id)
        return ""

    def _fail_pass(self, message: str) -> None:
        """The pass cannot run (no worktree, a failed setup): an error comment, the usual
        back-off, and the item ends."""
        with transaction.atomic(), events.batched():
            task = Task.objects.filter(id=self.item.task_id).first()
            if task is None:
                return
            failures = task_services.task_run_failed(task=task, message=message)
            notify_task_error(task=task, message=message, failure_streak=failures)
            TaskQueueItem.objects.finish(self.item, QueueStatus.FAILED)

    def run_directory(self) -> tuple[Path | None, str]:
        if self.worktree is not None:
            return self.worktree.path, ""
        return working_directory(self.workspace, self.working_folder)

    def after_run(self) -> Failure | None:
        """Commit what the agent changed on the task branch (a Failure if git refused)."""
        self.commit = None
        if self.worktree is None:
            return None
        try:
            self.commit = branches.commit_run(
                self.worktree.path, agent_name=self.agent.name, task=self.task
            )
        except branches.BranchProblem as exc:
            return Failure(str(exc))
        return None

    @functools.cached_property
    def health_marked(self) -> set[str]:
        """The CLIs a health check marked, read once per pass when the first step has ended
        (not on the way to starting the first CLI)."""
        return cli_health_marked()

    def _agents_changed(self) -> bool:
        return self.agents_read_at != self.task.workspace.updated_at

    def _next_agent(self, order: int | None) -> Agent | None:
        if self._agents_changed():
            workspace = self.task.workspace
            agents = Agent.objects.filter(workspace_id=workspace.id).in_order()
            self.workspace_agents, self.agents_read_at = list(agents), workspace.updated_at
            self.agents = [(agent.id, agent.name) for agent in self.workspace_agents]
            self.stall = stall_limits(workspace, settings=self.settings)
        resume = self.item.resume_agent_id
        if order is None and resume:  # the agent whose run hit the limit (if it still exists)
            self.item.resume_agent_id = None
            found = next((a for a in self.workspace_agents if a.id == resume), None)
            if found is not None:
                return found
        return next((a for a in self.workspace_agents if order is None or a.order > order), None)

    def _is_last_step(self) -> bool:
        """No agent after this one (as far as the agents read are still current)."""
        return not self._agents_changed() and self._next_agent(self.agent.order) is None

    def _history(self) -> tuple[list, list]:
        if self._current_history() is None:
            self.history = task_selectors.task_history(self.task)
            self.history_read_at = self.task.updated_at
        return self.history

    def _current_history(self) -> tuple[list, list] | None:
        """The history read, if nothing but this pass's own logs was added since."""
        if self.history is None or self.history_read_at != self.task.updated_at:
            return None
        return self.history

    def _remember(self, entry: TaskLog | None) -> None:
        """A log row this pass wrote: the input's history stays current without a read."""
        if entry is not None and self._current_history() is not None:
            self.history[1].append(entry)

    def _activity_due(self, *, wrote: bool) -> bool:
        """Whether a step's finish bumps the workspace's activity itself: not when the step
        wrote a comment or a move (they bump it), nor within ACTIVITY_EVERY of the pass's last
        bump (pages show it in minutes; a pass of quick steps would bump it every few ms)."""
        now = time.monotonic()
        if wrote or self.activity_at is None or now - self.activity_at >= ACTIVITY_EVERY:
            self.activity_at = now
            return not wrote
        return False

    def _commented_since(self, since) -> bool:
        history = self._current_history()
        if history is None:
            return TaskComment.objects.filter(task=self.task, created_at__gte=since).exists()
        return any(comment.created_at >= since for comment in history[0])

    def _last_agent_comment(self) -> str:
        history = self._current_history()
        if history is None:
            return task_selectors.last_agent_comment(self.task)
        by_agents = [comment for comment in history[0] if comment.agent_id]
        return max(by_agents, key=lambda c: c.created_at).content if by_agents else ""

    def _choose_cli(self) -> bool:
        """The agent's CLI, or its fallback CLI while that one is out of quota; False (and the
        item paused) when neither may run now."""
        agent, limited = self.agent, self.limited
        self.cli_type, self.fallback_for = agent.cli_type, ""
        if agent.cli_type not in limited:
            return True
        fallback = agent.fallback_cli_type
        if fallback and fallback != agent.cli_type and fallback not in limited:
            self.cli_type, self.fallback_for = fallback, agent.cli_type
            return True
        with transaction.atomic(), events.batched():
            self._wanted_task()
            self._pause(agent.cli_type)
        return False

    def _pause(self, cli_type: str, *, limited: bool = False) -> None:
        """Inside a transaction: the item goes back to the queue, waiting for `cli_type`, and
        continues at this agent with this pass's start."""
        task_services.task_pass_pause(
            task=self.task,
            item=self.item,
            actor=agent_actor(self.agent),
            cli_type=cli_type,
            pass_started=self.pass_started,
            limited=limited,
        )
        self.ended = True

    def _wanted_task(self) -> Task:
        """Inside a transaction: the item still runs and the task is still In Progress (checked
        here, so the item's own check needs no join)."""
        wanted = TaskQueueItem.objects.unstopped_q("queue_items__")
        rows = Task.objects.select_related("workspace").filter(
            wanted,
            queue_items__id=self.item.id,
            queue_items__worker_id=self.item.worker_id,  # still ours (DESIGN "Scale-out")
            id=self.item.task_id,
        )
        # Locks the item (and its task and workspace) with PostgreSQL until this transaction
        # ends: a recovery's requeue of the item waits, then finds it as this finish left it.
        rows = rows.filter(status=TaskStatus.IN_PROGRESS).select_for_update(no_key=True)
        task = next(iter(rows[:1]), None)  # (a join, not a subquery: cheaper to compile)
        if self.stop.is_set() or task is None:
            raise Stopped
        self.task = task
        return task

    def _end_pass(self) -> None:
        """The loop ran out of agents without a finish that saw it coming (no agents, or they
        changed during the last step)."""
        with transaction.atomic(), events.batched():
            self._wanted_task()
            self._end_pass_writes()

    def _end_pass_writes(self) -> None:
        """Inside a transaction that checked the task is still wanted."""
        task = self.task
        commented = self._commented_since(self.pass_started)
        if not commented:
            notify = {"last_comment": self._last_agent_comment(), "settings": self.settings}
            task_services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=SYSTEM)
            notify_task_in_review(task=task, **notify)
        TaskQueueItem.objects.finish(self.item, QueueStatus.COMPLETED)
        if commented and self.item.pass_started_at:
            # A resumed pass: the next pass its comments asked for gave way at the pause.
            task_services.queue_item_ensure(task=task)
        self.ended = True

    def _internal_error(self, exc: Exception) -> None:
        """Same path as a CLI error: an error comment (which queues the retry) and back-off."""
        with transaction.atomic(), events.batched():
            task = Task.objects.filter(id=self.item.task_id).first()
            if task is None:
                return
            task_services.task_run_failed(task=task, message=internal_error_message(exc))
            TaskQueueItem.objects.finish(self.item, QueueStatus.FAILED)

    # one step (called by run_step) -----------------------------------------------------------
    @property
    def workspace(self):
        return self.task.workspace

    @property
    def working_folder(self) -> str:
        return f"malamar_task_{self.task.id}"

    def include_dirs(self, input_path: Path) -> tuple[str, ...]:
        return (str(input_path.parent),)

    def recorder(self) -> RunRecorder:
        agent = self.agent
        # A fallback CLI runs without the agent's own model and flags (they are its CLI's).
        self.run_options = RunOptions() if self.fallback_for else execution.options_for(agent)
        return RunRecorder(
            cli_type=self.cli_type,
            model=self.run_options.model,
            workspace_id=self.task.workspace_id,
            agent_id=agent.id,
            agent_name=agent.name,
            task_id=self.task.id,
            fallback_for=self.fallback_for,
            deferred=True,
            worker_id=self.item.worker_id,
            **self.stall,
        )

    def write_input(self, output_path: Path) -> Path:
        """The input shows this run's agent_started log already: it is saved by start()."""
        self.started_log = task_services.task_agent_started_log(
            task=self.task, actor=agent_actor(self.agent)
        )
        comments, logs = self._history()
        history = (comments, [*logs, self.started_log])
        isolated = self.worktree is not None
        text = task_input_text(
            self.task, self.agent, output_path, self.agents, history, isolated=isolated
        )
        return write_private(task_input_path(self.task.id), text)

    def start(self, recorder: RunRecorder) -> None:
        """Inside the start transaction (the item is still wanted): the run and its log."""
        recorder.start_writes()
        entry, self.started_log = self.started_log, None
        self._remember(
            task_services.task_agent_started(
                task=self.task, actor=agent_actor(self.agent), run_id=recorder.run.id, entry=entry
            )
        )

    def read(self, data):
        try:
            return parse_task_output(data)
        except InvalidOutput as exc:
            return Failure(f"CLI output structure was invalid: {exc}")

    def still_wanted(self) -> bool:
        try:
            self._wanted_task()
        except Stopped:
            return False
        return True

    def apply(self, result) -> None:
        if self.commit:
            task_services.task_branch_commit_log(
                task=self.task, actor=agent_actor(self.agent), commit=self.commit
            )
        if isinstance(result, Paused):
            self._apply_pause(result)
        elif isinstance(result, Failure):
            self._apply_failure(result.message)
        else:
            self._apply_outcome(result)

    def _apply_pause(self, paused: Paused) -> None:
        """Not an error: no comment, no email, and the end of a failure streak (the CLI started
        and answered: whatever failed before, it is not what stops the task now; its card says
        it waits for the CLI, not "failed, retry pending"). The CLI is limited (one
        notification for all waiting work) and this pass waits for it."""
        cli_limit_set(cli_type=paused.cli_type, limit=paused.limit)
        task_services.task_run_succeeded(task=self.task)
        fallback = self.agent.fallback_cli_type
        if self.fallback_for:  # the fallback ran out too: wait for the agent's own CLI
            waits_for = self.fallback_for
        elif fallback and fallback != paused.cli_type and fallback not in cli_limited():
            waits_for = ""  # runs again at once, on the fallback CLI (see _choose_cli)
        else:
            waits_for = paused.cli_type
        self._pause(waits_for, limited=True)

    def _apply_outcome(self, outcome) -> None:
        task, actor = self.task, agent_actor(self.agent)
        for content in outcome.comments:
            task_services.comment_create(task=task, content=content, actor=actor)
        if outcome.in_review:
            notify = {"last_comment": self._last_agent_comment(), "settings": self.settings}
            task_services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=actor)
            notify_task_in_review(task=task, **notify)
        task_services.task_run_succeeded(task=task)
        touch = self._activity_due(wrote=bool(outcome.comments) or outcome.in_review)
        finished = task_services.task_agent_finished(
            task=task, actor=actor, action_type=outcome.action_type, touch_workspace=touch
        )
        self._remember(finished)
        if outcome.in_review:
            TaskQueueItem.objects.finish(self.item, QueueStatus.COMPLETED)
            self.ended = True
        elif self._is_last_step():
            self._end_pass_writes()

    def _apply_failure(self, message: str) -> None:
        task = self.task
        failures = task_services.task_run_failed(
            task=task, message=message, agent_name=self.agent.name
        )
        notify_task_error(
            task=task, message=message, failure_streak=failures, settings=self.settings
        )
        task_services.task_agent_finished(
            task=task, actor=agent_actor(self.agent), action_type="error"
        )
        TaskQueueItem.objects.finish(self.item, QueueStatus.FAILED)
        self.ended = True


# chat replies ------------------------------------------------------------------------------


class Outcome:
    """`outcome` of chat.processing_finished."""

    REPLIED = "replied"  # the agent's message was stored
    FAILED = "failed"  # a system message says why
    STOPPED = "stopped"  # stopped by the user (or shutdown): output discarded
    WAITING = "waiting"  # the CLI is out of quota: the reply comes when it is back


def _history(chat: Chat) -> list[dict]:
    """What agents see: included messages (system messages always), oldest first."""
    rows = []
    for m in chat.messages.filter(Q(included=True) | Q(role="system")).order_by("created_at", "id"):
        row = {"role": m.role}
        if m.role == "agent" and m.agent_name:
            row["agent"] = m.agent_name
        rows.append({**row, "content": m.message, "created_at": prompts.iso(m.created_at)})
    return rows


def _parse_chat_output(data) -> tuple[str, list]:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    message = data.get("message")
    if message is not None and not isinstance(message, str):
        raise ValueError('"message" must be a string')
    actions = data.get("actions") or []
    if not isinstance(actions, list):
        raise ValueError('"actions" must be an array')
    return message or "", actions


def _speaker(chat: Chat, item: ChatQueueItem):
    """(participant, agent) answering this item; older items fall back to the first one."""
    participant = item.participant or chat.participants.lead()
    return participant, participant.agent if participant else None


class ChatReply:
    """One participant's answer to a chat message: one step. Chats run concurrently (several in
    one workspace too). The CLI is the participant's override, else its agent's, else for the
    Malamar agent the first available in Claude → Codex → Gemini → OpenCode."""

    queue = ChatQueueItem
    output_prefix = "malamar_chat_output"
    invalid_output_fails_run = False

    def __init__(self, item: ChatQueueItem, *, stop: threading.Event, shutdown: threading.Event):
        self.item, self.stop, self.shutdown = item, stop, shutdown
        self.outcome = Outcome.FAILED
        self.announced = False
        self.health_marked: set[str] = set()
        self.fallback_for = ""
        self.snapshots = PassSnapshots()

    def run(self) -> None:
        chat = Chat.objects.select_related("workspace").filter(id=self.item.chat_id).first()
        if chat is None:
            return
        self.chat = chat
        participant, self.agent = _speaker(chat, self.item)
        self.agent_name = self.agent.name if self.agent else MALAMAR_NAME
        self.cli = participant_cli_type(participant) if participant else None
        self.schema = chat_schema(malamar=self.agent is None)
        self.schema_kind = "malamar" if self.agent is None else "chat"
        # How the run ended, for the page: only "replied" is toasted as a reply; a stopped run
        # (Stop, shutdown) is discarded and says nothing.
        try:
            if self.cli is None:
                self._reply_without_cli()
            else:
                # Read once per reply: the settings and the CLIs' health.
                self.settings, self.health = settings_get(), cli_health_all()
                marked = [h["cli_type"] for h in self.health if h["status"] in HEALTH_MARKS]
                self.health_marked = set(marked)
                if self._choose_cli():
                    run_step(self)
        except Stopped:
            self.outcome = Outcome.STOPPED
            if not self.shutdown.is_set():
                ChatQueueItem.objects.finish(self.item, QueueStatus.FAILED)
        except Exception as exc:  # a bug must not leave the user waiting for a reply forever
            log.exception("Chat processing failed", extra={"chat_id": chat.id})
            self.outcome = Outcome.FAILED
            with transaction.atomic(), events.batched():
                if Chat.objects.filter(id=chat.id).exists():
                    chat_message_add_system(chat=chat, message=internal_error_message(exc))
                ChatQueueItem.objects.finish(self.item, QueueStatus.FAILED)
        finally:
            if not self.announced:  # apply() announces in its own transaction
                with transaction.atomic():
                    if Chat.objects.filter(id=chat.id).exists():
                        self._announce()

    def _choose_cli(self) -> bool:
        """While the CLI is out of quota: the agent's fallback CLI, else the reply waits (the
        item stays queued for that CLI, no system message: the CLI's limit is not an error)."""
        limited = {h["cli_type"] for h in self.health if h.get("limited")}
        self.fallback_for = ""
        if self.cli not in limited:
            return True
        fallback = self.agent.fallback_cli_type if self.agent else ""
        if fallback and fallback not in limited:
            self.cli, self.fallback_for = fallback, self.cli
            return True
        with transaction.atomic(), events.batched():
            if not self.still_wanted():
                raise Stopped
            self._pause(self.cli)
        return False

    def _pause(self, cli_type: str) -> None:
        ChatQueueItem.objects.pause(self.item, cli_type=cli_type)
        self.outcome = Outcome.WAITING
        self._announce()

    def _announce(self) -> None:
        """chat.processing_finished, with how the run ended."""
        chat_run_finished(chat=self.chat, agent_name=self.agent_name, outcome=self.outcome)
        self.announced = True

    def _reply_without_cli(self) -> None:
        with transaction.atomic(), events.batched():
            chat_run_started(chat=self.chat, agent_name=self.agent_name)
            if not self.still_wanted():
                raise Stopped
            self.apply(Failure(no_cli_message([])))

    # one step (called by run_step) -----------------------------------------------------------
    @property
    def workspace(self):
        return self.chat.workspace

    @property
    def working_folder(self) -> str:
        return f"malamar_chat_{self.chat.id}"

    def include_dirs(self, _input_path: Path) -> tuple[str, ...]:
        return (str(temp_dir()), str(knowledge_base_dir()))

    def run_directory(self) -> tuple[Path | None, str]:
        return working_directory(self.workspace, self.working_folder)

    def after_run(self) -> None:
        return None

    def recorder(self) -> RunRecorder:
        agent = self.agent
        # The agent's model and flags belong to its own CLI: a chat's override runs without them.
        own_cli = agent is not None and self.cli == agent.cli_type
        self.run_options = execution.options_for(agent) if own_cli else RunOptions()
        return RunRecorder(
            cli_type=self.cli,
            model=self.run_options.model,
            workspace_id=self.chat.workspace_id,
            agent_id=agent.id if agent else None,
            agent_name=self.agent_name,
            chat_id=self.chat.id,
            fallback_for=self.fallback_for,
            deferred=True,
            worker_id=self.item.worker_id,
            **stall_limits(self.chat.workspace, settings=self.settings),
        )

    def start(self, recorder: RunRecorder) -> None:
        """Inside the start transaction (the item is still wanted): the run, and open pages
        learn that the agent is answering."""
        recorder.start_writes()
        chat_run_started(chat=self.chat, agent_name=self.agent_name)

    def write_input(self, output_path: Path) -> Path:
        """One input file per run, so parallel answers never share a file."""
        chat, agent, item_id = self.chat, self.agent, self.item.id
        is_malamar = agent is None
        context_path = write_private(
            temp_dir() / f"malamar_chat_{chat.id}_{item_id}_context.md",
            prompts.chat_context(
                workspace=chat.workspace,
                agents=list(Agent.objects.filter(workspace_id=chat.workspace_id).in_order()),
                clis=self.health,
                mailgun_configured=mailgun_configured(self.settings),
                temp_dir=str(temp_dir()),
                review_tasks=(
                    task_selectors.in_review_of_workspace(chat.workspace_id) if is_malamar else None
                ),
            ),
        )
        text = prompts.chat_input(
            chat_id=chat.id,
            workspace_title=chat.workspace.title,
            agent_name=self.agent_name,
            instruction=(
                malamar_instruction(self.settings["knowledge_base_url"])
                if is_malamar
                else agent.instruction
            ),
            history=_history(chat),
            context_path=str(context_path),
            output_path=str(output_path),
            schema=self.schema,
            action_names=MALAMAR_CHAT_ACTION_TYPES if is_malamar else AGENT_CHAT_ACTION_TYPES,
        )
        return write_private(temp_dir() / f"malamar_chat_{chat.id}_{item_id}.md", text)

    def read(self, data):
        try:
            return _parse_chat_output(data)
        except ValueError as exc:
            return Failure(f"CLI output structure was invalid: {exc}")

    def still_wanted(self) -> bool:
        """Inside a transaction: the item still runs and its chat still exists."""
        item = (
            ChatQueueItem.objects.wanted()
            .filter(id=self.item.id, worker_id=self.item.worker_id)  # still ours
            .select_related("chat__workspace")
            # PostgreSQL: a recovery's requeue of the item waits for this transaction's end.
            .select_for_update(no_key=True, of=("self",))
            .first()
        )
        if self.stop.is_set() or item is None:
            return False
        self.chat = item.chat
        return True

    def apply(self, result) -> None:
        chat = self.chat
        if isinstance(result, Paused):
            cli_limit_set(cli_type=result.cli_type, limit=result.limit)
            self._pause(self.fallback_for or result.cli_type)
            return
        if isinstance(result, Failure):
            chat_message_add_system(chat=chat, message=result.message)
            ChatQueueItem.objects.finish(self.item, QueueStatus.FAILED)
            self._announce()
            return
        message, actions = result
        results = execute_actions(chat=chat, actions=actions, is_malamar=self.agent is None)
        chat_message_add_agent(
            chat=chat, message=message, actions=[r.as_stored() for r in results], agent=self.agent
        )
        summary = failure_summary(results)
        if summary:
            chat_message_add_system(chat=chat, message=summary)
        ChatQueueItem.objects.finish(self.item, QueueStatus.COMPLETED)
        self.outcome = Outcome.REPLIED
        self._announce()
