"""Usage limits, the worker's side (DESIGN "Usage limits"), in-process with the fake CLIs: a run
that hits its CLI's quota pauses the task (no error comment, no failure streak), other work keeps
running, and the task resumes at the same agent at the reset time or after a probe answers.
The clock is injected: no test sleeps until a reset."""

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from agents.services import agent_update
from chats.models import ChatQueueItem
from chats.services import chat_start
from core.actors import USER
from core.models import OutboxEvent
from notifications import cli_states
from notifications import services as notification_services
from notifications.cli_states import cli_limit_set
from runner.limits import Limit
from runner.models import AgentRun, CliHealth, RunStatus
from runner.selectors import first_available_cli
from tasks.models import QueueStatus, Task, TaskComment, TaskQueueItem, TaskStatus
from tasks.services import comment_create_and_send_around, task_create
from tests.failures import fail_task
from tests.htmltree import parse
from tests.live import wait_until
from tests.passes import run_workspace, team
from tests.stack import FAKES_BIN
from worker import health, pickup
from worker.limits import LimitWatch, ProbeResult, probe
from worker.pipeline import ChatReply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fake_clis(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def notified(monkeypatch):
    """The pause/resume notifications sent (one per pause, one per resume)."""
    sent = []
    monkeypatch.setattr(cli_states, "notify_cli_limited", lambda **kw: sent.append(("limited", kw)))
    monkeypatch.setattr(cli_states, "notify_cli_resumed", lambda **kw: sent.append(("resumed", kw)))
    return sent


def _runs(task) -> list[tuple[str, str, str]]:
    runs = AgentRun.objects.filter(task=task).order_by("started_at", "id")
    return [(run.agent_name, run.cli_type, run.status) for run in runs]


def _events(kind: str) -> list[dict]:
    return [e.payload for e in OutboxEvent.objects.filter(type=kind).order_by("id")]


def _whole_minute(seconds_ahead: int) -> int:
    """A reset time as Codex prints it: to the minute (in the machine's local time)."""
    return (int(time.time()) + seconds_ahead) // 60 * 60


def _limited_task(reset=None):
    workspace, agents = team("Limited", ("Planner", "claude"), ("Implementer", "codex"))
    limit = f"limit {reset}" if reset else "limit"
    task = task_create(
        workspace=workspace,
        summary="Build it",
        description=f"@fake Planner: comment-once Planned\n@fake Implementer: {limit}",
    )
    return workspace, agents, task


@pytest.mark.pg
def test_a_limited_run_pauses_the_task_without_an_error(notified):
    reset = _whole_minute(3 * 3600)
    workspace, (_planner, implementer), task = _limited_task(reset)

    run_workspace(workspace)

    assert _runs(task) == [
        ("Planner", "claude", RunStatus.COMPLETED),
        ("Implementer", "codex", RunStatus.LIMITED),
    ]
    assert not TaskComment.objects.filter(task=task, kind="error").exists()
    task.refresh_from_db()
    assert task.failure_streak == 0 and task.retry_not_before is None
    assert task.status == TaskStatus.IN_PROGRESS
    item = TaskQueueItem.objects.get(task=task, status=QueueStatus.QUEUED)
    assert (item.waiting_for_cli, item.resume_agent_id) == ("codex", implementer.id)
    codex = CliHealth.objects.get(cli_type="codex")
    assert codex.limited_until == datetime.fromtimestamp(reset, tz=UTC)
    assert "usage limit" in codex.limit_message
    assert [e["cli_type"] for e in _events("cli.limited")] == ["codex"]
    assert [kind for kind, _ in notified] == ["limited"]
    assert pickup.claim_next(workspace.id) is None, "the paused task waits for its CLI"


@pytest.mark.pg
def test_a_failing_task_that_hits_a_limit_is_paused_not_an_error_loop(client):
    """A task whose runs kept failing (a wrong binary, fixed since) now runs out of quota: it
    waits for its CLI, and its card says so instead of "Failed 2 times, retry pending"."""
    workspace, _agents = team("Failing", ("Implementer", "codex"))
    reset = _whole_minute(3 * 3600)
    task = task_create(workspace=workspace, summary="Build", description=f"@fake limit {reset}")
    for _ in range(2):
        fail_task(task, "CLI could not be started: No such file")
    Task.objects.filter(id=task.id).update(retry_not_before=timezone.now())  # due now

    run_workspace(workspace)

    task.refresh_from_db()
    assert (task.failure_streak, task.retry_not_before) == (0, None)
    board = parse(client.get(f"/workspaces/{workspace.id}/").content.decode())
    assert board.find("task-card__waiting", data_task_waiting=task.id) is not None
    assert board.find(data_task_error=task.id) is None


@pytest.mark.pg
def test_other_workspaces_keep_running_while_a_cli_is_limited():
    workspace, _agents, _task = _limited_task(_whole_minute(3600))
    run_workspace(workspace)
    other, _ = team("Other", ("Solo", "claude"))
    task = task_create(workspace=other, summary="Unrelated", description="@fake skip")
    assert set(pickup.workspaces_with_work()) == {other.id}
    run_workspace(other)
    assert Task.objects.get(id=task.id).status == TaskStatus.IN_REVIEW


@pytest.mark.pg
def test_the_task_resumes_at_the_same_agent_at_the_reset_time(notified):
    reset = _whole_minute(3 * 3600)
    workspace, _agents, task = _limited_task(reset)
    run_workspace(workspace)
    reset_at = datetime.fromtimestamp(reset, tz=UTC)
    # The quota is back at the reset time: the fake answers this time (the user's comment
    # carries the directive that wins; it also shows a comment never restarts the pass).
    comment_create_and_send_around(
        task=task, content="@fake Implementer: comment-once Built", actor=USER
    )

    LimitWatch(clock=lambda: reset_at - timedelta(seconds=1), background=False).tick()
    assert pickup.claim_next(workspace.id) is None, "not before the reset time"
    LimitWatch(clock=lambda: reset_at, background=False).tick()

    assert not CliHealth.objects.get(cli_type="codex").is_limited
    assert [e["cli_type"] for e in _events("cli.resumed")] == ["codex"]
    run_workspace(workspace)
    runs = _runs(task)
    assert runs[:3] == [
        ("Planner", "claude", RunStatus.COMPLETED),
        ("Implementer", "codex", RunStatus.LIMITED),
        ("Implementer", "codex", RunStatus.COMPLETED),  # the same agent, not the Planner
    ]
    assert Task.objects.get(id=task.id).status == TaskStatus.IN_REVIEW
    authors = list(TaskComment.objects.filter(task=task).values_list("content", flat=True))
    assert "Planned" in authors and "Built" in authors
    assert [kind for kind, _ in notified] == ["limited", "resumed"]


@pytest.mark.pg
def test_without_a_reset_time_the_cli_is_probed_on_a_back_off():
    workspace, _agents, task = _limited_task()
    started = timezone.now()
    run_workspace(workspace)
    codex = CliHealth.objects.get(cli_type="codex")
    assert codex.limited_until is None
    assert timedelta(minutes=4) < codex.probe_at - started < timedelta(minutes=6)

    probes, answers = [], [False, False, True]

    def prober(cli):
        probes.append(cli)
        return ProbeResult(answered=answers[len(probes) - 1])

    now = [codex.probe_at - timedelta(seconds=1)]
    watch = LimitWatch(clock=lambda: now[0], prober=prober, background=False)
    watch.tick()
    assert probes == [], "not before the first probe time"
    delays = []
    for _ in range(3):
        now[0] = CliHealth.objects.get(cli_type="codex").probe_at
        watch.tick()
        row = CliHealth.objects.get(cli_type="codex")
        if row.is_limited:
            delays.append(row.probe_at - now[0])
    assert probes == ["codex"] * 3
    assert delays == [timedelta(minutes=15), timedelta(minutes=30)]
    assert not CliHealth.objects.get(cli_type="codex").is_limited
    assert TaskQueueItem.objects.get(task=task, status=QueueStatus.QUEUED).waiting_for_cli == ""


@pytest.mark.pg
def test_a_cli_limited_forever_is_probed_at_most_hourly():
    cli_limit_set(cli_type="gemini", limit=Limit("RESOURCE_EXHAUSTED"))
    now = [timezone.now()]
    probes = []
    watch = LimitWatch(
        clock=lambda: now[0],
        prober=lambda cli: probes.append(cli) or ProbeResult(answered=False),
        background=False,
    )
    for _ in range(8):
        now[0] = CliHealth.objects.get(cli_type="gemini").probe_at
        watch.tick()
        watch.tick()  # a second tick at the same time never probes again
    row = CliHealth.objects.get(cli_type="gemini")
    assert len(probes) == 8 and row.probe_attempts == 8
    assert row.probe_at - now[0] == timedelta(minutes=60)


def test_the_real_probe_sends_the_health_prompt():
    assert probe("claude") == ProbeResult(answered=True)


@pytest.mark.pg
def test_a_task_whose_cli_is_limited_waits_without_running_it():
    workspace, _agents = team("Waiting", ("Solo", "codex"))
    cli_limit_set(cli_type="codex", limit=Limit("Quota exceeded."))
    task = task_create(workspace=workspace, summary="Later", description="@fake skip")
    run_workspace(workspace)
    assert _runs(task) == []
    item = TaskQueueItem.objects.get(task=task, status=QueueStatus.QUEUED)
    assert item.waiting_for_cli == "codex"
    assert pickup.claim_next(workspace.id) is None


@pytest.mark.pg
def test_the_fallback_cli_runs_while_the_agents_cli_is_limited():
    workspace, (solo,) = team("Fallback", ("Solo", "codex"))
    agent_update(agent=solo, fallback_cli_type="claude")
    cli_limit_set(cli_type="codex", limit=Limit("Quota exceeded."))
    task = task_create(workspace=workspace, summary="Now", description="@fake skip")
    run_workspace(workspace)
    run = AgentRun.objects.get(task=task)
    assert (run.cli_type, run.fallback_for, run.status) == ("claude", "codex", "completed")
    assert Task.objects.get(id=task.id).status == TaskStatus.IN_REVIEW


@pytest.mark.pg
def test_a_completed_run_on_the_fallback_cli_clears_its_slow_mark():
    """The fallback CLI answered a real run: it works, whatever its last check said. (A CLI
    marked broken is not run at all: tests/test_pass_edges.py.)"""
    workspace, (solo,) = team("Fallback", ("Solo", "codex"))
    agent_update(agent=solo, fallback_cli_type="claude")
    cli_limit_set(cli_type="codex", limit=Limit("Quota exceeded."))
    CliHealth.objects.update_or_create(
        cli_type="claude", defaults={"status": "slow", "error": "timed out"}
    )
    task = task_create(workspace=workspace, summary="Now", description="@fake skip")
    run_workspace(workspace)
    assert AgentRun.objects.get(task=task).cli_type == "claude"
    assert CliHealth.objects.get(cli_type="claude").status == "healthy"


def test_the_fallback_cli_runs_without_the_agents_own_model(tmp_path, monkeypatch):
    """The model belongs to the agent's own CLI: a Codex model name must not reach Claude."""
    fake_log = tmp_path / "fake.log"
    monkeypatch.setenv("MALAMAR_FAKE_LOG", str(fake_log))
    workspace, (solo,) = team("Own model", ("Solo", "codex"))
    agent_update(agent=solo, fallback_cli_type="claude", model="gpt-5-codex")
    cli_limit_set(cli_type="codex", limit=Limit("Quota exceeded."))
    task = task_create(workspace=workspace, summary="Now", description="@fake skip")
    run_workspace(workspace)
    run = AgentRun.objects.get(task=task)
    assert (run.cli_type, run.fallback_for, run.status) == ("claude", "codex", "completed")
    assert run.model != "gpt-5-codex"
    (claude,) = [json.loads(line) for line in fake_log.read_text().splitlines()]
    assert claude["cli"] == "claude" and "gpt-5-codex" not in claude["argv"]


@pytest.mark.pg
def test_a_limited_run_switches_to_the_fallback_cli_at_once():
    """The agent's CLI runs out mid-pass: the same agent runs again at once on its fallback CLI
    (here out of quota too, so the pass then waits for the agent's own CLI)."""
    workspace, (solo,) = team("Fallback", ("Solo", "codex"))
    agent_update(agent=solo, fallback_cli_type="claude")
    task = task_create(workspace=workspace, summary="Now", description="@fake limit")
    run_workspace(workspace)
    assert _runs(task) == [
        ("Solo", "codex", RunStatus.LIMITED),
        ("Solo", "claude", RunStatus.LIMITED),
    ]
    item = TaskQueueItem.objects.get(task=task, status=QueueStatus.QUEUED)
    assert item.waiting_for_cli == "codex"
    assert AgentRun.objects.filter(task=task, fallback_for="codex").count() == 1


@pytest.mark.pg
def test_a_chat_reply_waits_for_its_limited_cli():
    workspace, (solo,) = team("Chat", ("Solo", "codex"))
    cli_limit_set(cli_type="codex", limit=Limit("Quota exceeded."))
    chat = chat_start(workspace=workspace, agent=solo, message="Hello")
    item = pickup.claim_next_chat()
    assert item is not None
    ChatReply(item, stop=threading.Event(), shutdown=threading.Event()).run()
    item.refresh_from_db()
    assert (item.status, item.waiting_for_cli) == (QueueStatus.QUEUED, "codex")
    assert not chat.messages.filter(role="system").exists()
    assert pickup.claim_next_chat() is None
    cli_states.cli_limit_lift(cli_type="codex")
    assert ChatQueueItem.objects.get(id=item.id).waiting_for_cli == ""
    assert pickup.claim_next_chat() is not None


@pytest.mark.pg
def test_a_limit_noticed_again_updates_the_reset_without_a_second_notification(notified):
    first = timezone.now() + timedelta(hours=1)
    cli_limit_set(cli_type="claude", limit=Limit("limit", first))
    cli_limit_set(cli_type="claude", limit=Limit("limit", first + timedelta(hours=1)))
    assert CliHealth.objects.get(cli_type="claude").limited_until == first + timedelta(hours=1)
    assert [kind for kind, _ in notified] == ["limited"]
    assert len(_events("cli.limited")) == 1


@pytest.mark.parametrize("cli", ["claude", "codex", "gemini", "opencode"])
def test_a_health_check_out_of_quota_limits_the_cli_instead_of_marking_it_unhealthy(
    cli, monkeypatch
):
    monkeypatch.setenv("MALAMAR_FAKE_HEALTH", "limit")
    health.check_and_store(cli, full=True)
    row = CliHealth.objects.get(cli_type=cli)
    assert row.status == "healthy" and row.error == ""
    assert row.is_limited and row.probe_at is not None
    assert cli not in health.needs_full_check(), "its probes have their own back-off"


@pytest.mark.pg
def test_a_health_check_that_answers_lifts_the_limit():
    cli_limit_set(cli_type="codex", limit=Limit("Quota exceeded."))
    health.check_and_store("codex", full=True)
    assert not CliHealth.objects.get(cli_type="codex").is_limited


@pytest.mark.pg
def test_a_check_that_started_before_a_run_hit_the_limit_does_not_lift_it(monkeypatch):
    """The worker's start-up check answers while a run meets the limit: the newer news wins."""
    real_check = health.check

    def check_while_a_run_hits_the_limit(*args, **kwargs):
        outcome = real_check(*args, **kwargs)
        cli_limit_set(cli_type="codex", limit=Limit("Quota exceeded."))
        return outcome

    monkeypatch.setattr(health, "check", check_while_a_run_hits_the_limit)
    health.check_and_store("codex", full=True)
    assert CliHealth.objects.get(cli_type="codex").is_limited


@pytest.mark.pg
def test_the_malamar_agent_prefers_a_cli_that_is_not_out_of_quota():
    assert first_available_cli() == "claude"
    cli_limit_set(cli_type="claude", limit=Limit("limit"))
    assert first_available_cli() == "codex"
    for cli in ("codex", "gemini", "opencode"):
        cli_limit_set(cli_type=cli, limit=Limit("limit"))
    assert first_available_cli() == "claude", "all limited: the first one (the reply waits)"


@pytest.mark.pg
@pytest.mark.live
def test_the_real_worker_pauses_a_limited_task_and_runs_the_others(start_stack):
    """End to end (runworker and server): the limited run leaves no error comment and the task
    waits In Progress, while a task of another workspace reaches In Review."""
    stack = start_stack(health_at_start=True)

    def codex_checked():
        clis = stack.api("GET", "/health/cli")["clis"]
        return all(c["status"] != "not_checked" for c in clis if c["cli_type"] == "codex")

    # The worker's start-up check of codex answers healthy (the fake is not limited there): a
    # check that started after the limit would rightly lift it, so let that one finish first.
    wait_until(codex_checked, timeout=60, what="the start-up check of codex")
    limited_ws = stack.workspace("Limited", agents=[("Solo", "codex")])
    waiting = stack.task(limited_ws, f"@fake Solo: limit {_whole_minute(3 * 3600)}")
    wait_until(
        lambda: (
            stack.api("GET", f"/tasks/{waiting['id']}/runs")["runs"][:1]
            and stack.api("GET", f"/tasks/{waiting['id']}/runs")["runs"][0]["status"] == "limited"
        ),
        timeout=30,
        what="the limited run",
    )
    other_ws = stack.workspace("Other", agents=[("Solo", "claude")])
    other = stack.task(other_ws, "@fake skip")
    stack.wait_status(other, "in_review")
    assert stack.comments(waiting) == []
    assert stack.status(waiting) == "in_progress"
    clis = {c["cli_type"]: c for c in stack.api("GET", "/health/cli")["clis"]}
    assert clis["codex"]["limited"] and clis["codex"]["limited_until"]
    assert len(stack.api("GET", f"/tasks/{waiting['id']}/runs")["runs"]) == 1, "no retry"


def test_one_email_and_webhook_when_work_pauses_and_one_when_it_resumes(
    monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(
        notification_services, "_deliver_global", lambda payload, mail: sent.append(payload)
    )
    with django_capture_on_commit_callbacks(execute=True):
        cli_limit_set(cli_type="claude", limit=Limit("You've hit your session limit"))
        cli_limit_set(cli_type="claude", limit=Limit("You've hit your session limit"))
    with django_capture_on_commit_callbacks(execute=True):
        cli_states.cli_limit_lift(cli_type="claude")
        cli_states.cli_limit_lift(cli_type="claude")
    assert [p["event"] for p in sent] == ["cli.limited", "cli.resumed"]
    assert sent[0]["cli_type"] == "claude" and sent[0]["until"] is None
