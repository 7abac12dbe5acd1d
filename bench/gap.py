"""The gap between two agents (issue 28): the orchestrator's own time from one agent's exit to
the next agent's start, with the working directory snapshotted before and after each run.

    .venv/bin/python bench/gap.py [--passes 20] [--files 100] [--rounds 1]

Black box, like bench/runner.py (whose Stack it uses): a real server and worker (the worker
through bench/_count_sql.py, which counts its SQL statements and the programs it starts), the
fake CLI in C (bench/fakecli.c) timestamping its own start and exit. Each case is a workspace of
4 agents and `--passes` tasks run one after the other (one pass each: 3 gaps per pass):

  temp folder, agents change nothing        the task's temp folder stays empty
  temp folder, each agent edits a file      every run appends a line to a file in it
  repository, agents change nothing         a static working directory: a committed
                                            repository of `--files` files
  repository, each agent edits a file       every run appends a line to one of its files

Printed per case: the gap p50/p90 (CLI k exit -> CLI k+1 start, within a pass), and per agent
step the git processes the worker started, its SQL statements (BEGIN/COMMIT not counted, the
idle rate subtracted as bench/runner.py does) and its CPU time with its children's (git and
the fake CLI; the idle rate subtracted too): less sensitive than the gap to a busy machine.
Each gap is also split by marks the counting worker writes (bench/_count_sql.py): the CLI's
exit -> its reaping by the worker; the worker's own step from there to the next CLI's go (wall
time, and the CPU time of the thread that runs it); the go -> that CLI's start (the gate's
exec). `BENCH_FAKE_SLEEP_MS=100` makes every run last 100 ms (what comes after the go is then
off the path; with 1 ms runs the worker may still be busy with the run's start when it ends).
`--only TEXT` runs the cases whose name holds TEXT (e.g. "temp folder, agents" for the first);
with `BENCH_PROFILE_STEPS=FILE` the worker profiles its own steps (bench/_count_sql.py);
with `BENCH_STEP_PHASES=1` the own step is split into its phases (from one phase's end to the
next: the after-snapshot, the locking read, the run's record... to the go).
`--rounds N` runs the cases N times in turn (a fresh server and worker each round) and prints
the median of the rounds' p50s.
"""

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.runner import (  # noqa: E402
    AGENTS_PER_WORKSPACE,
    Stack,
    idle_rates,
    net_counts,
    percentile,
    statements,
    task_runs,
)

GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
EDITED_FILE = "edited.txt"


@dataclass
class Case:
    name: str
    repository: bool
    edit: bool
    gaps: list[float] = field(default_factory=list)
    git_per_step: float = 0.0
    statements_per_step: float = 0.0
    cpu_per_step_ms: float = 0.0
    parts: dict[str, list[float]] = field(default_factory=dict)  # the gap's parts (step_marks)


def make_repository(root: Path, files: int) -> Path:
    root.mkdir(parents=True)
    for n in range(files):
        folder = root / f"pkg{n % 10}"
        folder.mkdir(exist_ok=True)
        (folder / f"module_{n}.py").write_text(f"def f{n}():\n    return {n}\n" * 3)
    (root / EDITED_FILE).write_text("first\n")
    (root / ".gitignore").write_text("build/\n")
    for args in (["init", "-q", "-b", "main"], ["add", "."]):
        subprocess.run(["git", *args], cwd=root, env=GIT_ENV, check=True)
    commit = ["-c", "user.name=B", "-c", "user.email=b@x", "commit", "-qm", "bench"]
    subprocess.run(["git", *commit], cwd=root, env=GIT_ENV, check=True)
    return root


def workspace(stack: Stack, case: Case, repo: Path | None) -> str:
    body: dict = {"title": case.name}
    if repo is not None:
        body.update(working_directory_mode="static", working_directory_path=str(repo))
    workspace_id = stack.api("POST", "/workspaces", body)["id"]
    extra = ["--bench-edit", EDITED_FILE] if case.edit else []
    for n in range(AGENTS_PER_WORKSPACE):
        agent = {"name": f"A{n}", "cli_type": "codex", "instruction": "Go.", "extra_args": extra}
        stack.api("POST", f"/workspaces/{workspace_id}/agents", agent)
    return workspace_id


def counts(stack: Stack) -> tuple[float, dict, dict]:
    """(time, SQL statements by kind, processes by program) of the counting worker."""
    elapsed, by_kind = stack.sql_counts()  # (dumps the counts file afresh)
    return elapsed, by_kind, json.loads(stack.counts_file.read_text()).get("processes", {})


def cpu_seconds(stack: Stack) -> float:
    """The worker's CPU time with that of its children (git, the fake CLI) once reaped."""
    times = stack.processes()["worker"].cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def step_marks(stack: Stack) -> list[tuple[str, float, str, float]]:
    """(tag, time, thread, thread CPU time) of each CLI's reaping and go, in time order."""
    path = stack.counts_file.with_name("step-marks.txt")
    rows = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    return sorted((tag, float(at), thread, float(cpu)) for tag, at, thread, cpu in rows)


def split_gap(case: Case, marks: list, exit_at: float, start_at: float) -> None:
    """The gap's parts from the marks between one CLI's exit and the next one's start."""
    inside = [m for m in marks if exit_at - 0.0002 <= m[1] <= start_at]
    reaped = next((m for m in inside if m[0] == "reaped"), None)
    go = next((m for m in inside if m[0] == "go" and reaped and m[1] >= reaped[1]), None)
    if reaped is None or go is None or go[2] != reaped[2]:
        return
    parts = {
        "reaped": reaped[1] - exit_at,
        "own": go[1] - reaped[1],
        "own CPU": go[3] - reaped[3],
        "go -> start": start_at - go[1],
    }
    mine = sorted(
        (m for m in inside if m[2] == reaped[2] and reaped[1] <= m[1] <= go[1]), key=lambda m: m[1]
    )
    last = reaped[1]
    for tag, at, _thread, _cpu in mine:  # BENCH_STEP_PHASES: the own step, phase by phase
        if tag.startswith("phase:"):
            name = "  " + tag.removeprefix("phase:").replace("_", " ")
            parts[name] = parts.get(name, 0.0) + at - last
            last = at
    if last != reaped[1]:
        parts["  (to the go)"] = go[1] - last
    for name, seconds in parts.items():
        case.parts.setdefault(name, []).append(seconds * 1000)


def run_case(stack: Stack, case: Case, workspace_id: str, passes: int) -> None:
    stack.wait_in_review(stack.task(workspace_id, "warm-up"))
    idle_cpu, idle_per_s = idle_rates(stack, seconds=1.0)
    before, cpu_before, started = counts(stack), cpu_seconds(stack), time.monotonic()
    task_ids = []
    for n in range(passes):
        task_id = stack.task(workspace_id, f"pass {n}")
        stack.wait_in_review(task_id)
        task_ids.append(task_id)
    after, cpu_after = counts(stack), cpu_seconds(stack)
    steps = passes * AGENTS_PER_WORKSPACE
    busy = cpu_after - cpu_before - idle_cpu * (time.monotonic() - started)
    case.cpu_per_step_ms = busy / steps * 1000
    net = net_counts(before[:2], after[:2], idle_per_s)
    case.statements_per_step = statements(net) / steps
    case.git_per_step = (after[2].get("git", 0) - before[2].get("git", 0)) / steps
    by_task: dict[str, list] = {}
    for run in task_runs(stack.cli_log):
        by_task.setdefault(run.task_id, []).append(run)
    marks = step_marks(stack)
    for task_id in task_ids:
        runs = sorted(by_task.get(task_id, []), key=lambda run: run.start)
        if len(runs) != AGENTS_PER_WORKSPACE:
            raise RuntimeError(f"task {task_id}: {len(runs)} CLI runs, not one pass of 4")
        for a, b in itertools.pairwise(runs):
            case.gaps.append((b.start - a.end) * 1000)
            split_gap(case, marks, a.end, b.start)


def one_round(args) -> list[Case]:
    root = Path(tempfile.mkdtemp(prefix="malamar-bench-gap-"))
    repo = make_repository(root / "repo", args.files)
    cases = [
        Case("temp folder, agents change nothing", repository=False, edit=False),
        Case("temp folder, each agent edits a file", repository=False, edit=True),
        Case(f"repository of {args.files} files, agents change nothing", True, edit=False),
        Case(f"repository of {args.files} files, each agent edits a file", True, edit=True),
    ]
    cases = [case for case in cases if args.only in case.name]
    stack = Stack(root / "stack", via="manage", count_sql=True)
    try:
        stack.start()
        for case in cases:
            workspace_id = workspace(stack, case, repo if case.repository else None)
            run_case(stack, case, workspace_id, args.passes)
    except BaseException:
        print(f"logs kept in {root}", file=sys.stderr)
        raise
    finally:
        stack.stop()
    shutil.rmtree(root, ignore_errors=True)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=20, help="timed passes per case")
    parser.add_argument("--files", type=int, default=100, help="files in the repository")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of all cases")
    parser.add_argument("--only", default="", help="the cases whose name holds this text")
    args = parser.parse_args()
    rounds = []
    for n in range(args.rounds):
        load = os.getloadavg()
        cases = one_round(args)
        rounds.append(cases)
        print(f"round {n + 1}: load average {load[0]:.2f} -> {os.getloadavg()[0]:.2f}")
        for case in cases:
            print(
                f"  {case.name:<52} gap p50 {statistics.median(case.gaps):6.2f} ms  "
                f"p90 {percentile(case.gaps, 90):6.2f} ms  (min {min(case.gaps):5.2f}, "
                f"n={len(case.gaps)})  "
                f"git/step {case.git_per_step:4.1f}  SQL/step {case.statements_per_step:5.1f}  "
                f"CPU/step {case.cpu_per_step_ms:5.1f} ms"
            )
            if case.parts:
                p50s = {name: statistics.median(values) for name, values in case.parts.items()}
                parts = ", ".join(f"{n} {v:.2f}" for n, v in p50s.items() if n[0] != " ")
                print(f"  {'':<52} p50s (ms): {parts} (n={len(case.parts['own'])})")
                phases = ", ".join(f"{n.strip()} {v:.2f}" for n, v in p50s.items() if n[0] == " ")
                if phases:
                    print(f"  {'':<52} own step's phases (p50, ms): {phases}")
        time.sleep(1)
    if args.rounds > 1:
        print(f"median of {args.rounds} rounds (p50 / p90):")
        for index, case in enumerate(rounds[0]):
            p50 = statistics.median(statistics.median(r[index].gaps) for r in rounds)
            p90 = statistics.median(percentile(r[index].gaps, 90) for r in rounds)
            print(f"  {case.name:<52} gap p50 {p50:6.2f} ms  p90 {p90:6.2f} ms")
    print(f"{os.cpu_count()} CPUs; load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
