"""Checks (issue 30, DESIGN "Checks"): the project's own commands gate a task before it goes In
Review, and a failure goes back to the agents. Real git repositories with a real test command
(a tiny script), the fake CLIs as agents, the worker in-process."""

import os
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from chats.actions import execute_actions
from chats.services import chat_start
from core.actors import SYSTEM, USER
from malamar_site.services import workspace_import
from malamar_site.transfer import export_document
from malamar_site.transfer_format import parse_document
from notifications import services as notification_services
from runner.git import git_text
from runner.models import AgentRun
from runner.schemas import chat_schema
from tasks import branches
from tasks.models import Task, TaskComment, TaskQueueItem
from tasks.services import (
    checks_failure_text,
    comment_create,
    comment_create_and_send_around,
    task_checks_ended,
    task_create,
    task_status_set,
)
from tests.conftest import error_of
from tests.gitrepo import make_repo
from tests.http_fakes import Receiver
from tests.live import wait_until
from tests.stack import FAKES_BIN
from tests.test_branches import isolated, run_pass
from tests.test_notifications import all_sent, new_sending_pool
from worker.prompts import chat_context
from workspaces.models import Workspace
from workspaces.services import workspace_create, workspace_update

PY = sys.executable
# The project's test: add(2, 3) must be 5. It prints its failure in colour, as test runners do.
CHECK_SCRIPT = """import calc
got = calc.add(2, 3)
if got != 5:
    print("collecting 1 item")
    print("\\x1b[31mFAILED\\x1b[0m test_add: expected 5 got %s" % got)
    raise SystemExit(1)
print("1 passed")
"""
BROKEN = r"def\sadd(a,\sb):\n\s\s\s\sreturn\sa\s-\sb\n"
FIXED = r"def\sadd(a,\sb):\n\s\s\s\sreturn\sa\s+\sb\n"
# The Implementer writes broken code, and the fix once the failure's output reaches its input.
FIXING_IMPLEMENTER = f"@fake Implementer: fix calc.py {BROKEN} {FIXED} expected\\s5\\sgot\\s-1"


# --- what the user sets ---------------------------------------------------------------------


def test_the_api_sets_checks_with_defaults_and_refuses_bad_ones_with_a_message(api):
    created = api.post("/api/workspaces", {"title": "W"}).json()
    assert (created["checks"], created["checks_attempts"]) == ([], 3)
    url = f"/api/workspaces/{created['id']}"
    body = {"checks": [{"command": "python -m pytest -q"}, {"name": "lint", "command": "ruff ."}]}
    saved = api.put(url, {**body, "checks_attempts": 5}).json()
    assert saved["checks"] == [
        {"name": "python", "command": "python -m pytest -q", "timeout_minutes": 10},
        {"name": "lint", "command": "ruff .", "timeout_minutes": 10},
    ]
    assert api.get(url).json()["checks_attempts"] == 5
    refused = {
        "a check without a command": ({"checks": [{"name": "x"}]}, "check 1 needs a command"),
        "quotes left open": (
            {"checks": [{"command": "pytest 'x"}]},
            "check 1: the command cannot be read: No closing quotation",
        ),
        "a bad limit": (
            {"checks": [{"command": "true"}, {"command": "true", "timeout_minutes": -1}]},
            "check 2: timeout_minutes must be a number",
        ),
        "an unknown key": ({"checks": [{"command": "t", "shell": 1}]}, "shell is not a check"),
        "not a list": ({"checks": "pytest"}, "checks: Input should be a valid list"),
        "zero attempts": ({"checks_attempts": 0}, "checks_attempts must be a whole number"),
    }
    for case, (payload, message) in refused.items():
        response = api.put(url, payload)
        assert response.status_code == 400, case
        assert message in error_of(response)["message"], case
    assert api.get(url).json()["checks"] == saved["checks"]  # nothing lost


def test_export_and_import_carry_the_checks(db):
    checks = [{"name": "tests", "command": "pytest -q", "timeout_minutes": 2.5}]
    workspace = workspace_create(title="W", checks=checks, checks_attempts=4)
    copy = workspace_import(document=parse_document(export_document(workspace)))
    assert (copy.checks, copy.checks_attempts) == (checks, 4)


def test_the_malamar_agent_can_set_checks(db):
    workspace = workspace_create(title="W")
    chat = chat_start(workspace=workspace, message="run pytest before review")
    action = {
        "type": "update_workspace",
        "checks": [{"name": "tests", "command": "python -m pytest -q", "timeout_minutes": None}],
        "checks_attempts": 2,
    }
    [done] = execute_actions(chat=chat, actions=[action], is_malamar=True)
    assert done.error is None
    workspace = Workspace.objects.get(id=workspace.id)
    assert workspace.checks == [
        {"name": "tests", "command": "python -m pytest -q", "timeout_minutes": 10}
    ]
    assert workspace.checks_attempts == 2
    [bad] = execute_actions(
        chat=chat, actions=[{"type": "update_workspace", "checks": [{}]}], is_malamar=True
    )
    assert "check 1 needs a command" in bad.error
    context = chat_context(
        workspace=workspace, agents=[], clis=[], mailgun_configured=False, temp_dir="/tmp"
    )
    assert "- Checks before In Review: tests: `python -m pytest -q` (10 min)" in context
    assert "(attempts before asking the user: 2)" in context
    item = chat_schema(malamar=True)["properties"]["actions"]["items"]["properties"]["checks"]
    assert item["items"]["required"] == ["name", "command", "timeout_minutes"]


# --- the loop -----------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(
        tmp_path / "repo", {"calc.py": "def add(a, b):\n    return 0\n", "check.py": CHECK_SCRIPT}
    )


def checked_workspace(stack, repo: Path, checks, **fields) -> dict:
    return stack.workspace(
        agents=[("Implementer", "claude")],
        working_directory_mode="static",
        working_directory_path=str(repo),
        checks=checks,
        **fields,
    )


def check_runs(task: dict) -> list[AgentRun]:
    return list(AgentRun.objects.filter(task_id=task["id"], kind="check").order_by("started_at"))


def by_checks(stack, task: dict) -> list[str]:
    return [c["content"] for c in stack.comments(task) if c["author_name"] == "Checks"]


def processes_with(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in (proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


def test_failing_code_goes_back_to_the_agents_who_fix_it_then_in_review_with_checks_passed(
    stack, repo
):
    ws = checked_workspace(stack, repo, [{"name": "tests", "command": f"{PY} check.py"}])
    task = stack.task(ws, f"Make add() add.\n{FIXING_IMPLEMENTER}")
    stack.wait_status(task, "in_review", timeout=60)

    # Round 1 failed: one comment by "Checks" with the command, exit code and colourless tail.
    [failure] = by_checks(stack, task)
    assert 'Check "tests" failed (exit code 1)' in failure
    assert f"`{PY} check.py`" in failure
    assert "FAILED test_add: expected 5 got -1" in failure
    assert "\x1b" not in failure
    first, second = check_runs(task)
    assert (first.status, first.exit_code, second.status, second.exit_code) == (
        "failed",
        1,
        "completed",
        0,
    )
    assert f"/runs/{first.id}/output" in failure  # the full output, one click away
    output = stack.client.get(f"/runs/{first.id}/output")
    assert output["Content-Type"].startswith("text/plain")
    assert "collecting 1 item\nFAILED test_add: expected 5 got -1" in output.content.decode()
    # The Implementer ran twice: the second time its input held the failure (the fake wrote
    # the fix only then), and the whole loop started from the first agent again.
    assert len(stack.task_runs()) == 2
    [read] = TaskComment.objects.filter(task_id=task["id"], kind="checks")
    assert read.delivered_at is not None  # it kept the task going until an agent read it
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    body = stack.api("GET", f"/tasks/{task['id']}")
    assert body["checks_status"] == "passed"
    assert [(r["name"], r["status"]) for r in body["checks_result"]] == [("tests", "passed")]
    texts = [log["event_type"] for log in stack.logs(task)]
    assert texts.count("checks_failed") == 1 and texts.count("checks_passed") == 1
    assert stack.worker_alive()


@pytest.fixture
def hooked(start_stack, monkeypatch):
    hook = Receiver()
    monkeypatch.setattr(notification_services, "_pool", new_sending_pool())
    stack = start_stack()
    stack.api("PUT", "/settings", {"webhook_urls": [f"{hook.url}/hook"]}, expect=200)
    yield stack, hook
    stack.stop()
    hook.close()


def test_a_check_that_always_fails_ends_in_review_failing_after_3_rounds_notifying_once(
    hooked, repo
):
    stack, hook = hooked
    checks = [
        {"name": "lint", "command": f"{PY} -c pass"},
        {"name": "tests", "command": f"{PY} check.py"},
        {"name": "never reached", "command": f"{PY} -c pass"},
    ]
    ws = checked_workspace(stack, repo, checks)
    task = stack.task(ws, "The agents cannot fix this.")
    stack.wait_status(task, "in_review", timeout=90)
    all_sent(stack)

    assert len(stack.task_runs()) == 3  # three rounds of the agents
    assert len(by_checks(stack, task)) == 3
    runs = [(run.agent_name, run.status) for run in check_runs(task)]
    assert runs == [("lint", "completed"), ("tests", "failed")] * 3  # stops at the failure
    body = stack.api("GET", f"/tasks/{task['id']}")
    assert body["checks_status"] == "failing"
    assert [r["status"] for r in body["checks_result"]] == ["passed", "failed"]
    assert [r["data"]["event"] for r in hook.requests] == ["task.in_review"]
    assert stack.worker_alive()


def test_a_hanging_check_is_killed_at_its_limit_and_counts_as_failed(stack, repo):
    marker = f"hang-{uuid.uuid4().hex}"
    hang = {
        "name": "hangs",
        "command": f'{PY} -c "import time; time.sleep(600)" {marker}',
        "timeout_minutes": 0.02,
    }
    ws = checked_workspace(stack, repo, [hang], checks_attempts=1)
    task = stack.task(ws, "Anything.")
    stack.wait_status(task, "in_review", timeout=60)

    [failure] = by_checks(stack, task)
    assert 'Check "hangs" timed out after 0.02 min (killed)' in failure
    [run] = check_runs(task)
    assert run.status == "failed"
    assert processes_with(marker) == []
    assert stack.api("GET", f"/tasks/{task['id']}")["checks_status"] == "failing"


STOPS = {
    "cancel": ("POST", "/cancel", None),
    "delete": ("DELETE", "", None),
    "move": ("PUT", "", {"status": "in_review"}),
}


@pytest.mark.parametrize("stop", list(STOPS))
def test_cancel_delete_or_move_during_a_check_leaves_no_process(stack, repo, stop):
    marker = f"slow-{uuid.uuid4().hex}"
    slow = {"name": "slow", "command": f'{PY} -c "import time; time.sleep(600)" {marker}'}
    ws = checked_workspace(stack, repo, [slow])
    task = stack.task(ws, "Anything.")
    wait_until(lambda: processes_with(marker), timeout=60, what="the check to run")
    method, path, body = STOPS[stop]
    stack.api(method, f"/tasks/{task['id']}{path}", body)
    wait_until(lambda: not processes_with(marker), timeout=10, what="the check to be killed")
    stack.wait_idle()
    if stop != "delete":
        assert [run.status for run in check_runs(task)] == ["stopped"]
        assert by_checks(stack, task) == []  # a stopped run is discarded
    assert stack.worker_alive()


HOLD_SCRIPT = """import os, time
while not os.path.exists("release"):
    time.sleep(0.05)
os.remove("release")
print("held check done")
"""


def test_a_restart_during_a_check_runs_the_checks_again_not_the_agents(stack, repo):
    (repo / "hold.py").write_text(HOLD_SCRIPT)
    ws = checked_workspace(stack, repo, [{"name": "held", "command": f"{PY} hold.py"}])
    task = stack.task(ws, "Anything.")
    wait_until(
        lambda: [r.status for r in check_runs(task)] == ["running"],
        timeout=60,
        what="the check to run",
    )
    stack.stop()  # Malamar stops while the check runs
    stack.start_worker()
    wait_until(lambda: len(check_runs(task)) == 2, timeout=60, what="the check to run again")
    (repo / "release").touch()
    stack.wait_status(task, "in_review", timeout=60)

    assert [r.status for r in check_runs(task)] == ["interrupted", "completed"]
    assert len(stack.task_runs()) == 1  # the Implementer is not run again
    page = stack.client.get(
        f"/tasks/{task['id']}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="task-activity"
    )
    assert "Resumed at Checks after a restart" in page.content.decode()
    assert stack.api("GET", f"/tasks/{task['id']}")["checks_status"] == "passed"


# --- branch per task --------------------------------------------------------------------------

FORMATTER = f"""{PY} -c "open('calc.py','a').write('# formatted\\\\n')" """


@pytest.mark.django_db(transaction=True)
def test_each_task_branch_runs_its_checks_in_its_worktree_and_keeps_a_formatters_changes(
    repo, tmp_path, settings, monkeypatch
):
    settings.DATA_DIR = tmp_path / "malamar-data"
    settings.DATA_DIR.mkdir()
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")
    workspace = isolated(
        repo, parallel_tasks=2, checks=[{"name": "fmt", "command": FORMATTER.strip()}]
    )
    first = task_create(workspace=workspace, summary="One", description="x")
    second = task_create(workspace=workspace, summary="Two", description="x")
    first, second = run_pass(first), run_pass(second)

    for task in (first, second):
        assert (task.status, task.checks_status) == ("in_review", "passed")
        [check] = AgentRun.objects.filter(task=task, kind="check")
        assert check.working_directory == str(branches.worktree_path(task.id))
        assert check.files_changed == 1  # the formatter's change is in the task's Changes
        assert "# formatted" in git_text("show", f"{task.branch_name}:calc.py", cwd=repo)
        assert git_text("log", "-1", "--format=%an", task.branch_name, cwd=repo) == "Check fmt"
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return 0\n"  # yours: untouched


# --- by hand, and what the person sees ---------------------------------------------------------


def test_run_checks_by_hand_on_an_in_review_task_shows_the_result_and_moves_nothing(stack, repo):
    ws = checked_workspace(
        stack, repo, [{"name": "tests", "command": f"{PY} check.py"}], checks_attempts=1
    )
    task = stack.task(ws, "The agents skip.")
    stack.wait_status(task, "in_review", timeout=60)
    assert stack.api("GET", f"/tasks/{task['id']}")["checks_status"] == "failing"
    board = stack.client.get(f"/workspaces/{ws['id']}/?tab=tasks").content.decode()
    assert "Checks failing" in board
    needs = stack.api("GET", "/needs-you")
    assert needs["checks_failing_count"] == 1 and needs["review"][0]["checks_failing"] is True
    popup = stack.client.get(f"/tasks/{task['id']}/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="task-checks-badge"' in popup and 'id="task-run-checks"' in popup

    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")  # the person fixes it
    stack.api("POST", f"/tasks/{task['id']}/checks/run", expect=200)
    wait_until(
        lambda: stack.api("GET", f"/tasks/{task['id']}")["checks_status"] == "passed",
        timeout=60,
        what="the checks run by hand",
    )
    stack.wait_idle()
    body = stack.api("GET", f"/tasks/{task['id']}")
    assert body["status"] == "in_review"
    assert [r["status"] for r in body["checks_result"]] == ["passed"]
    assert len(by_checks(stack, task)) == 1  # the round's comment only: a hand run writes none
    assert len(stack.task_runs()) == 1  # no agent ran
    popup = stack.client.get(f"/tasks/{task['id']}/", HTTP_HX_REQUEST="true").content.decode()
    assert "Checks passed" in popup
    activity = stack.client.get(
        f"/tasks/{task['id']}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="task-activity"
    ).content.decode()
    assert "User ran the checks by hand" in activity
    assert "Checks run by hand: passed" in activity
    assert stack.worker_alive()


def test_run_checks_by_hand_is_refused_unless_in_review_with_checks_and_not_twice(api, db):
    workspace = workspace_create(title="W")
    task = task_create(workspace=workspace, summary="T")
    response = api.post(f"/api/tasks/{task.id}/checks/run")
    assert response.status_code == 409
    assert "In Review" in error_of(response)["message"]
    for status in ("in_progress", "in_review"):
        task_status_set(task=task, status=status, actor=SYSTEM)
    TaskQueueItem.objects.filter(task=task).delete()  # its pass ended
    response = api.post(f"/api/tasks/{task.id}/checks/run")
    assert "no checks" in error_of(response)["message"]
    workspace_update(workspace=workspace, checks=[{"command": "true"}])
    assert api.post(f"/api/tasks/{task.id}/checks/run").status_code == 200
    response = api.post(f"/api/tasks/{task.id}/checks/run")  # queued: not a second at once
    assert (response.status_code, error_of(response)["message"]) == (
        409,
        "The checks are already running for this task",
    )
    [item] = TaskQueueItem.objects.filter(task=task)
    assert item.phase == "manual"
    comment_create_and_send_around(task=task, content="Do more", actor=USER)
    item.refresh_from_db()
    assert item.phase == ""  # a comment makes it the agents' pass it now is


# --- the round's rules --------------------------------------------------------------------------


def test_a_comment_written_while_the_checks_ran_sends_the_agents_around_before_review(db):
    workspace = workspace_create(title="W", checks=[{"command": "true"}])
    task = task_create(workspace=workspace, summary="T")
    item = TaskQueueItem.objects.get(task=task)
    assert TaskQueueItem.objects.claim(item.id)
    item.refresh_from_db()
    task_status_set(task=task, status="in_progress", actor=SYSTEM)
    comment_create(task=task, content="Also handle zero", actor=USER)  # no agent read it yet
    item.phase = "checks"
    passed = [{"name": "true", "command": "true", "status": "passed", "duration": 0.1}]
    task = Task.objects.select_related("workspace").get(id=task.id)
    task_checks_ended(task=task, item=item, results=passed, failure=None)

    task.refresh_from_db()
    assert (task.status, task.checks_status) == ("in_progress", "passed")
    assert TaskQueueItem.objects.queued().filter(task=task, phase="").exists()


def test_the_failure_comment_fences_output_that_holds_fences_and_says_a_timeout():
    failure = {
        "name": "docs",
        "command": "make docs",
        "exit_code": 2,
        "tail": "```\nbroken\n````",
        "tail_lines": 3,
        "run_id": "r1",
    }
    text = checks_failure_text(failure)
    assert "`````text\n```\nbroken\n````\n`````" in text
    assert "The last 3 lines of its output ([full output](/runs/r1/output)):" in text
    timed_out = checks_failure_text({**failure, "timed_out": True, "timeout_minutes": 10.0})
    assert '**Check "docs" timed out after 10 min (killed)**' in timed_out
