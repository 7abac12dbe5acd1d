"""Pickup latency of an idle worker: from a task's commit to its claim, on SQLite (the Unix
socket poke) and on PostgreSQL (LISTEN/NOTIFY), with the poll interval far away (60 s), so only
the wake-up can start the work. Also the statements of one claim on each database.

In-process: the worker's loop runs in a thread (as the tests run it), the fake CLI answers
`skip`. PostgreSQL is started from Debian's package (tests.services), as in the tests.

    .venv/bin/python bench/workers.py [--tasks 30] [--database sqlite|postgres|both]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run(database: str, tasks: int) -> None:
    """One database per process: Django's settings are read once."""
    data_dir = tempfile.mkdtemp(prefix="malamar-bench-workers-")
    env = {
        **os.environ,
        "MALAMAR_DATA_DIR": data_dir,
        "MALAMAR_TEMP_DIR": str(Path(data_dir) / "tmp"),  # (the tasks' folders)
        "DJANGO_SETTINGS_MODULE": "malamar_site.settings",
        "PATH": f"{ROOT / 'tests' / 'fakes' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "MALAMAR_LOG_LEVEL": "error",
    }
    if database == "postgres":
        from tests.services import Postgres

        env["DATABASE_URL"] = Postgres().start().url("postgres")
    else:
        (Path(data_dir) / "malamar.db").touch()  # not a first launch: no sample workspace
    code = f"import bench.workers as b; b.measure({database!r}, {tasks})"
    try:
        subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def measure(database: str, tasks: int) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    from agents.services import agent_create
    from tasks.models import QueueStatus, TaskQueueItem
    from tasks.services import task_create
    from worker import pickup
    from worker.loop import Worker
    from workspaces.services import workspace_create

    claimed: dict[str, float] = {}
    claim_next = pickup.claim_next

    def timed_claim(workspace_id, **kwargs):
        item = claim_next(workspace_id, **kwargs)
        if item is not None:
            claimed[item.task_id] = time.perf_counter()
        return item

    pickup.claim_next = timed_claim
    worker = Worker(poll_interval=60, heartbeat=5, stale_after=30)
    thread = threading.Thread(target=worker.serve_forever, daemon=True)
    thread.start()
    while worker.worker_id is None:
        time.sleep(0.01)
    time.sleep(1)  # the start's health checks and jobs are over
    latencies = []
    for n in range(tasks):
        workspace = workspace_create(title=f"W{n}")
        agent_create(workspace=workspace, name="A", instruction="Skip.", cli_type="claude")
        task = task_create(workspace=workspace, summary="T", description="@fake skip")
        committed = time.perf_counter()
        while task.id not in claimed:
            time.sleep(0.0005)
        latencies.append((claimed[task.id] - committed) * 1000)
        while TaskQueueItem.objects.filter(task=task, status=QueueStatus.QUEUED).exists() or (
            worker.runs
        ):
            time.sleep(0.01)
    workspace = workspace_create(title="Count")
    agent_create(workspace=workspace, name="A", instruction="Skip.", cli_type="claude")
    worker.shutdown.set()
    worker.kick()
    thread.join(timeout=10)
    task_create(workspace=workspace, summary="T")
    with CaptureQueriesContext(connection) as queries:
        claim_next(workspace.id, worker_id=None)
    if os.environ.get("BENCH_SHOW_SQL"):
        for query in queries.captured_queries:
            print("  ", query["sql"][:100])
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    print(
        f"{database:<9} pickup after commit: p50 {statistics.median(latencies):6.1f} ms"
        f"   p95 {p95:6.1f} ms   ({tasks} tasks, poll 60 s);"
        f" one claim: {len(queries.captured_queries)} statements"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    args = parser.parse_args()
    for database in ("sqlite", "postgres") if args.database == "both" else (args.database,):
        run(database, args.tasks)


if __name__ == "__main__":
    main()
