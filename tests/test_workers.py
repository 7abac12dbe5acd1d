"""Several workers sharing one database (DESIGN "Scale-out"): a row and a heartbeat per worker,
claims that keep a workspace's limit across every worker and each worker's capacity, a stale
worker's runs recovered by another, a worker that was taken over writing nothing, claims by
healthy CLI, stop requests reaching the owning worker, and LISTEN/NOTIFY wake-ups.

Worker loops run in threads of the test process (tests.workers_support); on PostgreSQL each
thread has its own connection, so the claims race as they would from several machines. One test
runs a real `runworker` process and kills it with SIGKILL."""

import contextlib
import dataclasses
import io
import os
import signal
import socket
import subprocess
import sys
import threading
from datetime import timedelta

import psutil
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from agents.services import agent_create
from chats.models import ChatQueueItem
from chats.services import chat_start
from core.actors import USER
from runner.models import AgentRun, RunStatus, Worker
from runner.services import worker_register, worker_take_over
from tasks import services as task_services
from tasks.models import QueueStatus, Task, TaskComment, TaskQueueItem, TaskStatus
from tasks.services import comment_create_and_send_around, task_cancel, task_create
from tests.htmltree import parse
from tests.live import ROOT, process_env, wait_until
from tests.services import Redis, free_port
from tests.stack import FAKES_BIN, alive
from tests.workers_support import WorkerThread, postgres_only
from worker import pickup, pipeline
from worker.loop import Worker as WorkerLoop
from worker.membership import recover
from workspaces.services import workspace_create

FAST = {"heartbeat": 0.2, "stale_after": 5}  # never stale under load, unless a test says so
QUICK_TO_JUDGE = {"heartbeat": 0.2, "stale_after": 1.5}  # a worker that takes others over


@pytest.fixture
def fake_clis(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def workers(transactional_db, fake_clis):
    """`workers(**options)` starts a worker loop; all are stopped at the end of the test."""
    started: list[WorkerThread] = []

    def start(**options) -> WorkerThread:
        started.append(WorkerThread(**options).start())
        return started[-1]

    yield start
    for worker in started:
        worker.stop()


def _workspace(name: str, cli: str = "claude"):
    workspace = workspace_create(title=name)
    agent_create(workspace=workspace, name="Solo", instruction="Work.", cli_type=cli)
    return workspace


def _all_in_review(tasks) -> bool:
    ids = [task.id for task in tasks]
    return Task.objects.filter(id__in=ids, status=TaskStatus.IN_REVIEW).count() == len(ids)


def _overlaps(spans) -> int:
    """The most spans (start, end) that are open at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    return peak


def _beating_for_an_hour(**row) -> Worker:
    """A worker row of another machine that stays live through the test."""
    worker = worker_register(**row)
    Worker.objects.filter(id=worker.id).update(heartbeat_at=timezone.now() + timedelta(hours=1))
    return worker


def _running_item(task) -> TaskQueueItem:
    return TaskQueueItem.objects.filter(task=task, status=QueueStatus.IN_PROGRESS).first()


def _running_on(task, worker_id: str) -> None:
    """The task's queued item as if `worker_id` were running it (no CLI behind it)."""
    item = TaskQueueItem.objects.get(task=task)
    TaskQueueItem.objects.filter(id=item.id).update(
        status=QueueStatus.IN_PROGRESS, worker_id=worker_id
    )
    AgentRun.objects.create(
        id=item.id,
        workspace=task.workspace,
        task=task,
        agent_name="A",
        cli_type="claude",
        worker_id=worker_id,
        started_at=timezone.now(),
    )


def _pid_gone() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _loop(worker_id: str | None = None, **options) -> WorkerLoop:
    """A worker's loop that is not started (its methods called one at a time)."""
    loop = WorkerLoop(poll_interval=1, **options)
    loop.membership.worker_id = worker_id
    return loop


def _close(loop: WorkerLoop) -> None:
    os.close(loop.kick_r)
    os.close(loop.kick_w)


def _run_started(task) -> bool:
    return AgentRun.objects.filter(task=task, status=RunStatus.RUNNING).exists()


def _process_recorded(task) -> bool:
    item = _running_item(task)
    return item is not None and item.pid is not None


# rows and capacity (both databases) ----------------------------------------------------------


@pytest.mark.pg
def test_a_worker_registers_beats_and_retires(workers):
    running = workers(capacity=3, **FAST)
    row = Worker.objects.get(id=running.id)
    assert (row.pid, row.capacity) == (os.getpid(), 3)
    first = row.heartbeat_at
    wait_until(
        lambda: Worker.objects.get(id=running.id).heartbeat_at > first,
        timeout=10,
        what="a heartbeat",
    )
    running.stop()
    assert not Worker.objects.filter(id=running.id).exists()


@pytest.mark.pg
def test_a_worker_never_runs_more_than_its_capacity(workers):
    tasks = [
        task_create(workspace=_workspace(f"W{n}"), summary="T", description="@fake sleep 0.4")
        for n in range(4)
    ]
    workers(capacity=2, **FAST)
    wait_until(lambda: _all_in_review(tasks), timeout=60, what="every task to run")
    spans = list(AgentRun.objects.values_list("started_at", "ended_at"))
    assert len(spans) == 4
    assert _overlaps(spans) == 2  # two at once (four workspaces could run four)


@pytest.mark.pg
def test_claims_record_the_claiming_worker_on_the_item_and_the_run(workers):
    task = task_create(workspace=_workspace("Owned"), summary="T", description="@fake skip")
    running = workers(**FAST)
    wait_until(lambda: _all_in_review([task]), timeout=30, what="the pass")
    assert TaskQueueItem.objects.get(task=task).worker_id == running.id
    assert AgentRun.objects.get(task=task).worker_id == running.id


@pytest.mark.pg
def test_a_comment_written_while_a_recovery_requeues_the_pass_waits_for_it(
    transactional_db, monkeypatch
):
    """A recovery re-queues a dead worker's pass while a person comments on the task: the
    comment found no queued item (the re-queue not committed yet), inserted one and failed on
    the one-queued-item rule once the re-queue committed (a 500 in bench/chaos.py --postgres).
    Both lock the task's row first now: the comment waits, then bumps the re-queued item."""
    me = _beating_for_an_hour(hostname="b", pid=2, capacity=1, clis=[], version="t")
    task = task_create(workspace=_workspace("Race"), summary="T")
    _running_on(task, "gone-worker-id-000000")
    requeued, go_on = threading.Event(), threading.Event()
    log_add = task_services.log_add

    def held_open(**kwargs):  # inside the recovery's transaction, after its re-queue
        if kwargs.get("event_type") == "pass_resumed":
            requeued.set()
            go_on.wait(30)
        return log_add(**kwargs)

    monkeypatch.setattr(task_services, "log_add", held_open)
    TaskQueueItem.objects.filter(task=task).update(resume_agent_id=task.workspace.agents.get().id)

    def recovery():
        try:
            recover(hostname="b", worker_id=me.id)
        finally:
            connection.close()

    recovering = threading.Thread(target=recovery)
    recovering.start()
    outcome = []

    def comment():
        try:
            outcome.append(
                comment_create_and_send_around(task=task, content="Mind the tests", actor=USER)
            )
        except Exception as exc:
            outcome.append(exc)
        finally:
            connection.close()

    try:
        assert requeued.wait(30)
        commenting = threading.Thread(target=comment)
        commenting.start()
        commenting.join(0.5)  # (it waits for the task's row now; before, it ran on)
    finally:
        go_on.set()
        recovering.join(30)
    commenting.join(30)

    assert len(outcome) == 1 and isinstance(outcome[0], TaskComment), outcome
    (item,) = TaskQueueItem.objects.filter(task=task)
    assert item.status == QueueStatus.QUEUED


@pytest.mark.pg
def test_a_recovery_takes_only_the_runs_no_live_worker_owns(db):
    live = _beating_for_an_hour(hostname="a", pid=1, capacity=1, clis=[], version="t")
    me = _beating_for_an_hour(hostname="b", pid=2, capacity=1, clis=[], version="t")
    workspace = _workspace("Mixed")
    tasks = [task_create(workspace=workspace, summary=name) for name in ("live", "dead")]
    owners = {tasks[0].id: live.id, tasks[1].id: "gone-worker-id-000000"}
    for task in tasks:
        _running_on(task, owners[task.id])

    assert recover(hostname="b", worker_id=me.id) == 1

    kept, requeued = (TaskQueueItem.objects.get(task=task) for task in tasks)
    assert (kept.status, kept.worker_id) == (QueueStatus.IN_PROGRESS, live.id)
    assert (requeued.status, requeued.worker_id) == (QueueStatus.QUEUED, None)
    runs = dict(AgentRun.objects.values_list("task_id", "status"))
    assert runs == {tasks[0].id: RunStatus.RUNNING, tasks[1].id: RunStatus.INTERRUPTED}


@pytest.mark.pg
def test_an_item_a_recovery_adopted_or_requeued_is_taken_over_for_the_worker_that_held_it(db):
    task = task_create(workspace=_workspace("Taken"), summary="T")
    _running_on(task, "old-worker-id-0000000")
    held = TaskQueueItem.objects.get(task=task)  # (as the old worker holds it)
    assert not TaskQueueItem.objects.taken_over(held)
    assert TaskQueueItem.objects.adopt(held, worker_id="new-worker-id-0000000")
    assert TaskQueueItem.objects.taken_over(held)
    assert TaskQueueItem.objects.requeue(TaskQueueItem.objects.get(id=held.id), stopped=False)
    assert TaskQueueItem.objects.taken_over(held)  # (requeued: nobody's)
    held.worker_id = None  # an item no worker claimed by name is nobody's to take over
    assert not TaskQueueItem.objects.taken_over(held)


@pytest.mark.pg
def test_a_worker_of_this_machine_whose_process_is_gone_is_taken_over_at_once(db):
    """Killed, then restarted on the same machine: its runs need not wait for its heartbeat to
    go stale. Another machine's worker with the same pid still beats: it is left alone."""
    here = socket.gethostname()
    row = {"capacity": 1, "clis": [], "version": "t"}
    me = worker_register(hostname=here, pid=os.getpid(), **row)
    pid = _pid_gone()
    died = worker_register(hostname=here, pid=pid, **row)
    elsewhere = worker_register(hostname=f"not-{here}", pid=pid, **row)
    workspace = _workspace("Restarted")
    tasks = [task_create(workspace=workspace, summary=name) for name in ("died", "elsewhere")]
    _running_on(tasks[0], died.id)
    _running_on(tasks[1], elsewhere.id)
    loop = _loop(me.id, heartbeat=1, stale_after=3600)
    try:
        assert loop.membership.recover_dead_workers() == 1
    finally:
        _close(loop)

    assert set(Worker.objects.values_list("id", flat=True)) == {me.id, elsewhere.id}
    assert [peer["id"] for peer in loop.membership.peers] == [elsewhere.id]
    requeued, kept = (TaskQueueItem.objects.get(task=task) for task in tasks)
    assert (requeued.status, requeued.worker_id) == (QueueStatus.QUEUED, None)
    assert (kept.status, kept.worker_id) == (QueueStatus.IN_PROGRESS, elsewhere.id)


def test_a_worker_that_cannot_beat_for_longer_than_the_stale_limit_drops_its_runs(monkeypatch):
    """Another worker may have taken its runs over by then: it must not finish them."""

    def database_gone(**_):
        raise ConnectionError("database unreachable")

    monkeypatch.setattr("worker.membership.worker_heartbeat", database_gone)
    loop = _loop("w" * 21, heartbeat=1, stale_after=30)
    stop = loop._register("task", TaskQueueItem(id="x" * 21))
    try:
        loop.membership.beat()  # the last beat was just now: the runs go on
        assert not stop.is_set()
        loop.membership.last_beat -= 31
        loop.membership.beat()
        assert stop.is_set()
    finally:
        _close(loop)


@postgres_only
def test_a_clean_stop_requeues_the_workers_runs_at_once(db):
    me = worker_register(
        hostname=socket.gethostname(), pid=os.getpid(), capacity=1, clis=[], version="t"
    )
    task = task_create(workspace=_workspace("Stopped"), summary="T")
    _running_on(task, me.id)
    loop = _loop(me.id)
    try:
        loop.membership.leave()
    finally:
        _close(loop)
    assert not Worker.objects.filter(id=me.id).exists()
    item = TaskQueueItem.objects.get(task=task)
    assert (item.status, item.worker_id) == (QueueStatus.QUEUED, None)


def test_runworker_refuses_a_negative_capacity():
    err = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("runworker", "--capacity", "-1", stderr=err)
    assert exited.value.code == 2
    assert "--capacity must be 0 (no limit) or more" in err.getvalue()


# several workers on PostgreSQL ---------------------------------------------------------------


@postgres_only
def test_three_workers_keep_one_task_per_workspace_and_their_capacity(workers):
    spaces = [_workspace(f"Space {n}") for n in range(6)]
    tasks = [
        task_create(
            workspace=space, summary=f"T{n}", description="@fake sleep 0.3 comment-once done"
        )
        for space in spaces
        for n in range(3)
    ]
    group = [workers(capacity=2, **FAST) for _ in range(3)]
    wait_until(lambda: _all_in_review(tasks), timeout=120, what="18 tasks on 3 workers")

    runs = list(AgentRun.objects.values("workspace_id", "worker_id", "started_at", "ended_at"))
    assert len(runs) == 36  # a pass that comments, then one that skips: each exactly once
    assert TaskComment.objects.filter(agent_id__isnull=False).count() == 18
    for space in spaces:
        spans = [(r["started_at"], r["ended_at"]) for r in runs if r["workspace_id"] == space.id]
        assert _overlaps(spans) == 1, "two tasks of one workspace ran at once"
    for worker in group:
        spans = [(r["started_at"], r["ended_at"]) for r in runs if r["worker_id"] == worker.id]
        assert spans, "a worker got no work"
        assert _overlaps(spans) <= 2, "a worker ran more than its capacity"


@postgres_only
def test_a_stale_worker_is_taken_over_and_its_run_recovered_once(workers):
    workspace = _workspace("Stale")
    task = task_create(workspace=workspace, summary="T", description="@fake sleep 60 comment late")
    first = workers(**FAST)
    wait_until(lambda: _process_recorded(task), timeout=30, what="the first run")
    orphan = _running_item(task).pid
    first.worker.membership.beat = lambda: (
        None
    )  # it stops beating (a pause, a partition) but keeps going
    Task.objects.filter(id=task.id).update(description="@fake comment-once done")

    second = workers(**QUICK_TO_JUDGE)
    wait_until(lambda: _all_in_review([task]), timeout=60, what="the recovered pass")

    assert not alive(orphan), "the dead worker's CLI was left running"
    assert not Worker.objects.filter(id=first.id).exists()
    runs = dict(AgentRun.objects.filter(task=task).values_list("worker_id", "status"))
    assert runs == {first.id: RunStatus.INTERRUPTED, second.id: RunStatus.COMPLETED}
    comments = TaskComment.objects.filter(task=task, agent_id__isnull=False)
    assert list(comments.values_list("content", flat=True)) == ["done"]


@postgres_only
def test_a_worker_that_was_taken_over_writes_nothing_for_its_runs(workers):
    _taken_over_while_it_runs(workers, started=_run_started)


@postgres_only
def test_a_worker_taken_over_before_its_runs_start_was_written_leaves_it_interrupted(
    workers, monkeypatch
):
    """Its process was recorded on the item, its run's row not written yet (the start comes
    after, as the CLI starts) when another worker took it over: the recovery found no run to
    close, the start wrote one; the finish closes it as the recovery would have."""
    takeover_done, start = threading.Event(), pipeline._start

    def late_start(owner, recorder):
        takeover_done.wait(30)
        start(owner, recorder)

    monkeypatch.setattr(pipeline, "_start", late_start)
    _taken_over_while_it_runs(workers, started=_process_recorded, then=takeover_done.set)


def _taken_over_while_it_runs(workers, *, started, then=lambda: None):
    """A worker that notices nothing (no heartbeat, no stop watcher: only its finish's own
    check is left) is taken over once `started(task)`; the recoverer is on another machine:
    the CLI runs on and ends normally. Nothing of its answer is written, its run ends
    interrupted, and the item stays the other worker's."""
    workspace = _workspace("Came back")
    task = task_create(workspace=workspace, summary="T", description="@fake sleep 1.5 comment late")
    paused = workers(**FAST)
    paused.worker.membership.beat = lambda: None
    paused.worker.watch_stops = lambda: None
    wait_until(lambda: started(task), timeout=30, what="the run")
    item = _running_item(task)
    Worker.objects.filter(id=paused.id).update(heartbeat_at=timezone.now() - timedelta(days=1))
    other = worker_register(hostname="elsewhere", pid=1, capacity=1, clis=[], version="t")
    assert worker_take_over(worker_id=paused.id, by=other.id, stale_after=1)
    assert recover(hostname="elsewhere", worker_id=other.id) == 1
    assert TaskQueueItem.objects.claim(item.id, worker_id=other.id)  # and claims it again
    then()

    wait_until(lambda: not paused.worker.runs, timeout=30, what="the paused worker's run to end")
    assert not TaskComment.objects.filter(task=task, agent_id__isnull=False).exists()
    assert AgentRun.objects.get(task=task).status == RunStatus.INTERRUPTED
    reclaimed = TaskQueueItem.objects.get(id=item.id)
    assert (reclaimed.status, reclaimed.worker_id) == (QueueStatus.IN_PROGRESS, other.id)


@pytest.mark.pg
def test_a_worker_that_finds_itself_taken_over_kills_its_runs_and_comes_back(workers):
    running = workers(**FAST)
    old_id = running.id
    stop = running.worker._register("task", TaskQueueItem(id="x" * 21))
    Worker.objects.filter(id=old_id).delete()  # taken over and recovered meanwhile

    wait_until(lambda: running.id != old_id, timeout=10, what="a new registration")
    assert stop.is_set()
    assert Worker.objects.filter(id=running.id, taken_over_at=None).exists()
    with running.worker.lock:
        running.worker.runs.clear()


@postgres_only
def test_a_worker_without_a_healthy_cli_leaves_its_work_to_one_that_has_it(workers, monkeypatch):
    able = _beating_for_an_hour(hostname="h", pid=2, capacity=1, clis=["claude"], version="t")
    lacking = workers(poll_interval=0.05, **FAST)
    monkeypatch.setattr(lacking.worker, "healthy_clis", lambda: frozenset({"codex"}))
    declined = threading.Event()
    ours_to_run = lacking.worker.membership.ours_to_run

    def watched(waiting, limits):
        ours = ours_to_run(waiting, limits)
        if waiting and not ours:
            declined.set()
        return ours

    monkeypatch.setattr(lacking.worker.membership, "ours_to_run", watched)
    wait_until(
        lambda: any(peer["id"] == able.id for peer in lacking.worker.membership.peers),
        timeout=10,
        what="the peer to be seen",
    )
    task = task_create(workspace=_workspace("Needs claude"), summary="T", description="@fake skip")
    assert declined.wait(10), "the worker never looked at the waiting task"
    assert TaskQueueItem.objects.get(task=task).status == QueueStatus.QUEUED

    Worker.objects.filter(id=able.id).delete()  # no live worker has claude: run it anyway
    wait_until(lambda: _all_in_review([task]), timeout=30, what="the fallback claim")
    assert AgentRun.objects.get(task=task).worker_id == lacking.id


@postgres_only
def test_a_chat_reply_on_a_cli_unusable_here_is_left_to_a_worker_that_has_it(workers, monkeypatch):
    able = _beating_for_an_hour(hostname="h", pid=2, capacity=1, clis=["claude"], version="t")
    lacking = workers(poll_interval=0.05, **FAST)
    monkeypatch.setattr(lacking.worker, "healthy_clis", lambda: frozenset({"codex"}))
    wait_until(
        lambda: any(peer["id"] == able.id for peer in lacking.worker.membership.peers),
        timeout=10,
        what="the peer to be seen",
    )
    workspace = workspace_create(title="Chats")
    agent = agent_create(workspace=workspace, name="Claude", instruction="Hi.", cli_type="claude")
    on_claude = chat_start(workspace=workspace, agent=agent, message="@fake reply one")
    on_malamar = chat_start(workspace=workspace, message="@fake reply two")  # any CLI

    wait_until(
        lambda: ChatQueueItem.objects.get(chat=on_malamar).status == QueueStatus.COMPLETED,
        timeout=30,
        what="the reply any worker may give",
    )
    assert ChatQueueItem.objects.get(chat=on_claude).status == QueueStatus.QUEUED


@postgres_only
def test_a_stop_request_reaches_the_worker_that_runs_the_task(workers):
    group = [workers(**FAST) for _ in range(2)]
    task = task_create(workspace=_workspace("Stop"), summary="T", description="@fake sleep 60")
    wait_until(lambda: _process_recorded(task), timeout=30, what="the run")
    item = _running_item(task)
    owner = next(w for w in group if w.id == item.worker_id)
    pid = item.pid

    task_cancel(task=Task.objects.get(id=task.id))

    wait_until(lambda: not alive(pid), timeout=10, what="the owning worker to kill the CLI")
    wait_until(lambda: not owner.worker.runs, timeout=10, what="the run to end")
    assert AgentRun.objects.get(task=task).status == RunStatus.STOPPED
    assert not TaskComment.objects.filter(task=task, agent_id__isnull=False).exists()


@postgres_only
def test_notify_wakes_an_idle_worker_before_its_poll(workers):
    idle = workers(poll_interval=3600, **FAST)
    listener = idle.worker.listener
    assert listener is not None
    seen = listener.received
    task = task_create(workspace=_workspace("Wake"), summary="T", description="@fake skip")
    # Only a wake-up can start it: the next poll is an hour away.
    wait_until(lambda: _all_in_review([task]), timeout=30, what="the woken worker")
    assert listener.received > seen


@postgres_only
def test_claims_of_one_workspace_from_many_threads_stay_within_its_limit(transactional_db):
    workspace = _workspace("Contended")
    for n in range(6):
        task_create(workspace=workspace, summary=f"T{n}")
    claimed, barrier = [], threading.Barrier(6)
    ids = [
        worker_register(hostname="h", pid=n, capacity=1, clis=[], version="t").id for n in range(6)
    ]

    def claim(n: int) -> None:
        barrier.wait()
        try:
            if item := pickup.claim_next(workspace.id, limit=2, worker_id=ids[n]):
                claimed.append(item.id)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(claimed) <= 2
    assert TaskQueueItem.objects.filter(status=QueueStatus.IN_PROGRESS).count() == len(claimed)


# a real worker process, killed ---------------------------------------------------------------


@postgres_only
def test_a_killed_runworker_process_is_recovered_by_another_worker(workers, tmp_path):
    task = task_create(
        workspace=_workspace("Killed"), summary="T", description="@fake sleep 60 comment late"
    )
    database = connection.settings_dict
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    env = process_env(
        tmp_path / "data",
        DATABASE_URL=url,
        PATH=f"{FAKES_BIN}:{process_env(tmp_path)['PATH']}",
        MALAMAR_WORKER_HEARTBEAT="0.2",
        MALAMAR_RUNNER_POLL_INTERVAL="200",
    )
    (tmp_path / "data").mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--capacity", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _process_recorded(task), timeout=60, what="the process's run")
        orphan = _running_item(task).pid
        assert Worker.objects.get(pid=proc.pid).capacity == 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert psutil.pid_exists(orphan)
        Task.objects.filter(id=task.id).update(description="@fake comment-once done")
        workers(**QUICK_TO_JUDGE)
        wait_until(lambda: _all_in_review([task]), timeout=60, what="the recovery")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not alive(orphan)
    comments = TaskComment.objects.filter(task=task, agent_id__isnull=False)
    assert list(comments.values_list("content", flat=True)) == ["done"]
    assert Worker.objects.count() == 1


# what users see: `malamar doctor` and the Settings page -------------------------------------


def _doctor(settings, **config) -> str:
    settings.CONFIG = dataclasses.replace(settings.CONFIG, **config)
    out = io.StringIO()
    with contextlib.suppress(SystemExit):
        call_command("doctor", stdout=out)
    return out.getvalue()


def _two_workers():
    busy = worker_register(hostname="box-a", pid=101, capacity=2, clis=["claude"], version="t")
    idle = worker_register(hostname="box-b", pid=202, capacity=4, clis=[], version="t")
    task = task_create(workspace=_workspace("Busy"), summary="T")
    assert TaskQueueItem.objects.claim(TaskQueueItem.objects.get(task=task).id, worker_id=busy.id)
    gone = worker_register(hostname="box-c", pid=303, capacity=1, clis=["codex"], version="t")
    Worker.objects.filter(id=gone.id).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    return busy, idle


@pytest.mark.pg
def test_doctor_lists_the_live_workers_and_the_database(db, settings, monkeypatch):
    _two_workers()
    password = "s3cret-Pa55"
    monkeypatch.setitem(connection.settings_dict, "PASSWORD", password)
    text = _doctor(settings)
    assert "✓ Workers: 2 live" in text
    assert "box-a pid 101: 1 of 2 running; CLIs: claude; last heartbeat" in text
    assert "box-b pid 202: 0 of 4 running; CLIs: no healthy CLI" in text
    assert "box-c" not in text  # its heartbeat is an hour old
    assert password not in text
    if connection.vendor == "postgresql":
        version = connection.cursor().connection.info.server_version // 10000
        assert f"✓ Database: PostgreSQL {connection.settings_dict['USER']}@" in text
        assert f"(server {version}." in text and "migrations current)" in text
    else:
        assert f"✓ Database: {connection.settings_dict['NAME']} (accessible" in text
    assert "Redis" not in text  # no REDIS_URL, no Redis line


def test_doctor_pings_redis_when_it_is_configured(db, settings):
    server = Redis().start()
    assert "✓ Redis (live events): 127.0.0.1:" in _doctor(settings, redis_url=server.url)
    down = f"redis://127.0.0.1:{free_port()}/0"
    assert "✗ Redis (live events): 127.0.0.1:" in _doctor(settings, redis_url=down)


def test_the_settings_page_lists_the_workers(db, client, settings):
    busy, idle = _two_workers()
    settings.CONFIG = dataclasses.replace(settings.CONFIG, database_url="postgres://x/y")
    page = parse(client.get("/settings/").content.decode())
    rows = {row.attrs["data-worker"]: row for row in page.find_all("worker-row", tag="li")}
    assert set(rows) == {busy.id, idle.id}  # not box-c: its heartbeat is an hour old

    def shown(worker_id: str) -> tuple[str, str]:
        text = rows[worker_id].find("token-row__text")
        return text.find(tag="strong").text, text.find_all(tag="span")[1].text

    assert shown(busy.id) == ("box-a", "1 of 2 running")
    assert shown(idle.id) == ("box-b", "0 of 4 running")
    assert rows[idle.id].find("worker-row__clis").text == "No healthy CLI"


def test_the_settings_page_says_one_line_about_a_single_sqlite_worker(db, client, settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, database_url="")
    line = parse(client.get("/settings/").content.decode()).find(data_single_worker="")
    assert line.text.startswith("No worker is running")
    worker_register(hostname="here", pid=77, capacity=0, clis=["claude"], version="t")
    page = parse(client.get("/settings/").content.decode())
    assert page.find(data_single_worker="").text.startswith("One worker on this machine (pid 77)")
    assert page.find("worker-row") is None
