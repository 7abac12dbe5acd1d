"""Time of the worker's pickup queries with many queued tasks, half of them waiting for others.

Seeds WORKSPACES workspaces with TASKS queued Todo tasks each, every second task waiting for the
one before (a long chain of open blockers), then times, in-process on SQLite:
- workspaces_with_work()  (the worker's poll: which workspaces have an eligible task)
- next_item(workspace)    (the pickup order, skipping waiting tasks)
- claim of a waiting item (refused by the one-statement claim)
and the same reads without the dependency filter (what they cost before dependencies). Times
include building and compiling the ORM queries (most of it at these sizes).

    .venv/bin/python bench/pickup.py [--workspaces 20] [--tasks 500] [--repeat 50]
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup_django(data_dir: Path) -> None:
    os.environ["MALAMAR_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "malamar_site.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def timed(function, repeat: int) -> str:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return f"p50 {statistics.median(samples):6.2f} ms   p95 {p95:6.2f} ms"


def seed(workspaces: int, tasks: int) -> list[str]:
    from django.db import transaction
    from django.utils import timezone

    from tasks.models import Task, TaskDependency, TaskQueueItem
    from workspaces.models import Workspace

    ids = []
    with transaction.atomic():
        for w in range(workspaces):
            workspace = Workspace.objects.create(title=f"W{w}")
            ids.append(workspace.id)
            rows = [Task(workspace=workspace, summary=f"T{n}") for n in range(tasks)]
            Task.objects.bulk_create(rows)
            now = timezone.now()
            TaskQueueItem.objects.bulk_create(
                TaskQueueItem(task=t, workspace=workspace, created_at=now, updated_at=now)
                for t in rows
            )
            TaskDependency.objects.bulk_create(
                TaskDependency(workspace=workspace, task=rows[n], blocker=rows[n - 1])
                for n in range(1, tasks, 2)
            )
    return ids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspaces", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    setup_django(Path(tempfile.mkdtemp(prefix="malamar-bench-pickup-")))

    from tasks.models import TaskQueueItem
    from worker import pickup

    ids = seed(args.workspaces, args.tasks)
    print(f"{args.workspaces} workspaces x {args.tasks} queued tasks, every second one waiting")
    waiting = TaskQueueItem.objects.filter(workspace_id=ids[0], task__summary="T1").get()
    measured = {
        "workspaces_with_work": pickup.workspaces_with_work,
        "next_item": lambda: pickup.next_item(ids[0]),
    }
    for name, function in measured.items():
        print(f"{name:<22}", timed(function, args.repeat))
        with without_dependencies():
            print(f"{'  without dependencies':<22}", timed(function, args.repeat))
    print(f"{'claim (refused)':<22}", timed(lambda: TaskQueueItem.objects.claim(waiting.id), 50))


@contextlib.contextmanager
def without_dependencies():
    """The pickup as it was before dependencies: every queued item is eligible."""
    from tasks.models import TaskQueueQuerySet

    original = TaskQueueQuerySet.eligible
    TaskQueueQuerySet.eligible = TaskQueueQuerySet.queued
    try:
        yield
    finally:
        TaskQueueQuerySet.eligible = original


if __name__ == "__main__":
    main()
