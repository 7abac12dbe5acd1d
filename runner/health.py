"""CLI health: is the binary there, and does a minimal prompt answer?

`--version` is cheap and runs every 5 minutes; the real prompt (a model call) runs at worker
start, on the user's "Refresh", and after a failure. Results are stored for the server.
"""

import logging
import threading

from django.db import transaction
from django.utils import timezone

from agents.models import CliType
from core import events
from runner import process
from runner.adapters import adapter_for
from runner.adapters.base import Command, stderr_message
from runner.execution import cli_env, resolve_binary
from runner.files import private_dir, temp_dir
from runner.models import CliHealth, CliHealthStatus

log = logging.getLogger(__name__)
PROMPT_TIMEOUT = 30
VERSION_TIMEOUT = 10


def _run(command: Command, env: dict, timeout: float) -> process.ProcessResult:
    cwd = private_dir(temp_dir() / "malamar_health")
    return process.run(command, cwd=str(cwd), env=env, timeout=timeout)


def _failure(cli: str, result: process.ProcessResult) -> str:
    if result.start_error:
        return f"CLI could not be started: {result.start_error}"
    if result.timed_out:
        return "CLI health check timed out"
    noise = getattr(adapter_for(cli), "STDERR_NOISE", ())
    detail = stderr_message(result.stderr, noise)[-500:]
    explain = adapter_for(cli).explain(result.stderr)
    return f"CLI exited with code {result.exit_code}" + (f": {detail}" if detail else "") + explain


def check(cli: str, *, full: bool) -> dict:
    """Check one CLI. `full` also sends the minimal prompt."""
    env = cli_env(cli)
    binary, problem = resolve_binary(cli, env)
    if binary is None:
        return {"status": CliHealthStatus.UNHEALTHY, "error": problem, "binary_path": ""}
    found = {"binary_path": binary}
    version = _run(Command([binary, "--version"]), env, VERSION_TIMEOUT)
    if version.exit_code != 0:
        return {**found, "status": CliHealthStatus.UNHEALTHY, "error": _failure(cli, version)}
    found["version"] = (version.stdout.strip().splitlines() or [""])[0][:200]
    if not full:
        return {**found, "status": CliHealthStatus.HEALTHY, "error": ""}
    answer = _run(adapter_for(cli).health_command(binary), env, PROMPT_TIMEOUT)
    if answer.exit_code != 0 or answer.timed_out or answer.start_error:
        return {**found, "status": CliHealthStatus.UNHEALTHY, "error": _failure(cli, answer)}
    if not answer.stdout.strip():
        return {
            **found,
            "status": CliHealthStatus.UNHEALTHY,
            "error": "CLI returned empty response",
        }
    return {**found, "status": CliHealthStatus.HEALTHY, "error": ""}


def store(cli: str, outcome: dict, *, clear_refresh: bool) -> None:
    with transaction.atomic():
        row, _ = CliHealth.objects.select_for_update().get_or_create(cli_type=cli)
        changed = row.status != outcome["status"] or row.error != outcome.get("error", "")
        row.status = outcome["status"]
        row.error = outcome.get("error", "")
        row.binary_path = outcome.get("binary_path", "")
        row.version = outcome.get("version", row.version if row.binary_path else "")
        row.checked_at = timezone.now()
        if clear_refresh:
            row.refresh_requested_at = None
        row.save()
        if changed or clear_refresh:
            events.publish(
                "cli.health_changed",
                {"cli_type": cli, "status": row.status, "error": row.error},
            )


def check_and_store(cli: str, *, full: bool, clear_refresh: bool = False) -> None:
    try:
        outcome = check(cli, full=full)
    except Exception as exc:  # a health check must never take the worker down
        log.exception("CLI health check failed", extra={"cli": cli})
        outcome = {"status": CliHealthStatus.UNHEALTHY, "error": f"Health check error: {exc}"}
    store(cli, outcome, clear_refresh=clear_refresh)


class HealthChecks:
    """Runs check rounds in the background, one round at a time.

    A request while a round runs is remembered and runs right after it, so an older, slower
    result can never overwrite a newer one."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = False
        self.pending: tuple[set[str], bool] | None = None

    def request(self, *, full_for: set[str], refresh: bool = False) -> None:
        with self.lock:
            if self.running:
                full, was_refresh = self.pending or (set(), False)
                self.pending = (full | full_for, was_refresh or refresh)
                return
            self.running = True
        threading.Thread(
            target=self._rounds, args=(full_for, refresh), name="malamar-health", daemon=True
        ).start()

    def _rounds(self, full_for: set[str], refresh: bool) -> None:
        while True:
            run_round(full_for=full_for, refresh=refresh)
            with self.lock:
                if self.pending is None:
                    self.running = False
                    return
                (full_for, refresh), self.pending = self.pending, None


def run_round(*, full_for: set[str], refresh: bool = False) -> None:
    """Check every CLI in parallel and wait for all of them."""
    threads = [
        threading.Thread(
            target=_checked_in_thread,
            args=(cli, cli in full_for, refresh),
            name=f"malamar-health-{cli}",
            daemon=True,
        )
        for cli in CliType.values
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _checked_in_thread(cli: str, full: bool, refresh: bool) -> None:
    from django.db import connection

    try:
        check_and_store(cli, full=full, clear_refresh=refresh)
    finally:
        connection.close()


def needs_full_check() -> set[str]:
    """CLIs whose last check failed (or never ran) get the real prompt again."""
    healthy = set(
        CliHealth.objects.filter(status=CliHealthStatus.HEALTHY).values_list("cli_type", flat=True)
    )
    return set(CliType.values) - healthy
