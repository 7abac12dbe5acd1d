"""Run one agent's CLI and turn what it left behind into data or an error message.

The error order is the spec's: exit code → missing file → empty file → invalid JSON; the caller
checks the structure. Messages are the ones users see as system comments.
"""

import logging
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from core.settings_store import binary_problem, cli_settings_for
from core.storable import loads_storable
from runner.clis import CLIS, CUSTOM_CLI, cli_for
from runner.clis.base import (
    Cli,
    Command,
    CustomCommand,
    Invocation,
    McpServer,
    McpSetup,
    RunOptions,
)
from runner.files import data_subdir, read_output, remove_quietly, schema_path, write_private
from runner.limits import Limit
from runner.schemas import schema_json
from worker import process
from worker.prompts import PROMPT_TEMPLATE

log = logging.getLogger(__name__)
ERROR_DETAIL_CHARS = 2000


@dataclass
class Execution:
    data: dict | list | None = None
    error: str | None = None
    stopped: bool = False
    result: process.ProcessResult | None = None
    limit: Limit | None = None  # the run failed on the CLI's quota or rate limit
    # The CLI cannot run at all (not started, logged out, unknown model, not that CLI): why, in
    # the user's words. Not retried on a timer: the work waits for the CLI (DESIGN "Retries").
    cannot_run: str | None = None


MCP_SERVER_NAME = "malamar"


def mcp_server_for(workspace) -> McpServer | None:
    """Malamar's MCP server for a run in `workspace`, if it gives agents Malamar's tools: this
    Python running `malamar mcp` on the same data directory. `-P`: the CLI starts it in the
    task's folder, whose own `tasks/` or `core/` must not shadow Malamar's packages."""
    if not workspace.mcp_tools_enabled:
        return None
    return McpServer(
        name=MCP_SERVER_NAME,
        command=sys.executable,
        args=("-P", "-m", "malamar_site.cli", "mcp", f"--workspace={workspace.id}"),
        env=_mcp_server_env(),
    )


def _mcp_server_env() -> tuple[tuple[str, str], ...]:
    """What `malamar mcp` needs to reach this Malamar: the data dir and, when set, the shared
    database and Redis (a CLI gives its servers only a minimal environment plus this)."""
    config = settings.CONFIG
    shared = (("DATABASE_URL", config.database_url), ("REDIS_URL", config.redis_url))
    return (
        ("MALAMAR_DATA_DIR", str(Path(settings.DATA_DIR).resolve())),
        *((name, value) for name, value in shared if value),
    )


def _mcp_setup(cli: Cli, server: McpServer | None, env: dict, output_path: Path) -> McpSetup:
    """The run's MCP configuration, its files written (private, in the data directory's
    private run-config folder, named after the run's output file)."""
    if server is None:
        return McpSetup()
    config_path = data_subdir(RUN_CONFIG_DIR) / f"{output_path.stem}_mcp.json"
    setup = cli.mcp_setup(server, env=env, config_path=config_path)
    for path, text in setup.files:
        write_private(path, text)
    return setup


RUN_CONFIG_DIR = "run-config"
CLI_TEMP_DIR = "tmp"


def cli_env(cli_type: str, conf: dict | None = None) -> dict[str, str]:
    """Inherited environment + the user's variables for this CLI (theirs win)."""
    env = dict(os.environ)
    env.update((conf or cli_settings_for(cli_type)).get("env") or {})
    return env


def process_env(base: dict[str, str], *, cwd: str | Path, extra=()) -> dict[str, str]:
    """The environment of every CLI process (runs, health checks, doctor), built here only:
    `base` (cli_env, or a custom command's), PWD = the process's working directory (OpenCode
    works in $PWD, not in its cwd: an inherited PWD made it edit the folder Malamar was started
    from), TMPDIR = a private folder of the data directory (not the shared system temp), and
    `extra`: the run's MCP variables (McpSetup.env)."""
    return {
        **base,
        "PWD": str(cwd),
        "TMPDIR": str(data_subdir(CLI_TEMP_DIR)),
        **dict(extra),
    }


def resolve_binary(
    cli_type: str, env: dict[str, str], conf: dict | None = None
) -> tuple[str | None, str]:
    """(path, error): the configured binary path, else the CLI's name looked up in PATH."""
    configured = ((conf or cli_settings_for(cli_type)).get("binary_path") or "").strip()
    if configured:
        problem = binary_problem(configured)  # missing, not a file, not executable
        if problem:
            return None, f"Binary {problem} (check Settings → CLIs)"
        return str(Path(configured).expanduser()), ""
    found = shutil.which(cli_type, path=env.get("PATH"))
    if found:
        return found, ""
    return None, f"Binary not found in PATH ({cli_type}); install it or set its path in Settings"


def resolve_custom(command: CustomCommand) -> tuple[str | None, dict[str, str], str]:
    """(path, env, error) of a custom command: its binary as a path or looked up in PATH, and
    the inherited environment with the agent's variables."""
    env = {**os.environ, **dict(command.env)}
    binary = command.binary.strip()
    if "/" in binary or binary.startswith("~"):
        problem = binary_problem(binary)
        if problem:
            return None, env, f"Binary {problem} (check the agent's custom command)"
        return str(Path(binary).expanduser()), env, ""
    found = shutil.which(binary, path=env.get("PATH")) if binary else None
    if found:
        return found, env, ""
    return None, env, f"Binary not found in PATH ({binary}); check the agent's custom command"


def _binary_and_env(
    cli_type: str, options: RunOptions, conf: dict | None
) -> tuple[str | None, dict, str]:
    if cli_type == CUSTOM_CLI:
        return resolve_custom(options.custom or CustomCommand())
    conf = conf if conf is not None else cli_settings_for(cli_type)
    env = cli_env(cli_type, conf)
    binary, problem = resolve_binary(cli_type, env, conf)
    return binary, env, problem


def _trim(text: str) -> str:
    text = text.strip()
    return text if len(text) <= ERROR_DETAIL_CHARS else "…" + text[-ERROR_DETAIL_CHARS:]


def _strip_fences(text: str) -> str:
    """Models sometimes wrap the file's JSON in a ``` fence; accept that."""
    stripped = text.strip().lstrip("\ufeff")
    if stripped.startswith("```"):
        lines = stripped.splitlines()[1:]
        if lines and lines[-1].strip().startswith("```"):
            lines = lines[:-1]
        return "\n".join(lines)
    return stripped


def interpret(cli_type: str | Cli, result: process.ProcessResult, output_path: Path) -> Execution:
    """The run's data, or its error; a failure the CLI's output calls a usage limit also
    carries that `limit` (DESIGN "Usage limits": the caller pauses instead of failing)."""
    cli = cli_for(cli_type) if isinstance(cli_type, str) else cli_type
    execution = _interpret(cli, result, output_path)
    if not execution.error:
        return execution
    if result.start_error:
        execution.cannot_run = f"it could not be started ({result.start_error})"
        return execution
    now = timezone.now()
    execution.limit = cli.usage_limit(stdout=result.stdout, stderr=result.stderr, now=now)
    if execution.limit is None:
        execution.cannot_run = cli.cannot_run_reason(result)
    return execution


def _interpret(cli: Cli, result: process.ProcessResult, output_path: Path) -> Execution:
    if result.start_error:
        return Execution(error=f"CLI could not be started: {result.start_error}", result=result)
    reported = cli.read_stdout(result.stdout)
    if result.exit_code != 0:
        return Execution(error=exit_message(cli, result), result=result)
    if reported.error:
        return Execution(error=f"CLI reported an error: {_trim(reported.error)}", result=result)
    if reported.structured is not None:
        return Execution(data=reported.structured, result=result)
    try:
        text = read_output(output_path)
    except ValueError as exc:
        return Execution(error=f"CLI output could not be read: {exc}", result=result)
    if text is None:
        message = f"CLI completed but output file was not created at {output_path}"
        return Execution(error=message, result=result)
    if not text.strip():
        return Execution(error="CLI completed but output file was empty", result=result)
    try:
        return Execution(data=loads_storable(_strip_fences(text)), result=result)
    except ValueError as exc:
        return Execution(error=f"CLI output was not valid JSON: {exc}", result=result)


def exit_message(cli: Cli, result: process.ProcessResult) -> str:
    """A CLI that exited non-zero, in its own words first (from its structured output where it
    has one; start-up noise dropped), then the exit code, then a hint for a known trap."""
    said = _trim(cli.error_message(stdout=result.stdout, stderr=result.stderr))
    code = f"CLI exited with code {result.exit_code}"
    return (f"{said} ({code})" if said else code) + cli.explain(result.stderr)


def _blame_extra_args(run: Execution, options: RunOptions) -> Execution:
    """A CLI refusing one of the agent's extra arguments (an unknown option, e.g. after an
    update of the CLI) says so on stderr: name the argument and where to change it."""
    if not run.error or not run.result or run.result.exit_code in (0, None):
        return run
    stderr = run.result.stderr
    for arg in options.extra_args:
        bare = arg.split("=", 1)[0]
        if bare.startswith("-") and (bare in stderr or f"argument: {bare.lstrip('-')}" in stderr):
            run.error += (
                f" The agent's extra argument {arg!r} may be the cause: check it in the agent's "
                "settings."
            )
            break
    return run


class LimitWait:
    """Watches a run's stderr for the CLI saying it now waits out a provider's limit silently
    (Cli.waits_out_a_limit): the run is then stopped at the next tick and paused as a usage
    limit instead of sitting through days of silence."""

    def __init__(self, cli: Cli):
        self.cli, self.limit = cli, None

    def on_error_line(self, line: str) -> None:
        if self.limit is None:
            self.limit = self.cli.waits_out_a_limit(line, timezone.now())

    def tick(self) -> bool:
        return self.limit is not None


@dataclass
class Launch:
    """A run ready to start (`prepare`): its CLI, command and environment (process_env), the
    files that live as long as the run (its answer file and MCP configuration), and the watch
    on its stderr for a limit it would wait out silently (`waiting`: its hooks go to the
    process)."""

    cli: Cli
    command: Command
    env: dict[str, str]
    cwd: Path
    output_path: Path
    options: RunOptions
    waiting: LimitWait
    files: tuple[Path, ...] = ()

    def cleanup(self) -> None:
        remove_quietly(self.output_path)
        for path in self.files:
            remove_quietly(path)


def prepare(
    *,
    cli_type: str,
    input_path: Path,
    output_path: Path,
    schema: dict,
    schema_kind: str,
    cwd: Path,
    include_dirs: tuple[str, ...] = (),
    options: RunOptions | None = None,
    cli_conf: dict | None = None,
    mcp: McpServer | None = None,
) -> Launch | Execution:
    """The command of one agent step, or why it cannot start (an Execution with the error).
    `options`: the agent's own CLI settings (model, effort, extra arguments, custom command);
    `cli_conf`: the CLI's settings, when the caller read them already (once per pass); `mcp`:
    an MCP server to give the CLI for this run (mcp_server_for)."""
    if cli_type not in CLIS:
        return Execution(error=f"Unknown CLI type {cli_type!r}")
    options = options or RunOptions()
    binary, env, problem = _binary_and_env(cli_type, options, cli_conf)
    if binary is None:
        return Execution(error=f"CLI could not be started: {problem}", cannot_run=problem)
    text = schema_json(schema)
    cli = cli_for(cli_type).configured(options)
    try:
        setup = _mcp_setup(cli, mcp, env, output_path)
    except OSError as exc:
        return Execution(error=f"CLI could not be started: the MCP configuration: {exc}")
    env = process_env(env, cwd=cwd, extra=setup.env)
    invocation = Invocation(
        binary=binary,
        prompt=PROMPT_TEMPLATE.format(path=input_path),
        output_path=output_path,
        schema=schema,
        schema_path=schema_path(schema_kind, text),
        include_dirs=include_dirs,
        options=options,
        input_path=input_path,
        cwd=str(cwd),
        mcp_args=setup.args,
    )
    return Launch(
        cli=cli,
        command=cli.command(invocation),
        env=env,
        cwd=cwd,
        output_path=output_path,
        options=options,
        waiting=LimitWait(cli),
        files=tuple(path for path, _text in setup.files),
    )


def conclude(launch: Launch, result: process.ProcessResult, *, stall_minutes: float = 0):
    """What the finished process left behind: its data, or its error (a usage limit, a CLI
    that cannot run at all, a silent CLI stopped, or any other failure)."""
    if result.stopped:
        return Execution(stopped=True, result=result)
    limit = launch.waiting.limit
    if limit is not None:  # stopped: it would have waited out the limit silently
        return Execution(error=f"CLI stopped: {limit.message}", result=result, limit=limit)
    if result.stalled:
        message = f"CLI produced no output for {stall_minutes:g} minutes and was stopped"
        return Execution(error=message, result=result)
    return _blame_extra_args(interpret(launch.cli, result, launch.output_path), launch.options)


def execute(
    *,
    cli_type: str,
    input_path: Path,
    output_path: Path,
    schema: dict,
    schema_kind: str,
    cwd: Path,
    stop: threading.Event,
    include_dirs: tuple[str, ...] = (),
    options: RunOptions | None = None,
    cli_conf: dict | None = None,
    mcp: McpServer | None = None,
) -> Execution:
    """Run the CLI for one agent step, with nothing to record before it starts, and interpret
    its answer (never raises for CLI trouble). The run pipeline does the same in steps, with
    its process record between the fork and the go (worker.pipeline)."""
    launch = prepare(
        cli_type=cli_type,
        input_path=input_path,
        output_path=output_path,
        schema=schema,
        schema_kind=schema_kind,
        cwd=cwd,
        include_dirs=include_dirs,
        options=options,
        cli_conf=cli_conf,
        mcp=mcp,
    )
    if isinstance(launch, Execution):
        return launch
    try:
        waiting = launch.waiting
        result = process.run(
            launch.command,
            cwd=str(cwd),
            env=launch.env,
            stop=stop,
            on_error_line=waiting.on_error_line,
            on_tick=waiting.tick,
        )
        return conclude(launch, result)
    finally:
        launch.cleanup()
