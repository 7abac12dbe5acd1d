"""The worker, end to end with the fake CLIs on PATH: its loop in-process (`stack`), the API
through Django's test client.

Real processes (`live_stack`: a server and `runworker`) only where the test is about the
process itself: kill -9 mid-run and recovery, SIGTERM leaving no child behind, the worker's
memory while a CLI floods its output, and a second `runworker` refused (a real second process
against the in-process worker's lock).
"""

import signal
import subprocess
import sys
import threading

import pytest
from django.db import connection

from runner.recorder import RunRecorder
from tasks import services as task_services
from tests.databases import ON_POSTGRES, SQLITE_ONE_WORKER
from tests.live import ROOT, START, process_env, wait_until
from tests.stack import FAKES_BIN, alive
from worker.loop import Worker

# Real workers among them (kill -9, SIGTERM, the MCP server): ordered first.
pytestmark = pytest.mark.live

FOUR = [("Planner", "claude"), ("Implementer", "gemini"), ("Reviewer", "codex")]
FOUR += [("Approver", "opencode")]


@pytest.mark.pg
def test_four_agents_on_four_clis_reach_in_review(stack):
    ws = stack.workspace(agents=FOUR)
    task = stack.task(
        ws,
        "Build it.\n@fake Planner: comment-once The plan\n"
        "@fake Implementer: comment-once Implemented\n@fake Approver: comment-once Approved",
    )
    stack.wait_status(task, "in_review")
    comments = stack.comments(task)
    assert [(c["author_name"], c["content"]) for c in comments] == [
        ("Planner", "The plan"),
        ("Implementer", "Implemented"),
        ("Approver", "Approved"),
    ]
    finished = [
        (log["metadata"]["agent_name"], log["metadata"]["action_type"])
        for log in stack.logs(task)
        if log["event_type"] == "agent_finished"
    ]
    assert finished == [
        ("Planner", "comment"),
        ("Implementer", "comment"),
        ("Reviewer", "skip"),
        ("Approver", "comment"),
        ("Planner", "skip"),
        ("Implementer", "skip"),
        ("Reviewer", "skip"),
        ("Approver", "skip"),
    ]
    assert {run["cli"] for run in stack.task_runs()} == {"claude", "gemini", "codex", "opencode"}


def test_each_cli_gets_its_real_invocation(stack):
    ws = stack.workspace(agents=FOUR)
    task = stack.task(ws, "@fake skip")
    stack.wait_status(task, "in_review")
    runs = {run["cli"]: run for run in stack.task_runs()}
    temp = str(stack.temp_dir)
    claude = runs["claude"]["argv"]
    assert claude[:2] == [
        "-p",
        f"Read the file at {runs['claude']['input_path']} and follow the instruction autonomously.",
    ]
    assert claude[2:6] == [
        "--dangerously-skip-permissions",
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    assert claude[6] == "--json-schema"
    gemini = runs["gemini"]["argv"]
    assert gemini[2:4] == ["--yolo", "--skip-trust"]
    assert gemini[4:6] == ["--include-directories", temp]
    assert gemini[-2:] == ["-o", "stream-json"]
    codex = runs["codex"]["argv"]
    assert codex[:3] == [
        "exec",
        "--dangerously-bypass-approvals-and-sandbox",
        "--skip-git-repo-check",
    ]
    assert codex[3:5] == ["--json", "--output-schema"] and codex[6] == "-o"
    assert codex[7].startswith(f"{temp}/malamar_output_")
    opencode = runs["opencode"]
    assert opencode["argv"] == [
        *["run", "--auto", "--format", "json"],
        *["--print-logs", "--log-level", "WARN"],  # its log on stderr: a silent retry-after
    ]
    assert opencode["stdin"].startswith("Read the file at ")
    for run in runs.values():
        assert run["cwd"] == f"{temp}/malamar_task_{task['id']}"
        assert run["sid"] == run["pid"], "each CLI runs in a session of its own"


def test_input_file_structure_and_privacy(stack):
    ws = stack.workspace(agents=[("Planner", "claude")], description="Workspace rules here")
    task = stack.task(ws, "Describe me\n@fake comment-once Noted", summary="My summary")
    stack.wait_status(task, "in_review")
    path = stack.temp_dir / f"malamar_task_{task['id']}.md"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    text = path.read_text()
    order = [
        "# Malamar Context",
        "Workspace rules here",
        "# Your Role",
        'agent "Planner"',
        "## Other Agents in This Workflow",
        "- Planner (you)",
        "# Task",
        "## Summary",
        "My summary",
        "## Description",
        "Describe me",
        "## Comments",
        "## Activity Log",
        "# Output Instruction",
        "Write your response as JSON to: ",
    ]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert '{"author": "Planner", "agent_id": ' in text
    assert '"event_type": "agent_started"' in text
    assert f"{stack.temp_dir}/malamar_output_" in text


@pytest.mark.pg
def test_user_comment_retriggers_the_loop(stack):
    ws = stack.workspace(agents=[("Planner", "claude"), ("Implementer", "codex")])
    task = stack.task(ws, "@fake Planner: comment-once plan v1")
    stack.wait_status(task, "in_review")
    stack.api(
        "POST",
        f"/tasks/{task['id']}/comments",
        {"content": "Please add tests.\n@fake Implementer: comment-once tests added"},
        expect=201,
    )
    wait_until(
        lambda: len(stack.comments(task)) == 3 and stack.status(task) == "in_review",
        timeout=30,
        what="second round",
    )
    assert [c["content"].splitlines()[0] for c in stack.comments(task)] == [
        "plan v1",
        "Please add tests.",
        "tests added",
    ]
    moves = [
        (log["metadata"]["old_status"], log["metadata"]["new_status"])
        for log in stack.logs(task)
        if log["event_type"] == "status_changed"
    ]
    assert moves == [
        ("todo", "in_progress"),
        ("in_progress", "in_review"),
        ("in_review", "todo"),
        ("todo", "in_progress"),
        ("in_progress", "in_review"),
    ]


@pytest.mark.parametrize(
    "directive,message",
    [
        ("exit 3 it broke", "it broke (CLI exited with code 3)"),
        ("no-file", "CLI completed but output file was not created at "),
        ("empty-file", "CLI completed but output file was empty"),
        ("invalid-json", "CLI output was not valid JSON: "),
        ("unknown-action", "CLI output structure was invalid: actions[0]: unknown action type"),
        (
            'json {"actions": [{"type": "change_status", "status": "done"}]}',
            "CLI output structure was invalid: ",
        ),
        ('json ["skip"]', "CLI output structure was invalid: expected a JSON object"),
    ],
)
def test_each_error_kind_writes_a_system_comment_and_queues_a_retry(stack, directive, message):
    ws = stack.workspace(agents=[("Planner", "gemini"), ("Reviewer", "claude")])
    task = stack.task(ws, f"@fake Planner: {directive}")
    comment = stack.wait_comments(task, 1)[0]
    assert (comment["author_type"], comment["kind"]) == ("system", "error")
    assert comment["content"].startswith(message), comment["content"]
    assert stack.status(task) == "in_progress"  # errors never move the task to In Review
    queued = stack.sql(
        "SELECT status FROM task_queue WHERE task_id = ? ORDER BY created_at", task["id"]
    )
    assert queued == [("failed",), ("queued",)]
    assert not [r for r in stack.task_runs() if r["cli"] == "claude"], "the pass stopped"
    assert stack.worker_alive(), "the worker survived"


@pytest.mark.parametrize("cli", ["gemini", "claude"])
def test_deeply_nested_cli_output_is_invalid_json_and_the_worker_lives(stack, cli):
    ws = stack.workspace(agents=[("Planner", cli)])
    task = stack.task(ws, "@fake nested 100000")
    comment = stack.wait_comments(task, 1)[0]
    assert (comment["author_type"], comment["kind"]) == ("system", "error")
    assert comment["content"] == "CLI output was not valid JSON: nested more than 200 levels deep"
    stack.api("POST", f"/tasks/{task['id']}/comments", {"content": "@fake review ok"}, expect=201)
    stack.wait_status(task, "in_review", timeout=20)
    assert stack.comments(task)[-1]["content"] == "ok"
    assert stack.worker_alive(), "the worker survived"


@pytest.mark.pg
def test_error_retry_backs_off_and_a_user_comment_retries_at_once(stack, monkeypatch):
    # An hour's back-off (injected): nothing is waited out. A second task of the workspace runs
    # meanwhile, though the failed one comes first in the pickup order (it ran last).
    monkeypatch.setattr(task_services, "BACKOFF_BASE_SECONDS", 3600)
    ws = stack.workspace(agents=[("Planner", "opencode")])
    failing = stack.task(ws, "@fake exit 1 no auth", summary="Failing")
    stack.wait_comments(failing, 1)
    other = stack.task(ws, "@fake review Other done", summary="Other")
    stack.wait_status(other, "in_review")
    assert len(stack.comments(failing)) == 1, "the failed task was retried before its back-off"
    stack.api(
        "POST",
        f"/tasks/{failing['id']}/comments",
        {"content": "fixed\n@fake review All good"},
        expect=201,
    )
    stack.wait_status(failing, "in_review", timeout=10)
    assert stack.comments(failing)[-1]["content"] == "All good"


def queue_statuses(stack, task) -> list[str]:
    rows = stack.sql(
        "SELECT status FROM task_queue WHERE task_id = ? ORDER BY created_at", task["id"]
    )
    return [status for (status,) in rows]


def run_ended(stack, task) -> bool:
    """The task's first queue item (the run) reached its final status: a stopped run fails."""
    statuses = queue_statuses(stack, task)
    return statuses[0] == "failed" and "in_progress" not in statuses


@pytest.mark.pg
def test_cancel_kills_the_cli_and_its_grandchild(stack):
    ws = stack.workspace(agents=[("Planner", "codex")])
    task = stack.task(ws, "@fake grandchild 60 comment should never appear")
    run = stack.wait_run()[0]
    pid_file = stack.temp_dir / f"malamar_task_{task['id']}" / "grandchild.pid"
    wait_until(pid_file.exists, timeout=10, what="grandchild")
    grandchild = int(pid_file.read_text())
    assert alive(grandchild) and alive(run["pid"])
    stack.api("POST", f"/tasks/{task['id']}/cancel", expect=200)
    wait_until(
        lambda: not alive(grandchild) and not alive(run["pid"]),
        timeout=30,
        what="CLI and grandchild to die",
    )
    wait_until(lambda: run_ended(stack, task), timeout=10, what="the stopped run to end")
    assert [c["content"] for c in stack.comments(task)] == ["Task cancelled by user"]
    assert stack.status(task) == "in_review"
    assert stack.worker_alive()


@pytest.mark.pg
def test_deleting_a_running_task_kills_its_cli(stack):
    ws = stack.workspace(agents=[("Planner", "claude")])
    task = stack.task(ws, "@fake sleep 60")
    run = stack.wait_run()[0]
    # 204: on PostgreSQL the delete failed at times with a 500 (a trace row the run wrote
    # meanwhile, tests/test_delete_while_flushing.py), and this test then timed out waiting.
    stack.api("DELETE", f"/tasks/{task['id']}", expect=204)
    # The bound is for a failure only: the worker sees the queue row gone at its next poll.
    wait_until(lambda: not alive(run["pid"]), timeout=30, what="CLI to die")
    # The loop lives and nothing crashed: the stopped run's record, closed after its task's
    # rows were gone, is skipped (it used to fail a FOREIGN KEY check at times).
    stack.wait_idle()
    assert stack.worker_alive()


@pytest.mark.pg
def test_moving_a_running_task_to_review_stops_it_and_discards_output(stack):
    ws = stack.workspace(agents=[("Planner", "gemini")])
    task = stack.task(ws, "@fake sleep 2 comment late output")
    run = stack.wait_run()[0]
    stack.api("PUT", f"/tasks/{task['id']}", {"status": "in_review"}, expect=200)
    wait_until(lambda: not alive(run["pid"]), timeout=30, what="CLI to die")
    wait_until(lambda: run_ended(stack, task), timeout=10, what="the stopped run to end")
    assert stack.comments(task) == []


@pytest.mark.pg
def test_a_run_stuck_in_the_database_has_its_cli_killed_when_the_worker_stops(stack, monkeypatch):
    """The database stops answering while a run saves its traces, and the worker is asked to
    stop: the run's thread cannot kill its CLI, so the stopping worker does. (Seen in CI: the
    worker ended and the agent's CLI went on running, free to edit the project.)"""
    saving, answer = threading.Event(), threading.Event()
    flush = RunRecorder.flush

    def waits_for_the_database(self):
        saving.set()
        answer.wait(60)
        flush(self)

    monkeypatch.setattr(RunRecorder, "flush", waits_for_the_database)
    ws = stack.workspace(agents=[("Planner", "claude")])
    stack.task(ws, "@fake sleep 60")
    run = stack.wait_run()[0]
    try:
        wait_until(saving.is_set, timeout=20, what="the run to save its traces")
        stack.worker.request_stop()
        stack.worker.wait_stopped(stack.thread)
        wait_until(lambda: not alive(run["pid"]), timeout=10, what="the CLI to be killed")
    finally:
        answer.set()


@pytest.mark.pg
def test_kill_9_mid_run_then_restart_finishes_without_duplicates(live_stack):
    stack = live_stack
    ws = stack.workspace(agents=[("Planner", "claude"), ("Implementer", "gemini")])
    task = stack.task(
        ws, "@fake Planner: comment-once plan\n@fake Implementer: sleep 30 comment-once built"
    )
    wait_until(lambda: len(stack.task_runs()) >= 2, timeout=20, what="Implementer start")
    orphan = stack.task_runs()[1]["pid"]
    stack.worker.send_signal(signal.SIGKILL)
    stack.worker.wait()
    assert alive(orphan), "the CLI outlived its worker, as it would after a crash"
    # Restart with a quicker Implementer: recovery must kill the orphan first.
    stack.api(
        "PUT",
        f"/tasks/{task['id']}",
        {"description": "@fake Planner: comment-once plan\n@fake Implementer: comment-once built"},
        expect=200,
    )
    stack.start_worker()
    # (The worker recovers after it binds its socket, as part of its start: START bounds both.)
    wait_until(lambda: not alive(orphan), timeout=START, what="recovery to kill the orphan")
    stack.wait_status(task, "in_review")
    assert [c["content"] for c in stack.comments(task)] == ["plan", "built"]


@pytest.mark.pg
def test_sigterm_stops_the_worker_and_leaves_no_child(live_stack):
    stack = live_stack
    ws = stack.workspace(agents=[("Planner", "opencode")])
    task = stack.task(ws, "@fake grandchild 60")
    run = stack.wait_run()[0]
    pid_file = stack.temp_dir / f"malamar_task_{task['id']}" / "grandchild.pid"
    wait_until(pid_file.exists, timeout=10, what="grandchild")
    grandchild = int(pid_file.read_text())
    worker = psutil_process(stack.worker.pid)
    stack.worker.send_signal(signal.SIGTERM)
    assert stack.worker.wait(timeout=10) == 0
    assert not alive(run["pid"]) and not alive(grandchild)
    assert not [p for p in worker_children(worker) if alive(p)]
    assert stack.comments(task) == [], "a shutdown is not an error"
    # SQLite: the pass stays claimed until the next start recovers it; PostgreSQL: a worker
    # that stops cleanly hands its runs back at once (another worker may take them).
    left = "queued" if ON_POSTGRES else "in_progress"
    assert stack.sql("SELECT status FROM task_queue WHERE task_id = ?", task["id"]) == [(left,)]
    stack.start_worker()  # the interrupted pass runs again
    wait_until(lambda: len(stack.task_runs()) >= 2, timeout=20, what="resumed run")


def psutil_process(pid):
    import psutil

    return psutil.Process(pid)


def worker_children(proc) -> list[int]:
    try:
        return [child.pid for child in proc.children(recursive=True)]
    except Exception:
        return []


@SQLITE_ONE_WORKER
def test_a_second_worker_is_refused(stack):
    second = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runworker"],
        env=process_env(stack.data_dir, **stack.env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert second.returncode == 1
    assert "already running" in second.stderr
    assert stack.worker_alive()


@pytest.mark.pg
def test_workspaces_run_in_parallel_one_task_each(stack):
    spans = {}
    workspaces = [stack.workspace(title=f"W{i}", agents=[("Solo", "codex")]) for i in range(2)]
    tasks = [
        stack.task(ws, "@fake sleep 1.5 in_review", summary=f"{ws['title']}-{n}")
        for ws in workspaces
        for n in range(2)
    ]
    for task in tasks:
        stack.wait_status(task, "in_review", timeout=40)
    for task in tasks:
        logs = {log["event_type"]: log["created_at"] for log in stack.logs(task)}
        spans[task["summary"]] = (logs["agent_started"], logs["agent_finished"])

    def overlap(a, b):
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    assert not overlap("W0-0", "W0-1") and not overlap("W1-0", "W1-1")
    assert any(overlap(f"W0-{i}", f"W1-{j}") for i in range(2) for j in range(2))


@pytest.mark.pg
def test_agent_changes_apply_to_the_next_agent_of_the_same_pass(stack):
    ws = stack.workspace(agents=[("Planner", "claude"), ("Reviewer", "gemini")])
    task = stack.task(ws, "@fake Planner: sleep 1.5 skip")
    stack.wait_run()
    agents = stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"]
    stack.api(
        "PUT",
        f"/agents/{agents[1]['id']}",
        {"instruction": "Review.\n@fake review changed mid-pass"},
        expect=200,
    )
    stack.wait_status(task, "in_review")
    assert stack.comments(task)[-1]["content"] == "changed mid-pass"


def test_no_agents_moves_the_task_to_review(stack):
    ws = stack.workspace()
    task = stack.task(ws, "nothing to do")
    stack.wait_status(task, "in_review")
    assert stack.task_runs() == []


def test_missing_static_directory_is_an_error_comment(stack, tmp_path):
    folder = tmp_path / "missing"
    folder.mkdir()  # it existed when saved (a folder that does not is refused), then went
    ws = stack.workspace(
        agents=[("Planner", "claude")],
        working_directory_mode="static",
        working_directory_path=str(folder),
    )
    folder.rmdir()
    task = stack.task(ws, "@fake comment hi")
    comment = stack.wait_comments(task, 1)[0]
    assert "does not exist" in comment["content"] and comment["author_type"] == "system"
    assert stack.worker_alive()


def test_static_directory_is_the_working_directory(stack, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    ws = stack.workspace(
        agents=[("Planner", "codex")],
        working_directory_mode="static",
        working_directory_path=str(repo),
    )
    task = stack.task(ws, "@fake skip")
    stack.wait_status(task, "in_review")
    assert stack.task_runs()[0]["cwd"] == str(repo)


def test_cli_settings_env_and_binary_path_reach_the_cli(stack, tmp_path):
    custom = tmp_path / "custom-bin" / "claude"
    custom.parent.mkdir()
    custom.symlink_to(FAKES_BIN / "claude")
    stack.api(
        "PUT",
        "/settings",
        {
            "cli_settings": {
                "claude": {"binary_path": str(custom), "env": {"MALAMAR_TEST_TOKEN": "s3cret"}}
            }
        },
        expect=200,
    )
    ws = stack.workspace(agents=[("Planner", "claude")])
    task = stack.task(ws, "@fake skip")
    stack.wait_status(task, "in_review")
    run = stack.task_runs()[0]
    assert run["argv0"] == str(custom)
    assert run["env"]["MALAMAR_TEST_TOKEN"] == "s3cret"


def test_a_missing_binary_makes_the_task_wait_for_its_cli_until_its_settings_are_fixed(
    stack, tmp_path
):
    """DESIGN "Retries": a CLI that cannot run is not retried on a timer; the task waits at the
    agent, and saving the CLI's settings re-checks it: once it works the task goes on there."""
    gemini = tmp_path / "gone" / "gemini"
    gemini.parent.mkdir()
    gemini.symlink_to(FAKES_BIN / "gemini")
    body = {"cli_settings": {"gemini": {"binary_path": str(gemini)}}}
    stack.api("PUT", "/settings", body, expect=200)
    gemini.unlink()  # removed after it was saved (a saved path that does not exist is refused)
    ws = stack.workspace(agents=[("Planner", "claude"), ("Reviewer", "gemini")])
    task = stack.task(ws, "@fake Reviewer: comment-once reviewed")
    reason = f"Binary {gemini} does not exist (check Settings → CLIs)"
    wait_until(
        lambda: (
            stack.sql("SELECT waiting_for_cli FROM task_queue WHERE status = 'queued'")
            == [("gemini",)]
        ),
        timeout=30,
        what="the task to wait for Gemini CLI",
    )
    assert stack.comments(task) == [], "no error comment: nothing the agents can fix"
    health = stack.sql("SELECT status, error FROM cli_health WHERE cli_type = 'gemini'")
    assert health == [("unhealthy", reason)]
    assert [run["cli"] for run in stack.task_runs()] == ["claude"]

    gemini.symlink_to(FAKES_BIN / "gemini")  # fixed, and saved again: checked at once
    stack.api("PUT", "/settings", body, expect=200)
    stack.wait_status(task, "in_review")
    assert [c["content"] for c in stack.comments(task)] == ["reviewed"]
    runs = [run["cli"] for run in stack.task_runs()]
    assert runs[:2] == ["claude", "gemini"], "it went on at the Reviewer, not from the Planner"


def test_a_cli_printing_100_mb_does_not_grow_the_worker(live_stack):
    stack = live_stack
    import psutil

    worker = psutil.Process(stack.worker.pid)
    ws = stack.workspace(agents=[("Planner", "gemini")])
    warm = stack.task(ws, "@fake skip", summary="warm-up")
    stack.wait_status(warm, "in_review")
    before = worker.memory_info().rss
    task = stack.task(ws, "@fake flood 100 review survived")
    stack.wait_status(task, "in_review", timeout=60)
    grew = (worker.memory_info().rss - before) / 1024 / 1024
    assert grew < 32, f"worker memory grew by {grew:.0f} MB"
    assert stack.comments(task)[-1]["content"] == "survived"


@pytest.mark.parametrize("at_start", [True, False])
def test_a_worker_checks_every_cli_as_it_starts_unless_told_not_to(start_stack, at_start):
    """DESIGN "Health checks": the real prompt at start; the tests' in-process worker skips
    them unless a test is about them (`health_at_start`)."""
    worker = start_stack(health_at_start=at_start).worker
    wait_until(lambda: worker.next_health, timeout=20, what="the worker's start")
    checks = worker.health.pending["background"] or worker.health.started
    assert bool(checks) is at_start


@pytest.mark.pg
def test_health_checks_are_stored_and_refreshable(start_stack):
    running = start_stack(health_at_start=True, MALAMAR_FAKE_HEALTH="fail")
    wait_until(
        lambda: all(c["status"] == "unhealthy" for c in running.api("GET", "/health/cli")["clis"]),
        timeout=20,
        what="health results",
    )
    claude = running.api("GET", "/health/cli")["clis"][0]
    assert claude["version"] == "2.1.197 (Claude Code)"
    assert claude["error"].endswith("(CLI exited with code 1)")
    assert claude["binary_path"].endswith("tests/fakes/bin/claude")
    running.api("POST", "/health/cli/refresh", expect=202)
    wait_until(
        lambda: all(
            c["refresh_requested_at"] is None for c in running.api("GET", "/health/cli")["clis"]
        ),
        timeout=20,
        what="refresh handled",
    )


def test_healthy_clis_and_missing_binaries(stack, tmp_path):
    codex = tmp_path / "bin" / "codex"
    codex.parent.mkdir()
    codex.symlink_to(FAKES_BIN / "codex")
    stack.api("PUT", "/settings", {"cli_settings": {"codex": {"binary_path": str(codex)}}})
    codex.unlink()  # the binary goes away after it was saved
    stack.api("POST", "/health/cli/refresh", expect=202)
    wait_until(
        lambda: (
            {c["cli_type"]: c["status"] for c in stack.api("GET", "/health/cli")["clis"]}
            == {
                "claude": "healthy",
                "gemini": "healthy",
                "codex": "unhealthy",
                "opencode": "healthy",
            }
        ),
        timeout=20,
        what="health results",
    )
    error = stack.api("GET", "/health/cli")["clis"][2]["error"]
    assert error == f"Binary {codex} does not exist (check Settings → CLIs)"


def clis(stack) -> dict:
    return {c["cli_type"]: c for c in stack.api("GET", "/health/cli")["clis"]}


@pytest.mark.pg
def test_saving_a_cli_rechecks_it_and_test_shows_its_answer(start_stack):
    stack = start_stack(health_at_start=True)
    wait_until(
        lambda: all(c["status"] == "healthy" and c["answer"] for c in clis(stack).values()),
        timeout=30,
        what="the first checks",
    )
    first = clis(stack)
    # A new variable breaks codex's login: the worker re-checks codex at once (not in 5 min).
    body = {"cli_settings": {"codex": {"env": {"MALAMAR_FAKE_HEALTH": "fail"}}}}
    stack.api("PUT", "/settings", body, expect=200)
    wait_until(
        lambda: clis(stack)["codex"]["status"] == "unhealthy",
        timeout=20,
        what="codex re-checked after its settings were saved",
    )
    codex = clis(stack)["codex"]
    assert codex["error"].endswith("(CLI exited with code 1)") and codex["answer"] == ""
    wait_until(
        lambda: clis(stack)["codex"]["refresh_requested_at"] is None, timeout=20, what="answered"
    )
    # "Test" on one CLI runs its real prompt, and only its.
    body = {"cli_settings": {"codex": {"env": {"MALAMAR_FAKE_HEALTH": None}}}}
    stack.api("PUT", "/settings", body, expect=200)
    wait_until(lambda: clis(stack)["codex"]["status"] == "healthy", timeout=20, what="fixed")
    tested = stack.api("POST", "/health/cli/gemini/check", expect=202)
    assert tested["refresh_requested_at"] is not None
    wait_until(
        lambda: clis(stack)["gemini"]["refresh_requested_at"] is None,
        timeout=20,
        what="gemini tested",
    )
    now = clis(stack)
    assert now["gemini"]["answer"] == "OK" and now["gemini"]["checked_at"] > tested["checked_at"]
    for cli in ("claude", "opencode"):
        assert now[cli]["checked_at"] == first[cli]["checked_at"]  # not re-checked


def _mcp_line(stack, ws: dict) -> str:
    data_dir = stack.data_dir.resolve()
    command = f"{sys.executable} -P -m malamar_site.cli mcp --workspace={ws['id']}"
    return f"mcp malamar: {command} (MALAMAR_DATA_DIR={data_dir})"


def test_giving_agents_malamars_tools_configures_the_mcp_server_on_each_cli(stack):
    ws = stack.workspace(agents=FOUR, mcp_tools_enabled=True)
    task = stack.task(ws, "@fake mcp-config")
    stack.wait_status(task, "in_review")
    # Each fake read the server the way its real CLI takes it (see tests/fakes/README.md).
    assert [(c["author_name"], c["content"]) for c in stack.comments(task)] == [
        (name, _mcp_line(stack, ws)) for name, _cli in FOUR
    ]
    runs = {run["cli"]: run for run in stack.task_runs()}
    assert runs["claude"]["argv"][6] == "--mcp-config"  # before --json-schema: it is greedy
    codex = [arg for arg in runs["codex"]["argv"] if arg.startswith("mcp_servers.malamar.")]
    assert [arg.split("=", 1)[0] for arg in codex] == [
        f"mcp_servers.malamar.{key}"
        for key in ("command", "args", "env", "required", "startup_timeout_sec")
    ]
    assert list(stack.temp_dir.glob("*_mcp.json")) == []  # a run's own config ends with it
    assert list((stack.data_dir / "run-config").glob("*_mcp.json")) == []


def test_without_the_opt_in_runs_get_no_mcp_configuration(stack):
    ws = stack.workspace(agents=FOUR)
    task = stack.task(ws, "@fake mcp-config")
    stack.wait_status(task, "in_review")
    # No --mcp-config, no -c mcp_servers…, no Gemini or OpenCode configuration in the env.
    assert {c["content"] for c in stack.comments(task)} == {"mcp: none"}
    for run in stack.task_runs():
        mcp_args = [a for a in run["argv"] if a == "--mcp-config" or a.startswith("mcp_servers")]
        assert mcp_args == [], run["argv"]


@pytest.mark.pg
def test_agents_use_malamars_tools_through_the_configured_server(live_stack):
    """Each fake CLI starts the server its run was configured with (in the task's folder, with
    the environment the real CLI would give it) and creates a task through its tool. Real
    processes: the server a CLI starts opens the data dir's database, which the in-process
    stack does not use."""
    stack = live_stack
    ws = stack.workspace(agents=FOUR, mcp_tools_enabled=True)
    task = stack.task(ws, "@fake mcp-create-task Follow-up")
    # Four server starts (Python, Django and the SDK: seconds each on a loaded machine).
    stack.wait_status(task, "in_review", timeout=120)
    created = stack.sql(
        "SELECT t.summary, l.actor_type, l.actor_id FROM tasks t JOIN task_logs l "
        "ON l.task_id = t.id AND l.event_type = 'task_created' "
        "WHERE t.workspace_id = ? AND t.id != ? ORDER BY t.summary",
        ws["id"],
        task["id"],
    )
    assert created == [
        (f"Follow-up ({cli})", "agent", "mcp") for cli in sorted(cli for _name, cli in FOUR)
    ]


@pytest.mark.pg
def test_a_runner_thread_keeps_its_connection_for_the_next_workspace(stack, monkeypatch):
    """A runner whose workspace has nothing left waits idle and runs the next workspace's task
    on the same database connection (no new thread and connection at every pickup)."""
    used = []
    run = Worker._run

    def recording(self, kind, item, stop):
        used.append((threading.current_thread(), connection.connection))
        run(self, kind, item, stop)

    monkeypatch.setattr(Worker, "_run", recording)
    for title in ("A", "B"):
        workspace = stack.workspace(title=title, agents=[("Solo", "codex")])
        stack.wait_status(stack.task(workspace, "@fake in_review"), "in_review")
        wait_until(lambda: stack.worker.idle_runners, timeout=30, what="the runner to wait idle")
    assert len(used) == 2
    assert used[0][0] is used[1][0] and used[0][1] is used[1][1]
