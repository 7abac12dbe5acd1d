"""One run pipeline: a task pass and a chat reply are the same thing to the worker.

A step (`run_step`) walks one agent's run in order:
1. the plan: which CLI and options (runner.plans, chosen by the owner before the step);
2. the input file, from what the owner already read, and the run's command (execution.prepare);
3. the fork: the CLI's process waits at its gate (process.spawn; a gate started while the
   run before worked, when there is one). In a task pass the command and the process are
   made ready while the agent before works (`Ready`), and that process is recorded by the
   finish of the agent before: between two agents, only the input is written before the go;
4. otherwise the process record (`_record`, one statement), which is also the "still wanted"
   check. Only then may the CLI run (`release`): a worker killed before this point leaves
   nothing running, or a recorded process at its gate that its recovery kills;
5. the start transaction (`_start`), while the CLI starts: the run row, the activity log and
   the events (a worker killed before its commit leaves a recorded process to its recovery);
6. the stream, through the recorder, to the process's end (the next run made ready, and in a
   task pass recorded by the start transaction as the item's next process);
7. the finish transaction: the result read and applied through the owning app's services
   (tasks.services for a pass, chats.replies for a reply) with the run's final record. In a
   task pass whose next agent follows, that agent's CLI goes first (`TaskPass.go_early`): its
   input is written with this answer's rows built ahead (the finish writes the same rows) and
   the finish is written as it starts; a finish that finds the pass unwanted, another agent
   next, or the task or its workspace written by somebody else meanwhile (the input missed
   it) kills it before it has a run of its own (then that agent starts anew).

Events of each transaction go to the outbox in one insert. Settings, agents, the CLIs' states
and the input's comments and logs are read once per pass (re-read only when the rows a step
reads anyway say they changed). A task pass is a loop of steps over the workspace's agents; a
chat reply is one step. The owners only orchestrate: when a task reaches In Review, what a
failure does, which CLI runs: the services and runner.plans decide.

A stopped run (cancel, delete, the user moved the task, chat stop, shutdown) is discarded: no
comment, no action, no error. Every write after a run re-checks that its rows still exist.
"""

import contextlib
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from chats.cli_notes import no_cli_message
from chats.malamar_agent import knowledge_base_dir, malamar_instruction
from chats.models import Chat, ChatQueueItem
from chats.replies import (
    ReplyEnd,
    chat_reply_answered,
    chat_reply_failed,
    chat_reply_limited,
    chat_reply_waits,
)
from chats.selectors import MALAMAR_NAME, participant_cli_type
from chats.services import chat_run_finished, chat_run_started
from core import events
from core.actors import agent_actor, author_name
from core.compiled_queries import compiled_models
from core.errors import ValidationFailed
from core.settings_store import mailgun_configured, settings_get
from runner.clis.base import Command
from runner.files import (
    fresh_output_path,
    task_input_path,
    temp_dir,
    working_directory,
    write_private,
)
from runner.limits import Limit
from runner.models import QueueStatus, RunStatus
from runner.plans import RunPlan, Wait, health_key_label, plan_run
from runner.recorder import RunRecorder, stall_limits
from runner.schemas import (
    AGENT_CHAT_ACTION_TYPES,
    MALAMAR_CHAT_ACTION_TYPES,
    InvalidOutput,
    chat_schema,
    parse_task_output,
    task_schema,
)
from runner.selectors import CliStates, cli_health_all, cli_states, cli_states_from
from runner.services import cli_health_works
from tasks import branches
from tasks import selectors as task_selectors
from tasks import services as task_services
from tasks.models import (
    KEEPS_GOING,
    PassPhase,
    Task,
    TaskComment,
    TaskLog,
    TaskQueueItem,
    TaskStatus,
)
from worker import execution, process, prompts
from worker.checks import ChecksStopped, run_checks
from worker.snapshotting import PassSnapshots, RunSnapshots

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
    """A run that failed, with the message users see (an error comment or system message);
    `cannot_run`: why its CLI cannot run at all (DESIGN "Retries": the work waits for it)."""

    message: str
    cannot_run: str | None = None


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


class RunOwner(Protocol):
    """What a step needs from the owner of its run: a TaskPass or a ChatReply."""

    queue: type  # the queue model of `item` (TaskQueueItem, ChatQueueItem)
    item: object  # the claimed queue item
    stop: threading.Event  # set: kill the CLI, discard the run
    shutdown: threading.Event  # the worker stops: the run is interrupted, not stopped
    settings: dict  # read once per pass or reply
    clis: CliStates  # the CLIs' states, read once per pass or reply
    schema: dict
    schema_kind: str
    output_prefix: str
    invalid_output_fails_run: bool  # an answer of the wrong shape fails the run
    snapshots: PassSnapshots  # the pass's snapshots: the one between two runs, the first trees

    @property
    def workspace(self): ...

    def recorder(self, plan: RunPlan) -> RunRecorder:
        """The run's recorder (its row is written by the start transaction)."""

    def run_directory(self) -> tuple[Path | None, str]:
        """The folder the CLI works in, or (None, why not)."""

    def write_input(self, output_path: Path) -> Path:
        """The input file, naming where the answer goes."""

    def include_dirs(self, input_path: Path) -> tuple[str, ...]:
        """Folders besides its working folder the CLI may read."""

    def item_fields(self) -> dict:
        """What the item records with the run's process, besides the process itself."""

    def start(self, recorder: RunRecorder) -> None:
        """Inside the start transaction (the CLI was recorded, so wanted): the run and its log."""

    def read(self, data):
        """The owner's result from the CLI's answer, or a Failure."""

    def after_run(self) -> Failure | None:
        """Once the CLI ended (also when stopped): keep what it did (a branch commit)."""

    def lock_if_wanted(self) -> bool:
        """Inside a transaction: lock the item's rows if the run is still wanted."""

    def apply(self, result) -> None:
        """Inside the finish transaction (still wanted): the result, through the services."""

    def continues(self, result) -> bool:
        """Whether another agent's run is expected right after this one's finish."""

    def prepare_next(self) -> None:
        """While this run's CLI works: make the next run ready (`Ready`), if one is foreseen."""

    def take_ready(self, plan: RunPlan) -> "Ready | None":
        """The run made ready for this step, if it is this one (else it is discarded)."""

    def record_ready(self) -> None:
        """In a run's start transaction: the next run's process, made ready, recorded."""

    def input_ahead(self) -> None:
        """As the run works: what the next run's early go can make ahead (TaskPass)."""

    def go_early(self, result) -> bool:
        """Before the finish of a step whose answer the next agent follows: let the next run go
        now if it may (True), the finish being written as it starts."""

    def drop_early(self) -> None:
        """The run let go early is not wanted after all (the finish said so, or failed)."""

    def kept_early(self) -> bool:
        """The finish kept the run let go early: the pass goes on at its agent."""


# the step ----------------------------------------------------------------------------------


def run_step(owner: RunOwner, plan: RunPlan):
    """Run one agent for `owner` with `plan`: returns what the owner read from the CLI (its
    answer, a Failure or a Paused), already applied. Raises Stopped when discarded. The run's
    files (its answer file, its MCP configuration) are removed, and its ended process reaped,
    once the step is over, off the path to the next agent's go."""
    leftovers: list[Callable[[], None]] = []
    try:
        return _step(owner, plan, leftovers)
    finally:
        for leftover in leftovers:
            leftover()


def _step(owner: RunOwner, plan: RunPlan, leftovers: list):
    recorder = owner.recorder(plan)
    snapshots = owner.snapshots
    try:
        result = _run_cli(owner, recorder, plan, leftovers)
    except BaseException:
        snapshots.count_now()  # (a stopped run's totals too, with its record)
        with contextlib.suppress(Exception):  # stopped: keep what the agent did so far
            owner.after_run()
            snapshots.write_later()
        _close(recorder)
        raise
    result = owner.after_run() or result
    continues = owner.continues(result)
    # The runs before's totals (counted as this one began), and this one's: counted while the
    # next agent starts, or now when none comes next (all of them then, in order).
    counted_before = snapshots.counted_later(wait=not continues)
    if continues:
        snapshots.count_later()
    else:
        snapshots.count_now()
    went = continues and owner.go_early(result)  # (the next CLI starts as this finish is written)
    try:
        with transaction.atomic(), events.batched():
            snapshots.write(counted_before)
            wanted = owner.lock_if_wanted()
            if not wanted and owner.queue.objects.taken_over(owner.item):
                # Its recovery closed the run as interrupted, unless it came before the run's
                # start was written (the process is recorded first): then it is said here.
                recorder.status = RunStatus.INTERRUPTED
            if wanted and not recorder.started:  # the CLI never ran: the run still counts
                owner.start(recorder)
            if recorder.started:
                recorder.finish_writes()
            if wanted:
                owner.apply(result)
    except Exception:
        if went:
            owner.drop_early()
        _close(recorder)  # the run's record must end even when applying its result failed
        raise
    if went and not (wanted and owner.kept_early()):
        owner.drop_early()
    if recorder.status == RunStatus.COMPLETED and plan.health_key in owner.clis.marked:
        cli_health_works(cli_type=plan.health_key)  # the CLI works after all
    if not wanted:
        raise Stopped
    return result


def _close(recorder: RunRecorder) -> None:
    """The run ended without a result to apply (stopped, or a bug): save its final record."""
    if recorder.started:
        with transaction.atomic(), events.batched():
            recorder.finish_writes()


@dataclass
class Ready:
    """A run made ready while the run before it worked (TaskPass.prepare_next): its folder,
    answer file, command and process at its gate, so that between two agents only the input
    is written before the go (to the task's one input file, which its command names; the
    process is recorded by the finish of the run before). Used by the step it was made for
    (same agent, plan and MCP server), otherwise discarded: its gate closes unused."""

    agent_id: str
    plan: RunPlan
    cwd: Path
    output_path: Path
    mcp: object
    launch: execution.Launch
    held: process.Held
    # Its process was recorded by the finish of the run before (TaskPass._ready_process), which
    # committed: no statement of its own between the two agents.
    recorded: bool = False
    recorder: RunRecorder | None = None  # its run's recorder, made while the run before worked
    # Recorded as the item's next process by the start of the run before (committed): it may
    # go before that run's finish is written (TaskPass.go_early).
    next_recorded: bool = False
    # Let go early: its input written and its "before" taken then; followed (a stopping worker
    # kills it) until its step takes it over.
    released: bool = False
    snapshots: RunSnapshots | None = None
    started_log: TaskLog | None = None
    read_comments: list | None = None
    ahead: "InputAhead | None" = None  # its input, made while the run before works
    # When its input was written: the task's and its workspace's last writes as the pass knew
    # them. The finish's locking read finds others (a person's comment or edit meanwhile):
    # `stale`, it is killed, and the next agent starts anew with an input that shows them.
    seen: tuple = ()
    stale: bool = False
    _followed: contextlib.ExitStack | None = None  # (process.followed, from `go`)

    def fits(self, agent_id: str, plan: RunPlan, mcp) -> bool:
        """Made for this step, its gate waiting (or let go early for it), its folder still
        there (else the step says that the folder is gone, as it always did)."""
        same = (self.agent_id, self.plan, self.mcp) == (agent_id, plan, mcp)
        if self.released:
            return same
        return self.held.waiting() and same and self.cwd.is_dir()

    def go(self, stop: threading.Event) -> None:
        """Let it run now, followed until its step follows it (`unfollow`)."""
        self._followed = contextlib.ExitStack()
        self._followed.enter_context(process.followed(stop, self.held.started))
        self.held.release()
        self.released = True

    def unfollow(self) -> None:
        followed, self._followed = self._followed, None
        if followed is not None:
            followed.close()

    def discard(self) -> None:
        if self.released:  # (it runs: nobody will follow it)
            self.held.kill()
            self.unfollow()
        else:
            self.held.cancel()
        self.launch.cleanup()


def _prepare(owner: RunOwner, plan: RunPlan, cwd: Path, input_path: Path, output_path: Path, mcp):
    return execution.prepare(
        cli_type=plan.cli_type,
        input_path=input_path,
        output_path=output_path,
        schema=owner.schema,
        schema_kind=owner.schema_kind,
        cwd=cwd,
        include_dirs=owner.include_dirs(input_path),
        options=plan.options,
        cli_conf=owner.settings["cli_settings"].get(plan.cli_type),
        mcp=mcp,
    )


def _spawn(launch: execution.Launch) -> process.Held:
    return process.spawn(launch.command, cwd=str(launch.cwd), env=launch.env, spare=True)


def _run_cli(owner: RunOwner, recorder: RunRecorder, plan: RunPlan, leftovers: list):
    ready = owner.take_ready(plan)
    if ready is not None:
        cwd, output_path = ready.cwd, ready.output_path
    else:
        cwd, problem = owner.run_directory()
        if cwd is None:
            recorder.status = RunStatus.FAILED
            return Failure(problem)
        output_path = fresh_output_path(owner.output_prefix)
    if ready is not None and ready.released:  # its input and "before" came with its go
        snapshots = ready.snapshots
    else:
        try:
            input_path = owner.write_input(output_path)
        except BaseException:
            if ready is not None:
                ready.discard()
            raise
        snapshots = RunSnapshots(recorder, cwd, owner.snapshots)
        snapshots.take_before()
    if ready is not None:
        launch, held = ready.launch, ready.held
    else:
        mcp = execution.mcp_server_for(owner.workspace)
        launch, held = _prepare(owner, plan, cwd, input_path, output_path, mcp), None
    if isinstance(launch, execution.Execution):  # it cannot start: nothing ran
        run = launch
    else:
        held = held or _spawn(launch)
        leftovers += [launch.cleanup, held.end]  # (as the step ends: run_step)
        run = _launch(owner, recorder, launch, held, ready=ready)
    snapshots.take_after(count=False)  # a stopped run may have changed files too
    recorder.note(run)
    if run.stopped or owner.stop.is_set():
        if owner.shutdown.is_set():  # the worker stops: the next start resumes this run
            recorder.status, recorder.exit_code = RunStatus.INTERRUPTED, None
        raise Stopped
    if run.limit:
        return Paused(cli_type=plan.cli_type, limit=run.limit)
    if run.error:
        return Failure(run.error, cannot_run=run.cannot_run)
    result = owner.read(run.data)
    if isinstance(result, Failure) and owner.invalid_output_fails_run:
        recorder.status = RunStatus.FAILED
    return result


def _launch(
    owner: RunOwner,
    recorder: RunRecorder,
    launch: execution.Launch,
    held: process.Held,
    *,
    ready: Ready | None = None,
):
    """Record the CLI's process (forked, at its gate) unless the finish before did (`ready`
    recorded), let it run (unless it went early: `ready` released), make the next run ready,
    write this one's start and follow it to its end."""
    recorder.use_working_directory(launch.cwd)
    released = ready is not None and ready.released
    if held.start_error is None:
        try:
            if ready is None or not (ready.recorded or released):
                _record(owner, held.started)
            elif owner.stop.is_set():  # (stopped since that finish: it never runs, or no more)
                raise Stopped
        except BaseException:
            if released:
                ready.discard()
            else:
                held.cancel()  # never runs: nobody wants it, or its record could not be written
            raise
        # Followed until its watch begins: whatever waits on a database that does not answer
        # (the start, the first tree's read), a stopping worker still ends the CLI.
        with process.followed(owner.stop, held.started):
            if released:
                ready.unfollow()  # (followed here from now on)
            else:
                held.release()
            owner.snapshots.start_counting()  # the totals of the run before, as this one works
            try:  # (before its start, which records the next run's process: it may go early)
                owner.prepare_next()
            except Exception:  # only time lost: the next step makes its run ready itself
                log.exception("Could not make the next run ready")
            try:
                _start(owner, recorder)
            except BaseException:
                held.kill()  # it runs unseen: no run row to show it, nothing to keep its answer
                if not _still_wanted(owner):
                    raise Stopped from None  # (its task or chat went meanwhile)
                raise
            try:  # (it may read the database: followed meanwhile)
                owner.input_ahead()
            except Exception:  # only time lost: the next agent's input is made at its go
                log.exception("Could not make the next agent's input ahead")
    waiting = launch.waiting  # a CLI that would wait out a limit silently is stopped
    result = held.wait(
        stop=owner.stop,
        on_line=recorder.on_line,
        on_output=recorder.on_output,
        on_error_line=waiting.on_error_line,
        on_tick=lambda: waiting.tick() or recorder.tick(),
        tick_due=recorder.tick_due,
        end_later=True,  # (reaped by run_step, after the next agent's go)
    )
    return execution.conclude(launch, result, stall_minutes=recorder.stall_kill_seconds / 60)


def _record(owner: RunOwner, started: process.Started) -> None:
    """Before the CLI may run: its process on the queue item (so that a recovery can kill it
    whatever happens to this worker), with where a pass continues. One statement, its own
    transaction, which is also the start's "still wanted" check: raises Stopped when the run
    is not wanted any more."""
    recorded = owner.queue.objects.record_process(
        owner.item,
        pid=started.pid,
        pgid=started.pgid,
        started_at=started.create_time,
        **owner.item_fields(),
    )
    if not recorded:
        raise Stopped


def _start(owner: RunOwner, recorder: RunRecorder) -> None:
    """The start transaction, while the CLI starts (off the path between two agents): the run
    row, the log and the events. A worker killed before its commit leaves the recorded
    process, which its recovery kills, and the pass resumes at this agent; the CLI did not
    live long enough to do anything."""
    with transaction.atomic(), events.batched():
        owner.start(recorder)
        owner.record_ready()


def _still_wanted(owner: RunOwner) -> bool:
    return owner.queue.objects.unstopped().filter(id=owner.item.id).exists()


# task passes -------------------------------------------------------------------------------


def task_input_text(
    task: Task,
    agent: Agent,
    output_path: Path,
    agents=None,
    history=None,
    *,
    isolated: bool = False,
    rendered: prompts.RenderedRows | None = None,
) -> str:
    """The input file of one agent step; `agents` = the workspace's (id, name) in order,
    `history` = tasks.selectors.task_history(task) (both read now when not given);
    `isolated`: the task works on its branch (agents are told which); `rendered`: the rows
    this pass rendered before (a task pass's, for the next step)."""
    if agents is None:
        agents = list(
            Agent.objects.filter(workspace_id=task.workspace_id)
            .in_order()
            .values_list("id", "name")
        )
    comments, logs = history if history is not None else task_selectors.task_history(task)
    rendered = rendered or prompts.RenderedRows()
    return prompts.task_input(
        comments=_comments_jsonl(task, comments, dict(agents), rendered),
        logs=_logs_jsonl(logs, rendered),
        **_input_context(task, agent, output_path, agents, isolated=isolated),
    )


def _input_context(task: Task, agent: Agent, output_path: Path, agents, *, isolated: bool):
    return {
        "workspace": task.workspace,
        "agent": agent,
        "agent_names": [name for _id, name in agents],
        "task": task,
        "output_path": str(output_path),
        "branch": (task.branch_name, task.branch_base) if isolated and task.branch_name else None,
    }


def _comments_jsonl(task: Task, comments: list, names: dict, rendered: prompts.RenderedRows):
    """The comments as agents read them: line comments with their code (and whether later
    runs changed it), identical consecutive errors as one."""
    shown = task_selectors.collapse_repeated_errors(task_selectors.mark_outdated(task.id, comments))
    return rendered.jsonl([_comment_row(c, names) for c in shown])


def _comment_row(comment: TaskComment, names: dict) -> tuple:
    author = author_name(comment.author_type, comment.agent_id, names, comment.kind)
    line = task_selectors.line_comment_text(comment) if comment.is_line_comment else None
    return ("comment", comment.id), prompts.comment_row(comment, author, line)


def _logs_jsonl(logs: list, rendered: prompts.RenderedRows) -> str:
    return rendered.jsonl([(("log", entry.id), prompts.log_row(entry)) for entry in logs])


def _joined(before: str, added: str) -> str:
    return f"{before}\n{added}" if before and added else before or added


@dataclass
class InputAhead:
    """The next agent's input, made while the agent before it works (TaskPass.input_ahead):
    all of it but what that agent's answer adds (its rows) and the next agent's agent_started
    log, which `write` puts in at its go (stamped then, after the answer's rows). `key`: what
    it was made from (TaskPass._ahead_key); a pass whose view moved since makes it again."""

    key: tuple
    agent: Agent
    plan: RunPlan
    mcp: object
    frame: tuple[str, str, str]  # (before the comments, between them and the logs, after)
    comments: str  # the history's rows, rendered
    logs: str
    read: list  # the history's comments it delivers
    started: TaskLog  # the next agent's agent_started log
    finished: TaskLog  # the agent before's agent_finished log (task_step_rows stamps it)
    path: Path  # the task's input file

    def write(self, pass_: "TaskPass", rows: "task_services.StepRows") -> tuple[TaskLog, list]:
        """The input with `rows` (the answer's, just built: plain agent comments, which no
        error or line comment before changes) and the agent_started log, stamped now: what
        task_input_text writes from the history with them. Returns (that log, the comments
        the input delivers)."""
        comments, logs = rows.shown()
        self.started.created_at = timezone.now()
        names, rendered = dict(pass_.agents), pass_.rendered_rows
        before, between, after = self.frame
        text = "".join(
            (
                before,
                _joined(self.comments, rendered.jsonl([_comment_row(c, names) for c in comments])),
                between,
                _joined(self.logs, _logs_jsonl([*logs, self.started], rendered)),
                after,
            )
        )
        write_private(self.path, text)
        return self.started, [*self.read, *(c for c in comments if c.kind in KEEPS_GOING)]


def _wanted_task_locked(by_hand: bool):
    """The query of TaskPass._lock_wanted_task: the pass's task with its workspace, while its
    item runs on this worker and the task is In Progress (In Review for a person's checks)."""
    status = TaskStatus.IN_REVIEW if by_hand else TaskStatus.IN_PROGRESS

    def build(task_id, item_id, worker_id=None):
        wanted = TaskQueueItem.objects.unstopped_q("queue_items__")
        rows = Task.objects.select_related("workspace").filter(
            wanted,
            queue_items__id=item_id,
            queue_items__worker_id=worker_id,  # still ours (DESIGN "Scale-out")
            id=task_id,
            status=status,
        )
        # Locks the item (and its task and workspace) with PostgreSQL until this transaction
        # ends: a recovery's requeue of the item waits, then finds it as this finish left it;
        # a comment written meanwhile waits too (tasks.services.comment_create_and_send_around).
        return rows.select_for_update(no_key=True)[:1]  # (a join, not a subquery)

    return build


def _agents_of(workspace_id):
    return Agent.objects.filter(workspace_id=workspace_id).in_order()


class TaskPass:
    """One pass of a task through the workspace's agents (one queue item = one pass), from the
    first agent or from where an earlier attempt stopped (a failure, a CLI's wait, a restart).

    Read once per pass: the settings, the CLIs' states, the agents and the input's comments
    and logs. Each step's finish reads the task and its workspace anyway (the "still wanted"
    check); when the workspace's `updated_at` moved (its agents or limits changed) the agents
    are read again before the next agent, so edits and reorders apply at once; when the task's
    `updated_at` moved (a comment, a move, an edit: every writer of its comments and logs
    moves it, see tasks.services) the comments and logs are read again. The pass's own
    agent_started/agent_finished logs are added to them as they are written.

    The pass's rules (its begin, a step's answer, its end, a failure, a wait for a CLI) are
    tasks.services'; this class walks the agents and keeps what it read."""

    queue = TaskQueueItem
    schema_kind = "task"
    output_prefix = "malamar_output"
    invalid_output_fails_run = True

    def __init__(self, item: TaskQueueItem, *, stop: threading.Event, shutdown: threading.Event):
        self.item, self.stop, self.shutdown = item, stop, shutdown
        self.task: Task | None = None
        self.agent: Agent | None = None
        self.plan: RunPlan | None = None
        self.agents: list[tuple[str, str]] = []
        self.workspace_agents: list[Agent] = []
        self.agents_read_at = None  # the workspace's updated_at when its agents were read
        self.history: tuple[list, list] | None = None
        self.history_read_at = None  # the task's updated_at when its history was read
        self.read_comments: list[TaskComment] = []  # the step's input's undelivered comments
        self.schema = task_schema()
        self.worktree: branches.Worktree | None = None
        self.commit: str | None = None
        self.ended = False  # the item is finished or waits (a failure, In Review, the end)
        self.snapshots = PassSnapshots()  # one snapshot between two runs, the first trees
        self.started_log = None  # the next run's agent_started log, shown in its input
        self.activity_at: float | None = None  # when this pass last bumped the workspace
        self.settings: dict | None = None  # read once the pass may run
        self.pass_started = None  # its real start (kept when it continues where it stopped)
        self.ready: Ready | None = None  # the next run, made ready while this one works
        self.rendered_rows = prompts.RenderedRows()  # the input's rows, rendered once a pass
        self.step_rows: task_services.StepRows | None = None  # an early go's, for its finish
        # The agent whose run failed last time (its answer ends the failure streak).
        self.retried_agent_id = item.resume_agent_id

    # the pass --------------------------------------------------------------------------------
    def run(self) -> None:
        """Never raises for CLI or agent trouble. At shutdown the item stays in progress so that
        startup recovery re-queues it, at the agent it was running."""
        try:
            if self.item.phase == PassPhase.MANUAL:
                self._checks_by_hand()
                return
            begun = (  # (begun by its claim, worker.pickup, when it could)
                self.item.pass_begun
                if hasattr(self.item, "pass_begun")
                else task_services.task_pass_begin(item=self.item)
            )
            if begun is None:
                return
            self.task, moved = begun
            if moved:  # the move bumped the workspace's activity
                self.activity_at = time.monotonic()
            if not self._prepare_worktree():
                return
            self.settings = settings_get()
            # Read once per pass (a CLI limited meanwhile pauses the pass at its own run).
            self.clis = cli_states()
            # A pass that stopped on the way (a failure, a wait, a restart) keeps its start.
            self.pass_started = self.item.pass_started_at or timezone.now()
            if self.item.phase != PassPhase.CHECKS:  # (after a restart: the checks again)
                self._run_agents()
            if self.item.phase == PassPhase.CHECKS:  # the agents would put it In Review
                self.ended = False
                run_checks(self)
        except (Stopped, ChecksStopped):
            if not self.shutdown.is_set():
                TaskQueueItem.objects.finish(self.item, QueueStatus.FAILED)
        except Exception as exc:  # a bug must not leave the task stuck without a word
            log.exception("Task pass failed", extra={"task_id": self.item.task_id})
            self._fail_outside_a_step(internal_error_message(exc))
        finally:  # totals left for a next agent that did not come (the finish ended the pass)
            self.snapshots.write_later()
            if self.ready is not None:  # (made for an agent that did not come)
                self.ready.discard()
                self.ready = None

    def _checks_by_hand(self) -> None:
        """A person's "Run checks" on an In Review task: the checks only, where its agents
        work; the task does not move (it ran away meanwhile: nothing to do)."""
        task = Task.objects.select_related("workspace").filter(id=self.item.task_id).first()
        if task is None or task.status != TaskStatus.IN_REVIEW:
            TaskQueueItem.objects.finish(self.item, QueueStatus.COMPLETED)
            return
        self.task = task
        if not self._prepare_worktree():
            return
        self.settings = settings_get()
        run_checks(self)

    def _run_agents(self) -> None:
        """The agents in order, from where the pass is, until one step ends the pass (its
        item finished, waiting, or in its checks phase) or none is left."""
        order = None
        while (agent := self._next_agent(order)) is not None:
            order, self.agent = agent.order, agent
            plan = plan_run(agent, limited=self.clis.limited, broken=self.clis.broken)
            if isinstance(plan, Wait):
                self._wait_for(plan.cli)
                return  # the item waits for its CLI
            self.plan = plan
            run_step(self, plan)
            if self.ended:
                return  # apply() finished the item (or made it wait, or check)
        self._end_pass()

    # branch per task ---------------------------------------------------------------------------
    def _prepare_worktree(self) -> bool:
        """Branch per task: the task's worktree (made on first use, its setup command run until
        it succeeds once). False when there is none to be had: the pass failed with an error
        comment saying why (and the usual retry)."""
        workspace = self.task.workspace
        if not workspace.isolated:
            return True
        try:
            worktree = branches.prepare(self.task, workspace)
        except branches.BranchProblem as exc:
            self._fail_outside_a_step(str(exc))
            return False
        if worktree.created:
            with transaction.atomic(), events.batched():
                task_services.task_branch_record(task=self.task, worktree=worktree)
        problem = self._setup(worktree, workspace.setup_command)
        if problem:
            self._fail_outside_a_step(problem)
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
            env=execution.process_env(dict(os.environ), cwd=worktree.path),
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

    # the agents, and what the pass read -----------------------------------------------------
    def _agents_changed(self) -> bool:
        return self.agents_read_at != self.task.workspace.updated_at

    def _next_agent(self, order: int | None) -> Agent | None:
        if self._agents_changed():
            workspace = self.task.workspace
            agents = compiled_models(("pass_agents",), _agents_of, workspace_id=workspace.id)
            self.workspace_agents, self.agents_read_at = agents, workspace.updated_at
            self.agents = [(agent.id, agent.name) for agent in self.workspace_agents]
            self.stall = stall_limits(workspace, settings=self.settings)
        resume = self.item.resume_agent_id
        if order is None and resume:  # where the pass stopped (if that agent still exists)
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

    def _lock_wanted_task(self) -> Task:
        """Inside a transaction: the item still runs and the task is still In Progress (checked
        here, so the item's own check needs no join); the task's row locked. Raises Stopped.
        Its SQL is compiled once (core.compiled_queries): building it cost ~0.9 ms of CPU at
        every step's finish, running it ~0.2."""
        by_hand = self.item.phase == PassPhase.MANUAL  # checks on an In Review task
        values = {"task_id": self.item.task_id, "item_id": self.item.id}
        if self.item.worker_id is not None:
            values["worker_id"] = self.item.worker_id
        key = ("task_pass_wanted", by_hand, self.item.worker_id is None)
        task = next(iter(compiled_models(key, _wanted_task_locked(by_hand), **values)), None)
        if self.stop.is_set() or task is None:
            raise Stopped
        self.task = task
        return task

    # the pass's edges, through tasks.services ----------------------------------------------
    def _wait_for(self, cli: str) -> None:
        """The agent's CLI (and its fallback) may not run now: the pass waits for it here."""
        with transaction.atomic(), events.batched():
            self._lock_wanted_task()
            task_services.task_pass_pause(
                task=self.task,
                item=self.item,
                agent=self.agent,
                cli_type=cli,
                pass_started=self.pass_started,
            )
        self.ended = True

    def _end_pass(self) -> None:
        """The loop ran out of agents without a finish that saw it coming (no agents, or they
        changed during the last step)."""
        with transaction.atomic(), events.batched():
            self._lock_wanted_task()
            task_services.task_pass_end(
                task=self.task,
                item=self.item,
                pass_started=self.pass_started,
                settings=self.settings,
            )
        self.ended = True

    def _fail(self, failure: Failure) -> None:
        """Inside the step's finish transaction: the one failure rule of tasks.services."""
        task_services.task_pass_failed(
            task=self.task,
            item=self.item,
            agent=self.agent,
            message=failure.message,
            pass_started=self.pass_started,
            settings=self.settings,
            cli=self.plan.health_key if self.plan else "",
            cannot_run=failure.cannot_run,
        )
        self.ended = True

    def _fail_outside_a_step(self, message: str) -> None:
        """No worktree, a failed setup, a bug: the pass fails at the agent it was at (from the
        first when none started yet)."""
        with transaction.atomic(), events.batched():
            task = Task.objects.select_related("workspace").filter(id=self.item.task_id).first()
            if task is None:
                return
            self.task = task
            task_services.task_pass_failed(
                task=task,
                item=self.item,
                agent=self.agent,
                message=message,
                pass_started=self.pass_started,
                settings=self.settings,
            )
        self.ended = True

    # one step (called by run_step) -----------------------------------------------------------
    @property
    def workspace(self):
        return self.task.workspace

    @property
    def working_folder(self) -> str:
        return f"malamar_task_{self.task.id}"

    def include_dirs(self, input_path: Path) -> tuple[str, ...]:
        return (str(input_path.parent),)

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

    def recorder(self, plan: RunPlan) -> RunRecorder:
        """The run's recorder: the one made with the run made ready for this step, if any."""
        ready = self.ready
        if ready is not None and (ready.agent_id, ready.plan) == (self.agent.id, plan):
            recorder, ready.recorder = ready.recorder, None
            if recorder is not None:
                return recorder
        return self._recorder(self.agent, plan)

    def _recorder(self, agent: Agent, plan: RunPlan) -> RunRecorder:
        return RunRecorder(
            cli_type=plan.cli_type,
            model=plan.options.model,
            workspace_id=self.task.workspace_id,
            agent_id=agent.id,
            agent_name=agent.name,
            task_id=self.task.id,
            fallback_for=plan.fallback_for,
            deferred=True,
            worker_id=self.item.worker_id,
            knowledge_dir=str(knowledge_base_dir()),
            **self.stall,
        )

    def write_input(self, output_path: Path) -> Path:
        """The input shows this run's agent_started log already: it is saved by start()."""
        comments, logs = self._history()
        self.started_log, self.read_comments = self._write_input(
            self.agent, output_path, comments, logs
        )
        return task_input_path(self.task.id)

    def _write_input(self, agent: Agent, output_path: Path, comments: list, logs: list):
        """`agent`'s input, from these comments and logs: (its agent_started log, not saved
        yet; the comments it delivers)."""
        started = task_services.task_agent_started_log(task=self.task, actor=agent_actor(agent))
        text = task_input_text(
            self.task,
            agent,
            output_path,
            self.agents,
            (comments, [*logs, started]),
            isolated=self.worktree is not None,
            rendered=self.rendered_rows,
        )
        write_private(task_input_path(self.task.id), text)
        read = [c for c in comments if c.delivered_at is None and c.kind in KEEPS_GOING]
        return started, read

    def item_fields(self) -> dict:
        """Where the pass continues if its worker dies or stops now: at this agent."""
        return {"resume_agent_id": self.agent.id, "pass_started_at": self.pass_started}

    def start(self, recorder: RunRecorder) -> None:
        """Inside the start transaction (the CLI was recorded, so wanted): the run and its log."""
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

    def lock_if_wanted(self) -> bool:
        """The step's finish: also whether a run let go early saw the task and workspace as
        they are (its input is the pass's view of both)."""
        try:
            task = self._lock_wanted_task()
        except Stopped:
            return False
        ready = self.ready
        if ready is not None and ready.released:
            ready.stale = (task.updated_at, task.workspace.updated_at) != ready.seen
        return True

    def prepare_next(self) -> None:
        """The next agent's run, as far as the agents read know, made ready while this one's
        CLI works: its command and its process at the gate (not recorded: nothing runs)."""
        agent = self._next_agent(self.agent.order)
        if agent is None:
            return
        plan = plan_run(agent, limited=self.clis.limited, broken=self.clis.broken)
        cwd, _problem = self.run_directory()
        if isinstance(plan, Wait) or cwd is None:
            return
        output_path = fresh_output_path(self.output_prefix)
        input_path = task_input_path(self.task.id)
        mcp = execution.mcp_server_for(self.workspace)
        launch = _prepare(self, plan, cwd, input_path, output_path, mcp)
        if isinstance(launch, execution.Execution):  # it cannot start: the step will say why
            return
        held = _spawn(launch)
        if held.start_error is not None:
            launch.cleanup()
            return
        # (its recorder too: the run's row is written at its start)
        recorder = self._recorder(agent, plan)
        self.ready = Ready(agent.id, plan, cwd, output_path, mcp, launch, held, recorder=recorder)

    def take_ready(self, plan: RunPlan) -> Ready | None:
        ready, self.ready = self.ready, None
        mcp = execution.mcp_server_for(self.workspace)
        if ready is None or ready.fits(self.agent.id, plan, mcp):
            if ready is not None and ready.released:  # (what its early go wrote its input with)
                self.started_log, self.read_comments = ready.started_log, ready.read_comments
            return ready
        ready.discard()
        return None

    def record_ready(self) -> None:
        """The next run's process, at its gate, recorded on the item as this run starts: from
        its commit on, that process may go before this run's finish is written (a recovery
        kills it with this one)."""
        ready = self.ready
        if ready is None:
            return
        started = ready.held.started
        TaskQueueItem.objects.record_next_process(
            self.item, pid=started.pid, pgid=started.pgid, started_at=started.create_time
        )
        transaction.on_commit(lambda: setattr(ready, "next_recorded", True))

    def go_early(self, result) -> bool:
        """The next agent's CLI let go before this step's finish is written: its input shows
        this answer's rows, built first (the finish writes the same rows), and its "before" is
        this run's "after". The finish then checks as ever that the pass is wanted and goes on
        at that agent, and that nobody else wrote the task or its workspace since the pass read
        them (its locking read); if not, that CLI is killed and its run never recorded
        (drop_early), and the next step starts that agent anew. A crash in between resumes at
        this agent as before, the next agent's process being recorded (record_ready) for the
        recovery to kill. The input was made as this agent worked (input_ahead) unless the
        pass's view moved since: then now."""
        ready = self.ready
        if ready is None or not ready.next_recorded or self.stop.is_set():
            return False
        ahead = ready.ahead
        if ahead is None or ahead.key != self._ahead_key():
            ahead = self._input_ahead(ready)
        if ahead is None or not ready.fits(ahead.agent.id, ahead.plan, ahead.mcp):
            return False
        try:
            rows = task_services.task_step_rows(
                task=self.task,
                agent=self.agent,
                answer=result,
                commit=self.commit,
                finished=ahead.finished,
            )
            ready.started_log, ready.read_comments = ahead.write(self, rows)
            ready.snapshots = RunSnapshots(ready.recorder, ready.cwd, self.snapshots)
            ready.snapshots.take_before()
        except ValidationFailed:  # a comment the finish refuses, as ever
            return False
        except Exception:  # (a full disk...): the finish comes first, and the input after it
            log.exception("Could not let the next agent go early")
            return False
        self.step_rows = rows
        ready.seen = (self.task.updated_at, self.agents_read_at)
        ready.go(self.stop)
        return True

    def input_ahead(self) -> None:
        """As this agent works: the next agent's input, all but what this one's answer adds
        (InputAhead), so that between the two only those rows are written."""
        ready = self.ready
        if ready is not None:
            ready.ahead = self._input_ahead(ready)

    def _input_ahead(self, ready: Ready) -> InputAhead | None:
        """The input of the run made ready, from the pass's view; None when the next agent
        may not go early (another agent comes next, its CLI must wait, or the history needs
        reading again: others wrote the task)."""
        agent = self._next_agent(self.agent.order)
        if agent is None or agent.id != ready.agent_id:
            return None
        plan = plan_run(agent, limited=self.clis.limited, broken=self.clis.broken)
        history = self._current_history()
        if isinstance(plan, Wait) or history is None:
            return None
        comments, logs = history
        isolated = self.worktree is not None
        context = _input_context(
            self.task, agent, ready.output_path, self.agents, isolated=isolated
        )
        return InputAhead(
            key=self._ahead_key(),
            agent=agent,
            plan=plan,
            mcp=execution.mcp_server_for(self.workspace),
            frame=prompts.task_input_frame(**context),
            comments=_comments_jsonl(self.task, comments, dict(self.agents), self.rendered_rows),
            logs=_logs_jsonl(logs, self.rendered_rows),
            read=[c for c in comments if c.delivered_at is None and c.kind in KEEPS_GOING],
            started=task_services.task_agent_started_log(task=self.task, actor=agent_actor(agent)),
            finished=task_services.task_agent_finished_log(
                task=self.task, actor=agent_actor(self.agent)
            ),
            path=task_input_path(self.task.id),
        )

    def _ahead_key(self) -> tuple:
        """What an InputAhead is made from: the step, the history as read, the task and the
        agents as the pass knows them."""
        comments, logs = self.history or ((), ())
        return (
            self.agent.id,
            id(self.history),
            len(comments),
            len(logs),
            self.history_read_at,
            self.task.updated_at,
            self.agents_read_at,
        )

    def drop_early(self) -> None:
        ready, self.ready, self.step_rows = self.ready, None, None
        if ready is not None:
            ready.discard()

    def kept_early(self) -> bool:
        ready = self.ready
        return not self.ended and ready is not None and ready.recorded and not ready.stale

    def continues(self, result) -> bool:
        """An answer that neither asks for review nor comes from the last agent: the next
        agent runs (as far as this pass knows before the finish decides)."""
        if isinstance(result, (Failure, Paused)) or result.in_review:
            return False
        return not self._is_last_step()

    def apply(self, result) -> None:
        answered = not isinstance(result, (Paused, Failure))
        rows, self.step_rows = self.step_rows, None  # (built before, for an early go)
        if answered and rows is None:
            rows = task_services.task_step_rows(
                task=self.task, agent=self.agent, answer=result, commit=self.commit
            )
        if self.commit:
            task_services.task_branch_commit_log(
                task=self.task,
                actor=agent_actor(self.agent),
                commit=self.commit,
                entry=rows and rows.commit_log,
            )
        if isinstance(result, Paused):
            task_services.task_pass_limited(
                task=self.task,
                item=self.item,
                agent=self.agent,
                cli=result.cli_type,
                limit=result.limit,
                pass_started=self.pass_started,
            )
            self.ended = True
        elif isinstance(result, Failure):
            self._fail(result)
        else:
            self._apply_answer(result, rows)

    def _apply_answer(self, answer, rows: task_services.StepRows) -> None:
        wrote = bool(answer.comments) or answer.in_review
        # Nobody else wrote the task since its history was read (this finish's locking read
        # says so): the history stays current with this step's own rows, without a read.
        current = self._current_history() is not None
        _finished, self.ended = task_services.task_step_answered(
            task=self.task,
            item=self.item,
            agent=self.agent,
            answer=answer,
            pass_started=self.pass_started,
            read=self.read_comments,
            retried=self.agent.id == self.retried_agent_id and bool(self.task.failure_streak),
            last_step=self._is_last_step(),
            settings=self.settings,
            touch_workspace=self._activity_due(wrote=wrote),
            rows=rows,
        )
        if current and not self.ended:
            comments, logs = rows.shown()
            self.history[0].extend(comments)
            self.history[1].extend(logs)
            self.history_read_at = self.task.updated_at
        following = None if self.ended else self._next_agent(self.agent.order)
        if following is not None:
            task_services.task_pass_continues_at(
                item=self.item, agent=following, process=self._ready_process(following)
            )

    def _ready_process(self, agent: Agent) -> dict | None:
        """The process made ready for `agent` while this run worked, if any (still at its
        gate): recorded with this finish, so that between two agents no statement of its own
        comes before its go (DESIGN "One run pipeline": a step writes in two transactions).
        A record that proves unused (the next step makes its run anew) is overwritten by that
        run's own; a stop asked for after this finish is seen at the go (`_launch`) or by the
        run's stop watcher."""
        ready = self.ready
        if ready is None or ready.agent_id != agent.id:
            return None
        if not (ready.released or ready.held.waiting()):  # (let go early: it ran, maybe ended)
            return None
        transaction.on_commit(lambda: setattr(ready, "recorded", True))
        started = ready.held.started
        return {"pid": started.pid, "pgid": started.pgid, "process_started_at": started.create_time}


# chat replies ------------------------------------------------------------------------------


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
    Malamar agent the first available in Claude → Codex → Gemini → OpenCode; the agent's
    fallback CLI while that one is out of quota (runner.plans). The reply's rules are
    chats.replies'."""

    queue = ChatQueueItem
    output_prefix = "malamar_chat_output"
    invalid_output_fails_run = False

    def __init__(self, item: ChatQueueItem, *, stop: threading.Event, shutdown: threading.Event):
        self.item, self.stop, self.shutdown = item, stop, shutdown
        self.ended = False  # chats.replies announced how the reply ended
        self.clis = CliStates(limited=frozenset(), broken={}, marked=frozenset())
        self.plan: RunPlan | None = None
        self.snapshots = PassSnapshots()  # (a chat has no task totals)

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
        try:
            if self.cli is None:
                self._reply_without_cli()
                return
            # Read once per reply: the settings and the CLIs' health (the context lists it).
            self.settings, self.health = settings_get(), cli_health_all()
            self.clis = cli_states_from(self.health)
            plan = plan_run(
                self.agent, limited=self.clis.limited, broken=self.clis.broken, cli=self.cli
            )
            if isinstance(plan, Wait):
                self._wait_for(plan.cli)
                return
            self.plan = plan
            run_step(self, plan)
        except Stopped:
            if not self.shutdown.is_set():
                ChatQueueItem.objects.finish(self.item, QueueStatus.FAILED)
            self._announce(ReplyEnd.STOPPED)
        except Exception as exc:  # a bug must not leave the user waiting for a reply forever
            log.exception("Chat processing failed", extra={"chat_id": chat.id})
            with transaction.atomic(), events.batched():
                chat_reply_failed(
                    chat=chat,
                    item=self.item,
                    agent_name=self.agent_name,
                    message=internal_error_message(exc),
                )
            self.ended = True

    def _announce(self, outcome: str) -> None:
        """chat.processing_finished for an end no service announced (a stop)."""
        if self.ended:
            return
        with transaction.atomic():
            if Chat.objects.filter(id=self.chat.id).exists():
                chat_run_finished(chat=self.chat, agent_name=self.agent_name, outcome=outcome)
        self.ended = True

    def _wait_for(self, cli: str) -> None:
        """Neither the CLI nor the agent's fallback may run: a CLI out of quota makes the
        reply wait for it (no system message: a limit is not an error); a broken one fails the
        reply with why (the user picks another CLI)."""
        with transaction.atomic(), events.batched():
            if not self.lock_if_wanted():
                raise Stopped
            if cli in self.clis.limited:
                chat_reply_waits(
                    chat=self.chat, item=self.item, agent_name=self.agent_name, cli=cli
                )
            else:
                reason = self.clis.broken.get(cli, "")
                chat_reply_failed(
                    chat=self.chat,
                    item=self.item,
                    agent_name=self.agent_name,
                    message=f"{health_key_label(cli)} cannot run: {reason}".rstrip(": "),
                )
        self.ended = True

    def _reply_without_cli(self) -> None:
        with transaction.atomic(), events.batched():
            chat_run_started(chat=self.chat, agent_name=self.agent_name)
            if not self.lock_if_wanted():
                raise Stopped
            chat_reply_failed(
                chat=self.chat,
                item=self.item,
                agent_name=self.agent_name,
                message=no_cli_message([]),
            )
        self.ended = True

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

    def prepare_next(self) -> None:
        """A reply is one step."""

    def record_ready(self) -> None:
        pass

    def input_ahead(self) -> None:
        pass  # (a reply is one step)

    def go_early(self, _result) -> bool:
        return False

    def drop_early(self) -> None:
        pass

    def kept_early(self) -> bool:
        return False

    def take_ready(self, _plan: RunPlan) -> None:
        return None

    def continues(self, _result) -> bool:
        return False  # a reply is one run

    def recorder(self, plan: RunPlan) -> RunRecorder:
        return RunRecorder(
            cli_type=plan.cli_type,
            model=plan.options.model,
            workspace_id=self.chat.workspace_id,
            agent_id=self.agent.id if self.agent else None,
            agent_name=self.agent_name,
            chat_id=self.chat.id,
            fallback_for=plan.fallback_for,
            deferred=True,
            worker_id=self.item.worker_id,
            knowledge_dir=str(knowledge_base_dir()),
            **stall_limits(self.chat.workspace, settings=self.settings),
        )

    def item_fields(self) -> dict:
        return {}

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

    def lock_if_wanted(self) -> bool:
        """Inside a transaction: the item still runs and its chat still exists (locked)."""
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
        chat, item, name = self.chat, self.item, self.agent_name
        if isinstance(result, Paused):
            chat_reply_limited(
                chat=chat,
                item=item,
                agent=self.agent,
                cli=self.cli,
                ran_on=result.cli_type,
                limit=result.limit,
            )
        elif isinstance(result, Failure):
            chat_reply_failed(
                chat=chat,
                item=item,
                agent_name=name,
                message=result.message,
                cli=self.plan.health_key,
                cannot_run=result.cannot_run,
            )
        else:
            message, actions = result
            chat_reply_answered(
                chat=chat, item=item, agent=self.agent, message=message, actions=actions
            )
        self.ended = True
