"""A quick look at one CLI from the command line (`malamar doctor`): is its binary there (on PATH
or at the path set in Settings → CLIs), and does `--version` answer within a few seconds?

It works without the worker and without a database (then only PATH counts). The worker's health
checks (runner.worker.health, stored in CliHealth) go further and send a real prompt."""

from dataclasses import dataclass

from runner.clis.base import Command
from runner.files import private_dir, temp_dir
from runner.worker import process
from runner.worker.execution import cli_env, process_env, resolve_binary

VERSION_TIMEOUT = 5.0
NO_SETTINGS = {"binary_path": "", "env": {}}


@dataclass(frozen=True)
class CliProbe:
    cli_type: str
    ok: bool
    binary: str = ""
    version: str = ""
    problem: str = ""


def cli_probe(cli_type: str, *, conf: dict | None = None, timeout: float = VERSION_TIMEOUT):
    """`conf`: the CLI's settings (binary path, environment); None reads them from the database,
    NO_SETTINGS when it cannot be read."""
    env = cli_env(cli_type, conf)
    binary, problem = resolve_binary(cli_type, env, conf)
    if binary is None:
        return CliProbe(cli_type, ok=False, problem=problem)
    cwd = private_dir(temp_dir() / "malamar_health")
    env = process_env(env, cwd=cwd)
    result = process.run(Command([binary, "--version"]), cwd=str(cwd), env=env, timeout=timeout)
    if result.start_error:
        return CliProbe(cli_type, False, binary, problem=f"could not start: {result.start_error}")
    if result.timed_out:
        return CliProbe(cli_type, False, binary, problem=f"`--version` took over {timeout:g} s")
    if result.exit_code != 0:
        detail = (result.stderr.strip().splitlines() or [""])[-1][:200]
        problem = f"`--version` exited with {result.exit_code}"
        problem += f": {detail}" if detail else ""
        return CliProbe(cli_type, False, binary, problem=problem)
    version = (result.stdout.strip().splitlines() or [""])[0][:200]
    return CliProbe(cli_type, True, binary, version=version)
