"""One run pipeline: a task pass and a chat reply are the same thing to the worker.

A run step checks that its queue item is still wanted and records the run's start (one
transaction), builds the input, starts the CLI (`execution.execute`), streams its output through
the recorder, reads the result, and applies it through the owning app's services together with
the run's final record (a second transaction). Events of each transaction go to the outbox in
one insert. A task pass is a loop of steps over the workspace's agents; a chat reply is one step.

A stopped run (cancel, delete, the user moved the task, chat stop, shutdown) is discarded: no
comment, no action, no error. Every write after a run re-checks that its rows still exist.
"""

import contextlib
import logging
import os
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from agents.models import CUSTOM_CLI, Agent, custom_health_key
from chats.actions import execute_actions, failure_summary
from chats.cli_notes import no_cli_message
from chats.malamar_agent import knowledge_base_dir, malamar_instruction
from chats.models import Chat, ChatQueueItem
from chats.selectors import MALAMAR_NAME, participant_cli_type
from chats.services import chat_message_add_agent, chat_message_add_system
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
from runner.selectors import cli_health_all, cli_health_marked
from runner.services import cli_health_run_succeeded
from runner.worker import execution, process
from tasks import branches
from tasks import selectors as task_selectors
from tasks import services as task_services
from tasks.models import RUNNABLE_STATUSES, Task, TaskComment, TaskQueueItem, TaskStatus
from workspaces.services import workspace_touch

log = logging.getLogger(__name__)


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


def internal_error_message(exc: Exception) -> str:
    return (
        f"Malamar hit an internal error ({type(exc).__name__}: {exc}). "
        "The details are in the worker log."
    )


def record_process(queue, item_id: str):
    """The hook `execution.execute` calls once the CLI runs: its process goes on the item."""

    def on_started(started) -> None:
        queue.objects.record_process(
            item_id, pid=started.pid, pgid=started.pgid, started_at=started.create_time
        )

    return on_started


# the step ----------------------------------------------------------------------------------


def run_step(owner):
    """Run one agent for `owner` (a TaskPass or a ChatReply): returns what the owner read from
    the CLI (its outcome or a Failure), already applied. Raises Stopped when discarded."""
    with transaction.atomic(), events.batched():
        recorder = owner.begin()
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
            recorder.finish_writes()
            wanted = owner.still_wanted()
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
    with transaction.atomic(), events.batched():
        recorder.finish_writes()


def _run_cli(owner, recorder: RunRecorder):
    cwd, problem = owner.run_directory()
    if cwd is None:
        recorder.status = RunStatus.FAILED
        return Failure(problem)
    output_path = fresh_output_path(owner.output_prefix)
    input_path = owner.write_input(output_path)
    run = execution.execute(
        cli_type=recorder.run.cli_type,
        input_path=input_path,
        output_path=output_path,
        schema=owner.schema,
        schema_kind=owner.schema_kind,
        cwd=cwd,
        stop=owner.stop,
        include_dirs=owner.include_dirs(input_path),
        on_started=record_process(owner.queue, owner.item.id),
        recorder=recorder,
        options=owner.run_options,
    )
    recorder.note(run)
    if run.stopped or owner.stop.is_set():
        raise Stopped
    if run.error:
        return Failure(run.error)
    result = owner.read(run.data)
    if isinstance(result, Failure) and owner.invalid_output_fails_run:
        recorder.status = RunStatus.FAILED
    return result


# task passes -------------------------------------------------------------------------------


def task_input_text(
    task: Task, agent: Agent, output_path: Path, agents=None, *, isolated: bool = False
) -> str:
    """The input file of one agent step; `agents` = the workspace's (id, name) in order;
    `isolated`: the task works on its branch (agents are told which)."""
    if agents is None:
        agents = list(
            Agent.objects.filter(workspace_id=task.workspace_id)
            .in_order()
            .values_list("id", "name")
        )
    names = dict(agents)
    comments = [
        prompts.comment_row(c, author_name(c.author_type, c.agent_id, names))
        for c in task_selectors.collapse_repeated_errors(
            list(task.comments.order_by("created_at", "id"))
        )
    ]
    logs = [prompts.log_row(entry) for entry in task.logs.order_by("created_at", "id")]
    return prompts.task_input(
        workspace=task.workspace,
        agent=agent,
        agent_names=[name for _id, name in agents],
        task=task,
        comments=comments,
        logs=logs,
        output_path=str(output_path),
        branch=(task.branch_name, task.branch_base) if isolated and task.branch_name else None,
    )


def _last_agent_comment(task: Task) -> str:
    comment = (
        TaskComment.objects.filter(task=task, agent_id__isnull=False)
        .order_by("-created_at")
        .first()
    )
    return comment.content if comment else ""


def _begin_task(item: TaskQueueItem) -> Task | None:
    """Task → In Progress; the workspace's other In Progress tasks go back to Todo (queued).
    None when the task is gone, or waits for the user (the item is then finished)."""
    with transaction.atomic(), events.batched():
        task = Task.objects.select_for_update().select_related("workspace")
        task = task.filter(id=item.task_id).first()
        if task is None:
            return None
        if task.status not in RUNNABLE_STATUSES:
            TaskQueueItem.objects.finish(item.id, QueueStatus.COMPLETED)
            return None
        # Parallel tasks (branch per task) keep running; a task that waits goes back to Todo.
        running = TaskQueueItem.objects.filter(
            task_id=OuterRef("pk"), status=QueueStatus.IN_PROGRESS
        )
        others = (
            Task.objects.filter(workspace_id=task.workspace_id, status=TaskStatus.IN_PROGRESS)
            .exclude(id=task.id)
            .exclude(Exists(running))
        )
        for other in others:
            task_services.task_status_set(task=other, status=TaskStatus.TODO, actor=SYSTEM)
            task_services.queue_item_ensure(task=other)
        if task.status == TaskStatus.TODO:
            task_services.task_status_set(task=task, status=TaskStatus.IN_PROGRESS, actor=SYSTEM)
    return task


class TaskPass:
    """One pass of a task through the workspace's agents (one queue item = one pass).

    Each agent is read just before it runs (edits and reorders apply at once; the same read
    gives the input its agent names). A comment queues the next pass (the comment service does
    that); "in_review" ends the pass; a pass where nobody commented moves the task to In Review;
    an error writes an error comment (which queues the retry) and ends the pass."""

    queue = TaskQueueItem
    schema_kind = "task"
    output_prefix = "malamar_output"
    invalid_output_fails_run = True

    def __init__(self, item: TaskQueueItem, *, stop: threading.Event, shutdown: threading.Event):
        self.item, self.stop, self.shutdown = item, stop, shutdown
        self.task: Task | None = None
        self.agent: Agent | None = None
        self.agents: list[tuple[str, str]] = []
        self.schema = task_schema()
        self.worktree: branches.Worktree | None = None
        self.commit: str | None = None

    # the pass --------------------------------------------------------------------------------
    def run(self) -> None:
        """Never raises for CLI or agent trouble. At shutdown the item stays in progress so that
        startup recovery re-queues it."""
        try:
            self.task = _begin_task(self.item)
            if self.task is None or not self._prepare_worktree():
                return
            # Read once per pass: the settings (stall limits) and which CLIs carry a health mark.
            self.stall = stall_limits(self.task.workspace)
            self.health_marked = cli_health_marked()
            pass_started = timezone.now()
            order = None
            while (agent := self._next_agent(order)) is not None:
                order, self.agent = agent.order, agent
                result = run_step(self)
                if isinstance(result, Failure) or result.in_review:
                    return  # apply() finished the item
            self._end_pass(pass_started)
        except Stopped:
            if not self.shutdown.is_set():
                TaskQueueItem.objects.finish(self.item.id, QueueStatus.FAILED)
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
            TaskQueueItem.objects.finish(self.item.id, QueueStatus.FAILED)

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

    def _next_agent(self, order: int | None) -> Agent | None:
        agents = list(Agent.objects.filter(workspace_id=self.task.workspace_id).in_order())
        self.agents = [(agent.id, agent.name) for agent in agents]
        return next((a for a in agents if order is None or a.order > order), None)

    def _wanted_task(self) -> Task:
        """Inside a transaction: the item still runs and the task is still In Progress (checked
        here, so the item's own check needs no join)."""
        wanted = TaskQueueItem.objects.unstopped().filter(id=self.item.id, task_id=OuterRef("pk"))
        task = (
            Task.objects.select_related("workspace")
            .filter(Exists(wanted), id=self.item.task_id, status=TaskStatus.IN_PROGRESS)
            .first()
        )
        if self.stop.is_set() or task is None:
            raise Stopped
        self.task = task
        return task

    def _payload(self, **extra) -> dict:
        return task_services.task_payload(
            self.task, agent_id=self.agent.id, agent_name=self.agent.name, **extra
        )

    def _end_pass(self, pass_started) -> None:
        with transaction.atomic(), events.batched():
            task = self._wanted_task()
            commented = TaskComment.objects.filter(task=task, created_at__gte=pass_started).exists()
            if not commented:
                task_services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=SYSTEM)
                notify_task_in_review(task=task, last_comment=_last_agent_comment(task))
            TaskQueueItem.objects.finish(self.item.id, QueueStatus.COMPLETED)

    def _internal_error(self, exc: Exception) -> None:
        """Same path as a CLI error: an error comment (which queues the retry) and back-off."""
        with transaction.atomic(), events.batched():
            task = Task.objects.filter(id=self.item.task_id).first()
            if task is None:
                return
            task_services.task_run_failed(task=task, message=internal_error_message(exc))
            TaskQueueItem.objects.finish(self.item.id, QueueStatus.FAILED)

    # one step (called by run_step) -----------------------------------------------------------
    @property
    def workspace(self):
        return self.task.workspace

    @property
    def working_folder(self) -> str:
        return f"malamar_task_{self.task.id}"

    def include_dirs(self, input_path: Path) -> tuple[str, ...]:
        return (str(input_path.parent),)

    def begin(self) -> RunRecorder:
        task, agent = self._wanted_task(), self.agent
        task_services.log_add(
            task=task,
            event_type="agent_started",
            actor=agent_actor(agent),
            metadata={"agent_name": agent.name},
        )
        workspace_touch(task.workspace_id)
        self.run_options = execution.options_for(agent)
        recorder = RunRecorder(
            cli_type=agent.cli_type,
            model=self.run_options.model,
            workspace_id=task.workspace_id,
            agent_id=agent.id,
            agent_name=agent.name,
            task_id=task.id,
            **self.stall,
        )
        events.publish("agent.execution_started", self._payload(run_id=recorder.run.id))
        return recorder

    def write_input(self, output_path: Path) -> Path:
        isolated = self.worktree is not None
        text = task_input_text(self.task, self.agent, output_path, self.agents, isolated=isolated)
        return write_private(task_input_path(self.task.id), text)

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
        if isinstance(result, Failure):
            self._apply_failure(result.message)
        else:
            self._apply_outcome(result)

    def _apply_outcome(self, outcome) -> None:
        task, actor = self.task, agent_actor(self.agent)
        for content in outcome.comments:
            task_services.comment_create(task=task, content=content, actor=actor)
        if outcome.in_review:
            task_services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=actor)
            notify_task_in_review(task=task, last_comment=_last_agent_comment(task))
        task_services.log_add(
            task=task,
            event_type="agent_finished",
            actor=actor,
            metadata={"agent_name": self.agent.name, "action_type": outcome.action_type},
        )
        task_services.task_run_succeeded(task=task)
        events.publish("agent.execution_finished", self._payload(action_type=outcome.action_type))
        if outcome.in_review:
            TaskQueueItem.objects.finish(self.item.id, QueueStatus.COMPLETED)

    def _apply_failure(self, message: str) -> None:
        task = self.task
        failures = task_services.task_run_failed(
            task=task, message=message, agent_name=self.agent.name
        )
        notify_task_error(task=task, message=message, failure_streak=failures)
        events.publish("agent.execution_finished", self._payload(action_type="error"))
        TaskQueueItem.objects.finish(self.item.id, QueueStatus.FAILED)


# chat replies ------------------------------------------------------------------------------


class Outcome:
    """`outcome` of chat.processing_finished."""

    REPLIED = "replied"  # the agent's message was stored
    FAILED = "failed"  # a system message says why
    STOPPED = "stopped"  # stopped by the user (or shutdown): output discarded


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
    participant = item.participant or chat.participants.order_by("position").first()
    agent = participant.agent if participant else chat.agent
    return participant, agent


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

    def run(self) -> None:
        chat = (
            Chat.objects.select_related("workspace", "agent").filter(id=self.item.chat_id).first()
        )
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
                run_step(self)
        except Stopped:
            self.outcome = Outcome.STOPPED
            if not self.shutdown.is_set():
                ChatQueueItem.objects.finish(self.item.id, QueueStatus.FAILED)
        except Exception as exc:  # a bug must not leave the user waiting for a reply forever
            log.exception("Chat processing failed", extra={"chat_id": chat.id})
            self.outcome = Outcome.FAILED
            with transaction.atomic(), events.batched():
                if Chat.objects.filter(id=chat.id).exists():
                    chat_message_add_system(chat=chat, message=internal_error_message(exc))
                ChatQueueItem.objects.finish(self.item.id, QueueStatus.FAILED)
        finally:
            if not self.announced:  # apply() announces in its own transaction
                with transaction.atomic():
                    if Chat.objects.filter(id=chat.id).exists():
                        self._announce()

    def _announce(self) -> None:
        """chat.processing_finished, with how the run ended."""
        events.publish("chat.processing_finished", self._payload(outcome=self.outcome))
        self.announced = True

    def _reply_without_cli(self) -> None:
        with transaction.atomic(), events.batched():
            events.publish("chat.processing_started", self._payload())
            if not self.still_wanted():
                raise Stopped
            self.apply(Failure(no_cli_message([])))

    def _payload(self, **extra) -> dict:
        return {
            "chat_id": self.chat.id,
            "chat_title": self.chat.title,
            "agent_name": self.agent_name,
            "workspace_id": self.chat.workspace_id,
            **extra,
        }

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

    def begin(self) -> RunRecorder:
        events.publish("chat.processing_started", self._payload())
        if not self.still_wanted():
            raise Stopped
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
            **stall_limits(self.chat.workspace, settings=self.settings),
        )

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
        wanted = ChatQueueItem.objects.wanted().filter(id=self.item.id, chat_id=OuterRef("pk"))
        chat = (
            Chat.objects.select_related("workspace", "agent")
            .filter(Exists(wanted), id=self.item.chat_id)
            .first()
        )
        if self.stop.is_set() or chat is None:
            return False
        self.chat = chat
        return True

    def apply(self, result) -> None:
        chat = self.chat
        if isinstance(result, Failure):
            chat_message_add_system(chat=chat, message=result.message)
            ChatQueueItem.objects.finish(self.item.id, QueueStatus.FAILED)
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
        ChatQueueItem.objects.finish(self.item.id, QueueStatus.COMPLETED)
        self.outcome = Outcome.REPLIED
        self._announce()
