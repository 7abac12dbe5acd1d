"""CLI health in one process (DESIGN "Health checks"): the checks against the fake CLIs, the
per-CLI requests, one CLI at a time in the background while asked checks run at once, time
limits ("slow to answer", never unavailable), only failures making a CLI unhealthy, and real
runs as proof of health."""

import os
import threading
from datetime import timedelta

import psutil
import pytest
from django.utils import timezone

from core.errors import ValidationFailed
from core.models import OutboxEvent
from core.settings_store import cli_settings_for, settings_update
from runner.clis import CliType
from runner.models import AgentRun, CliHealth, CliHealthStatus, RunStatus
from runner.selectors import cli_available, first_available_cli
from runner.services import cli_health_check_request, cli_health_store
from tests.live import wait_until
from tests.stack import FAKES_BIN, alive, command_line
from worker import health, process
from worker.execution import resolve_binary

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake_clis(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")


def health_events(cli: str) -> list[dict]:
    rows = OutboxEvent.objects.filter(type="cli.health_changed").order_by("id")
    return [row.payload for row in rows if row.payload["cli_type"] == cli]


@pytest.mark.parametrize("cli", CliType.values)
def test_the_health_prompt_stores_the_cli_answer(fake_clis, cli):
    health.check_and_store(cli, full=True)
    row = CliHealth.objects.get(cli_type=cli)
    assert (row.status, row.answer, row.error) == ("healthy", "OK", "")
    assert row.binary_path == str(FAKES_BIN / cli) and row.version


def test_a_failing_prompt_shows_the_cli_error_and_no_answer(fake_clis, monkeypatch):
    health.check_and_store("claude", full=True)
    monkeypatch.setenv("MALAMAR_FAKE_HEALTH", "fail")
    health.check_and_store("claude", full=True)
    row = CliHealth.objects.get(cli_type="claude")
    assert row.status == "unhealthy" and row.answer == ""
    assert row.error.endswith("(CLI exited with code 1)")


def test_a_binary_that_is_not_executable_is_reported_as_such(tmp_path):
    binary = tmp_path / "claude"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    settings_update(changes={"cli_settings": {"claude": {"binary_path": str(binary)}}})
    binary.chmod(0o644)  # lost its x bit after it was saved
    path, problem = resolve_binary("claude", dict(os.environ))
    assert path is None
    assert problem == f"Binary {binary} is not executable (check Settings → CLIs)"
    binary.unlink()
    assert "does not exist" in resolve_binary("claude", dict(os.environ))[1]


def test_a_binary_removed_while_it_is_checked_is_reported_as_a_run_reports_it(
    tmp_path, monkeypatch
):
    """Found when the check began, gone when its `--version` starts (the user removed it right
    after saving): the check says what a run says, not the process gate's words."""
    binary = tmp_path / "claude"
    binary.symlink_to(FAKES_BIN / "claude")
    settings_update(changes={"cli_settings": {"claude": {"binary_path": str(binary)}}})
    spawn = process.spawn

    def removed_after_the_check(command, **kwargs):
        held = spawn(command, **kwargs)
        binary.unlink()
        return held

    monkeypatch.setattr(process, "spawn", removed_after_the_check)
    result = health.check("claude", full=False)
    reason = f"Binary {binary} does not exist (check Settings → CLIs)"
    assert (result["status"], result["error"]) == ("unhealthy", reason)


# --- requests: per CLI, answered by a check that started after them -------------------------


@pytest.mark.pg
def test_a_request_is_answered_only_by_a_full_check_that_started_after_it():
    ok = {"status": "healthy", "error": "", "answer": "OK"}
    started = timezone.now()
    cli_health_check_request(cli_types=["gemini"])  # "Test", after that check had started
    assert list(
        CliHealth.objects.filter(refresh_requested_at__isnull=False).values_list(
            "cli_type", flat=True
        )
    ) == ["gemini"]
    cli_health_store(cli_type="gemini", outcome=ok, started_at=started, full=True)
    assert CliHealth.objects.get(cli_type="gemini").refresh_requested_at is not None
    # --version only:
    cli_health_store(cli_type="gemini", outcome=ok, started_at=timezone.now(), full=False)
    assert CliHealth.objects.get(cli_type="gemini").refresh_requested_at is not None
    cli_health_store(cli_type="gemini", outcome=ok, started_at=timezone.now(), full=True)
    row = CliHealth.objects.get(cli_type="gemini")
    assert row.refresh_requested_at is None and row.answer == "OK"
    assert health_events("gemini")[-1] == {"cli_type": "gemini", "status": "healthy", "error": ""}


class Recorder:
    """A checker for HealthChecks: records each check (CLI, full, thread, how many ran at
    once) and, for the CLIs in `hold`, waits until the test releases them."""

    def __init__(self, hold=()):
        self.lock = threading.Lock()
        self.running, self.peak = 0, 0
        self.done: list[tuple[str, bool]] = []
        self.threads: set[int] = set()
        self.started = {cli: threading.Event() for cli in hold}
        self.release = {cli: threading.Event() for cli in hold}
        self.stored: list[str] = []

    def __call__(self, cli, *, full, stop, current):
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.threads.add(threading.get_ident())
        if cli in self.started:
            self.started[cli].set()
            assert self.release[cli].wait(30), f"{cli} never released"
        with self.lock:
            self.running -= 1
            self.done.append((cli, full))
            if current():  # what check_and_store would store
                self.stored.append(cli)
        return "healthy"


@pytest.mark.pg
def test_a_per_cli_request_checks_only_that_cli():
    checker = Recorder()
    checks = health.HealthChecks(checker=checker)
    checks.request(full_for={"codex"}, clis={"codex"})
    assert checks.join(timeout=10)
    assert checker.done == [("codex", True)]


# --- one CLI at a time; asked checks at once; newest wins -------------------------------------


def test_start_up_checks_run_one_cli_after_another_in_order():
    """Four model calls at once on a busy machine made healthy CLIs time out: the start-up
    round checks the four CLIs one at a time, on one thread, in the table's order."""
    checker = Recorder()
    checks = health.HealthChecks(checker=checker)
    checks.request(full_for=set(CliType.values))
    assert checks.join(timeout=10)
    assert checker.done == [(cli, True) for cli in CliType.values]
    assert checker.peak == 1 and len(checker.threads) == 1


def test_a_check_someone_asked_for_runs_at_once_beside_a_slow_background_check():
    """Saving a custom agent's (or a CLI's) settings checks it now, not after the background
    round (custom agents' checks used to wait 23-71 s behind the four CLIs')."""
    checker = Recorder(hold=("claude",))
    checks = health.HealthChecks(checker=checker)
    checks.request(full_for=set(CliType.values))  # start-up: claude's check takes its time
    assert checker.started["claude"].wait(10)
    checks.request(full_for={"custom:A1"}, clis={"custom:A1"})  # the agent was saved
    wait_until(lambda: ("custom:A1", True) in checker.done, timeout=10, what="the asked check")
    assert ("claude", True) not in checker.done  # still in its check, not in the way
    checker.release["claude"].set()
    assert checks.join(timeout=10)
    assert [cli for cli, _ in checker.done][-3:] == ["gemini", "codex", "opencode"]


@pytest.mark.pg
def test_an_older_check_never_overwrites_a_newer_ones_result():
    """A CLI whose settings were saved while its background check ran: the check made with the
    new settings is the one kept, whichever ends last."""
    checker = Recorder(hold=("codex",))
    checks = health.HealthChecks(checker=checker)
    checks.request(full_for=set(CliType.values))  # background: codex with its old settings
    assert checker.started["codex"].wait(10)
    del checker.started["codex"]  # the asked check does not wait: only the first one does
    checks.request(full_for={"codex"}, clis={"codex"})
    wait_until(lambda: "codex" in checker.stored, timeout=10, what="the asked check stored")
    checker.release["codex"].set()
    assert checks.join(timeout=10)
    assert [cli for cli, _ in checker.done].count("codex") == 2
    assert checker.stored.count("codex") == 1  # the older one, ending last, stored nothing


def test_a_cli_asked_for_leaves_the_background_lane():
    checker = Recorder(hold=("claude",))
    checks = health.HealthChecks(checker=checker)
    checks.request(full_for=set(CliType.values))
    assert checker.started["claude"].wait(10)
    checks.request(full_for={"opencode"}, clis={"opencode"})
    wait_until(lambda: ("opencode", True) in checker.done, timeout=10, what="asked check")
    checker.release["claude"].set()
    assert checks.join(timeout=10)
    assert [cli for cli, _ in checker.done].count("opencode") == 1


# --- a check measures whether the CLI can answer, not how busy the machine is ---------------


def test_the_time_limit_counts_from_the_first_output():
    """A process that prints counts its time limit from its first output; one silent for the
    whole limit times out all the same."""
    deadline = process.deadline
    assert deadline(100.0, [], 90, from_output=True) == 190
    assert deadline(100.0, [150.0], 90, from_output=True) == 240  # start-up took 50 s
    assert deadline(100.0, [150.0], 90, from_output=False) == 190
    assert deadline(100.0, [150.0], None, from_output=True) is None


def test_each_cli_has_its_own_time_limit_default_90_s():
    assert health.time_limit(cli_settings_for("gemini")) == 90
    settings_update(changes={"cli_settings": {"opencode": {"health_timeout_seconds": 240}}})
    assert health.time_limit(cli_settings_for("opencode")) == 240
    with pytest.raises(ValidationFailed, match="from 5 to 3600"):
        settings_update(changes={"cli_settings": {"claude": {"health_timeout_seconds": 1}}})


@pytest.fixture
def short_limits(monkeypatch):
    """Time limits of half a second instead of 90 (nothing waits real minutes)."""
    monkeypatch.setattr(health, "time_limit", lambda conf: 0.5)


@pytest.mark.parametrize("before", [s.value for s in CliHealthStatus])
def test_a_check_that_times_out_is_slow_and_blocks_nothing(
    fake_clis, short_limits, monkeypatch, before
):
    monkeypatch.setenv("MALAMAR_FAKE_HEALTH", "hang")
    CliHealth.objects.create(cli_type="opencode", status=before)
    health.check_and_store("opencode", full=True)
    row = CliHealth.objects.get(cli_type="opencode")
    assert row.status == CliHealthStatus.SLOW and row.error.startswith("Slow to answer")
    assert "within 0.5 s" in row.error
    assert cli_available("opencode")
    assert "opencode" in health.needs_full_check()  # the next round asks it again


@pytest.mark.django_db(transaction=True)
@pytest.mark.pg
def test_start_up_checks_on_a_loaded_machine_mark_no_working_cli_unavailable(
    fake_clis, short_limits, monkeypatch, task_recorder
):
    """The four CLIs too slow to answer within their limits at start-up (a machine loaded by
    four agents: Gemini took ~17 s, OpenCode ~63 s): none becomes unavailable, chats keep a
    CLI, and one that completed a real run within the hour stays healthy."""
    recorder = task_recorder()
    recorder.finish(status=RunStatus.COMPLETED, exit_code=0)  # claude worked 0 s ago
    monkeypatch.setenv("MALAMAR_FAKE_HEALTH", "hang")
    checks = health.HealthChecks()
    checks.request(full_for=set(CliType.values))
    assert checks.join(timeout=60)
    rows = {row.cli_type: row.status for row in CliHealth.objects.all()}
    assert rows == {
        "claude": CliHealthStatus.HEALTHY,
        "gemini": CliHealthStatus.SLOW,
        "codex": CliHealthStatus.SLOW,
        "opencode": CliHealthStatus.SLOW,
    }
    assert all(cli_available(cli) for cli in CliType.values)
    assert first_available_cli() == "claude"


def test_a_run_older_than_an_hour_proves_nothing(fake_clis, short_limits, monkeypatch, task):
    AgentRun.objects.create(
        id="R" * 21,
        workspace_id=task.workspace_id,
        task=task,
        agent_name="Planner",
        cli_type="gemini",
        status=RunStatus.COMPLETED,
        started_at=timezone.now() - timedelta(hours=2),
        ended_at=timezone.now() - timedelta(minutes=61),
    )
    monkeypatch.setenv("MALAMAR_FAKE_HEALTH", "hang")
    health.check_and_store("gemini", full=True)
    assert CliHealth.objects.get(cli_type="gemini").status == CliHealthStatus.SLOW


# --- only a check that failed makes a CLI unavailable ----------------------------------------


def test_a_binary_that_is_another_program_is_unhealthy():
    """A binary path set to another program (it answered `--version` with exit 0 and passed
    until a run failed): recorded, GNU echo prints "echo (GNU coreutils) 9.1"."""
    settings_update(changes={"cli_settings": {"codex": {"binary_path": "/bin/echo"}}})
    health.check_and_store("codex", full=True)
    row = CliHealth.objects.get(cli_type="codex")
    assert row.status == CliHealthStatus.UNHEALTHY and not cli_available("codex")
    assert row.error.startswith("Not Codex CLI: `--version` printed 'echo (GNU coreutils)")


def test_a_logged_out_cli_is_unhealthy_with_the_reason(fake_clis, monkeypatch):
    monkeypatch.setenv("MALAMAR_FAKE_HEALTH", "fail")
    health.check_and_store("claude", full=True)
    row = CliHealth.objects.get(cli_type="claude")
    assert row.status == CliHealthStatus.UNHEALTHY
    assert row.error == (
        "Logged out, or its login was refused: Invalid API key · Fix external API key "
        "(CLI exited with code 1)"
    )


# --- a CLI that just answered a real run is healthy -----------------------------------------


@pytest.mark.pg
def test_a_successful_run_clears_an_unhealthy_mark(task_recorder):
    CliHealth.objects.create(cli_type="claude", status="unhealthy", error="timed out")

    def run(status):
        recorder = task_recorder()
        recorder.finish(status=status, exit_code=0 if status == RunStatus.COMPLETED else 1)

    run(RunStatus.FAILED)
    assert not cli_available("claude")
    run(RunStatus.COMPLETED)
    row = CliHealth.objects.get(cli_type="claude")
    assert (row.status, row.error) == ("healthy", "")
    assert cli_available("claude")
    assert health_events("claude") == [{"cli_type": "claude", "status": "healthy", "error": ""}]
    run(RunStatus.COMPLETED)  # already healthy: nothing written, no event
    assert len(health_events("claude")) == 1


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_stopping_the_checks_kills_a_hanging_check_and_stores_nothing(monkeypatch):
    """At shutdown a check's CLI is killed (never left running after the worker exits) and its
    cut-short outcome is not stored as the CLI's health."""
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MALAMAR_FAKE_HEALTH", "hang")
    checks = health.HealthChecks()
    checks.request(full_for={"codex"}, clis={"codex"})

    def hanging_clis():
        # (the `--version` check's process may be a zombie by then: command_line says "")
        children = psutil.Process().children(recursive=True)
        return [p for p in children if "codex" in command_line(p)]

    wait_until(hanging_clis, timeout=10, what="the health prompt to start")
    survivors = hanging_clis()
    checks.stop(timeout=5)
    assert checks.join(timeout=0)
    wait_until(lambda: not [p for p in survivors if alive(p.pid)], timeout=30, what="CLI killed")
    assert not CliHealth.objects.filter(cli_type="codex", checked_at__isnull=False).exists()


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_stopped_worker_leaves_the_next_workers_checks_running(fake_clis):
    """The stop belongs to one worker's checks: a worker started later in the same process
    (the in-process tests, a restart) checks and stores as usual."""
    stopped = health.HealthChecks()
    stopped.stop(timeout=1)
    checks = health.HealthChecks()
    checks.request(full_for={"codex"}, clis={"codex"})
    assert checks.join(timeout=30)
    row = CliHealth.objects.get(cli_type="codex")
    assert (row.status, row.answer) == (CliHealthStatus.HEALTHY, "OK")
