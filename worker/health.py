"""CLI health: is the binary there and that CLI, and does a minimal prompt answer?

DESIGN "Health checks". `--version` is cheap and runs every 5 minutes; the real prompt (a model
call) runs at worker start, on the user's "Refresh" or "Test", after the CLI's settings are
saved, and after a failure. Results are stored for the server. `malamar doctor` runs the same
`check()` (worker/management/commands/doctor.py), so both say the same thing.

A check measures whether the CLI can answer, not how busy the machine is:
- each CLI has a generous time limit (Settings → CLIs, default 90 s), counted from the CLI's
  first output (its start-up on a loaded machine does not count; one silent for the whole limit
  times out);
- the background checks (start-up, every 5 minutes) run one CLI at a time: four model calls at
  once on a busy machine made healthy CLIs look dead;
- a check that merely timed out says "slow to answer" and blocks nothing; a CLI that completed a
  real run in the last hour stays healthy (the run is the better proof, and it outlives a
  restart: runs are stored);
- only a check that failed makes a CLI unhealthy: not found, not executable, not that CLI, logged
  out or its login refused, an error answer.
Checks someone asked for (Refresh, Test, saved settings) run at once, beside the background
round, never queued behind it; a newer check's result is never overwritten by an older one's.
"""

import itertools
import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from django.db import DatabaseError, connection
from django.utils import timezone

from agents.models import Agent
from core.settings_store import HEALTH_TIMEOUT_DEFAULT, cli_settings_for
from notifications.cli_states import cli_limit_lift, cli_limit_set
from runner.clis import CUSTOM_CLI, CliType, cli_for
from runner.clis.base import HEALTH_PROMPT, Cli, Command
from runner.files import private_dir, temp_dir, write_private
from runner.limits import Limit
from runner.models import CliHealth, CliHealthStatus
from runner.plans import options_for
from runner.selectors import cli_completed_a_run_since, cli_limited
from runner.services import cli_health_forget, cli_health_store
from worker import process
from worker.execution import (
    cli_env,
    exit_message,
    process_env,
    resolve_binary,
    resolve_custom,
)

log = logging.getLogger(__name__)
ANSWER_CHARS = 500
# A CLI that completed a real run this recently is healthy whatever a slow check says.
RUN_PROVES_HEALTH = timedelta(hours=1)


def _run(
    command: Command,
    env: dict,
    timeout: float,
    stop: threading.Event | None,
    *,
    from_output: bool = False,
) -> process.ProcessResult:
    cwd = private_dir(temp_dir() / "malamar_health")
    env = process_env(env, cwd=cwd)
    return process.run(
        command,
        cwd=str(cwd),
        env=env,
        timeout=timeout,
        stop=stop,
        timeout_from_output=from_output,
    )


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


def time_limit(conf: dict | None) -> float:
    """A CLI's health check time limit (seconds): its setting, else the default."""
    return float((conf or {}).get("health_timeout_seconds") or HEALTH_TIMEOUT_DEFAULT)


def _slow(key: str, found: dict, what: str, timeout: float) -> dict:
    """A check that timed out: "slow to answer", available; healthy still when a real run of
    the CLI completed within the last hour."""
    if _proved_by_a_run(key):
        found = {name: value for name, value in found.items() if name != "answer"}
        return {**found, "status": CliHealthStatus.HEALTHY, "error": ""}
    error = (
        f"Slow to answer: {what} did not answer within {timeout:g} s (a busy machine?). "
        "Malamar keeps using it and checks again in 5 minutes."
    )
    return {**found, "status": CliHealthStatus.SLOW, "error": error}


def _proved_by_a_run(key: str) -> bool:
    try:
        return cli_completed_a_run_since(key, timezone.now() - RUN_PROVES_HEALTH)
    except DatabaseError:  # `malamar doctor` without a database: no runs to prove anything
        return False


def _unhealthy(found: dict, error: str) -> dict:
    return {**found, "status": CliHealthStatus.UNHEALTHY, "error": error}


def _custom_agent(key: str) -> Agent | None:
    return Agent.objects.filter(id=key.removeprefix(f"{CUSTOM_CLI}:"), cli_type=CUSTOM_CLI).first()


def check_custom(key: str, *, stop: threading.Event | None = None) -> dict | None:
    """A custom-command agent's check: its template with the health prompt must exit 0 and
    print something (it has no --version to ask). None when the agent is gone or changed."""
    agent = _custom_agent(key)
    if agent is None:
        return None
    options = options_for(agent)
    binary, env, problem = resolve_custom(options.custom)
    if binary is None:
        return _unhealthy({"binary_path": ""}, problem)
    found = {"binary_path": binary, "answer": "", "version": ""}
    cli = cli_for(CUSTOM_CLI).configured(options)
    folder = private_dir(temp_dir() / "malamar_health")
    input_path = write_private(folder / "malamar_health_input.md", HEALTH_PROMPT + "\n")
    command = cli.health_command_in(binary, input_path)
    answer = _run(command, env, HEALTH_TIMEOUT_DEFAULT, stop)  # no known stream: from its start
    return _prompt_outcome(key, cli, found, answer, HEALTH_TIMEOUT_DEFAULT)


def check(
    cli: str,
    *,
    full: bool,
    stop: threading.Event | None = None,
    conf: dict | None = None,
    timeout: float | None = None,
) -> dict | None:
    """Check one CLI: its binary, `--version` (it must print this CLI's version), and with
    `full` the minimal prompt. `conf`: its settings when the caller read them (doctor without a
    database); `timeout` overrides its time limit; setting `stop` kills the check's CLI. A
    custom-command agent's key (`custom:<agent id>`) checks its command."""
    if cli.startswith(f"{CUSTOM_CLI}:"):
        return check_custom(cli, stop=stop)
    conf = conf if conf is not None else cli_settings_for(cli)
    limit = timeout or time_limit(conf)
    env = cli_env(cli, conf)
    binary, problem = resolve_binary(cli, env, conf)
    if binary is None:
        return _unhealthy({"binary_path": ""}, problem)
    found = {"binary_path": binary, **({"answer": ""} if full else {})}
    version = _run(Command([binary, "--version"]), env, limit, stop)
    if version.start_error:  # it was removed since: say it as a run would
        binary, problem = resolve_binary(cli, env, conf)
        if binary is None:
            return _unhealthy({"binary_path": ""}, problem)
    if version.timed_out:
        return _slow(cli, found, "`--version`", limit)
    if version.start_error or version.exit_code != 0:
        return _unhealthy(found, _failure(cli, version))
    found["version"] = (version.stdout.strip().splitlines() or [""])[0][:200]
    other = cli_for(cli).version_problem(found["version"])
    if other:
        return _unhealthy(found, f"{other[0].upper()}{other[1:]} (check Settings → CLIs)")
    if not full:
        return {**found, "status": CliHealthStatus.HEALTHY, "error": ""}
    prompt = cli_for(cli).health_command(binary)
    answer = _run(prompt, env, limit, stop, from_output=True)
    return _prompt_outcome(cli, cli_for(cli), found, answer, limit)


def _prompt_outcome(
    key: str, cli: Cli, found: dict, answer: process.ProcessResult, timeout: float
) -> dict:
    """What the answer to the health prompt says about the CLI."""
    if answer.timed_out:
        return _slow(key, found, "the health prompt", timeout)
    limit = _usage_limit(cli, answer)
    if limit is not None:  # installed and logged in, only out of quota: not "unhealthy"
        return {**found, "status": CliHealthStatus.HEALTHY, "error": "", "limit": limit}
    if answer.start_error:
        return _unhealthy(found, _failure(cli.name, answer))
    reason = cli.cannot_run_reason(answer)
    if reason:
        code = f" (CLI exited with code {answer.exit_code})" if answer.exit_code else ""
        return _unhealthy(found, f"{reason[0].upper()}{reason[1:]}{code}")
    if answer.exit_code != 0:
        return _unhealthy(found, _failure(cli.name, answer))
    reported = None if cli.name == CUSTOM_CLI else cli.read_stdout(answer.stdout).error
    if reported:
        return _unhealthy(found, f"CLI reported an error: {reported[-500:]}")
    text = cli.health_answer(answer.stdout)
    if not text:
        return _unhealthy(found, "CLI returned empty response")
    return {**found, "status": CliHealthStatus.HEALTHY, "error": "", "answer": text[:ANSWER_CHARS]}


def check_and_store(
    cli: str,
    *,
    full: bool,
    stop: threading.Event | None = None,
    current: Callable[[], bool] | None = None,
) -> str | None:
    """Check one CLI and save the outcome, unless `stop` (the worker's shutdown) cut it short
    or `current()` says a newer check of the same CLI started meanwhile."""
    started_at = timezone.now()
    try:
        outcome = check(cli, full=full, stop=stop)
    except Exception as exc:  # a health check must never take the worker down
        log.exception("CLI health check failed", extra={"cli": cli})
        outcome = _unhealthy({}, f"Health check error: {exc}")
    if stop is not None and stop.is_set():  # its CLI was killed: no result to keep
        return None
    if current is not None and not current():  # superseded by a newer check
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


def check_order(clis) -> list[str]:
    """The four CLIs first (the preference of the table), then custom-command agents' checks."""
    order = [cli for cli in CliType.values if cli in clis]
    return order + sorted(cli for cli in clis if cli not in order)


class HealthChecks:
    """Runs checks in the background: one CLI at a time in each of two lanes. The background
    lane takes the start-up and periodic checks; the asked lane the checks someone asked for
    (Refresh, Test, saved settings), at once, whatever the background lane is doing.

    A request for a CLI already waiting in a lane is merged (the real prompt wins over
    --version); a CLI asked for is dropped from the background lane. Each check has a number:
    only the newest started check of a CLI stores its result, so an older, slower result never
    overwrites a newer one. `stop()` (the worker's shutdown) kills the CLIs being checked,
    never left running after we exit, and ends the lanes for good."""

    def __init__(self, checker=check_and_store):
        self.checker = checker
        self.lock = threading.Lock()
        self.pending: dict[str, dict[str, bool]] = {"background": {}, "asked": {}}
        self.threads: dict[str, threading.Thread | None] = {"background": None, "asked": None}
        self.started: list[threading.Thread] = []  # the lanes' threads, for join()
        self.stopping = process.RunStop()  # wakes every check it stops
        self.numbers = itertools.count(1)
        self.newest: dict[str, int] = {}  # CLI → the number of its newest started check
        # CLI → the status this worker's own last check found (the database's row is shared
        # by every worker; this is what the worker advertises, DESIGN "Scale-out").
        self.results: dict[str, str] = {}

    def request(self, *, full_for: set[str], clis=None) -> None:
        """Check `clis` (default: every CLI), with the real prompt for those in `full_for`.
        Named `clis` are checks someone asked for: the asked lane runs them at once."""
        asked = clis is not None
        wanted = set(CliType.values if clis is None else clis) | set(full_for)
        lane = "asked" if asked else "background"
        with self.lock:
            queue = self.pending[lane]
            for cli in wanted:
                queue[cli] = queue.get(cli, False) or cli in full_for
                if asked:
                    self.pending["background"].pop(cli, None)
            thread = self.threads[lane]
            if thread is not None and thread.is_alive():
                return
            thread = threading.Thread(
                target=self._lane, args=(lane,), name=f"malamar-health-{lane}", daemon=True
            )
            self.threads[lane] = thread
            self.started = [t for t in self.started if t.is_alive()] + [thread]
        thread.start()

    def join(self, timeout: float) -> bool:
        """Wait (up to `timeout` each) for the checks requested so far; True when all ended."""
        with self.lock:
            started = list(self.started)
        for thread in started:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in started)

    def stop(self, timeout: float) -> None:
        """Kill the CLIs being checked and wait (up to `timeout`) for the lanes to end."""
        self.stopping.set()
        self.join(timeout)

    def _next(self, lane: str) -> tuple[str, bool, int] | None:
        with self.lock:
            queue = self.pending[lane]
            if not queue or self.stopping.is_set():
                self.threads[lane] = None
                return None
            cli = check_order(queue)[0]
            full = queue.pop(cli)
            number = self.newest[cli] = next(self.numbers)
            return cli, full, number

    def _lane(self, lane: str) -> None:
        try:
            while (job := self._next(lane)) is not None:
                cli, full, number = job
                try:
                    status = self.checker(
                        cli,
                        full=full,
                        stop=self.stopping,
                        current=lambda cli=cli, number=number: self.newest.get(cli) == number,
                    )
                    if status:
                        self.results[cli] = status
                except Exception:  # never leave a lane marked running with nobody running
                    log.exception("CLI health check failed", extra={"cli": cli})
        finally:
            connection.close()


def custom_keys() -> set[str]:
    """The health rows of custom-command agents (each checks its own command)."""
    custom = CliHealth.objects.filter(cli_type__startswith=f"{CUSTOM_CLI}:")
    return set(custom.values_list("cli_type", flat=True))


def needs_full_check() -> set[str]:
    """CLIs whose last check failed, was slow (or never ran) get the real prompt again; never a
    CLI out of quota (its probes run on their own back-off, worker.limits)."""
    healthy = set(
        CliHealth.objects.filter(status=CliHealthStatus.HEALTHY).values_list("cli_type", flat=True)
    )
    return (set(CliType.values) | custom_keys()) - healthy - cli_limited()
