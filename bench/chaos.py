"""kill -9 the worker at random moments while passes run, and check what a person would: no
agent's answered run is paid for again, no CLI is left running, no run stays "running", and
with `--comments`, no comment of theirs is lost.

    .venv/bin/python bench/chaos.py [--seed 1] [--kills 40] [--workspaces 3] [--tasks 6]
                                    [--comments N | --edits] [--postgres [--workers 3]]

A real server and worker (bench/runner.py's Stack, the fake CLI in C answering "skip" after a
random 5-60 ms), `--workspaces` workspaces of 4 agents with `--tasks` tasks each. Every 0.05-0.6
s the worker is killed with SIGKILL and started again (at most `--kills` times), until every
task is In Review. Then, per task: the agents whose runs completed must be A0, A1, A2, A3, once
each and in order (a run killed mid-way is "interrupted" and runs again: that is the crash's
cost; an agent that completed and ran again after a restart is a paid run lost). Prints the
tasks that break that, the runs left "running" and the CLIs still alive; exits 1 if any.

`--comments N`: the agents are tests/fakes' CLI (which logs the input each run read), A1
comments once per task (so a task's first pass loops once more), and N comments of the person
are posted on random tasks at random moments of the chaos (on a task In Review too, which sends
it back). It ends when all are posted and every task is In Review with nothing queued. Then,
per task, the completed runs must be whole loops A0-A3, A0-A3, ... (an agent twice in a row is
a paid run lost, one missing a lost step), and every comment of the person must be in the input
of some run (DESIGN "No lost comment").

`--edits`: every run appends a line to a file of its task's folder (the C stand-in's
`--bench-edit`), so every run has a diff; then no completed run may be left without its totals
(a run's totals are written with the next run's finish: a kill in between leaves them to the
recovery, worker.snapshotting.totals_recovered), no tree a run names may be missing from its
snapshot store and `git fsck` must find every store whole (objects are written into spare
files made ahead, runner.gitobjects: a kill may not leave one half-written).

`--postgres`: on a PostgreSQL of its own (Debian's, as the tests start it) with `--workers`
workers (DESIGN "Scale-out"); each kill takes a random one, whose runs another worker takes
over once its heartbeat is stale (0.5 s beats, stale after 3 s here).
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from bench.runner import ROOT, Stack

AGENTS = ["A0", "A1", "A2", "A3"]
FAKES_BIN = ROOT / "tests" / "fakes" / "bin"
WORKER = [sys.executable, str(ROOT / "manage.py"), "runworker"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--workspaces", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=6, help="per workspace")
    parser.add_argument("--comments", type=int, default=0, help="the person's, posted meanwhile")
    parser.add_argument("--edits", action="store_true", help="every run edits a file")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--workers", type=int, default=3, help="with --postgres")
    args = parser.parse_args()
    if args.comments and args.edits:  # (tests/fakes' CLI takes the real CLIs' flags only)
        parser.error("--edits needs the C stand-in: not with --comments")
    chance = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="malamar-chaos-"))
    stack = Stack(root, via="manage", count_sql=False)
    postgres = None
    if args.postgres:
        from tests.services import Postgres

        postgres = Postgres().start()
        stack.env["DATABASE_URL"] = postgres.url("postgres")
        stack.env["MALAMAR_WORKER_HEARTBEAT"] = "0.5"
        stack.env["MALAMAR_WORKER_STALE_AFTER"] = "3"
        stack.sql = Query(postgres.url("postgres"))
    stack.env["BENCH_FAKE_SLEEP_MS"] = "5-60"
    fake_log = root / "fake.jsonl"
    if args.comments:
        stack.env["PATH"] = f"{FAKES_BIN}:{stack.env['PATH']}"
        stack.env.update({"MALAMAR_FAKE_LOG": str(fake_log), "MALAMAR_FAKE_LOG_INPUT": "1"})
    stack.start()
    for n in range(1, args.workers if args.postgres else 1):
        stack._spawn(f"worker{n}", WORKER)
    try:
        tasks = []
        for n in range(args.workspaces):
            workspace = stack.api("POST", "/workspaces", {"title": f"W{n}"})["id"]
            for name in AGENTS:
                instruction = "Go."
                if args.comments and name == "A1":
                    instruction += "\n@fake comment-once A plan for this task"
                agent = {"name": name, "cli_type": "codex", "instruction": instruction}
                if args.edits:
                    agent["extra_args"] = ["--bench-edit", "edited.txt"]
                stack.api("POST", f"/workspaces/{workspace}/agents", agent)
            tasks += [stack.task(workspace, f"t{k}") for k in range(args.tasks)]
        kills, posted = chaos(stack, chance, args.kills, tasks, args.comments)
        return report(stack, kills, posted, fake_log if args.comments else None, args.edits)
    finally:
        stack.stop()
        if postgres:
            postgres.stop()
        shutil.rmtree(root, ignore_errors=True)


class Query:
    """stack.sql on PostgreSQL: the same queries ("?" placeholders), autocommit."""

    def __init__(self, url: str):
        self.url, self.conn = url, None

    def __call__(self, query: str, *params) -> list[tuple]:
        import psycopg

        if self.conn is None:
            self.conn = psycopg.connect(self.url, autocommit=True)
        return self.conn.execute(query.replace("?", "%s"), params).fetchall()


def chaos(stack: Stack, chance: random.Random, most: int, tasks: list, comments: int):
    kills, posted, deadline = 0, [], time.monotonic() + 600
    while time.monotonic() < deadline:
        time.sleep(chance.uniform(0.05, 0.6))
        if len(posted) < comments and chance.random() < 0.5:
            content = f"Person's note {len(posted) + 1} ({chance.randrange(10**6)})"
            stack.api("POST", f"/tasks/{chance.choice(tasks)}/comments", {"content": content})
            posted.append(content)
        if len(posted) == comments and settled(stack, len(tasks)):
            break
        if kills < most:
            name = chance.choice(sorted(name for name in stack.procs if name.startswith("worker")))
            stack.procs[name].send_signal(signal.SIGKILL)
            stack.procs[name].wait()
            kills += 1
            stack._spawn(name, WORKER)
    return kills, posted


def settled(stack: Stack, tasks: int) -> bool:
    """Every task In Review, no pass queued or running."""
    in_review = stack.sql("SELECT count(*) FROM tasks WHERE status = 'in_review'")[0][0]
    waiting = "SELECT count(*) FROM task_queue WHERE status IN ('queued', 'in_progress')"
    return in_review == tasks and stack.sql(waiting)[0][0] == 0


def whole_loops(names: list[str]) -> bool:
    return len(names) % len(AGENTS) == 0 and names == AGENTS * (len(names) // len(AGENTS))


def report(
    stack: Stack, kills: int, posted: list[str], fake_log: Path | None, edits: bool = False
) -> int:
    time.sleep(2)  # the last runs' processes end
    statuses = dict(stack.sql("SELECT status, count(*) FROM tasks GROUP BY status"))
    running = stack.sql("SELECT count(*) FROM agent_runs WHERE status = 'running'")[0][0]
    runs_by_status = dict(stack.sql("SELECT status, count(*) FROM agent_runs GROUP BY status"))
    broken = []
    for (task_id,) in stack.sql("SELECT id FROM tasks"):
        runs = stack.sql(
            "SELECT agent_name, status FROM agent_runs WHERE task_id = ? ORDER BY started_at",
            task_id,
        )
        completed = [name for name, status in runs if status == "completed"]
        if completed != AGENTS and not (fake_log and completed and whole_loops(completed)):
            broken.append((task_id, runs))
    alive = [
        p
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == "codex" or "fakecli" in " ".join(p.info["cmdline"] or ())
    ]
    rule = "whole loops A0-A3" if fake_log else "A0-A3 once each"
    print(
        f"{kills} kills; tasks by status {statuses}; runs by status {runs_by_status}; "
        f"runs left running {running}; "
        f"tasks whose completed runs are not {rule} {len(broken)}; CLIs alive {len(alive)}"
    )
    for task_id, runs in broken[:5]:
        print(f"  {task_id}: {runs}")
    lost = []
    if fake_log:
        inputs = [json.loads(line).get("input") or "" for line in fake_log.open()]
        lost = [note for note in posted if not any(note in text for text in inputs)]
        print(f"{len(posted)} comments of the person; in no agent's input {len(lost)}")
        for note in lost[:5]:
            print(f"  lost: {note}")
    uncounted = 0
    if edits:
        counted = stack.sql(
            "SELECT count(*) FROM agent_runs WHERE status = 'completed' AND tree_after != ''"
            " AND tree_after != tree_before AND files_changed > 0"
        )[0][0]
        uncounted = stack.sql(
            "SELECT count(*) FROM agent_runs WHERE status = 'completed' AND tree_after != ''"
            " AND files_changed IS NULL"
        )[0][0]
        print(f"completed runs with a diff counted {counted}; left without totals {uncounted}")
        uncounted += broken_trees(stack)
    failed = running or broken or alive or lost or uncounted or set(statuses) != {"in_review"}
    return 1 if failed else 0


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def broken_trees(stack: Stack) -> int:
    """The trees the runs name that their stores lack, and the stores git finds corrupt (a
    kill while an object was written must leave none half-written)."""
    stores = stack.data_dir / "snapshots"
    named = stack.sql(
        "SELECT snapshot_store, tree_before FROM agent_runs WHERE tree_before != ''"
        " UNION SELECT snapshot_store, tree_after FROM agent_runs WHERE tree_after != ''"
    )
    missing = 0
    for store in {store for store, _tree in named}:
        listing = "".join(f"{tree}\n" for name, tree in named if name == store)
        checked = subprocess.run(
            ["git", "cat-file", "--batch-check"], input=listing, capture_output=True, text=True,
            env={**GIT_ENV, "GIT_DIR": str(stores / store)}, check=False,
        )  # fmt: skip
        missing += checked.stdout.count(" missing")
    corrupt = 0
    for store in sorted(stores.iterdir()) if stores.is_dir() else []:
        fsck = subprocess.run(
            ["git", "fsck", "--no-dangling", "--no-progress"], capture_output=True, text=True,
            env={**GIT_ENV, "GIT_DIR": str(store)}, check=False,
        )  # fmt: skip
        # (the empty tree, which git knows without storing it, is "missing" to fsck when a
        # store's index names it: no object of ours)
        found = [line for line in fsck.stdout.splitlines() if line != f"missing tree {EMPTY_TREE}"]
        if found or (fsck.returncode != 0 and not fsck.stdout):
            corrupt += 1
            if corrupt <= 3:
                print(f"  git fsck of {store.name}: {found[:3]} {fsck.stderr[-300:]}")
    print(f"trees the runs name missing from their stores {missing}; stores fsck rejects {corrupt}")
    return missing + corrupt


if __name__ == "__main__":
    sys.exit(main())
