"""Malamar scaled out on PostgreSQL: throughput with 1, 2 and 4 workers, pickup, round trips.

    .venv/bin/python bench/scale.py            # 40 tasks over 20 workspaces, 1/2/4 workers
    .venv/bin/python bench/scale.py --quick    # 16 tasks over 8 workspaces, fewer samples

Black box, through tests/scaleout.py: a throwaway PostgreSQL (tests/services.py), migrated
once, a fresh copy of the database per configuration, one `daphne` server and N
`manage.py runworker --capacity 2` processes, each with its own data dir (as on N machines).
The agent CLI is bench/fakecli.c compiled on the fly and installed as `codex`, sleeping
BENCH_FAKE_SLEEP_MS (1 s) and answering "skip": each task is one step of its workspace's one
agent, then In Review. It costs ~1 ms of CPU, so the numbers are Malamar's, not the fake's (the
Python fake of tests/fakes costs ~150 ms of CPU per start on this machine: fine for tests,
noise here).

Measured (definitions printed with the results):
- throughput   tasks / (last run ended - tasks created) x 60, per configuration; the tasks are
               created in one transaction (the services' task_create in a script, not 40
               API calls, which on 2 busy cores would take longer than 4 workers need)
- ideal        tasks x sleep / (workers x capacity): the bound the configuration can reach
- pickup       task created -> its run started (API timestamps), one task at a time on an
               idle 1-worker cluster; without a wake-up across machines this is the poll
               interval's business (--poll-ms, default 1000 ms as shipped)
- statements   what the workers send to PostgreSQL per step, from the server's own log
               (log_statement=all for the measured window, connections named by PGAPPNAME):
               every logged statement is one round trip (psycopg 3 sends BEGIN and COMMIT as
               statements of their own; Django's default client-side binding does not
               pipeline). The idle rate (polling) is measured first and reported apart.

Runs today with 1 worker. Several workers on one database need a worker capacity
(`runworker --capacity` or MALAMAR_WORKER_CAPACITY): until that exists the 2- and 4-worker rows
say so, and the 1 worker is uncapped.
"""

import argparse
import collections
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.runner import compile_fake_cli  # noqa: E402
from tests.scaleout import (  # noqa: E402
    Api,
    Cluster,
    Databases,
    parse_time,
    percentile,
    worker_capacity_supported,
)
from tests.services import Postgres  # noqa: E402

CAPACITY = 2
STATEMENT = re.compile(r"^(malamar-[\w-]+)\|.*?LOG:\s+(?:statement|execute [^:]*):\s+(\S+)")

DEFINITIONS = """\
definitions:
  tasks/min     tasks / (last run ended_at - the commit that created every task) x 60
  ideal         the same if every worker slot slept back to back (tasks x sleep / slots)
  speed-up      tasks/min / tasks/min with 1 worker
  stmts/step    statements the workers sent to PostgreSQL during the batch / steps (each one
                a round trip), minus their idle rate x the batch's duration; BEGIN and COMMIT
                included; idle/s = their rate before any task existed (polling)
  pickup        task created_at -> run started_at, one task at a time, idle cluster"""


def compile_fake(bin_dir: Path) -> Path:
    compile_fake_cli(bin_dir)
    return bin_dir


class StatementLog:
    """PostgreSQL's log of every statement, on for a window, counted per application name."""

    def __init__(self, pg: Postgres, databases: Databases):
        self.path = pg.folder / "server.log"
        self.databases = databases
        self.offset = 0

    def _set(self, on: bool) -> None:
        value = "'all'" if on else "'none'"
        self.databases.execute(f"ALTER SYSTEM SET log_statement = {value}")
        self.databases.execute("ALTER SYSTEM SET log_line_prefix = '%a|'")
        self.databases.execute("SELECT pg_reload_conf()")

    def start(self) -> None:
        self._set(True)
        time.sleep(0.2)  # the reload reaches every backend at its next statement
        self.offset = self.path.stat().st_size

    def stop(self) -> collections.Counter:
        """{(application, first word): count} since start()."""
        self._set(False)
        counts = collections.Counter()
        with self.path.open("rb") as log:
            log.seek(self.offset)
            for line in log.read().decode(errors="replace").splitlines():
                match = STATEMENT.match(line)
                if match:
                    counts[(match.group(1), match.group(2).upper().rstrip(";"))] += 1
        return counts


def worker_statements(counts: collections.Counter) -> int:
    return sum(n for (app, _), n in counts.items() if app.startswith("malamar-worker"))


def by_kind(counts: collections.Counter) -> str:
    kinds = collections.Counter()
    for (app, kind), n in counts.items():
        if app.startswith("malamar-worker"):
            kinds[kind] += n
    return ", ".join(f"{kind} {n}" for kind, n in kinds.most_common(6))


CREATE_AT_ONCE = """
import json, time
from django.db import transaction
from tasks.services import task_create
from workspaces.models import Workspace
ids = json.loads({ids!r})
spaces = Workspace.objects.in_bulk(ids)
with transaction.atomic():
    for n in range({tasks}):
        task_create(workspace=spaces[ids[n % len(ids)]], summary=f"T{{n}}", description="bench")
print(time.time())
"""


def run_batch(cluster: Cluster, api: Api, workspaces: int, tasks: int) -> tuple[list[dict], float]:
    """The workspaces through the API, then every task in one transaction (the services'
    task_create, in a script): they all appear at once, when it commits (returned)."""
    ids = [api.workspace(f"Bench {w}", cli="codex")["id"] for w in range(workspaces)]
    committed = float(cluster.django(CREATE_AT_ONCE.format(ids=json.dumps(ids), tasks=tasks)))
    return [task for ws in ids for task in api.tasks(ws)], committed


def span(api: Api, tasks: list[dict], committed: float) -> tuple[float, int]:
    """(seconds from the tasks' commit to the last run ended, steps run)."""
    runs = [r for t in tasks for r in api.runs(t["id"]) if r["status"] == "completed"]
    return max(parse_time(r["ended_at"]) for r in runs) - committed, len(runs)


def measure_throughput(args, root: Path, databases, template, statements, workers: int) -> dict:
    url = databases.create(f"bench_w{workers}", template=template)
    cluster = Cluster(
        root / f"w{workers}",
        url,
        fake_bin=args.bin_dir,
        poll_ms=args.poll_ms,
        env={"BENCH_FAKE_SLEEP_MS": str(int(args.sleep * 1000))},
    )
    try:
        cluster.start(servers=1, workers=workers, capacity=CAPACITY)
        api = cluster.api(0)
        statements.start()
        time.sleep(args.idle_seconds)
        idle = worker_statements(statements.stop()) / args.idle_seconds
        statements.start()
        batch_start = time.time()
        tasks, committed = run_batch(cluster, api, args.workspaces, args.tasks)
        api.wait_finished(tasks, timeout=args.tasks * args.sleep * 3 + 120)
        counts = statements.stop()
        elapsed = time.time() - batch_start
        seconds, steps = span(api, tasks, committed)
        result = {
            "workers": workers,
            "tasks_per_min": args.tasks / seconds * 60,
            "seconds": seconds,
            "steps": steps,
            "idle_per_s": idle,
            "per_step": (worker_statements(counts) - idle * elapsed) / max(steps, 1),
            "kinds": by_kind(counts),
        }
        if workers == 1:
            result["pickup"] = measure_pickup(api, args.pickup_samples)
        return result
    finally:
        cluster.stop()


def measure_pickup(api: Api, samples: int) -> list[float]:
    """Task created → run started, one task at a time on the idle cluster."""
    workspace = api.workspace("Pickup", cli="codex")
    delays = []
    for n in range(samples):
        task = api.task(workspace, "bench", summary=f"P{n}")
        api.wait_finished([task], timeout=60, interval=0.1)
        run = api.runs(task["id"])[0]
        delays.append(parse_time(run["started_at"]) - parse_time(task["created_at"]))
        time.sleep(0.3)  # land at a random point of the poll cycle, not right after a run
    return delays


def print_table(args, results: list[dict], skipped: list[int], load: str) -> None:
    slots = CAPACITY if worker_capacity_supported() else args.workspaces
    print(
        f"\n{args.tasks} tasks over {args.workspaces} workspaces, fake CLI sleeping {args.sleep} s,"
    )
    print(
        f"capacity {CAPACITY} per worker, poll interval {args.poll_ms} ms, PostgreSQL, load {load}"
    )
    if not worker_capacity_supported():
        print("no worker capacity yet: 1 worker runs every workspace at once (uncapped)")
    base = results[0]["tasks_per_min"] if results else 0
    header = f"{'workers':>7}  {'tasks/min':>9}  {'ideal':>7}  {'speed-up':>8}  {'seconds':>7}"
    print(header + f"  {'stmts/step':>10}  {'idle/s':>6}  worker statements by kind")
    for r in results:
        ideal = 60 * min(r["workers"] * slots, args.tasks) / args.sleep
        print(
            f"{r['workers']:>7}  {r['tasks_per_min']:>9.1f}  {ideal:>7.0f}"
            f"  {r['tasks_per_min'] / base:>7.2f}x  {r['seconds']:>7.1f}"
            f"  {r['per_step']:>10.1f}  {r['idle_per_s']:>6.1f}  {r['kinds']}"
        )
    for workers in skipped:
        print(f"{workers:>7}  needs a worker capacity (several workers on one database)")
    pickup = results[0].get("pickup") if results else None
    if pickup:
        print(
            f"\npickup (1 worker, {len(pickup)} tasks one at a time): p50"
            f" {percentile(pickup, 50) * 1000:.0f} ms, p90 {percentile(pickup, 90) * 1000:.0f} ms,"
            f" max {max(pickup) * 1000:.0f} ms"
        )
    print("\n" + DEFINITIONS)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 tasks, 8 workspaces, 5 pickups")
    parser.add_argument("--workers", default="1,2,4", help="worker counts to measure")
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--workspaces", type=int, default=20)
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds the fake CLI sleeps")
    parser.add_argument("--poll-ms", type=int, default=1000, help="MALAMAR_RUNNER_POLL_INTERVAL")
    parser.add_argument("--pickup-samples", type=int, default=15)
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.workspaces, args.pickup_samples = 16, 8, 5
    return args


def main() -> None:
    args = parse_args()
    root = Path(tempfile.mkdtemp(prefix="malamar-bench-scale-"))
    os.chmod(root, 0o755)
    try:
        args.bin_dir = compile_fake(root / "bin")
        pg = Postgres().start()
        databases = Databases(pg.url())
        template = databases.migrated_template(root)
        statements = StatementLog(pg, databases)
        counts = [int(n) for n in args.workers.split(",")]
        runnable = [n for n in counts if n == 1 or worker_capacity_supported()]
        results = []
        for workers in runnable:
            print(f"measuring {workers} worker(s)…", file=sys.stderr, flush=True)
            results.append(measure_throughput(args, root, databases, template, statements, workers))
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print_table(args, results, [n for n in counts if n not in runnable], load)
        pg.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
