"""The input of an agent step on a task with a long history, in-process (no CLI): what the
worker renders between two agents (worker.pipeline.task_input_text).

A task of `--comments` agent comments and `--logs` activity logs (a task that went round its
agents many times). Printed, p50 over `--repeat` renders:
- from scratch: every row rendered (what each step paid before a pass kept its rows);
- in a pass: the rows rendered by the step before reused, one new comment and two new logs
  rendered (what a step pays now).

    .venv/bin/python bench/task_input.py [--comments 60] [--logs 200] [--repeat 50]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pages import setup_django  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--comments", type=int, default=60)
    parser.add_argument("--logs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="malamar-bench-input-") as data_dir:
        setup_django(Path(data_dir))
        measure(args.comments, args.logs, args.repeat)


def measure(comments: int, logs: int, repeat: int) -> None:
    from agents.services import agent_create
    from core.ids import new_id
    from tasks.models import Task, TaskComment, TaskLog
    from tasks.selectors import task_history
    from tasks.services import task_create
    from worker import prompts
    from worker.pipeline import task_input_text
    from workspaces.services import workspace_create

    workspace = workspace_create(title="Bench")
    agents = [
        agent_create(workspace=workspace, name=name, instruction=f"You are the {name}.")
        for name in ("Planner", "Implementer", "Reviewer", "Approver")
    ]
    task = task_create(workspace=workspace, summary="A long task", description="Many loops")

    def comment(n: int) -> TaskComment:
        return TaskComment(
            id=new_id(),
            task=task,
            workspace=workspace,
            agent_id=agents[n % 4].id,
            kind="agent",
            content=f"Round {n}: " + "what I did and what is left. " * 12,
        )

    def log(n: int) -> TaskLog:
        agent = agents[n % 4]
        return TaskLog(
            id=new_id(),
            task=task,
            workspace=workspace,
            event_type="agent_started" if n % 2 else "agent_finished",
            actor_type="agent",
            actor_id=agent.id,
            metadata={"agent_name": agent.name},
        )

    TaskComment.objects.bulk_create([comment(n) for n in range(comments)])
    TaskLog.objects.bulk_create([log(n) for n in range(logs)])
    task = Task.objects.select_related("workspace").get(id=task.id)
    names = [(agent.id, agent.name) for agent in agents]
    out = Path(tempfile.gettempdir()) / "malamar_output_bench.json"
    comments_now, logs_now = task_history(task)

    scratch, in_pass = [], []
    kept = hasattr(prompts, "RenderedRows")  # (a build from before a pass kept its rows)
    for n in range(repeat):
        history = (comments_now, logs_now)
        started = time.perf_counter()
        whole = task_input_text(task, agents[0], out, names, history)
        scratch.append(time.perf_counter() - started)
        if not kept:
            continue
        rendered = prompts.RenderedRows()
        task_input_text(task, agents[0], out, names, history, rendered=rendered)  # step k
        history = ([*comments_now, comment(n)], [*logs_now, log(n), log(n + 1)])
        started = time.perf_counter()
        task_input_text(task, agents[1], out, names, history, rendered=rendered)
        in_pass.append(time.perf_counter() - started)
    line = (
        f"task input, {comments} comments and {logs} logs ({len(whole):,} characters): "
        f"from scratch p50 {statistics.median(scratch) * 1000:.2f} ms"
    )
    if in_pass:
        median = statistics.median(in_pass) * 1000
        line += f"; in a pass (1 comment, 2 logs new) p50 {median:.2f} ms"
    print(line)


if __name__ == "__main__":
    main()
