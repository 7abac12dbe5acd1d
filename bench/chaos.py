"""kill -9 the worker at random moments while passes run, and check what a person would: no
agent's answered run is paid for again, no CLI is left running, no run stays "running".

    .venv/bin/python bench/chaos.py [--seed 1] [--kills 40] [--workspaces 3] [--tasks 6]

A real server and worker (bench/runner.py's Stack, the fake CLI in C answering "skip" after a
random 5-60 ms), `--workspaces` workspaces of 4 agents with `--tasks` tasks each. Every 0.05-0.6
s the worker is killed with SIGKILL and started again (at most `--kills` times), until every
task is In Review. Then, per task: the agents whose runs completed must be A0, A1, A2, A3, once
each and in order (a run killed mid-way is "interrupted" and runs again: that is the crash's
cost; an agent that completed and ran again after a restart is a paid run lost). Prints the
tasks that break that, the runs left "running" and the CLIs still alive; exits 1 if any.
"""

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from bench.runner import ROOT, Stack

AGENTS = ["A0", "A1", "A2", "A3"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--workspaces", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=6, help="per workspace")
    args = parser.parse_args()
    chance = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="malamar-chaos-"))
    stack = Stack(root, via="manage", count_sql=False)
    stack.env["BENCH_FAKE_SLEEP_MS"] = "5-60"
    stack.start()
    try:
        tasks = []
        for n in range(args.workspaces):
            workspace = stack.api("POST", "/workspaces", {"title": f"W{n}"})["id"]
            for name in AGENTS:
                agent = {"name": name, "cli_type": "codex", "instruction": "Go."}
                stack.api("POST", f"/workspaces/{workspace}/agents", agent)
            tasks += [stack.task(workspace, f"t{k}") for k in range(args.tasks)]
        kills = chaos(stack, chance, args.kills, len(tasks))
        return report(stack, kills)
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)


def chaos(stack: Stack, chance: random.Random, most: int, tasks: int) -> int:
    worker = [sys.executable, str(ROOT / "manage.py"), "runworker"]
    kills, deadline = 0, time.monotonic() + 600
    while time.monotonic() < deadline:
        time.sleep(chance.uniform(0.05, 0.6))
        if stack.sql("SELECT count(*) FROM tasks WHERE status = 'in_review'")[0][0] == tasks:
            break
        if kills < most:
            stack.procs["worker"].send_signal(signal.SIGKILL)
            stack.procs["worker"].wait()
            kills += 1
            stack._spawn("worker", worker)
    return kills


def report(stack: Stack, kills: int) -> int:
    time.sleep(2)  # the last runs' processes end
    statuses = dict(stack.sql("SELECT status, count(*) FROM tasks GROUP BY status"))
    running = stack.sql("SELECT count(*) FROM agent_runs WHERE status = 'running'")[0][0]
    paid_twice = []
    for (task_id,) in stack.sql("SELECT id FROM tasks"):
        runs = stack.sql(
            "SELECT agent_name, status FROM agent_runs WHERE task_id = ? ORDER BY started_at",
            task_id,
        )
        if [name for name, status in runs if status == "completed"] != AGENTS:
            paid_twice.append((task_id, runs))
    alive = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "codex"]
    print(
        f"{kills} kills; tasks by status {statuses}; runs left running {running}; "
        f"tasks whose completed runs are not A0-A3 once each {len(paid_twice)}; "
        f"CLIs alive {len(alive)}"
    )
    for task_id, runs in paid_twice[:5]:
        print(f"  {task_id}: {runs}")
    return 1 if running or paid_twice or alive or set(statuses) != {"in_review"} else 0


if __name__ == "__main__":
    sys.exit(main())
