"""The edges of a task pass (issue 25; DESIGN "Retries", "No lost comment"), in-process with the
fake CLIs: a failed run is retried at the agent that failed and its streak counts attempts; a
CLI that cannot run makes the pass wait for it (no timer, one notification, a fallback CLI
meanwhile) and the pass goes on at that agent once the CLI works; a comment that no agent's
input contained yet keeps the task going, whoever wrote it and whenever it was committed.

The passes run on the test thread (`_run_workspace`, as the worker's workspace thread runs
them); an interleaving is made exact with a hook at the point it names (no sleeps). Time is
moved, never waited: a back-off is over when a test says so."""

import importlib
import os
import threading

import pytest
from django.apps import apps as django_apps
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from agents.services import agent_update
from core.actors import SYSTEM, USER
from notifications import cli_states
from runner.clis import cli_for
from runner.files import task_input_path
from runner.models import AgentRun, CliHealth, CliHealthStatus, RunStatus
from runner.schemas import parse_task_output
from runner.services import cli_health_store, settings_save
from tasks import services as task_services
from tasks.mcp_server import WorkspaceTools
from tasks.models import QueueStatus, Task, TaskComment, TaskLog, TaskQueueItem, TaskStatus
from tasks.services import comment_create_and_send_around, task_create
from tests.htmltree import parse
from tests.passes import run_workspace, team
from tests.stack import FAKES_BIN
from worker import pickup
from worker.pipeline import InputAhead, TaskPass

pytestmark = pytest.mark.django_db(transaction=True)

TEAM = (("Planner", "claude"), ("Implementer", "claude"), ("Auditor", "claude"))


@pytest.fixture(autouse=True)
def fake_clis(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def inputs(monkeypatch):
    """Every agent's input, in order: (agent name, text). (Written between two agents before
    the finish, with the early go, from the part made ahead; or after the finish.)"""
    seen = []
    write, write_ahead = TaskPass._write_input, InputAhead.write

    def recorded(owner, agent, output_path, comments, logs):
        written = write(owner, agent, output_path, comments, logs)
        seen.append((agent.name, task_input_path(owner.task.id).read_text()))
        return written

    def recorded_ahead(ahead, owner, rows):
        written = write_ahead(ahead, owner, rows)
        seen.append((ahead.agent.name, task_input_path(owner.task.id).read_text()))
        return written

    monkeypatch.setattr(TaskPass, "_write_input", recorded)
    monkeypatch.setattr(InputAhead, "write", recorded_ahead)
    return seen


def _back_off_over(task) -> None:
    Task.objects.filter(id=task.id).update(retry_not_before=timezone.now())


def _runs(task) -> list[tuple[str, str]]:
    runs = AgentRun.objects.filter(task=task).order_by("started_at", "id")
    return [(run.agent_name, run.status) for run in runs]


def _queued(task) -> TaskQueueItem:
    return TaskQueueItem.objects.get(task=task, status=QueueStatus.QUEUED)


def _status(task) -> str:
    return Task.objects.get(id=task.id).status


# retries at the agent that failed --------------------------------------------------------


def test_a_failed_run_is_retried_at_the_agent_that_failed(inputs):
    workspace, agents = team("Retry", *TEAM, ("Reviewer", "codex"))
    reviewer = agents[-1]
    task = task_create(
        workspace=workspace,
        summary="Build it",
        description="@fake Planner: comment-once Planned\n@fake Reviewer: exit 3 it broke",
    )
    run_workspace(workspace)
    assert _runs(task) == [
        ("Planner", RunStatus.COMPLETED),
        ("Implementer", RunStatus.COMPLETED),
        ("Auditor", RunStatus.COMPLETED),
        ("Reviewer", RunStatus.FAILED),
    ]
    item = _queued(task)
    assert (item.resume_agent_id, item.waiting_for_cli) == (reviewer.id, "")

    Task.objects.filter(id=task.id).update(description="@fake Planner: comment-once Planned")
    _back_off_over(task)
    run_workspace(workspace)

    assert _runs(task)[4] == ("Reviewer", RunStatus.COMPLETED), "not the Planner again"
    assert "it broke (CLI exited with code 3)" in inputs[4][1], "the retry reads the error"
    task.refresh_from_db()
    assert (task.failure_streak, task.retry_not_before) == (0, None)
    # The Planner commented in this pass (it continued at the Reviewer): one more loop.
    assert [name for name, _ in _runs(task)[5:]] == [
        "Planner",
        "Implementer",
        "Auditor",
        "Reviewer",
    ]
    assert task.status == TaskStatus.IN_REVIEW


def test_the_failure_streak_counts_attempts_and_doubles_the_back_off(monkeypatch):
    """The last agent fails every time: the agents before it run once, the streak grows (a
    success of another agent does not reset it), the back-off doubles, the error shows once
    ("3 times") and the error notification is asked for with each streak (notifications sends
    the first only)."""
    notified = []
    monkeypatch.setattr(
        task_services, "notify_task_error", lambda **kw: notified.append(kw["failure_streak"])
    )
    workspace, _agents = team("Streak", *TEAM, ("Reviewer", "codex"))
    task = task_create(workspace=workspace, summary="T", description="@fake Reviewer: exit 1 no")
    delays = []
    for _ in range(3):
        run_workspace(workspace)
        task.refresh_from_db()
        failed_at = TaskComment.objects.filter(task=task).latest("created_at").created_at
        delays.append(round((task.retry_not_before - failed_at).total_seconds()))
        assert pickup.claim_next(workspace.id) is None, "it waits out its back-off"
        _back_off_over(task)

    assert [name for name, _ in _runs(task)] == [
        "Planner",
        "Implementer",
        "Auditor",
        "Reviewer",
        "Reviewer",
        "Reviewer",
    ]
    assert task.failure_streak == 3
    assert delays == [5, 10, 20]
    assert notified == [1, 2, 3]
    errors = TaskComment.objects.filter(task=task, kind="error").count()
    assert errors == 3  # shown as one, "3 times" (tasks.selectors.collapse_repeated_errors)


def test_an_internal_error_fails_the_pass_at_its_agent_with_the_usual_back_off(monkeypatch):
    workspace, agents = team("Bug", *TEAM)
    task = task_create(workspace=workspace, summary="T", description="@fake skip")
    apply = TaskPass._apply_answer

    def buggy(owner, answer, rows):
        if owner.agent.name == "Implementer":
            raise RuntimeError("a bug")
        apply(owner, answer, rows)

    monkeypatch.setattr(TaskPass, "_apply_answer", buggy)
    run_workspace(workspace)
    task.refresh_from_db()
    assert task.failure_streak == 1
    comment = TaskComment.objects.get(task=task)
    assert comment.kind == "error" and "RuntimeError: a bug" in comment.content
    assert _queued(task).resume_agent_id == agents[1].id


# a CLI that cannot run at all -------------------------------------------------------------


@pytest.fixture
def broken_codex(tmp_path):
    """Codex CLI's binary set to a file that is gone (saved while it existed)."""
    codex = tmp_path / "bin" / "codex"
    codex.parent.mkdir()
    codex.symlink_to(FAKES_BIN / "codex")
    settings_save(changes={"cli_settings": {"codex": {"binary_path": str(codex)}}})
    CliHealth.objects.filter(cli_type="codex").update(refresh_requested_at=None)
    codex.unlink()
    return codex


@pytest.fixture
def cli_notifications(monkeypatch):
    sent = []
    monkeypatch.setattr(cli_states, "notify_cli_broken", lambda **kw: sent.append(kw["cli_type"]))
    return sent


def _works_again(codex) -> None:
    """The binary is back and a check passes: the CLI works now."""
    codex.symlink_to(FAKES_BIN / "codex")
    outcome = {"status": CliHealthStatus.HEALTHY, "error": "", "binary_path": str(codex)}
    cli_health_store(cli_type="codex", outcome=outcome, started_at=timezone.now(), full=True)


def test_a_cli_that_cannot_run_makes_the_pass_wait_at_its_agent(broken_codex, cli_notifications):
    workspace, agents = team("Broken", *TEAM, ("Reviewer", "codex"))
    task = task_create(workspace=workspace, summary="T", description="@fake skip")
    run_workspace(workspace)

    reason = f"Binary {broken_codex} does not exist (check Settings → CLIs)"
    assert _runs(task) == [
        ("Planner", RunStatus.COMPLETED),
        ("Implementer", RunStatus.COMPLETED),
        ("Auditor", RunStatus.COMPLETED),
        ("Reviewer", RunStatus.FAILED),
    ]
    task.refresh_from_db()
    assert (task.failure_streak, task.retry_not_before) == (0, None), "not a retry on a timer"
    assert not TaskComment.objects.filter(task=task).exists(), "no error comment"
    item = _queued(task)
    assert (item.waiting_for_cli, item.resume_agent_id) == ("codex", agents[-1].id)
    codex = CliHealth.objects.get(cli_type="codex")
    assert (codex.status, codex.error) == (CliHealthStatus.UNHEALTHY, reason)
    assert cli_notifications == ["codex"]
    assert pickup.claim_next(workspace.id) is None, "it waits for its CLI, however long"
    log = TaskLog.objects.get(task=task, event_type="waits_for_cli")
    assert log.metadata == {"agent_name": "Reviewer", "cli": "codex", "reason": reason}

    client = Client()
    board = parse(client.get(f"/workspaces/{workspace.id}/").content.decode())
    chip = board.find("task-card__waiting", data_task_waiting=task.id)
    assert chip.text == f"Waits for Codex CLI: {reason}"
    popup = parse(client.get(f"/tasks/{task.id}/", HTTP_HX_REQUEST="true").content.decode())
    assert popup.by_id("task-cli-wait").text == f"Waits for Codex CLI: {reason}"

    _works_again(broken_codex)
    assert _queued(task).waiting_for_cli == ""
    run_workspace(workspace)
    assert _runs(task)[4] == ("Reviewer", RunStatus.COMPLETED), "it goes on at the Reviewer"
    assert len(_runs(task)) == 5
    assert _status(task) == TaskStatus.IN_REVIEW


def test_waiting_tasks_share_one_notification_and_other_tasks_keep_running(
    broken_codex, cli_notifications
):
    workspace, _ = team("Needs codex", ("Reviewer", "codex"))
    first = task_create(workspace=workspace, summary="First", description="@fake skip")
    second = task_create(workspace=workspace, summary="Second", description="@fake skip")
    healthy, _ = team("Healthy", ("Solo", "claude"))
    other = task_create(workspace=healthy, summary="Other", description="@fake skip")

    run_workspace(workspace)
    run_workspace(healthy)

    assert _queued(first).waiting_for_cli == _queued(second).waiting_for_cli == "codex"
    assert cli_notifications == ["codex"], "one notification for all the waiting work"
    assert _status(other) == TaskStatus.IN_REVIEW


def test_a_cli_can_say_it_cannot_run_from_its_output(monkeypatch, cli_notifications):
    """The shared interface (issue 26 fills it per CLI): Cli.cannot_run_reason(result)."""
    codex = type(cli_for("codex"))
    monkeypatch.setattr(
        codex,
        "cannot_run_reason",
        lambda self, result: "not logged in" if "401" in result.stderr else None,
    )
    workspace, _agents = team("Logged out", ("Planner", "claude"), ("Reviewer", "codex"))
    task = task_create(
        workspace=workspace, summary="T", description="@fake Reviewer: exit 1 401 Unauthorized"
    )
    run_workspace(workspace)
    assert _queued(task).waiting_for_cli == "codex"
    assert CliHealth.objects.get(cli_type="codex").error == "not logged in"
    assert not TaskComment.objects.filter(task=task).exists()


def test_a_broken_cli_runs_the_agent_on_its_fallback_cli(broken_codex):
    workspace, (_planner, reviewer) = team("Fallback", ("Planner", "claude"), ("Reviewer", "codex"))
    agent_update(agent=reviewer, fallback_cli_type="gemini")
    task = task_create(workspace=workspace, summary="T", description="@fake skip")
    run_workspace(workspace)
    runs = AgentRun.objects.filter(task=task).order_by("started_at", "id")
    assert [(r.agent_name, r.cli_type, r.fallback_for, r.status) for r in runs] == [
        ("Planner", "claude", "", RunStatus.COMPLETED),
        ("Reviewer", "codex", "", RunStatus.FAILED),  # found out: codex cannot run
        ("Reviewer", "gemini", "codex", RunStatus.COMPLETED),  # at once, on its fallback
    ]
    assert _status(task) == TaskStatus.IN_REVIEW


def test_a_cli_a_check_found_broken_is_not_run_at_all():
    """Health checks mark a CLI broken: the pass runs the agents before it, then waits there
    without starting it (a paid run that can only fail)."""
    CliHealth.objects.create(cli_type="codex", status=CliHealthStatus.UNHEALTHY, error="logged out")
    workspace, agents = team("Checked", *TEAM, ("Reviewer", "codex"))
    task = task_create(workspace=workspace, summary="T", description="@fake skip")
    run_workspace(workspace)
    assert [name for name, _ in _runs(task)] == ["Planner", "Implementer", "Auditor"]
    item = _queued(task)
    assert (item.waiting_for_cli, item.resume_agent_id) == ("codex", agents[-1].id)


# a comment always reaches the agents -------------------------------------------------------


def _comment_while(agent_name: str, write, monkeypatch) -> list:
    """Hook: as `agent_name`'s run starts (its CLI went, with its input), `write()` commits a
    comment. Returns the comments written."""
    written = []
    start = TaskPass.start

    def then_comment(owner, recorder):
        start(owner, recorder)
        if owner.agent.name == agent_name and not written:
            written.append(write())

    monkeypatch.setattr(TaskPass, "start", then_comment)
    return written


REVIEWING = "@fake Reviewer: review Looks good"


def test_a_comment_committed_while_the_last_agent_works_keeps_the_task_going(inputs, monkeypatch):
    workspace, _ = team("Late comment", ("Planner", "claude"), ("Reviewer", "claude"))
    task = task_create(workspace=workspace, summary="T", description=REVIEWING)
    _comment_while(
        "Reviewer",
        lambda: comment_create_and_send_around(
            task=Task.objects.get(id=task.id), content="Also add tests", actor=USER
        ),
        monkeypatch,
    )
    run_workspace(workspace)

    assert "Also add tests" not in inputs[1][1]  # the Reviewer's first input missed it
    assert [name for name, _ in inputs] == ["Planner", "Reviewer", "Planner", "Reviewer"]
    assert "Also add tests" in inputs[2][1] and "Also add tests" in inputs[3][1]
    assert TaskLog.objects.filter(task=task, event_type="review_postponed").count() == 1
    assert _status(task) == TaskStatus.IN_REVIEW  # once every agent had read it
    assert not TaskComment.objects.undelivered().filter(user_id__isnull=False).exists()


def test_a_comment_through_malamars_mcp_server_while_an_agent_works_reaches_the_agents(
    inputs, monkeypatch
):
    workspace, _ = team("MCP comment", ("Planner", "claude"), ("Reviewer", "claude"))
    task = task_create(workspace=workspace, summary="T", description=REVIEWING)
    tools = WorkspaceTools(workspace.id)
    _comment_while(
        "Reviewer", lambda: tools.comment_on_task(task.id, "Seen in production too"), monkeypatch
    )
    run_workspace(workspace)
    assert "Seen in production too" in inputs[2][1]
    assert _status(task) == TaskStatus.IN_REVIEW


def test_a_comment_through_mcp_on_an_in_review_task_sends_it_around(inputs):
    workspace, _ = team("MCP review", ("Planner", "claude"))
    task = task_create(workspace=workspace, summary="T", description="@fake skip")
    run_workspace(workspace)
    assert _status(task) == TaskStatus.IN_REVIEW

    WorkspaceTools(workspace.id).comment_on_task(task.id, "The login still fails")
    assert _status(task) == TaskStatus.TODO
    run_workspace(workspace)
    assert "The login still fails" in inputs[-1][1]
    assert _status(task) == TaskStatus.IN_REVIEW


def test_a_comment_posted_as_the_pass_ends_sends_the_task_back(inputs, monkeypatch):
    """The page read the task while it was In Progress; the comment is committed while the pass
    ends (its finish holds the task's row): the comment waits for it, then sends it back."""
    workspace, _ = team("Ending", ("Planner", "claude"))
    task = task_create(workspace=workspace, summary="T", description="@fake skip")
    loaded_by_the_page = Task.objects.get(id=task.id)
    end = task_services.task_pass_end
    posting = []

    def end_while_posting(**kwargs):
        if not posting:
            thread = threading.Thread(
                target=_post_and_close, args=(loaded_by_the_page, "One more thing")
            )
            thread.start()
            posting.append(thread)
        end(**kwargs)

    monkeypatch.setattr(task_services, "task_pass_end", end_while_posting)
    run_workspace(workspace)
    posting[0].join()
    run_workspace(workspace)  # (the next pass may have run already: it was sent back)

    assert "One more thing" in inputs[-1][1], "an agent read it: it was not left behind"
    assert _status(task) == TaskStatus.IN_REVIEW
    assert not TaskComment.objects.undelivered().exists()


def _post_and_close(task, content: str) -> None:
    try:
        comment_create_and_send_around(task=task, content=content, actor=USER)
    finally:
        connection.close()


def test_an_agents_own_review_comment_does_not_keep_the_task_going(inputs):
    workspace, _ = team("Own comment", ("Planner", "claude"), ("Reviewer", "claude"))
    task = task_create(workspace=workspace, summary="T", description=REVIEWING)
    run_workspace(workspace)
    assert [name for name, _ in inputs] == ["Planner", "Reviewer"]
    assert _status(task) == TaskStatus.IN_REVIEW


def test_a_comment_during_a_pass_makes_every_agent_read_it_before_review(inputs, monkeypatch):
    """A person's comment while the first agent works: the later agents read it in this pass,
    the first one in the next; only then may the task reach In Review."""
    workspace, _ = team("Mid pass", ("Planner", "claude"), ("Reviewer", "claude"))
    task = task_create(workspace=workspace, summary="T", description="@fake skip")
    _comment_while(
        "Planner",
        lambda: comment_create_and_send_around(
            task=Task.objects.get(id=task.id), content="Mind the tests", actor=USER
        ),
        monkeypatch,
    )
    run_workspace(workspace)
    readers = [name for name, text in inputs if "Mind the tests" in text]
    assert readers == ["Reviewer", "Planner", "Reviewer"]
    assert _status(task) == TaskStatus.IN_REVIEW


def test_comments_written_before_delivery_was_tracked_count_as_read(workspace):
    """The migration: old comments never send their tasks around again."""
    migration = importlib.import_module("tasks.migrations.0009_comment_delivery")
    task = task_create(workspace=workspace, summary="Old")
    comment_create_and_send_around(task=task, content="old", actor=USER)
    TaskComment.objects.update(delivered_at=None)
    migration.comments_so_far_were_delivered(django_apps, None)
    comment = TaskComment.objects.get(task=task)
    assert comment.delivered_at == comment.created_at


def test_the_undelivered_rule_ignores_system_notes_and_errors(workspace):
    task = task_create(workspace=workspace, summary="T")
    task_services.task_note_add(task=task, content="Branch made")
    task_services.comment_create(task=task, content="It failed", actor=SYSTEM, kind="error")
    assert not TaskComment.objects.undelivered().exists()
    comment_create_and_send_around(task=task, content="Please", actor=USER)
    assert TaskComment.objects.undelivered().count() == 1


def test_an_answers_rows_built_before_a_persons_comment_never_move_the_task_back_in_time():
    """The rows of an answer are built before its finish writes them (the next agent's early
    go): a person's comment in between is newer than those rows, and the task's last write
    (`updated_at`, what the passes compare to see others' writes) stays the newest."""
    workspace, (agent,) = team("Rows", ("Planner", "claude"))
    task = task_create(workspace=workspace, summary="T")
    item = TaskQueueItem.objects.get(task=task)
    answer = parse_task_output({"actions": [{"type": "comment", "content": "Planned"}]})
    rows = task_services.task_step_rows(task=task, agent=agent, answer=answer)

    person = comment_create_and_send_around(task=task, content="Mind the tests", actor=USER)
    with transaction.atomic():
        task_services.task_step_answered(
            task=task,
            item=item,
            agent=agent,
            answer=answer,
            pass_started=timezone.now(),
            read=[],
            retried=False,
            last_step=False,
            rows=rows,
        )

    planned = TaskComment.objects.get(task=task, content="Planned")
    assert planned.created_at == rows.comments[0][0].created_at < person.created_at
    assert Task.objects.get(id=task.id).updated_at > person.created_at
