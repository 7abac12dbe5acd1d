"""The run pipeline in-process: one task pass through four agents with the fake CLI, counting
the statements the worker sends per agent step (DESIGN "One run pipeline": a lean step)."""

import collections
import contextlib
import os
import shutil
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from agents.services import agent_create, agent_update
from chats.malamar_agent import knowledge_base_dir
from chats.models import ChatQueueItem
from chats.services import chat_cancel, chat_delete, chat_start
from core import events
from core.actors import USER
from core.models import OutboxEvent
from core.wake import bind_datagram_socket, socket_path, uses_notify
from malamar_site.services import workspace_delete
from runner.files import temp_dir
from runner.models import CliHealth, CliHealthStatus
from runner.recorder import RunRecorder
from tasks import selectors as task_selectors
from tasks.models import QueueStatus, Task, TaskComment, TaskQueueItem, TaskStatus
from tasks.services import (
    comment_create_and_send_around,
    task_cancel,
    task_create,
    task_delete,
    task_status_set,
)
from tests.live import wait_until
from tests.stack import FAKES_BIN, alive
from worker import jobs, loop, pipeline, process, prompts, snapshotting
from worker.listener import WorkListener
from worker.loop import Worker
from worker.membership import recover
from worker.pipeline import ChatReply, TaskPass
from workspaces.services import workspace_create

AGENTS = 4
# Statements per step, the pass's own share included (BEGIN is counted here, COMMIT is not: it
# does not go through execute; nor are live trace flushes, which depend on timing). Before the
# redesign: 46 (incl. 6 savepoint pairs); then about 23; then under 16; 17 with the next
# agent's early go (its process recorded at the start before: one per step but the last).
# tests/test_runner_cost.py holds the exact budget of one step and of one pass.
MAX_STATEMENTS_PER_STEP = 17


class StatementCounter:
    """Counts what this thread's connection sends, by kind (SELECT, INSERT, SAVEPOINT, ...)."""

    def __init__(self):
        self.kinds = collections.Counter()
        self.thread = threading.get_ident()
        self.paused = False

    def __call__(self, execute, sql, params, many, context):
        if threading.get_ident() == self.thread and not self.paused:
            self.kinds[sql.split(None, 1)[0].upper()] += 1
        return execute(sql, params, many, context)

    def leave_out_live_flushes(self, monkeypatch):
        """Live trace flushes while the CLI runs depend on its timing (at most ~4 a second):
        not counted, so the count is the same on a fast and a slow machine."""
        flush = RunRecorder.flush

        def uncounted(recorder):
            self.paused = True
            try:
                flush(recorder)
            finally:
                self.paused = False

        monkeypatch.setattr(RunRecorder, "flush", uncounted)

    def count_begins(self, monkeypatch):
        """SQLite starts a transaction with a statement (BEGIN IMMEDIATE), PostgreSQL without one
        (psycopg sends BEGIN with the first statement): there, count Django's switch out of
        autocommit (an outermost atomic block) as the BEGIN, so both count the same."""
        conn = connections[DEFAULT_DB_ALIAS]
        if conn.vendor == "sqlite":
            return
        switch = conn.set_autocommit

        def counted(autocommit, *args, **kwargs):
            if not autocommit and threading.get_ident() == self.thread and not self.paused:
                self.kinds["BEGIN"] += 1
            return switch(autocommit, *args, **kwargs)

        monkeypatch.setattr(conn, "set_autocommit", counted)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())


@pytest.fixture
def fake_clis(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")


def _run_pass(item):
    TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()


def _recovery_kills_and_requeues(item, pid: int, *, at) -> None:
    """The recovery after a worker's death: it kills `pid` (a gate or a CLI the dead worker
    left), and the pass waits in the queue to resume at agent `at`."""
    assert recover(hostname=socket.gethostname(), worker_id=None) == 1
    wait_until(lambda: not alive(pid), timeout=10, what="the process left to die of its SIGKILL")
    requeued = TaskQueueItem.objects.get(id=item.id)
    assert (requeued.status, requeued.resume_agent_id) == (QueueStatus.QUEUED, at.id)


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_task_pass_step_stays_within_its_statement_budget(fake_clis, capsys, monkeypatch):
    workspace = workspace_create(title="Bench")
    for n in range(AGENTS):
        agent_create(workspace=workspace, name=f"Agent {n}", instruction="Skip.", cli_type="claude")
    task = task_create(workspace=workspace, summary="Count statements")
    item = TaskQueueItem.objects.queued().get(task=task)
    assert TaskQueueItem.objects.claim(item.id)

    counter = StatementCounter()
    counter.leave_out_live_flushes(monkeypatch)
    counter.count_begins(monkeypatch)
    with connection.execute_wrapper(counter):
        _run_pass(item)

    per_step = counter.total / AGENTS
    with capsys.disabled():
        print(f"\nstatements per step: {per_step:.1f} ({dict(counter.kinds)} over {AGENTS} steps)")
    task.refresh_from_db()
    assert task.status == TaskStatus.IN_REVIEW  # every agent skipped: the pass ends in review
    assert TaskQueueItem.objects.get(id=item.id).status == QueueStatus.COMPLETED
    assert task.runs.filter(status="completed").count() == AGENTS
    assert counter.kinds["SAVEPOINT"] == 0
    assert per_step <= MAX_STATEMENTS_PER_STEP
    assert Task.objects.filter(id=task.id).exists()


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_chat_reply_is_one_step_without_savepoints(fake_clis, capsys, monkeypatch):
    workspace = workspace_create(title="Chat bench")
    chat = chat_start(workspace=workspace, message="Hello")
    item = ChatQueueItem.objects.queued().get(chat=chat)
    assert ChatQueueItem.objects.claim(item.id)

    counter = StatementCounter()
    counter.leave_out_live_flushes(monkeypatch)
    counter.count_begins(monkeypatch)
    with connection.execute_wrapper(counter):
        ChatReply(item, stop=threading.Event(), shutdown=threading.Event()).run()

    with capsys.disabled():
        print(f"\nstatements per chat reply: {counter.total} ({dict(counter.kinds)})")
    assert counter.kinds["BEGIN"] == 2  # start; finish with chat.processing_finished
    assert ChatQueueItem.objects.get(id=item.id).status == QueueStatus.COMPLETED
    reply = chat.messages.get(role="agent")
    assert (reply.message, reply.agent_name) == ("OK", "Malamar")
    finished = OutboxEvent.objects.filter(type="chat.processing_finished").get()
    assert finished.payload["outcome"] == "replied"
    assert counter.kinds["SAVEPOINT"] == 0


@pytest.mark.pg
def test_batched_events_go_out_in_one_insert_in_publishing_order(db):
    counter = StatementCounter()
    with connection.execute_wrapper(counter), events.batched():
        events.publish("task.updated", {"n": 1})
        with events.batched():  # a nested block joins the outer one
            events.publish("task.updated", {"n": 2})
        assert not OutboxEvent.objects.exists(), "nothing is inserted before the block ends"
    assert counter.kinds == {"SELECT": 1, "INSERT": 1}
    assert [e.payload["n"] for e in OutboxEvent.objects.order_by("id")] == [1, 2]


@pytest.mark.pg
def test_a_failed_batch_publishes_nothing(db):
    with pytest.raises(RuntimeError), events.batched():
        events.publish("task.updated", {"n": 1})
        raise RuntimeError
    events.publish("task.updated", {"n": 2})  # and the next publish is not batched any more
    assert [e.payload["n"] for e in OutboxEvent.objects.all()] == [2]


def test_cleanup_prunes_old_finished_queue_items_of_both_kinds(workspace):
    old = timezone.now() - timedelta(days=8)
    task = task_create(workspace=workspace, summary="Old")
    done = TaskQueueItem.objects.get(task=task)
    TaskQueueItem.objects.filter(id=done.id).update(status=QueueStatus.COMPLETED, updated_at=old)
    queued = task_create(workspace=workspace, summary="Still queued")
    chat = chat_start(workspace=workspace, message="Hi")
    ChatQueueItem.objects.filter(chat=chat).update(status=QueueStatus.FAILED, updated_at=old)

    counts = jobs.cleanup()

    assert (counts["task_queue_items"], counts["chat_queue_items"]) == (1, 1)
    assert list(TaskQueueItem.objects.values_list("task_id", flat=True)) == [queued.id]


@pytest.mark.pg
def test_one_stop_watcher_stops_task_passes_and_chat_replies(workspace):
    worker = Worker(poll_interval=1)
    tasks = [task_create(workspace=workspace, summary=name) for name in ("Kept", "Cancelled")]
    items = [TaskQueueItem.objects.get(task=task) for task in tasks]
    chats = [chat_start(workspace=workspace, message=text) for text in ("Kept", "Deleted")]
    replies = [ChatQueueItem.objects.get(chat=chat) for chat in chats]
    for item in items:
        assert TaskQueueItem.objects.claim(item.id)
    for reply in replies:
        assert ChatQueueItem.objects.claim(reply.id)
    stops = {
        "task kept": worker._register("task", items[0]),
        "task cancelled": worker._register("task", items[1]),
        "chat kept": worker._register("chat", replies[0]),
        "chat deleted": worker._register("chat", replies[1]),
    }
    TaskQueueItem.objects.filter(id=items[1].id).update(stop_requested_at=timezone.now())
    chats[1].delete()

    worker.watch_stops()

    assert {name for name, stop in stops.items() if stop.is_set()} == {
        "task cancelled",
        "chat deleted",
    }


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_task_step_that_completes_clears_its_clis_slow_mark(fake_clis):
    """(A CLI marked broken is not run at all: tests/test_pass_edges.py.)"""
    CliHealth.objects.create(cli_type="claude", status=CliHealthStatus.SLOW, error="timed out")
    workspace = workspace_create(title="Marked")
    agent_create(workspace=workspace, name="Planner", instruction="Skip.", cli_type="claude")
    item = TaskQueueItem.objects.get(task=task_create(workspace=workspace, summary="Run"))
    assert TaskQueueItem.objects.claim(item.id)

    _run_pass(item)

    row = CliHealth.objects.get(cli_type="claude")
    assert (row.status, row.error) == (CliHealthStatus.HEALTHY, "")


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_each_agent_after_the_first_starts_from_a_gate_started_while_the_one_before_worked(
    fake_clis, monkeypatch
):
    """No process is started between two agents: the next run's gate was started while the
    run before it worked (worker.process.Spares); the stop ends the one left."""
    process.spares.clear()
    taken = []
    take = process.spares.take

    def spy(env):
        found = take(env)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(process.spares, "take", spy)
    workspace = workspace_create(title="Spares")
    for n in range(3):
        agent_create(workspace=workspace, name=f"A{n}", instruction="Skip.", cli_type="claude")
    item = TaskQueueItem.objects.get(task=task_create(workspace=workspace, summary="Run"))
    assert TaskQueueItem.objects.claim(item.id)

    _run_pass(item)

    assert taken == [False, True, True]
    assert len(process.spares.waiting()) == 1  # for the next run with this environment
    process.spares.clear()
    assert process.spares.waiting() == []


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_chat_reply_that_completes_clears_its_clis_slow_mark(fake_clis):
    CliHealth.objects.create(cli_type="claude", status=CliHealthStatus.SLOW, error="slow")
    chat = chat_start(workspace=workspace_create(title="Slow"), message="Hello")
    item = ChatQueueItem.objects.queued().get(chat=chat)
    assert ChatQueueItem.objects.claim(item.id)

    ChatReply(item, stop=threading.Event(), shutdown=threading.Event()).run()

    assert chat.runs.get().cli_type == "claude"
    assert CliHealth.objects.get(cli_type="claude").status == CliHealthStatus.HEALTHY
    context = temp_dir() / f"malamar_chat_{chat.id}_{item.id}_context.md"
    assert "Claude Code (claude): slow to answer (slow)" in context.read_text()


@pytest.mark.django_db(transaction=True)
def test_the_worker_gives_each_run_the_knowledge_base_it_calls_malamars_guide(
    fake_clis, monkeypatch
):
    """The recorder learns where the Malamar agent's knowledge base is from the worker (the runs
    domain does not import chats), for a chat reply and a task pass alike."""
    given = []

    def recorder(**options):
        given.append(options.get("knowledge_dir"))
        return RunRecorder(**options)

    monkeypatch.setattr(pipeline, "RunRecorder", recorder)
    workspace = workspace_create(title="Guide")
    agent_create(workspace=workspace, name="Planner", instruction="Skip.", cli_type="claude")
    chat = chat_start(workspace=workspace, message="Hello")
    chat_item = ChatQueueItem.objects.queued().get(chat=chat)
    assert ChatQueueItem.objects.claim(chat_item.id)
    ChatReply(chat_item, stop=threading.Event(), shutdown=threading.Event()).run()
    task_item = TaskQueueItem.objects.get(task=task_create(workspace=workspace, summary="Run"))
    assert TaskQueueItem.objects.claim(task_item.id)
    _run_pass(task_item)

    assert given == [str(knowledge_base_dir())] * 2


def test_run_threads_give_their_freed_memory_back_when_they_end(workspace, monkeypatch):
    released = []
    monkeypatch.setattr(loop, "release_free_memory", lambda: released.append("released"))
    worker = Worker(poll_interval=1, idle_runners=0)  # (a runner then ends with its work)
    monkeypatch.setattr(worker, "_run", lambda kind, item, stop: None)

    def in_a_thread(target, *args):  # as the worker runs them (they close their connection)
        thread = threading.Thread(target=target, args=args)
        thread.start()
        thread.join()

    in_a_thread(worker._workspace_thread, workspace.id, 1)  # nothing queued: ends at once
    assert released == ["released"]
    chat = chat_start(workspace=workspace, message="Hi")
    in_a_thread(worker._chat_thread, ChatQueueItem.objects.get(chat=chat), threading.Event())
    assert released == ["released"] * 2


def _stop_requests():
    """Each way the server asks a running run to stop (DESIGN "Stopping runs")."""
    return {
        "cancel": lambda task, chat: task_cancel(task=task),
        "delete the task": lambda task, chat: task_delete(task=task),
        "move it to In Review": lambda task, chat: task_status_set(
            task=task, status=TaskStatus.IN_REVIEW, actor=USER
        ),
        "stop the chat": lambda task, chat: chat_cancel(chat=chat),
        "delete the chat": lambda task, chat: chat_delete(chat=chat),
        "delete the workspace": lambda task, chat: workspace_delete(workspace=task.workspace),
    }


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("request_stop", list(_stop_requests()))
def test_a_stop_request_wakes_the_one_stop_watcher_before_its_next_poll(workspace, request_stop):
    """The watcher looks at the running items when something wakes the worker, not every
    100 ms: every stop request commits with a wake-up (a poke, or a NOTIFY on PostgreSQL)."""
    worker = Worker(poll_interval=3600)
    worker.sock = bind_datagram_socket(socket_path())
    worker.listener = WorkListener.connect() if uses_notify() else None
    try:
        task = task_create(workspace=workspace, summary="Running")
        chat = chat_start(workspace=workspace, message="Running too")
        item = TaskQueueItem.objects.get(task=task)
        reply = ChatQueueItem.objects.get(chat=chat)
        assert TaskQueueItem.objects.claim(item.id) and ChatQueueItem.objects.claim(reply.id)
        Task.objects.filter(id=task.id).update(status=TaskStatus.IN_PROGRESS)
        task.refresh_from_db()
        chat.refresh_from_db()
        stops = {"task": worker._register("task", item), "chat": worker._register("chat", reply)}
        worker.next_poll = 0.0  # no waiting: drain the setup's own wake-ups
        while worker._wait_for_wake():
            pass
        worker.next_poll = time.monotonic() + 60  # (a failure waits for this poll)

        _stop_requests()[request_stop](task, chat)

        assert worker._wait_for_wake(), "the stop request did not wake the worker"
        worker.watch_stops()
        stopped = {kind for kind, stop in stops.items() if stop.is_set()}
        wanted = {"task"} if "chat" not in request_stop else {"chat"}
        assert stopped == ({"task", "chat"} if request_stop == "delete the workspace" else wanted)
    finally:
        worker.sock.close()
        if worker.listener is not None:
            worker.listener.close()


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_wake_up_for_a_queued_task_looks_for_tasks_only_and_others_for_everything(
    workspace, monkeypatch
):
    """A task queued wakes the worker for tasks: its thread claims it at once, not beside the
    chat and job queries of the same wake-up (a SQLite poke's datagram or a NOTIFY's payload
    says so); any other wake-up, or the poll, looks at everything."""
    worker = Worker(poll_interval=3600)
    worker.sock = bind_datagram_socket(socket_path())
    worker.listener = WorkListener.connect() if uses_notify() else None
    looked = []
    for name in ("spawn_workspaces", "spawn_chats", "run_jobs"):
        monkeypatch.setattr(worker, name, lambda name=name: looked.append(name))
    try:
        worker.next_poll = 0.0  # no waiting: drain what came before
        while worker._wait_for_wake():
            pass
        worker.next_poll = time.monotonic() + 60

        task_create(workspace=workspace, summary="Start me")
        worker.step()
        assert looked == ["spawn_workspaces"]

        looked.clear()
        chat_start(workspace=workspace, message="Answer me")
        worker.step()
        assert looked == ["spawn_workspaces", "spawn_chats", "run_jobs"]

        looked.clear()
        task_create(workspace=workspace, summary="Start me too")
        worker.next_poll = 0.0  # the poll is due as well: everything
        worker.step()
        assert looked == ["spawn_workspaces", "spawn_chats", "run_jobs"]
    finally:
        worker.sock.close()
        if worker.listener is not None:
            worker.listener.close()


def _record_then(monkeypatch, then):
    """Run `then()` right after a run's process is recorded and released (its CLI starts)."""
    record, release = pipeline._record, process.Held.release
    recorded = []

    def spied_record(owner, started):
        record(owner, started)
        recorded.append(started.pid)

    def spied_release(held):
        release(held)
        if recorded:
            then()

    monkeypatch.setattr(pipeline, "_record", spied_record)
    monkeypatch.setattr(process.Held, "release", spied_release)
    return recorded


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_cli_whose_task_went_as_it_started_is_killed_quietly(fake_clis, monkeypatch, caplog):
    """The run row is written while the CLI starts (off the path between two agents): a task
    deleted between the record and that write leaves no CLI running and no error."""
    workspace = workspace_create(title="Gone")
    agent_create(workspace=workspace, name="Planner", instruction="Go.", cli_type="claude")
    task = task_create(workspace=workspace, summary="Go", description="@fake hold 120 skip")
    item = TaskQueueItem.objects.get(task=task)
    assert TaskQueueItem.objects.claim(item.id)
    recorded = _record_then(monkeypatch, lambda: task_delete(task=task))

    _run_pass(item)

    assert len(recorded) == 1 and not alive(recorded[0])
    assert not Task.objects.filter(id=task.id).exists()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_cli_whose_start_cannot_be_written_is_killed_and_the_pass_fails(
    fake_clis, monkeypatch, caplog
):
    """A start that fails for another reason (a bug, a database error) kills the CLI it
    released, and the pass fails with a comment saying so, as any bug in a pass does."""
    workspace = workspace_create(title="Broken")
    agent_create(workspace=workspace, name="Planner", instruction="Go.", cli_type="claude")
    task = task_create(workspace=workspace, summary="Go", description="@fake hold 120 skip")
    item = TaskQueueItem.objects.get(task=task)
    assert TaskQueueItem.objects.claim(item.id)
    recorded = _record_then(monkeypatch, lambda: None)

    def broken(owner, recorder):
        raise RuntimeError("the start could not be written")

    monkeypatch.setattr(TaskPass, "start", broken)
    _run_pass(item)

    assert len(recorded) == 1 and not alive(recorded[0])
    task.refresh_from_db()
    assert task.failure_streak == 1
    comment = task.comments.get()
    assert "the start could not be written" in comment.content
    assert not task.runs.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("hanging_at", ["the start", "the first tree"])
def test_a_released_cli_whose_start_write_hangs_is_killed_by_a_stopping_worker(
    fake_clis, monkeypatch, hanging_at
):
    """Between the go and the watch, the run's start is written and the task's first tree is
    read: if either hangs (a database that does not answer), a stopping worker's kill_followed
    still ends the CLI (a SIGTERM'd worker left it running when the read came after)."""
    workspace = workspace_create(title="Frozen")
    agent_create(workspace=workspace, name="Planner", instruction="Go.", cli_type="claude")
    task = task_create(workspace=workspace, summary="Go", description="@fake hold 120 skip")
    item = TaskQueueItem.objects.get(task=task)
    assert TaskQueueItem.objects.claim(item.id)
    hanging, answers = threading.Event(), threading.Event()
    module, name = (
        (pipeline, "_start") if hanging_at == "the start" else (snapshotting, "task_first_tree")
    )
    original = getattr(module, name)

    def hangs(*args):
        hanging.set()
        answers.wait(30)
        return original(*args)

    monkeypatch.setattr(module, name, hangs)
    stop, shutdown = process.RunStop(), threading.Event()
    run = threading.Thread(target=TaskPass(item, stop=stop, shutdown=shutdown).run)
    run.start()
    try:
        assert hanging.wait(30)
        pid = TaskQueueItem.objects.get(id=item.id).pid
        assert alive(pid)
        shutdown.set()
        stop.set()
        assert stop.kill_followed() == 1
        wait_until(lambda: not alive(pid), timeout=10, what="the CLI to end")
    finally:
        answers.set()
        run.join(30)


def _spy_ready(monkeypatch, then=None):
    """The pids of the runs made ready, in order, and of the processes that ran (their go),
    each checked at its go: the process is recorded on its queue item (DESIGN "Processes")."""
    made, ran = [], []
    prepare_next, release = TaskPass.prepare_next, process.Held.release

    def spied_prepare(owner):
        prepare_next(owner)
        if owner.ready is not None:
            made.append(owner.ready.held.started.pid)
        if then is not None:
            then(owner)

    def spied_release(held):
        pid = held.started.pid
        recorded = TaskQueueItem.objects.filter(
            Q(pid=pid) | Q(next_pid=pid), status=QueueStatus.IN_PROGRESS
        )
        assert recorded.exists(), "a CLI went before its process was recorded"
        ran.append(pid)
        release(held)

    monkeypatch.setattr(TaskPass, "prepare_next", spied_prepare)
    monkeypatch.setattr(process.Held, "release", spied_release)
    return made, ran


def _no_early_go(monkeypatch):
    """The next agent goes after the finish, not before it: the way of a step after which
    something else than the pass wrote the task or its workspace (TaskPass.go_early)."""
    monkeypatch.setattr(TaskPass, "go_early", lambda owner, result: False)


def _pass_of(names: list[str], description: str = "@fake skip", cli_type: str = "claude"):
    workspace = workspace_create(title="Ready")
    agents = [
        agent_create(workspace=workspace, name=name, instruction="Go.", cli_type=cli_type)
        for name in names
    ]
    task = task_create(workspace=workspace, summary="Go", description=description)
    item = TaskQueueItem.objects.get(task=task)
    assert TaskQueueItem.objects.claim(item.id)
    return task, item, agents


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_each_next_agent_runs_the_process_made_ready_while_the_one_before_worked(
    fake_clis, monkeypatch
):
    """Between two agents only the input is written before the record and the go: the next
    run's command and process were made ready while the run before it worked."""
    made, ran = _spy_ready(monkeypatch)
    record, records = pipeline._record, []
    monkeypatch.setattr(pipeline, "_record", lambda *a: records.append(1) or record(*a))
    prepare, recorder = TaskPass.prepare_next, TaskPass.recorder
    made_recorders, used_recorders = [], []

    def prepared(owner):
        prepare(owner)
        if owner.ready is not None:
            made_recorders.append(owner.ready.recorder)

    def used(owner, plan):
        used_recorders.append(recorder(owner, plan))
        return used_recorders[-1]

    monkeypatch.setattr(TaskPass, "prepare_next", prepared)
    monkeypatch.setattr(TaskPass, "recorder", used)
    task, item, _agents = _pass_of(["A", "B", "C"])

    _run_pass(item)

    assert len(made) == 2 and ran[1:] == made  # B and C ran in the processes made ready
    assert records == [1]  # A's: B's and C's were recorded by the finish before them
    # ...and their runs' recorders were made then too (C's as B worked)
    assert len(made_recorders) == 2 and used_recorders[1:] == made_recorders
    task.refresh_from_db()
    assert task.status == TaskStatus.IN_REVIEW
    assert list(task.runs.order_by("started_at").values_list("agent_name", flat=True)) == [
        "A",
        "B",
        "C",
    ]


@pytest.mark.django_db(transaction=True)
def test_a_stop_after_the_finish_that_recorded_the_next_process_is_seen_at_its_go(
    fake_clis, monkeypatch
):
    """B's process was recorded by A's finish, so no record of its own comes before its go to
    refuse it: a stop asked for in between is seen at the go, and B's CLI never runs (no run
    row, its gate ends unused)."""
    _no_early_go(monkeypatch)
    made, ran = _spy_ready(monkeypatch)
    write_input = TaskPass.write_input

    def stopped_meanwhile(owner, output_path):
        if owner.agent.name == "B":
            owner.stop.set()  # (what the stop watcher does when the user stops the task)
        return write_input(owner, output_path)

    monkeypatch.setattr(TaskPass, "write_input", stopped_meanwhile)
    task, item, _agents = _pass_of(["A", "B"])

    _run_pass(item)

    assert len(made) == 1 and made[0] not in ran and len(ran) == 1
    assert list(task.runs.values_list("agent_name", flat=True)) == ["A"]
    wait_until(lambda: not alive(made[0]), timeout=10, what="the unused gate to end")


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_run_made_ready_for_an_agent_that_does_not_come_ends_unused(fake_clis, monkeypatch):
    """The first agent asks for review: the run made ready for the second is discarded, its
    process ends at its gate without running the CLI."""
    made, ran = _spy_ready(monkeypatch)
    task, item, _agents = _pass_of(["A", "B"], description="@fake review Look")
    task_pass = TaskPass(item, stop=threading.Event(), shutdown=threading.Event())

    task_pass.run()

    assert task_pass.ready is None  # (kept, its gate would wait for a go until collected)
    assert len(made) == 1 and len(ran) == 1 and made[0] not in ran
    wait_until(lambda: not alive(made[0]), timeout=10, what="the unused gate to end")
    assert list(task.runs.values_list("agent_name", flat=True)) == ["A"]


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_run_made_ready_before_its_agent_changed_is_made_again(fake_clis, monkeypatch):
    """The next agent's model changes while the one before works: its run made ready (let go
    early, as the pass knew that agent) is killed unused once the finish sees the change, and
    the run takes the new model."""

    def change_b(owner):
        if owner.agent.name == "A":
            agent_update(agent=Agent.objects.get(name="B"), model="opus-new")

    made, ran = _spy_ready(monkeypatch, then=change_b)
    task, item, _agents = _pass_of(["A", "B"])

    _run_pass(item)

    assert len(ran) == 3 and ran[1] == made[0] and made[0] not in ran[2:]
    wait_until(lambda: not alive(made[0]), timeout=10, what="the unused CLI to end")
    assert task.runs.get(agent_name="B").model.startswith("opus-new")  # as the CLI says it


@pytest.mark.django_db(transaction=True)
def test_a_run_made_ready_whose_input_cannot_be_written_is_discarded(fake_clis, monkeypatch):
    """The second agent's input cannot be written (a full disk): the run made ready for it is
    discarded (its gate closed) and the pass fails as any fault in a pass does."""
    _no_early_go(monkeypatch)
    made, ran = _spy_ready(monkeypatch)
    discarded, discard = [], pipeline.Ready.discard

    def spied_discard(ready):
        discarded.append(ready.held.started.pid)
        discard(ready)

    write_input = TaskPass.write_input

    def full_disk(owner, output_path):
        if owner.agent.name == "B":
            raise OSError(28, "No space left on device")
        return write_input(owner, output_path)

    monkeypatch.setattr(pipeline.Ready, "discard", spied_discard)
    monkeypatch.setattr(TaskPass, "write_input", full_disk)
    task, item, _agents = _pass_of(["A", "B"])

    _run_pass(item)

    assert len(made) == 1 and discarded == made and len(ran) == 1
    task.refresh_from_db()
    assert task.failure_streak == 1


class WorkerDied(BaseException):
    """What a kill -9 would do to the worker at that point: nothing after it runs."""


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_dies_between_a_finish_and_the_next_start_resumes_at_the_next_agent(
    fake_clis, monkeypatch
):
    """A's answer is applied, and with it B's process (made ready at its gate) is recorded;
    the worker dies before B's go: the pass goes on at B, not at A (whose run would be paid
    for again), and the recovery ends B's waiting process."""
    _no_early_go(monkeypatch)
    made, _ran = _spy_ready(monkeypatch)
    release = process.Held.release

    def dies_at_b(held):
        if len(made) == 1 and held.started.pid == made[0]:
            raise WorkerDied
        release(held)

    monkeypatch.setattr(process.Held, "release", dies_at_b)
    task, item, agents = _pass_of(["A", "B", "C"])

    with pytest.raises(WorkerDied):
        _run_pass(item)

    left = TaskQueueItem.objects.get(id=item.id)
    assert (left.resume_agent_id, left.pid) == (agents[1].id, made[0])
    assert list(task.runs.values_list("agent_name", "status")) == [("A", "completed")]
    assert alive(made[0])  # at its gate: never released
    _recovery_kills_and_requeues(item, made[0], at=agents[1])


@pytest.mark.django_db(transaction=True)
def test_a_working_directory_removed_while_the_agent_before_works_is_said_as_before(
    fake_clis, monkeypatch, tmp_path
):
    """The next run was made ready in the workspace's folder, then the folder went (once the
    agent before ended): that run is discarded and the step fails with the usual words."""
    _no_early_go(monkeypatch)
    folder = tmp_path / "project"
    folder.mkdir()
    apply = TaskPass.apply

    def apply_then_remove_folder(owner, result):
        apply(owner, result)
        if owner.agent.name == "A":
            shutil.rmtree(folder)

    made, ran = _spy_ready(monkeypatch)
    monkeypatch.setattr(TaskPass, "apply", apply_then_remove_folder)
    workspace = workspace_create(
        title="Static", working_directory_mode="static", working_directory_path=str(folder)
    )
    for name in ("A", "B"):
        agent_create(workspace=workspace, name=name, instruction="Go.", cli_type="claude")
    task = task_create(workspace=workspace, summary="Go")
    item = TaskQueueItem.objects.get(task=task)
    assert TaskQueueItem.objects.claim(item.id)

    _run_pass(item)

    assert len(made) == 1 and made[0] not in ran
    wait_until(lambda: not alive(made[0]), timeout=10, what="the unused gate to end")
    comment = task.comments.get()
    assert f"Working directory {folder} does not exist" in comment.content


# the next agent's early go (TaskPass.go_early) -----------------------------------------------


def _inputs_written(monkeypatch) -> list[str]:
    """The text of every file the pipeline writes (the agents' inputs), in order."""
    inputs, write_private = [], pipeline.write_private
    monkeypatch.setattr(
        pipeline, "write_private", lambda p, text: inputs.append(text) or write_private(p, text)
    )
    return inputs


def _applied_after(monkeypatch, ran: list, then=None) -> list:
    """How many CLIs had gone when each step's answer was applied (its finish); `then(owner)`
    runs just before the finish's locking read."""
    seen, apply, lock = [], TaskPass.apply, TaskPass.lock_if_wanted
    monkeypatch.setattr(TaskPass, "apply", lambda o, r: seen.append(len(ran)) or apply(o, r))
    if then is not None:
        monkeypatch.setattr(TaskPass, "lock_if_wanted", lambda o: then(o) or lock(o))
    return seen


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_the_next_agent_goes_before_the_finish_of_the_one_before_with_its_answer_in_its_input(
    fake_clis, monkeypatch
):
    """A's answer (a comment) is in B's input, yet B's CLI went before A's finish wrote it:
    B's input shows the very rows A's finish writes (same time, same words), and every
    process was recorded on the item before it went (_spy_ready)."""
    made, ran = _spy_ready(monkeypatch)
    applied = _applied_after(monkeypatch, ran)
    inputs = _inputs_written(monkeypatch)
    task, item, _agents = _pass_of(["A", "B", "C"], "@fake A: comment-once Hello from A")

    _run_pass(item)

    assert ran[1:] == made and applied == [2, 3, 3]  # B went before A's finish, C before B's
    comment = task.comments.get()
    assert comment.content == "Hello from A"
    b_input = next(text for text in inputs if 'You are the agent "B"' in text)
    assert f'"content": "Hello from A", "created_at": "{prompts.iso(comment.created_at)}"' in (
        b_input
    )
    finished = task.logs.get(event_type="agent_finished", metadata__agent_name="A")
    assert f'"created_at": "{prompts.iso(finished.created_at)}"' in b_input
    # (its agent_finished log, made as A worked, says what A answered; so do B's and C's)
    actions = dict(
        task.logs.filter(event_type="agent_finished").values_list(
            "metadata__agent_name", "metadata__action_type"
        )
    )
    assert actions == {"A": "comment", "B": "skip", "C": "skip"}


@pytest.mark.django_db(transaction=True)
def test_the_next_input_is_made_as_the_agent_works_and_reads_as_a_whole_render(
    fake_clis, monkeypatch
):
    """B's input is made while A works (all but A's answer: InputAhead), and only A's rows and
    B's agent_started log are put in at B's go: the text is the one task_input_text renders
    from the task's history as the database has it once B started."""
    made_while_working, made_at_go, going = [], [], []
    input_ahead, go_early = TaskPass._input_ahead, TaskPass.go_early

    def spied_ahead(owner, ready):
        (made_at_go if going else made_while_working).append(owner.agent.name)
        return input_ahead(owner, ready)

    def spied_go(owner, result):
        going.append(owner.agent.name)
        try:
            return go_early(owner, result)
        finally:
            going.clear()

    monkeypatch.setattr(TaskPass, "_input_ahead", spied_ahead)
    monkeypatch.setattr(TaskPass, "go_early", spied_go)
    inputs = _inputs_written(monkeypatch)
    task, item, agents = _pass_of(["A", "B", "C"], "@fake A: comment-once Hello from A")

    _run_pass(item)

    assert (made_while_working, made_at_go) == (["A", "B"], [])
    b_input = next(text for text in inputs if 'You are the agent "B"' in text)
    started = task.logs.get(event_type="agent_started", metadata__agent_name="B")
    comments, logs = task_selectors.task_history(task)
    shown_logs = logs[: [entry.id for entry in logs].index(started.id) + 1]
    shown_comments = [c for c in comments if c.created_at <= started.created_at]
    output_path = b_input.split("Write your response as JSON to: ", 1)[1].split("\n", 1)[0]
    whole = pipeline.task_input_text(
        Task.objects.select_related("workspace").get(id=task.id),
        agents[1],
        Path(output_path),
        [(agent.id, agent.name) for agent in agents],
        (shown_comments, shown_logs),
    )
    assert b_input == whole and "Hello from A" in whole


@pytest.mark.django_db(transaction=True)
def test_every_runs_answer_file_is_removed_once_its_step_is_over(fake_clis, monkeypatch):
    """Removed after the step's finish (off the path to the next agent's go), not before, and
    whatever the step's end: here a pass of three, the last one stopped while it works. (Codex
    writes its answer to a file: `-o`.)"""
    task, item, _agents = _pass_of(["A", "B", "C"], "@fake C: sleep 30", cli_type="codex")
    order = _goes_and_reapings(monkeypatch)
    stop, start = threading.Event(), TaskPass.start

    def stop_at_c(owner, recorder):
        start(owner, recorder)
        if owner.agent.name == "C":
            stop.set()  # (as C's CLI sleeps)

    monkeypatch.setattr(TaskPass, "start", stop_at_c)

    TaskPass(item, stop=stop, shutdown=threading.Event()).run()

    assert list(task.runs.values_list("agent_name", "status")) == [
        ("A", "completed"),
        ("B", "completed"),
        ("C", "stopped"),
    ]
    assert sorted(temp_dir().glob("malamar_output_*")) == []
    assert len(order) == 6 and _unreaped(held for _what, held, _pids in order) == []  # (C's too)


def _goes_and_reapings(monkeypatch) -> list[tuple[str, process.Held, list[int]]]:
    """("go", held, ...) as each CLI goes, ("reaped", held, ...) as its step ends (Held.end);
    each with the pids of the CLIs gone before that were not reaped then."""
    order, release, end = [], process.Held.release, process.Held.end

    def noted(what, held, then):
        order.append((what, held, _unreaped(gone for _what, gone, _pids in order)))
        then(held)

    monkeypatch.setattr(process.Held, "release", lambda held: noted("go", held, release))
    monkeypatch.setattr(process.Held, "end", lambda held: noted("reaped", held, end))
    return order


def _unreaped(helds) -> list[int]:
    """Those of `pids` that ended and wait for this process to reap them."""
    ended = []
    for pid in {held.started.pid for held in helds}:
        with contextlib.suppress(ChildProcessError):  # (not a child: reaped)
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                ended.append(pid)
    return ended


@pytest.mark.django_db(transaction=True)
def test_each_ended_cli_is_reaped_after_the_next_agents_go(fake_clis, monkeypatch):
    """Reaping a process is the kernel freeing it (~0.1 ms, with its pipes closed): done once
    the step is over, not between A's exit and B's go; its exit status is read before."""
    order = _goes_and_reapings(monkeypatch)
    task, item, _agents = _pass_of(["A", "B", "C"], "@fake C: exit 3 Broke")

    _run_pass(item)

    assert list(task.runs.order_by("started_at").values_list("exit_code", flat=True)) == [0, 0, 3]
    names = dict(zip([held for what, held, _pids in order if what == "go"], "ABC", strict=True))
    names.update({held.started.pid: name for held, name in list(names.items())})
    assert [(what, names[held], [names[pid] for pid in pids]) for what, held, pids in order] == [
        ("go", "A", []),
        ("go", "B", ["A"]),  # (A ended, not reaped yet)
        ("reaped", "A", ["A"]),
        ("go", "C", ["B"]),
        ("reaped", "B", ["B"]),
        ("reaped", "C", ["C"]),
    ]
    assert _unreaped(held for held in names if isinstance(held, process.Held)) == []


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_stop_between_the_early_go_and_the_finish_ends_the_next_cli_and_discards_the_answer(
    fake_clis, monkeypatch
):
    """The task is stopped after B's CLI went early, before A's finish: the finish sees it as
    ever (A's answer is discarded: no comment), B's CLI is killed and never becomes a run."""
    made, ran = _spy_ready(monkeypatch)

    def stopped(owner):
        if owner.agent.name == "A":
            TaskQueueItem.objects.filter(id=owner.item.id).update(stop_requested_at=timezone.now())

    applied = _applied_after(monkeypatch, ran, then=stopped)
    task, item, _agents = _pass_of(["A", "B"], "@fake A: comment Hello\n@fake B: sleep 30")

    _run_pass(item)

    assert len(ran) == 2 and ran[1] == made[0] and applied == []
    assert not alive(made[0])
    assert list(task.runs.values_list("agent_name", flat=True)) == ["A"]
    assert not task.comments.exists()
    assert TaskQueueItem.objects.get(id=item.id).status == QueueStatus.FAILED


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_an_agent_edited_between_the_early_go_and_the_finish_runs_as_edited(fake_clis, monkeypatch):
    """B's model changes after B's CLI went early, before A's finish: that CLI ends unused
    (killed) and B runs again, with its new model."""
    made, ran = _spy_ready(monkeypatch)

    def edit_b(owner):
        if owner.agent.name == "A":
            agent_update(agent=Agent.objects.get(name="B"), model="opus-new")

    _applied_after(monkeypatch, ran, then=edit_b)
    task, item, _agents = _pass_of(["A", "B"])

    _run_pass(item)

    assert len(ran) == 3 and ran[1] == made[0] and made[0] not in ran[2:]
    wait_until(lambda: not alive(made[0]), timeout=10, what="the early CLI to end")
    runs = list(task.runs.order_by("started_at").values_list("agent_name", "model"))
    assert [name for name, _model in runs] == ["A", "B"]
    assert runs[1][1].startswith("opus-new")


class DiesAt(BaseException):
    """A kill -9 of the worker at that point (nothing after it runs)."""


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_dies_between_the_early_go_and_the_finish_leaves_nothing_running(
    fake_clis, monkeypatch
):
    """B's CLI went early and the worker dies before A's finish: the recovery kills B's CLI
    (recorded by A's start as the item's next process) and the pass resumes at A, whose
    answer was never written, as a crash anywhere before a finish does."""
    made, ran = _spy_ready(monkeypatch)

    def dies(owner):
        if owner.agent.name == "A":
            raise DiesAt

    _applied_after(monkeypatch, ran, then=dies)
    monkeypatch.setattr(pipeline.Ready, "discard", lambda ready: None)  # (nothing runs after)
    _task, item, agents = _pass_of(["A", "B"], "@fake B: sleep 30")
    task_pass = TaskPass(item, stop=threading.Event(), shutdown=threading.Event())

    with pytest.raises(DiesAt):
        task_pass.run()

    left = TaskQueueItem.objects.get(id=item.id)
    assert (
        (left.resume_agent_id, left.next_pid)
        == (agents[0].id, made[0])
        == (
            agents[0].id,
            ran[1],
        )
    )
    assert alive(made[0])  # B's fake CLI sleeps
    _recovery_kills_and_requeues(item, made[0], at=agents[0])


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_dies_after_the_finish_before_the_early_start_resumes_at_the_next_agent(
    fake_clis, monkeypatch
):
    """B went early, A's finish is written (B's process is now the item's), and the worker dies
    before B's start: the recovery kills B's CLI and the pass resumes at B, not at A (whose
    run would be paid for again)."""

    def dies_at_b(owner):  # (its start comes next: C's process is made ready first)
        if owner.agent.name == "B":
            raise DiesAt

    _made, ran = _spy_ready(monkeypatch, then=dies_at_b)
    task, item, agents = _pass_of(["A", "B", "C"], "@fake B: sleep 30")
    task_pass = TaskPass(item, stop=threading.Event(), shutdown=threading.Event())

    with pytest.raises(DiesAt):
        task_pass.run()

    left = TaskQueueItem.objects.get(id=item.id)
    assert (left.resume_agent_id, left.pid, left.next_pid) == (agents[1].id, ran[1], None)
    assert list(task.runs.values_list("agent_name", "status")) == [("A", "completed")]
    assert alive(ran[1])
    _recovery_kills_and_requeues(item, ran[1], at=agents[1])


@pytest.mark.django_db(transaction=True)
def test_after_a_comment_written_while_the_agent_worked_the_next_one_starts_anew_with_it(
    fake_clis, monkeypatch
):
    """Somebody else wrote the task while A worked (a person's comment): B's CLI went early
    with an input that lacks it; A's finish sees the write (its locking read), so that CLI is
    killed unused and B starts anew, after the finish, with the comment in its input."""
    made, ran = _spy_ready(monkeypatch)
    start = TaskPass.start

    def comment_while_a_works(owner, recorder):
        start(owner, recorder)
        if owner.agent.name == "A":
            task = Task.objects.get(id=owner.task.id)
            comment_create_and_send_around(task=task, content="Mind the tests", actor=USER)

    monkeypatch.setattr(TaskPass, "start", comment_while_a_works)
    inputs = _inputs_written(monkeypatch)
    task, item, _agents = _pass_of(["A", "B"], "@fake B: sleep 30")

    with monkeypatch.context() as m:  # (B's second input: no sleep for it)
        m.setattr(TaskPass, "write_input", _then_skip(TaskPass.write_input))
        _run_pass(item)

    assert len(ran) == 3 and ran[1] == made[0] and not alive(made[0])
    first, again = [text for text in inputs if 'You are the agent "B"' in text]
    assert "Mind the tests" not in first and "Mind the tests" in again
    assert list(task.runs.order_by("started_at").values_list("agent_name", flat=True)) == [
        "A",
        "B",
    ]
    assert not TaskComment.objects.filter(task=task, delivered_at=None).exists()  # B read it


def _then_skip(write_input):
    """The step's input is written after the task's description says "skip" to every agent."""

    def written(owner, output_path):
        Task.objects.filter(id=owner.task.id).update(description="@fake skip")
        owner.task.description = "@fake skip"
        return write_input(owner, output_path)

    return written
