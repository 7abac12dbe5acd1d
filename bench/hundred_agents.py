"""100 agents at once (issue 28): what Malamar itself costs while 100 CLIs run.

    .venv/bin/python bench/hundred_agents.py [--agents 100] [--sleep 40] [--rounds 3]

Black box, through bench/runner.py's Stack, via the `malamar` command (its supervisor and its
server with the worker in one process): `--agents` workspaces of one agent each, the fake CLI in
C (bench/fakecli.c, installed as `codex`) sleeping `--sleep` seconds and logging its own start
(BENCH_CLI_LOG_STARTS). Each round creates one task in every workspace, all in one transaction
(the services' task_create in a script, so they exist at one instant: its commit), then measures:

  all started     the commit -> the last of the fake CLIs' starts (their own timestamps)
  quiet CPU       Malamar's processes' CPU (user + system, not the CLIs') over a window while
                  every CLI sleeps, as % of one core
  RSS             the sum of Malamar's processes' RSS in that window

and waits for every task to reach In Review before the next round. Printed: each round and the
median of the rounds, with the load average at the start and the end.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.runner import Stack, load_text, read_cli_log  # noqa: E402
from tests.live import wait_until  # noqa: E402

CREATE_AT_ONCE = """
import json, time
from django.db import transaction
from tasks.services import task_create
from workspaces.models import Workspace
ids = json.loads({ids!r})
spaces = Workspace.objects.in_bulk(ids)
with transaction.atomic():
    for n, workspace_id in enumerate(ids):
        task_create(workspace=spaces[workspace_id], summary=f"R{round} T{{n}}", description="b")
print(time.time())
"""
SETTLE_SECONDS = 2.0
WINDOW_SECONDS = 10.0


def create_workspaces(stack: Stack, count: int) -> list[str]:
    ids = []
    for n in range(count):
        workspace_id = stack.api("POST", "/workspaces", {"title": f"Agents {n}"})["id"]
        body = {"name": "A", "cli_type": "codex", "instruction": "You are A."}
        stack.api("POST", f"/workspaces/{workspace_id}/agents", body)
        ids.append(workspace_id)
    return ids


def create_tasks_at_once(stack: Stack, ids: list[str], round_no: int) -> float:
    """Every workspace's task in one transaction; returns the commit's time."""
    script = CREATE_AT_ONCE.format(ids=json.dumps(ids), round=round_no)
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", script],
        env=stack.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def malamar_cpu(stack: Stack) -> float:
    total = 0.0
    for proc in stack.processes().values():
        times = proc.cpu_times()
        total += times.user + times.system
    return total


def malamar_rss_mb(stack: Stack) -> float:
    return sum(proc.memory_info().rss for proc in stack.processes().values()) / 2**20


def one_round(stack: Stack, ids: list[str], round_no: int, sleep: float) -> dict:
    seen = len(started_runs(stack))
    committed = create_tasks_at_once(stack, ids, round_no)
    expected = seen + len(ids)

    def all_started() -> bool:
        return len(started_runs(stack)) >= expected

    wait_until(all_started, timeout=sleep * 3 + 120, what="every CLI to start")
    starts = [run.start for run in started_runs(stack)[seen:]]
    last_start = max(starts)
    quiet_until = min(starts) + sleep - 1  # the first CLI ends then
    time.sleep(SETTLE_SECONDS)
    window = min(WINDOW_SECONDS, quiet_until - time.time())
    cpu = rss = None
    if window > 1:
        cpu0, wall0 = malamar_cpu(stack), time.monotonic()
        time.sleep(window)
        cpu = (malamar_cpu(stack) - cpu0) / (time.monotonic() - wall0) * 100
        rss = malamar_rss_mb(stack)
    in_review = len(ids) * round_no
    query = "SELECT COUNT(*) FROM tasks WHERE status = 'in_review'"
    wait_until(
        lambda: stack.sql(query)[0][0] >= in_review,
        timeout=sleep * 3 + 120,
        what="every task In Review",
    )
    return {"all_started": last_start - committed, "cpu": cpu, "rss": rss, "window": window}


def started_runs(stack: Stack) -> list:
    """The CLIs' task runs that started, by their own first instant (BENCH_CLI_LOG_STARTS)."""
    return sorted(
        (run for run in read_cli_log(stack.cli_log) if run.kind == "start"),
        key=lambda run: run.start,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--sleep", type=float, default=40.0, help="each CLI's run, seconds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, database)")
    args = parser.parse_args()
    load_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="malamar-bench-hundred-"))
    stack = Stack(root, via="malamar", count_sql=False)
    stack.env["BENCH_FAKE_SLEEP_MS"] = str(int(args.sleep * 1000))
    stack.env["BENCH_CLI_LOG_STARTS"] = "1"
    results = []
    try:
        stack.start()
        ids = create_workspaces(stack, args.agents)
        time.sleep(SETTLE_SECONDS)
        idle_rss = malamar_rss_mb(stack)
        for round_no in range(1, args.rounds + 1):
            result = one_round(stack, ids, round_no, args.sleep)
            results.append(result)
            cpu = "n/a" if result["cpu"] is None else f"{result['cpu']:5.1f} %"
            rss = "n/a" if result["rss"] is None else f"{result['rss']:6.1f} MB"
            print(
                f"round {round_no}: all {args.agents} started {result['all_started']:6.2f} s"
                f"   quiet CPU {cpu} of a core (over {result['window']:.1f} s)   RSS {rss}"
                f"   load {load_text(os.getloadavg())}",
                flush=True,
            )
    except BaseException:
        print(f"logs kept in {root}", file=sys.stderr)
        raise
    finally:
        stack.stop()
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)

    def median(key: str) -> float:
        values = [r[key] for r in results if r[key] is not None]
        return statistics.median(values) if values else float("nan")

    print(
        f"\n{args.agents} agents, {args.rounds} rounds (medians): "
        f"all started {median('all_started'):.2f} s [goal <= 10 s]   "
        f"quiet CPU {median('cpu'):.1f} % of a core [goal <= 10 %]   "
        f"RSS {median('rss'):.0f} MB [goal <= 300 MB] (idle before: {idle_rss:.0f} MB)\n"
        f"load average (1/5/15 min) start {load_text(load_start)}, "
        f"end {load_text(os.getloadavg())}; {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
