"""CLI health in one process: the checks against the fake CLIs, the per-CLI requests, the
rounds' concurrency, timeouts (retry, "slow"), and real runs clearing an "unhealthy" mark."""

import os
import threading
import time

import psutil
import pytest
from django.utils import timezone

from agents.models import CliType
from core.models import OutboxEvent
from core.settings_store import settings_update
from runner.models import CliHealth, CliHealthStatus, RunStatus
from runner.selectors import cli_available
from runner.services import cli_health_check_request, cli_health_store
from runner.worker import health
from runner.worker.execution import resolve_binary
from tests.live import wait_until
from tests.stack import FAKES_BIN, alive

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
    assert row.error.startswith("CLI exited with code 1")


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


@pytest.mark.pg
def test_a_per_cli_request_checks_only_that_cli(monkeypatch):
    done = threading.Event()
    rounds = []

    def fake_round(jobs, *, stop):
        rounds.append(jobs)
        done.set()

    monkeypatch.setattr(health, "run_round", fake_round)
    health.HealthChecks().request(full_for={"codex"}, clis={"codex"})
    assert done.wait(5)
    assert rounds == [{"codex": True}]


# --- contention: two at a time, timeouts retried, "slow" rather than unavailable --------------


@pytest.mark.pg
def test_a_round_runs_at_most_two_checks_at_a_time(monkeypatch):
    lock = threading.Lock()
    state = {"running": 0, "peak": 0, "done": []}

    def fake_check(cli, full, stop):
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
        time.sleep(0.2)  # a check takes a while: the others must wait for a free slot
        with lock:
            state["running"] -= 1
            state["done"].append((cli, full))

    monkeypatch.setattr(health, "_checked_in_thread", fake_check)
    health.run_round({cli: True for cli in CliType.values})
    assert state["peak"] == health.CONCURRENCY == 2
    assert sorted(state["done"]) == sorted((cli, True) for cli in CliType.values)


def hang_once(tmp_path, cli: str):
    """A wrapper around the fake CLI whose first health prompt hangs; later ones answer."""
    marker = tmp_path / "hung-once"
    script = tmp_path / cli
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --version) exec "{FAKES_BIN / cli}" "$@";; esac\n'
        f'if [ -e "{marker}" ]; then exec "{FAKES_BIN / cli}" "$@"; fi\n'
        f'touch "{marker}"\n'
        f'MALAMAR_FAKE_HEALTH=hang exec "{FAKES_BIN / cli}" "$@"\n'
    )
    script.chmod(0o755)
    settings_update(changes={"cli_settings": {cli: {"binary_path": str(script)}}})


def test_a_prompt_that_times_out_is_retried_once(tmp_path, monkeypatch):
    monkeypatch.setattr(health, "PROMPT_TIMEOUT", 1.5)
    hang_once(tmp_path, "codex")
    outcome = health.check("codex", full=True)
    assert (outcome["status"], outcome["answer"]) == ("healthy", "OK")


@pytest.mark.pg
@pytest.mark.parametrize(
    ("before", "status", "available"),
    [
        (CliHealthStatus.HEALTHY, CliHealthStatus.SLOW, True),
        (CliHealthStatus.SLOW, CliHealthStatus.UNHEALTHY, False),  # slow again: unavailable
        (CliHealthStatus.NOT_CHECKED, CliHealthStatus.UNHEALTHY, False),
    ],
)
def test_two_timeouts_make_a_healthy_cli_slow_not_unavailable(
    fake_clis, monkeypatch, before, status, available
):
    monkeypatch.setattr(health, "PROMPT_TIMEOUT", 0.5)
    monkeypatch.setenv("MALAMAR_FAKE_HEALTH", "hang")
    CliHealth.objects.create(cli_type="opencode", status=before)
    health.check_and_store("opencode", full=True)
    row = CliHealth.objects.get(cli_type="opencode")
    assert row.status == status and "within 0.5 s, twice" in row.error
    assert cli_available("opencode") is available
    assert ("opencode" in health.needs_full_check()) is True  # the next round asks it again


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
        me = psutil.Process()
        return [p for p in me.children(recursive=True) if "codex" in " ".join(p.cmdline())]

    wait_until(hanging_clis, timeout=10, what="the health prompt to start")
    survivors = hanging_clis()
    checks.stop(timeout=5)
    assert not checks.thread.is_alive()
    wait_until(lambda: not [p for p in survivors if alive(p.pid)], timeout=5, what="CLI killed")
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
    checks.thread.join(timeout=30)
    row = CliHealth.objects.get(cli_type="codex")
    assert (row.status, row.answer) == (CliHealthStatus.HEALTHY, "OK")
