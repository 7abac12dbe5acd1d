"""A restart or a dead worker loses nothing and leaves nothing running (issue 25; DESIGN
"Processes", "Retries"): a pass interrupted by a restart goes on at the interrupted agent and
says so; a worker killed between forking a CLI and recording it leaves no CLI behind, because
a CLI may only run once recorded (worker.process holds it at a gate until then); and,
from outside with real processes, a CLI that cannot run as the last agent costs the healthy
agents' runs once, then nothing until it works again."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.htmltree import parse
from tests.live import ROOT, process_env, wait_until
from tests.stack import FAKES_BIN, alive

AUDIT = "@fake Planner: comment-once Planned\n@fake Security Auditor: hold 120 comment-once Audited"
THREE = [("Planner", "claude"), ("Security Auditor", "gemini"), ("Reviewer", "codex")]


def _release(stack, task) -> None:
    """Let every `hold` directive in the task's folder go on (each takes its release)."""
    (stack.temp_dir / f"malamar_task_{task['id']}" / "release").touch()


def test_a_restart_resumes_the_pass_at_the_interrupted_agent_and_says_so(stack):
    ws = stack.workspace(agents=THREE)
    task = stack.task(ws, AUDIT)
    wait_until(lambda: len(stack.task_runs()) == 2, timeout=30, what="the Auditor's run")

    stack.stop()  # Malamar stops (Ctrl-C) while the Auditor works
    stack.start_worker()  # and starts again
    wait_until(lambda: len(stack.task_runs()) == 3, timeout=30, what="the resumed run")
    wait_until(
        lambda: _release(stack, task) or stack.status(task) == "in_review",
        timeout=60,
        what="the pass to end",
    )

    clis = [run["cli"] for run in stack.task_runs()]
    assert clis[:4] == ["claude", "gemini", "gemini", "codex"], "not from the Planner again"
    page = stack.client.get(
        f"/tasks/{task['id']}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="task-activity"
    )
    activity = parse(page.content.decode())
    states = [el.text for el in activity.find_all("run__state")]
    assert "Interrupted: Malamar restarted" in states
    texts = [el.text for el in activity.find_all("task-log__text")]
    assert "Resumed at Security Auditor after a restart" in texts
    assert [c["content"] for c in stack.comments(task)] == ["Planned", "Audited"]


# Runs `runworker` with the start transaction held forever at the process record: the CLI's
# process exists, and nothing has recorded it yet.
HELD_AT_THE_RECORD = """
import pathlib, sys, time
import django
django.setup()
from runner.models import QueueItemQuerySet

def held(self, item, **fields):
    pathlib.Path(sys.argv[1]).write_text(str(fields["pid"]))
    time.sleep(3600)

QueueItemQuerySet.record_process = held
from django.core.management import call_command
call_command("runworker")
"""


def _killed_holding(stack, script: str, mark: Path, description: str) -> tuple[dict, int]:
    """The stack's worker replaced by one running `script`, which writes the pid of a task's
    CLI to `mark` and holds there; then that worker is killed (-9). (task, pid)."""
    stack.worker.send_signal(signal.SIGTERM)
    stack.worker.wait(timeout=30)
    held = subprocess.Popen(
        [sys.executable, "-c", script, str(mark)],
        env=process_env(stack.data_dir, **stack.env),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ws = stack.workspace(agents=[("Planner", "claude")])
        task = stack.task(ws, description)
        wait_until(mark.exists, timeout=60, what="the worker to hold")
        return task, int(mark.read_text())
    finally:
        held.kill()
        held.wait()


@pytest.mark.live
def test_a_worker_killed_between_fork_and_record_leaves_no_cli_running(live_stack, tmp_path):
    stack = live_stack
    # killed between the fork and the record
    task, forked = _killed_holding(
        stack, HELD_AT_THE_RECORD, tmp_path / "forked", "@fake comment-once done"
    )
    wait_until(
        lambda: not alive(forked) or stack.task_runs(),
        timeout=30,
        what="the unrecorded process to end (or its CLI to start)",
    )
    assert stack.task_runs() == [], "the CLI ran although nobody had recorded it"
    assert not alive(forked)

    stack.start_worker()  # recovery: the pass runs again, once
    stack.wait_status(task, "in_review")
    assert [run["cli"] for run in stack.task_runs()] == ["claude", "claude"]
    assert [c["content"] for c in stack.comments(task)] == ["done"]


# Runs `runworker` held forever where the CLI was recorded and released but its run row not yet
# written (that write is off the path between two agents, while the CLI starts).
HELD_BEFORE_THE_RUN_ROW = """
import pathlib, sys, time
import django
django.setup()
from worker import pipeline

def held(owner, recorder):
    pathlib.Path(sys.argv[1]).write_text(str(owner.item.__class__.objects.get(id=owner.item.id).pid))
    time.sleep(3600)

pipeline._start = held
from django.core.management import call_command
call_command("runworker")
"""


@pytest.mark.live
def test_a_worker_killed_before_a_started_clis_run_row_leaves_it_to_the_recovery(
    live_stack, tmp_path
):
    """Killed after the go, before the run's row: the recorded CLI is killed by the next
    worker's recovery and the pass runs that agent again, once."""
    stack = live_stack
    description = "@fake hold 120 comment-once done"
    task, released = _killed_holding(
        stack, HELD_BEFORE_THE_RUN_ROW, tmp_path / "released", description
    )
    assert alive(released), "the CLI runs on, recorded"

    stack.start_worker()  # recovery kills it; the pass runs the Planner again
    wait_until(lambda: not alive(released), timeout=30, what="the recovery to end the CLI")
    wait_until(
        lambda: _release(stack, task) or stack.status(task) == "in_review",
        timeout=60,
        what="the pass to end",
    )
    runs = stack.sql("SELECT agent_name, status FROM agent_runs WHERE task_id = ?", task["id"])
    assert runs == [("Planner", "completed")] * 2, "the loop after the comment: no run before"
    assert [c["content"] for c in stack.comments(task)] == ["done"]


@pytest.mark.live
def test_a_broken_last_agent_runs_the_healthy_agents_once_then_waits(live_stack, tmp_path):
    """From outside: Codex CLI's binary is gone (saved while it existed). The three healthy
    agents run once; the Reviewer waits for Codex without another paid run, while the worker
    goes on with other work; fixing the binary (saving it again) resumes at the Reviewer."""
    stack = live_stack
    codex = tmp_path / "bin" / "codex"
    codex.parent.mkdir()
    codex.symlink_to(FAKES_BIN / "codex")
    settings = {"cli_settings": {"codex": {"binary_path": str(codex)}}}
    stack.api("PUT", "/settings", settings, expect=200)
    codex.unlink()
    team = [("Planner", "claude"), ("Implementer", "claude"), ("Auditor", "gemini")]
    ws = stack.workspace(agents=[*team, ("Reviewer", "codex")])
    task = stack.task(ws, "@fake skip")
    wait_until(
        lambda: (
            stack.sql("SELECT waiting_for_cli FROM task_queue WHERE status = 'queued'")
            == [("codex",)]
        ),
        timeout=60,
        what="the task to wait for Codex CLI",
    )
    # The worker keeps going: later tasks of the same workspace run past the waiting one.
    for n in range(3):
        later = stack.task(ws, "@fake skip", summary=f"Later {n}")
        wait_until(
            lambda later=later: (
                stack.sql(
                    "SELECT waiting_for_cli FROM task_queue WHERE task_id = ? "
                    "AND status = 'queued'",
                    later["id"],
                )
                == [("codex",)]
            ),
            timeout=60,
            what="a later task to wait too",
        )
    runs = stack.sql(
        "SELECT agent_name, status FROM agent_runs WHERE task_id = ? ORDER BY started_at",
        task["id"],
    )
    healthy = [("Planner", "completed"), ("Implementer", "completed"), ("Auditor", "completed")]
    assert runs[:3] == healthy, "the healthy agents ran once"
    # The Reviewer's run found Codex broken (or a health check did first: then it never ran).
    assert runs[3:] in ([("Reviewer", "failed")], []), "and no run since"
    assert stack.comments(task) == []
    assert stack.sql("SELECT failure_streak FROM tasks WHERE id = ?", task["id"]) == [(0,)]

    codex.symlink_to(FAKES_BIN / "codex")
    stack.api("PUT", "/settings", settings, expect=200)  # saved again: checked at once
    stack.wait_status(task, "in_review", timeout=60)
    runs = stack.sql(
        "SELECT agent_name, status FROM agent_runs WHERE task_id = ? ORDER BY started_at",
        task["id"],
    )
    assert runs[:3] == healthy and runs[-1] == ("Reviewer", "completed")
    assert len(runs) <= 5, "it went on at the Reviewer"
