"""Server time of the heavy pages at scale, in-process (no network, no browser).

Seeds a workspace with 2,000 tasks (spread over the four columns, with comments and agent runs)
and a 200-message chat, then renders through Django's test client and prints p50/p95 server
time, the median CPU time and the SQL query count of:
- the Kanban board (workspace page, tasks tab)
- the task detail popup (a task with 40 comments and 10 runs)
- the chat popup (200 messages)

    .venv/bin/python bench/pages.py [--tasks 2000] [--messages 200] [--repeat 20]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def percentile(values, pct):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def setup_django(data_dir: Path) -> None:
    os.environ["MALAMAR_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "malamar_site.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed(tasks: int, messages: int) -> dict:
    from django.utils import timezone

    from agents.services import agent_create
    from chats.models import ChatMessage
    from chats.services import chat_create
    from core.ids import new_id
    from runner.models import AgentRun, TraceEvent
    from tasks.models import Task, TaskComment
    from workspaces.services import workspace_create

    now = timezone.now()
    workspace = workspace_create(title="Bench")
    agents = [
        agent_create(workspace=workspace, name=name, instruction=f"You are the {name}.")
        for name in ("Planner", "Implementer", "Reviewer", "Approver")
    ]
    statuses = ["todo", "in_progress", "in_review", "done"]
    rows = [
        Task(
            id=new_id(),
            workspace=workspace,
            summary=f"Task number {n} with a reasonably long summary to ellipsize",
            description="Do the thing.\n\n- step one\n- step two",
            status=statuses[n % 4],
            created_at=now - timedelta(minutes=n),
            updated_at=now - timedelta(minutes=n),
        )
        for n in range(tasks)
    ]
    Task.objects.bulk_create(rows, batch_size=500)
    comments = [
        TaskComment(
            id=new_id(),
            task=task,
            workspace=workspace,
            agent_id=agents[i % 4].id,
            kind="agent",
            content=f"Comment {i}: **looks good**, see `app/models.py`.\n\n```python\nx = {i}\n```",
            created_at=now - timedelta(seconds=i),
        )
        for task in rows[:500]
        for i in range(3)
    ]
    detail_task = rows[1]  # in progress
    comments += [
        TaskComment(
            id=new_id(),
            task=detail_task,
            workspace=workspace,
            agent_id=agents[i % 4].id,
            kind="agent",
            content=f"Step {i}\n\n| file | change |\n|---|---|\n| a.py | edit |\n\n- [x] done",
            created_at=now - timedelta(seconds=100 - i),
        )
        for i in range(40)
    ]
    TaskComment.objects.bulk_create(comments, batch_size=500)
    runs = []
    for i in range(10):
        run = AgentRun(
            id=new_id(),
            workspace=workspace,
            task=detail_task,
            agent_id=agents[i % 4].id,
            agent_name=agents[i % 4].name,
            cli_type="claude",
            status="running" if i == 9 else "completed",
            started_at=now - timedelta(minutes=10 - i),
            ended_at=None if i == 9 else now - timedelta(minutes=9 - i),
            input_tokens=1200,
            output_tokens=300,
            cost_usd=0.02,
            trace_count=30,
        )
        runs.append(run)
    AgentRun.objects.bulk_create(runs)
    TraceEvent.objects.bulk_create(
        TraceEvent(
            run=run,
            seq=s + 1,
            kind="action",
            action_kind=("command", "command-result", "file-read")[s % 3],
            text="Running `pytest`" if s % 3 == 0 else "Reading app/models.py",
            detail={"command": "pytest", "exit_code": 0, "output": "3 passed"},
            created_at=now,
        )
        for run in runs
        for s in range(30)
    )
    chat = chat_create(workspace=workspace, agent=agents[0], title="Long chat")
    ChatMessage.objects.bulk_create(
        ChatMessage(
            id=new_id(),
            chat=chat,
            role="user" if i % 2 == 0 else "agent",
            agent_id=None if i % 2 == 0 else agents[0].id,
            agent_name="" if i % 2 == 0 else agents[0].name,
            message=f"Message {i}: a paragraph with `code` and a list:\n\n- one\n- two",
            created_at=now - timedelta(seconds=messages - i),
        )
        for i in range(messages)
    )
    return {"workspace": workspace, "task": detail_task, "chat": chat}


def measure(client, url: str, repeat: int, **headers) -> tuple[list[float], list[float], int, int]:
    from django.db import connection

    response = client.get(url, **headers)  # warm caches (templates, markdown)
    assert response.status_code == 200, (url, response.status_code)
    queries = []  # counted with a wrapper: each request start clears Django's query log
    with connection.execute_wrapper(lambda run, sql, *rest: queries.append(sql) or run(sql, *rest)):
        client.get(url, **headers)
    times, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get(url, **headers)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return times, cpu, len(queries), len(response.content)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    setup_django(Path(tempfile.mkdtemp(prefix="malamar-bench-pages-")))
    from django.test import Client
    from django.urls import reverse

    data = seed(args.tasks, args.messages)
    client = Client(HTTP_HOST="127.0.0.1")
    htmx = {"HTTP_HX_REQUEST": "true"}
    board = reverse("workspace_detail", args=[data["workspace"].id]) + "?tab=tasks"
    pages = [
        (f"board ({args.tasks} tasks)", board, {}),
        (
            "task detail (40 comments, 10 runs)",
            reverse("task_detail", args=[data["task"].id]),
            htmx,
        ),
        (f"chat popup ({args.messages} msgs)", reverse("chat_popup", args=[data["chat"].id]), htmx),
    ]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load {load}; CPU ms: this process's CPU time (SQLite included), steadier under load")
    print(
        f"{'page':<40} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'CPU ms':>8}"
        f" {'queries':>8} {'KB':>6}"
    )
    for name, url, headers in pages:
        times, cpu, queries, size = measure(client, url, args.repeat, **headers)
        print(
            f"{name:<40} {statistics.median(times):8.1f} {percentile(times, 95):8.1f} "
            f"{max(times):8.1f} {statistics.median(cpu):8.1f} {queries:8d} {size / 1024:6.0f}"
        )


if __name__ == "__main__":
    main()
