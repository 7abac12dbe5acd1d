"""The original TypeScript/Bun build's gap between two agents (issue 28) on this machine: the
number the README sets beside bench/gap.py's and bench/floor.py's, timed the same way.

    .venv/bin/python bench/original.py --source DIR --bun PATH [--rounds 3] [--tasks 15]
                                       [--agents 4]

DIR is a checkout of https://github.com/malamar-dev/malamar (not part of this project; its
`api` folder holds the server, whose dependencies `bun install` in that folder puts in place)
and PATH a bun binary (npm's `bun` package has one: `npm install bun`, then
node_modules/.bin/bun). The script never downloads anything (bun runs with --no-install).

Black box: bench/fakeclaude.c is compiled with `cc -O2` into a temp dir and put first on PATH
as `claude`, the CLI that build calls; it logs its own start and exit (CLOCK_REALTIME), sleeps
100 ms per task run (BENCH_FAKE_SLEEP_MS) and answers "skip", so every task is one pass of its
workspace's agents and goes to In Review (one task at a time: they share a workspace). Each
round starts `bun src/main.ts` in DIR/api (at `nice -n -10` when permitted) on a fresh data
dir, HOME and TMPDIR, waits for /api/health and for the build's startup health check of
`claude`, then makes one workspace, replaces the agents a new workspace gets by `--agents`
agents of cliType "claude" and creates `--tasks` tasks at once. It then only reads the fake's
log (no HTTP during the measurement) until all tasks x agents runs are there, and stops the
server.

The gap is one run's exit to the next run's start for consecutive runs of the same task (the
same working directory, $TMPDIR/malamar_task_<id>) within a pass: agents - 1 per task. That
build takes no snapshots, so it is the orchestrator's own time between two CLIs plus the
operating system's share (a process's end seen, a program started), as in bench/floor.py.
Gaps that begin before the last task was created are left out (none, unless --tasks is large).

Printed per round: the gap's n, p50, p90 and min, and the load average before and after; then
the median of the rounds' p50s.
"""

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.runner import compile_fake_cli, free_port, percentile, wait_until  # noqa: E402

SLEEP_MS = "100"
NICENESS = -10


@dataclass
class Run:
    kind: str
    start: float
    end: float
    cwd: str


@dataclass
class Round:
    gaps: list[float] = field(default_factory=list)
    runs: int = 0
    tasks: int = 0
    excluded: int = 0
    niceness: int = 0
    odd: list[str] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)


# --- the fake and its log --------------------------------------------------------------------
def read_log(path: Path) -> list[Run]:
    """KIND START END PID CWD PROMPT lines (bench/fakeclaude.c)."""
    if not path.exists():
        return []
    runs = []
    for line in path.read_text().splitlines():
        kind, start, end, _pid, cwd, *_prompt = line.split(" ", 5)
        runs.append(Run(kind, float(start), float(end), cwd))
    return runs


def task_runs(path: Path) -> list[Run]:
    return [run for run in read_log(path) if run.kind == "task"]


def gaps(runs: list[Run], agents: int, since: float, result: Round) -> None:
    """Exit -> next start of consecutive runs of one task within a pass, in ms."""
    ordered = sorted(runs, key=lambda run: run.start)
    overlaps = sum(b.start < a.end for a, b in itertools.pairwise(ordered))
    if overlaps:
        result.odd.append(f"{overlaps} runs started before the one before them ended")
    by_task: dict[str, list[Run]] = {}
    for run in ordered:
        by_task.setdefault(run.cwd, []).append(run)
    for cwd, task in by_task.items():
        if len(task) % agents:
            result.odd.append(f"{Path(cwd).name}: {len(task)} runs, not passes of {agents}")
        for first in range(0, len(task), agents):
            for a, b in itertools.pairwise(task[first : first + agents]):
                if a.end < since:
                    result.excluded += 1
                else:
                    result.gaps.append((b.start - a.end) * 1000)
    result.runs, result.tasks = len(ordered), len(by_task)


# --- the server ------------------------------------------------------------------------------
def api(port: int, method: str, path: str, body=None):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def raise_priority() -> None:
    """`nice -n -10` in the child before bun starts; left as it is when not permitted."""
    with contextlib.suppress(OSError):
        os.nice(NICENESS)


def server_env(folder: Path, bin_dir: Path, port: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALAMAR_", "BENCH_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        HOME=str(folder / "home"),
        TMPDIR=str(folder / "tmp"),
        MALAMAR_DATA_DIR=str(folder / "data"),
        MALAMAR_HOST="127.0.0.1",
        MALAMAR_PORT=str(port),
        BENCH_CLI_LOG=str(folder / "cli.log"),
        BENCH_FAKE_SLEEP_MS=SLEEP_MS,
    )
    return env


def start_server(source: Path, bun: str, folder: Path, env: dict) -> subprocess.Popen:
    for name in ("data", "home", "tmp"):
        (folder / name).mkdir(parents=True)
    with open(folder / "server.log", "wb") as output:
        return subprocess.Popen(
            [bun, "--no-install", "src/main.ts"],
            cwd=source / "api",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=raise_priority,
        )


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM to its process group (the server and any CLI it runs), SIGKILL after 5 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(5)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def wait_ready(server: subprocess.Popen, port: int, log: Path) -> None:
    def healthy() -> bool:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}")
        try:
            api(port, "GET", "/health")
        except (urllib.error.URLError, ConnectionError):
            return False
        return True

    wait_until(healthy, timeout=30, what="/api/health")
    wait_until(
        lambda: any(run.kind == "health" for run in read_log(log)),
        timeout=30,
        what="the startup health check of `claude`",
    )
    time.sleep(0.3)


def set_up(port: int, agents: int, tasks: int) -> None:
    """One workspace of `agents` claude agents (instead of the default ones), `tasks` tasks."""
    workspace_id = api(port, "POST", "/workspaces", {"title": "gap", "description": "bench"})["id"]
    for agent in api(port, "GET", f"/workspaces/{workspace_id}/agents")["agents"]:
        api(port, "DELETE", f"/agents/{agent['id']}")
    for n in range(agents):
        body = {"name": f"Agent {n + 1}", "instruction": "Always skip.", "cliType": "claude"}
        api(port, "POST", f"/workspaces/{workspace_id}/agents", body)
    made = api(port, "GET", f"/workspaces/{workspace_id}/agents")["agents"]
    if len(made) != agents or any(agent["cliType"] != "claude" for agent in made):
        raise RuntimeError(f"the workspace's agents are not {agents} claude agents: {made}")
    for n in range(tasks):
        body = {"summary": f"task {n + 1}", "description": "bench"}
        api(port, "POST", f"/workspaces/{workspace_id}/tasks", body)


# --- rounds ----------------------------------------------------------------------------------
def one_round(args, bin_dir: Path, folder: Path) -> Round:
    result = Round()
    load_before = os.getloadavg()[0]
    log, port, expected = folder / "cli.log", free_port(), args.tasks * args.agents
    server = start_server(args.source, args.bun, folder, server_env(folder, bin_dir, port))
    try:
        result.niceness = os.getpriority(os.PRIO_PROCESS, server.pid)
        wait_ready(server, port, log)
        set_up(port, args.agents, args.tasks)
        since = time.time()
        wait_until(
            lambda: len(task_runs(log)) >= expected,
            timeout=60 + expected,
            interval=0.2,
            what=f"{expected} task runs",
        )
        time.sleep(1)  # (any run beyond a pass each would show here)
    finally:
        stop_server(server)
    result.load = (load_before, os.getloadavg()[0])
    gaps(task_runs(log), args.agents, since, result)
    if result.runs != expected:
        result.odd.append(f"{result.runs} task runs, not {expected}")
    if not result.gaps:
        raise RuntimeError(f"no gaps measured: {result.odd}")
    return result


def source_commit(source: Path) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else None


def describe(source: Path, bun: str) -> str:
    commit = source_commit(source)
    version = subprocess.run([bun, "--version"], capture_output=True, text=True).stdout.strip()
    checkout = f"commit {commit}" if commit else "not a git checkout"
    return f"source {source} ({checkout}); bun {version}; {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="a malamar-dev/malamar checkout")
    parser.add_argument("--bun", required=True, help="a bun binary (npm's `bun` package has one)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, a fresh server each")
    parser.add_argument("--tasks", type=int, default=15, help="tasks per round")
    parser.add_argument("--agents", type=int, default=4, help="agents of the workspace")
    args = parser.parse_args()
    args.source = args.source.resolve()
    if not (args.source / "api" / "node_modules").is_dir():
        parser.error(f"no {args.source / 'api' / 'node_modules'}: run `bun install` there first")
    if args.agents < 2:
        parser.error("--agents must be 2 or more: a gap is between two agents")
    print(describe(args.source, args.bun))
    root = Path(tempfile.mkdtemp(prefix="malamar-bench-original-"))
    p50s = []
    try:
        bin_dir = root / "bin"
        compile_fake_cli(bin_dir, source="fakeclaude.c", name="claude")
        for n in range(args.rounds):
            result = one_round(args, bin_dir, root / f"round-{n + 1}")
            p50s.append(statistics.median(result.gaps))
            excluded = f", {result.excluded} left out" if result.excluded else ""
            print(
                f"round {n + 1}: {result.runs} task runs of {result.tasks} tasks, server niceness"
                f" {result.niceness}; gap p50 {p50s[-1]:5.2f} ms  p90"
                f" {percentile(result.gaps, 90):5.2f} ms  (min {min(result.gaps):5.2f},"
                f" n={len(result.gaps)}{excluded});"
                f" load average {result.load[0]:.2f} -> {result.load[1]:.2f}"
            )
            for note in result.odd:
                print(f"  odd: {note}")
            time.sleep(1)
    except BaseException:
        print(f"logs kept in {root}", file=sys.stderr)
        raise
    shutil.rmtree(root, ignore_errors=True)
    print(
        f"median of the rounds' p50s: {statistics.median(p50s):.2f} ms"
        f"  ({', '.join(f'{p50:.2f}' for p50 in p50s)})"
    )


if __name__ == "__main__":
    main()
