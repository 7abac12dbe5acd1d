"""Cost of "Needs you" (issue 29): the lists and the header count over many workspaces.

Seeds W workspaces, each with T tasks (a quarter In Review, some failing, some waiting for a
CLI) and C chats (half with a reply not seen yet), then times needs_you() and needs_you_count()
(median of several runs) and counts their queries.

    .venv/bin/python bench/needs_you.py [--workspaces 50] [--tasks 40] [--chats 10] [--runs 7]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["MALAMAR_DATA_DIR"] = tempfile.mkdtemp(prefix="malamar-bench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from chats.models import Chat, ChatMessage  # noqa: E402
from malamar_site.needs_you import needs_you, needs_you_count  # noqa: E402
from tasks.models import Task, TaskLog, TaskQueueItem  # noqa: E402
from workspaces.models import Workspace  # noqa: E402


def seed(workspaces: int, tasks: int, chats: int) -> None:
    now = timezone.now()
    for w in range(workspaces):
        ws = Workspace.objects.create(title=f"W{w}")
        rows = []
        for t in range(tasks):
            status = ("in_review", "todo", "in_progress", "done")[t % 4]
            rows.append(
                Task(
                    workspace=ws,
                    summary=f"task {w}-{t}",
                    status=status,
                    failure_streak=1 if t % 8 == 1 else 0,
                )
            )
        Task.objects.bulk_create(rows)
        TaskLog.objects.bulk_create(
            TaskLog(
                task=task,
                workspace=ws,
                event_type="status_changed",
                actor_type="system",
                metadata={"old_status": "in_progress", "new_status": "in_review"},
            )
            for task in rows
            if task.status == "in_review"
        )
        TaskQueueItem.objects.bulk_create(
            TaskQueueItem(task=task, workspace=ws, waiting_for_cli="codex" if n % 3 else "")
            for n, task in enumerate(rows)
            if task.status == "todo"
        )
        for c in range(chats):
            chat = Chat.objects.create(workspace=ws, title=f"chat {w}-{c}", last_seen_at=now)
            ChatMessage.objects.create(
                chat=chat,
                role="agent",
                message="reply",
                created_at=now + timezone.timedelta(seconds=1 if c % 2 else -1),
            )


def timed(fn, runs: int) -> tuple[float, int]:
    times = []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, len(queries)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspaces", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--chats", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    seed(args.workspaces, args.tasks, args.chats)
    found = needs_you()
    print(
        f"{args.workspaces} workspaces x {args.tasks} tasks, {args.chats} chats each: "
        f"{found.review_count} in review, {found.trouble_count} failing or waiting, "
        f"{found.chat_count} chats with an unseen reply"
    )
    for name, fn in (("needs_you()", needs_you), ("needs_you_count()", needs_you_count)):
        ms, queries = timed(fn, args.runs)
        print(f"{name}: median {ms:.1f} ms over {args.runs} runs, {queries} queries")


if __name__ == "__main__":
    main()
