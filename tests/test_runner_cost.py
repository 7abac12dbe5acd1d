"""What one agent step and one task pass cost the database, counted (not timed): a regression in
the run pipeline's statement budget fails here (DESIGN "One run pipeline": a step writes in two
transactions, outbox rows in bulk, no savepoints, settings and agents read once per pass).

Statements are counted with Django's CaptureQueriesContext on the worker thread's connection;
BEGIN and COMMIT are counted apart (the write transactions). Live trace flushes while a CLI runs
depend on its timing, so they are left out here: the step's traces are written by its finish,
as for a short run. The time these cost is measured by bench/runner.py.
"""

import os
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.services import agent_create, agent_update
from core.actors import USER
from runner.recorder import RunRecorder
from tasks.models import QueueStatus, Task, TaskQueueItem, TaskStatus
from tasks.services import (
    comment_create_and_send_around,
    task_create,
    task_pass_begin,
)
from tests.stack import FAKES_BIN
from worker import pickup, pipeline
from worker.pipeline import TaskPass
from workspaces.services import workspace_create

pytestmark = pytest.mark.pg

# One step: start (run, activity log, outbox) and finish (task re-read = "still wanted",
# traces, run, activity log, outbox, and when another agent follows, where the pass goes on
# with that agent's process, made ready meanwhile: its record); the workspace's activity is
# bumped by the first step of a pass and then at most once a minute (ACTIVITY_EVERY). When
# another agent follows, its process is also recorded by this step's start (it may go before
# this step's finish: worker.pipeline.TaskPass.go_early).
STEP_STATEMENTS = 10
STEP_TRANSACTIONS = 2
# A pass of 4 skipping agents, its claim included: claim (2, and the CLIs it must wait for: 1),
# Todo → In Progress (5, which bumps the workspace's activity), settings, the CLIs' states
# (limits, broken, health marks: one read), agents, comments and logs, the task's first
# snapshot for its +/- totals (6, once), the first step's process record (1: the others' come
# with the finish before them), 4 steps, and the end (whether a comment keeps the task going,
# In Review, its log, the workspace's activity and the item: 5, in the last step's finish).
PASS_STATEMENTS = 3 + 5 + 6 + 1 + 4 * STEP_STATEMENTS - 2 + 5  # (no agent follows the last)
# With PostgreSQL, where several workers may claim at once, the claim also locks its workspace
# (SKIP LOCKED) and counts what runs there, in a transaction of its own (DESIGN "Scale-out");
# a step costs the same.
CLAIM_LOCK_STATEMENTS, CLAIM_LOCK_TRANSACTIONS = (
    (2, 1) if connection.vendor == "postgresql" else (0, 0)
)
PASS_TRANSACTIONS = 1 + 4 * STEP_TRANSACTIONS


@pytest.fixture
def quiet_steps(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(RunRecorder, "flush", lambda recorder: None)  # the finish writes all


def _workspace(agents: int):
    workspace = workspace_create(title=f"{agents} agents")
    for n in range(agents):
        agent_create(workspace=workspace, name=f"Agent {n}", instruction="Skip.", cli_type="claude")
    return workspace


def _counted_pass(agents: int) -> tuple[dict, Task]:
    """Claim and run one pass of a new task; returns the statements by kind."""
    workspace = _workspace(agents)
    task = task_create(workspace=workspace, summary="Count")
    with CaptureQueriesContext(connection) as queries:
        item = pickup.claim_next(workspace.id)
        TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()
    kinds: dict[str, int] = {}
    for query in queries.captured_queries:
        kind = query["sql"].split(None, 1)[0].upper()
        kinds[kind] = kinds.get(kind, 0) + 1
    task.refresh_from_db()
    assert task.status == TaskStatus.IN_REVIEW  # every agent skipped: the pass ends in review
    assert TaskQueueItem.objects.get(id=item.id).status == QueueStatus.COMPLETED
    assert task.runs.filter(status="completed").count() == agents
    return kinds, task


def _statements(kinds: dict) -> int:
    return sum(n for kind, n in kinds.items() if kind not in ("BEGIN", "COMMIT"))


@pytest.mark.django_db(transaction=True)
def test_one_agent_step_and_one_pass_stay_within_their_statement_budget(quiet_steps, capsys):
    four, _ = _counted_pass(4)
    five, _ = _counted_pass(5)
    step = _statements(five) - _statements(four)  # what one more agent costs
    with capsys.disabled():
        print(f"\none step: {step} statements; a pass of 4 steps: {_statements(four)} {four}")
    assert step <= STEP_STATEMENTS
    assert five["COMMIT"] - four["COMMIT"] == STEP_TRANSACTIONS
    assert _statements(four) <= PASS_STATEMENTS + CLAIM_LOCK_STATEMENTS
    assert four["COMMIT"] <= PASS_TRANSACTIONS + CLAIM_LOCK_TRANSACTIONS
    assert "SAVEPOINT" not in four


@pytest.mark.django_db(transaction=True)
def test_slow_steps_bump_the_workspace_activity_each(quiet_steps, monkeypatch):
    monkeypatch.setattr(pipeline, "ACTIVITY_EVERY", 0.0)  # every step is a minute apart
    four, task = _counted_pass(4)
    five, _ = _counted_pass(5)
    assert _statements(five) - _statements(four) == STEP_STATEMENTS + 1
    workspace = task.workspace
    workspace.refresh_from_db()
    assert workspace.last_activity_at >= task.runs.order_by("-ended_at").first().ended_at


@pytest.mark.django_db(transaction=True)
def test_the_input_sees_what_changed_during_the_previous_step(quiet_steps, monkeypatch):
    """Comments, logs and agents are read once per pass, yet a user's comment and an agent edit
    made while agent 0 runs reach agent 1's input (the finish's re-read of the task and its
    workspace tells the pass they changed: agent 1's CLI, let go early with the input as the
    pass knew it, is killed unused and starts anew); the pass's own logs are there too."""
    workspace = _workspace(2)
    task = task_create(workspace=workspace, summary="Watch")
    inputs = []
    write = pipeline.write_private
    monkeypatch.setattr(
        pipeline, "write_private", lambda path, text: inputs.append(text) or write(path, text)
    )
    start = TaskPass.start

    def start_and_meddle(owner, recorder):
        start(owner, recorder)
        if owner.agent.name == "Agent 0":
            comment_create_and_send_around(
                task=Task.objects.get(id=task.id), content="Mind the tests", actor=USER
            )
            second = owner.workspace_agents[1]
            agent_update(agent=second, instruction="Review carefully.")

    monkeypatch.setattr(TaskPass, "start", start_and_meddle)
    item = pickup.claim_next(workspace.id)
    TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()

    assert len(inputs) == 3  # agent 0's, agent 1's early one (dropped), agent 1's anew
    assert "Mind the tests" not in inputs[1]
    assert "Mind the tests" in inputs[2] and "Review carefully." in inputs[2]
    assert inputs[2].count('"event_type": "agent_started"') == 2
    assert inputs[2].count('"event_type": "agent_finished"') == 1
    assert list(task.runs.values_list("agent_name", flat=True)) == ["Agent 0", "Agent 1"]
    task.refresh_from_db()
    assert task.status == TaskStatus.IN_PROGRESS  # the user's comment queued another pass


def test_a_step_is_unwanted_once_its_own_item_was_asked_to_stop(workspace):
    """The finish's re-read joins the pass's own item: another item of the task (the next pass,
    queued) never makes a stopped pass look wanted."""
    task = task_create(workspace=workspace, summary="Stop me")
    item = pickup.claim_next(workspace.id)
    owner = TaskPass(item, stop=threading.Event(), shutdown=threading.Event())
    owner.task, _moved = task_pass_begin(item=item)
    assert owner.lock_if_wanted()
    comment_create_and_send_around(task=task, content="queues the next pass", actor=USER)
    TaskQueueItem.objects.filter(id=item.id).update(stop_requested_at=timezone.now())
    assert TaskQueueItem.objects.queued().filter(task=task).exists()
    assert not owner.lock_if_wanted()


@pytest.mark.django_db(transaction=True)
def test_a_run_stopped_before_its_cli_started_leaves_no_trace(quiet_steps):
    """The start is written once the CLI runs; a stop that came first makes its process record
    find nothing, the CLI is killed at once and nothing of the run is kept."""
    workspace = _workspace(1)
    task = task_create(workspace=workspace, summary="Cancelled early")
    item = pickup.claim_next(workspace.id)
    TaskQueueItem.objects.filter(id=item.id).update(stop_requested_at=timezone.now())

    TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()

    assert TaskQueueItem.objects.get(id=item.id).status == QueueStatus.FAILED
    assert not task.runs.exists()
    assert not task.logs.filter(event_type__startswith="agent_").exists()
