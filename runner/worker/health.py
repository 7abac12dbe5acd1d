"""CLI health: is the binary there, and does a minimal prompt answer?

`--version` is cheap and runs every 5 minutes; the real prompt (a model call) runs at worker
start, on the user's "Refresh" or "Test", after the CLI's settings are saved, and after a
failure. Results are stored for the server.

Our own load must not look like a broken CLI: a round runs at most CONCURRENCY CLIs at a time
(four model calls at once on a busy machine used to time out healthy CLIs), each prompt's time
limit counts from that CLI's own start, and a prompt that times out is retried once. If the
retry times out too, a CLI that was healthy is reported "slow to answer" (still available; the
next round re-checks it with the real prompt), and only a CLI that was not healthy, or is slow
again in the next round, becomes unhealthy.
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from django.db import connection
from django.utils import timezone

from agents.models import CUSTOM_CLI, Agent, CliType
from core.settings_store import cli_settings_for
from runner.clis import cli_for
from runner.clis.base import HEALTH_PROMPT, Cli, Command
from runner.files import private_dir, temp_dir, write_private
from runner.limits import Limit
from runner.models import CliHealth, CliHealthStatus
from runner.selectors import cli_limited
from runner.services import cli_health_forget, cli_health_store, cli_limit_lift, cli_limit_set
from runner.worker import process
from runner.worker.execution import (
    cli_env,
    exit_message,
    options_for,
    process_env,
    resolve_binary,
    resolve_custom,
)

log = logging.getLogger(__name__)
PROMPT_TIMEOUT = 30
VERSION_TIMEOUT = 10
CONCURRENCY = 2  # CLIs checked at the same time
ANSWER_CHARS = 500


def _run(
    command: Command, env: dict, timeout: float, stop: threading.Event | None
) -> process.ProcessResult:
    cwd = private_dir(temp_dir() / "malamar_health")
    env = process_env(env, cwd=cwd)
    return process.run(command, cwd=str(cwd), env=env, timeout=timeout, stop=stop)


def _failure(cli: str, result: process.ProcessResult) -> str:
    if result.start_error:
        return f"CLI could not be started: {result.start_error}"
    return exit_message(cli_for(cli), result)


def _usage_limit(cli: Cli, result: process.ProcessResult) -> Limit | None:
    """The health prompt's answer ended on the CLI's usage limit (DESIGN "Usage limits")."""
    failed = result.exit_code != 0 or cli.read_stdout(result.stdout).error
    if result.start_error or not failed:
        return None
    return cli.usage_limit(stdout=result.stdout, stderr=result.stderr, now=timezone.now())


def _patient_run(
    cli: str, command: Command, env: dict, timeout: float, stop: threading.Event | None
) -> process.ProcessResult:
    """Run a check command; once more if it times out. The limit counts from the CLI's own
    start, so waiting for a free slot in the round never counts against it."""
    result = _run(command, env, timeout, stop)
    if result.timed_out and not (stop and stop.is_set()):
        log.info("CLI health check timed out; retrying once", extra={"cli": cli})
        result = _run(command, env, timeout, stop)
    return result


def _timed_out(found: dict, *, was_healthy: bool, timeout: float) -> dict:
    if was_healthy:
        error = (
            f"Slow to answer: no answer to the health check within {timeout:g} s, twice (a "
            "busy machine?). Malamar keeps using it and checks again in 5 minutes."
        )
        return {**found, "status": CliHealthStatus.SLOW, "error": error}
    error = f"CLI health check timed out (no answer within {timeout:g} s, twice)"
    return {**found, "status": CliHealthStatus.UNHEALTHY, "error": error}


def _custom_agent(key: str) -> Agent | None:
    return Agent.objects.filter(id=key.removeprefix(f"{CUSTOM_CLI}:"), cli_type=CUSTOM_CLI).first()


def check_custom(
    key: str, *, was_healthy: bool = False, stop: threading.Event | None = None
) -> dict | None:
    """A custom-command agent's check: its template with the health prompt must exit 0 and
    print something (it has no --version to ask). None when the agent is gone or changed."""
    agent = _custom_agent(key)
    if agent is None:
        return None
    options = options_for(agent)
    binary, env, problem = resolve_custom(options.custom)
    if binary is None:
        return {"status": CliHealthStatus.UNHEALTHY, "error": problem, "binary_path": ""}
    found = {"binary_path": binary, "answer": "", "version": ""}
    cli = cli_for(CUSTOM_CLI).configured(options)
    folder = private_dir(temp_dir() / "malamar_health")
    input_path = write_private(folder / "malamar_health_input.md", HEALTH_PROMPT + "\n")
    command = cli.health_command_in(binary, input_path)
    answer = _patient_run(key, command, env, PROMPT_TIMEOUT, stop)
    return _prompt_outcome(CUSTOM_CLI, cli, found, answer, was_healthy)


def check(
    cli: str, *, full: bool, was_healthy: bool = False, stop: threading.Event | None = None
) -> dict | None:
    """Check one CLI. `full` also sends the minimal prompt; `was_healthy` (its last stored
    status) decides whether two timeouts make it "slow" or "unhealthy"; setting `stop` kills
    the check's CLI. A custom-command agent's key (`custom:<agent id>`) checks its command."""
    if cli.startswith(f"{CUSTOM_CLI}:"):
        return check_custom(cli, was_healthy=was_healthy, stop=stop)
    conf = cli_settings_for(cli)
    env = cli_env(cli, conf)
    binary, problem = resolve_binary(cli, env, conf)
    if binary is None:
        return {"status": CliHealthStatus.UNHEALTHY, "error": problem, "binary_path": ""}
    found = {"binary_path": binary, **({"answer": ""} if full else {})}
    version = _patient_run(cli, Command([binary, "--version"]), env, VERSION_TIMEOUT, stop)
    if version.timed_out:
        return _timed_out(found, was_healthy=was_healthy, timeout=VERSION_TIMEOUT)
    if version.exit_code != 0:
        return {**found, "status": CliHealthStatus.UNHEALTHY, "error": _failure(cli, version)}
    found["version"] = (version.stdout.strip().splitlines() or [""])[0][:200]
    if not full:
        return {**found, "status": CliHealthStatus.HEALTHY, "error": ""}
    prompt = cli_for(cli).health_command(binary)
    answer = _patient_run(cli, prompt, env, PROMPT_TIMEOUT, stop)
    return _prompt_outcome(cli, cli_for(cli), found, answer, was_healthy)


def _prompt_outcome(
    cli_type: str, cli: Cli, found: dict, answer: process.ProcessResult, was_healthy: bool
) -> dict:
    """What the answer to the health prompt says about the CLI."""
    if answer.timed_out:
        return _timed_out(found, was_healthy=was_healthy, timeout=PROMPT_TIMEOUT)
    limit = _usage_limit(cli, answer)
    if limit is not None:  # installed and logged in, only out of quota: not "unhealthy"
        return {**found, "status": CliHealthStatus.HEALTHY, "error": "", "limit": limit}
    if answer.exit_code != 0 or answer.start_error:
        return {**found, "status": CliHealthStatus.UNHEALTHY, "error": _failure(cli_type, answer)}
    reported = None if cli_type == CUSTOM_CLI else cli.read_stdout(answer.stdout).error
    if reported:
        error = f"CLI reported an error: {reported[-500:]}"
        return {**found, "status": CliHealthStatus.UNHEALTHY, "error": error}
    text = cli.health_answer(answer.stdout)
    if not text:
        return {
            **found,
            "status": CliHealthStatus.UNHEALTHY,
            "error": "CLI returned empty response",
        }
    return {**found, "status": CliHealthStatus.HEALTHY, "error": "", "answer": text[:ANSWER_CHARS]}


def check_and_store(cli: str, *, full: bool, stop: threading.Event | None = None) -> str | None:
    """Check one CLI and save the outcome, unless `stop` (the worker's shutdown) cut it short."""
    started_at = timezone.now()
    was_healthy = CliHealth.objects.filter(cli_type=cli, status=CliHealthStatus.HEALTHY).exists()
    try:
        outcome = check(cli, full=full, was_healthy=was_healthy, stop=stop)
    except Exception as exc:  # a health check must never take the worker down
        log.exception("CLI health check failed", extra={"cli": cli})
        outcome = {"status": CliHealthStatus.UNHEALTHY, "error": f"Health check error: {exc}"}
    if stop is not None and stop.is_set():  # its CLI was killed: no result to keep
        return None
    if outcome is None:  # a custom-command agent deleted or switched to another CLI meanwhile
        cli_health_forget(cli_type=cli)
        return None
    limit = outcome.pop("limit", None)
    cli_health_store(cli_type=cli, outcome=outcome, started_at=started_at, full=full)
    if limit is not None:
        cli_limit_set(cli_type=cli, limit=limit)
    elif full and outcome["status"] == CliHealthStatus.HEALTHY:
        # The prompt answered: its quota is back (a probe, too), unless a run hit the limit
        # while this check ran.
        cli_limit_lift(cli_type=cli, answered_since=started_at)
    return outcome["status"]


class HealthChecks:
    """Runs check rounds in the background, one round at a time.

    A request while a round runs is remembered (per CLI: the real prompt wins over --version)
    and runs right after it, so an older, slower result can never overwrite a newer one.
    `stop()` (the worker's shutdown) kills the CLIs being checked, never left running after we
    exit, and ends the rounds for good."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = False
        self.pending: dict[str, bool] = {}  # CLI → full check
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        # CLI → the status this worker's own last check found (the database's row is shared
        # by every worker; this is what the worker advertises, DESIGN "Scale-out").
        self.results: dict[str, str] = {}

    def request(self, *, full_for: set[str], clis=None) -> None:
        """Check `clis` (default: every CLI), with the real prompt for those in `full_for`."""
        wanted = set(CliType.values if clis is None else clis) | set(full_for)
        with self.lock:
            for cli in wanted:
                self.pending[cli] = self.pending.get(cli, False) or cli in full_for
            if self.running:
                return
            self.running = True
        self.thread = threading.Thread(target=self._rounds, name="malamar-health", daemon=True)
        self.thread.start()

    def stop(self, timeout: float) -> None:
        """Kill the CLIs being checked and wait (up to `timeout`) for the round to end."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout)

    def _rounds(self) -> None:
        while True:
            with self.lock:
                if not self.pending or self.stopping.is_set():
                    self.running = False
                    return
                jobs, self.pending = self.pending, {}
            try:
                self.results.update(run_round(jobs, stop=self.stopping) or {})
            except Exception:  # never leave `running` set with nobody running
                log.exception("CLI health round failed")


def run_round(jobs: dict[str, bool], *, stop: threading.Event | None = None) -> dict[str, str]:
    """Check the CLIs of `jobs` (CLI → full), CONCURRENCY at a time, and wait for all; returns
    CLI → the status found (for the CLIs a check answered)."""
    # The four CLIs first (preference of the table), then custom-command agents' own checks.
    order = [cli for cli in CliType.values if cli in jobs]
    order += sorted(cli for cli in jobs if cli not in order)
    with ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="malamar-health") as pool:
        found = list(pool.map(lambda cli: _checked_in_thread(cli, jobs[cli], stop), order))
    return {cli: status for cli, status in zip(order, found, strict=True) if status}


def _checked_in_thread(cli: str, full: bool, stop: threading.Event | None) -> str | None:
    try:
        return check_and_store(cli, full=full, stop=stop)
    finally:
        connection.close()


def custom_keys() -> set[str]:
    """The health rows of custom-command agents (each checks its own command)."""
    custom = CliHealth.objects.filter(cli_type__startswith=f"{CUSTOM_CLI}:")
    return set(custom.values_list("cli_type", flat=True))


def needs_full_check() -> set[str]:
    """CLIs whose last check failed (or never ran) get the real prompt again; never a CLI out
    of quota (its probes run on their own back-off, runner.worker.limits)."""
    healthy = set(
        CliHealth.objects.filter(status=CliHealthStatus.HEALTHY).values_list("cli_type", flat=True)
    )
    return (set(CliType.values) | custom_keys()) - healthy - cli_limited()
