"""Runner speed, measured on a real server + worker with a shell stub CLI.

Prints:
- pickup latency: task created (its row's created_at) → CLI started (target p50 <= 50 ms)
- orchestration overhead per agent step: step time minus the CLI's own lifetime (p50 <= 15 ms)
- agent steps per second with 20 workspaces busy at once

    .venv/bin/python bench/runner.py [--tasks 30] [--workspaces 20]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"

from tests.live import wait_until  # noqa: E402
from tests.stack import FAKES_BIN, Stack, migrated_template  # noqa: E402

BENCH_BIN = ROOT / "bench" / "bin"


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def percentile(values, pct):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def cli_lifetimes(log: Path) -> list[tuple[float, float]]:
    if not log.exists():
        return []
    return [tuple(map(float, line.split())) for line in log.read_text().splitlines() if line]


def make_stack(root: Path, template: Path, log: Path) -> Stack:
    path = f"{BENCH_BIN}{os.pathsep}{FAKES_BIN}{os.pathsep}{os.environ['PATH']}"
    return Stack(
        root, template, PATH=path, BENCH_CLI_LOG=str(log), MALAMAR_RUNNER_POLL_INTERVAL="1000"
    ).start()


def bench_pickup_and_overhead(root: Path, template: Path, tasks: int) -> None:
    log = root / "cli.log"
    stack = make_stack(root / "pickup", template, log)
    try:
        ws = stack.workspace(agents=[(f"A{i}", "codex") for i in range(4)])
        pickups = []
        for n in range(tasks):
            before = len(cli_lifetimes(log))
            task = stack.task(ws, "bench", summary=f"t{n}")
            wait_until(lambda b=before: len(cli_lifetimes(log)) > b, timeout=10, what="CLI start")
            created = stack.sql("SELECT created_at FROM tasks WHERE id = ?", task["id"])[0][0]
            first_cli_start = cli_lifetimes(log)[before][0]
            pickups.append((first_cli_start - ts(created)) * 1000)
            stack.wait_status(task, "in_review")
            time.sleep(0.05)
        overheads = step_overheads(stack, log)
    finally:
        stack.stop()
    print(f"pickup latency (task created → CLI started), {len(pickups)} tasks, poll 1000 ms:")
    print(
        f"  p50 {statistics.median(pickups):.1f} ms   p95 {percentile(pickups, 95):.1f} ms"
        "   (target p50 <= 50 ms)"
    )
    print(f"orchestration overhead per agent step, {len(overheads)} steps:")
    print(
        f"  p50 {statistics.median(overheads):.1f} ms   p95 {percentile(overheads, 95):.1f} ms"
        "   (target p50 <= 15 ms)"
    )


def step_overheads(stack: Stack, log: Path) -> list[float]:
    """Each step: agent_started log → agent_finished log, minus the CLI's lifetime."""
    rows = stack.sql(
        "SELECT event_type, created_at FROM task_logs WHERE event_type IN "
        "('agent_started', 'agent_finished') ORDER BY created_at"
    )
    starts = [ts(at) for kind, at in rows if kind == "agent_started"]
    ends = [ts(at) for kind, at in rows if kind == "agent_finished"]
    lifetimes = [end - start for start, end in cli_lifetimes(log)]
    return [
        ((end - start) - life) * 1000
        for start, end, life in zip(starts, ends, lifetimes, strict=False)
    ]


def bench_throughput(root: Path, template: Path, workspaces: int) -> None:
    log = root / "busy.log"
    stack = make_stack(root / "busy", template, log)
    try:
        spaces = [
            stack.workspace(title=f"W{i}", agents=[(f"A{j}", "codex") for j in range(4)])
            for i in range(workspaces)
        ]
        stack.stop()  # queue everything first, then start the worker on a full queue
        stack.server.start()
        tasks = [
            stack.task(ws, "bench", summary=f"{ws['title']}-{n}") for ws in spaces for n in range(5)
        ]
        started = time.time()
        stack.start_worker()
        for task in tasks:
            stack.wait_status(task, "in_review", timeout=300)
        elapsed = time.time() - started
        steps = len(cli_lifetimes(log))
    finally:
        stack.stop()
    print(
        f"throughput with {workspaces} workspaces busy: {steps} agent steps in {elapsed:.1f} s"
        f" = {steps / elapsed:.1f} steps/s (worker start included)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--workspaces", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="malamar-bench-"))
    template = migrated_template(root / "template-base")
    bench_pickup_and_overhead(root, template, args.tasks)
    bench_throughput(root, template, args.workspaces)


if __name__ == "__main__":
    main()
