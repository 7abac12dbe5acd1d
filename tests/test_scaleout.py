"""Malamar scaled out, end to end (issue 21's "Done when"): a real PostgreSQL and Redis, 2 server
processes and 3 workers (tests/scaleout.py), 200 tasks over 40 workspaces with a fake CLI that
takes ~1 s, one worker killed with SIGKILL mid-run.

One test function (~1 minute on 2 busy cores). Parts that need work not merged yet are not
silently dropped: each says why in a warning (shown in pytest's summary) and turns on by
itself once the feature exists:
- several workers: only when a worker has a capacity (`runworker --capacity` or
  MALAMAR_WORKER_CAPACITY; before that one worker runs everything, and its kill -9 is recovered
  by restarting it, as today);
- every SSE client sees every event once, in order: only when REDIS_URL gives a channel layer.
"""

import contextlib
import re
import signal
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from tests import databases
from tests.live import process_env, wait_until
from tests.scaleout import (
    Api,
    Cluster,
    Databases,
    channel_layer_configured,
    overlapping_runs,
    parse_time,
    worker_capacity_supported,
)
from tests.services import Postgres, Redis

pytestmark = [pytest.mark.live, pytest.mark.scaleout]

SERVERS = 2
WORKERS = 3
CAPACITY = 8  # concurrent runs per worker: 24 in all, ~9 rounds of 1 s for 200 tasks
WORKSPACES = 40
TASKS_PER_WORKSPACE = 5
FINISH_TIMEOUT = 240
# A killed worker's runs are taken over after a few seconds, not the production 30 (ignored
# where the options do not exist yet).
FAST_RECOVERY = {"MALAMAR_WORKER_HEARTBEAT": "1", "MALAMAR_WORKER_STALE_AFTER": "5"}
TASK_FOLDER = re.compile(r"malamar_task_([A-Za-z0-9_-]+)")


def done_text(ws: int, n: int) -> str:
    return f"done-{ws}-{n}"


def create_workspace_tasks(cluster: Cluster, ws: int) -> list[tuple[dict, str]]:
    """Workspace `ws` with one agent and 5 tasks (through server ws % 2): each sleeps 1 s in the
    fake CLI, then comments its own text and asks for review."""
    api = Api(cluster.servers[ws % SERVERS].url)
    workspace = api.workspace(f"Scale {ws}")
    created = []
    for n in range(TASKS_PER_WORKSPACE):
        text = done_text(ws, n)
        created.append((api.task(workspace, f"@fake sleep 1 review {text}", summary=text), text))
    return created


def create_tasks(cluster: Cluster) -> tuple[list[dict], dict[str, str]]:
    """Every workspace and task, by 8 clients at once (as many users would)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        batches = pool.map(lambda ws: create_workspace_tasks(cluster, ws), range(WORKSPACES))
        pairs = [pair for batch in batches for pair in batch]
    return [task for task, _ in pairs], {task["id"]: text for task, text in pairs}


def kill_a_busy_worker(cluster: Cluster) -> tuple[str, str]:
    """kill -9 a worker while it runs a task's CLI; (its name, that CLI's task). The worker is
    stopped (SIGSTOP) while its CLIs are looked at: a CLI seen then has not been reaped, so its
    run is not recorded as done (under load a CLI seen running used to finish and be recorded
    before the kill, and the test then found one completed run where it expected a re-run).
    Its run's row must be there too: it is written while the CLI starts (worker.pipeline's
    _start), and a kill before that commit leaves no run to mark interrupted (the agent runs
    again all the same; tests/test_restarts.py)."""

    def stopped_with_a_task_cli():
        for worker in (w for w in cluster.workers if w.alive and w.cli_children()):
            worker.proc.send_signal(signal.SIGSTOP)
            task_id = next(filter(running_with_a_row, map(task_of, worker.cli_children())), "")
            if task_id:
                return worker, task_id
            worker.proc.send_signal(signal.SIGCONT)  # a health check's CLI: not that one
        return None

    def running_with_a_row(task_id: str) -> bool:
        query = "SELECT 1 FROM agent_runs WHERE task_id = %s AND status = 'running'"
        return bool(task_id) and bool(cluster.sql(query, task_id))

    busy, task_id = wait_until(
        stopped_with_a_task_cli, timeout=60, what="a worker running a task's CLI", interval=0.02
    )
    cluster.kill9(busy)
    return busy.name, task_id


def task_of(cli: psutil.Process) -> str:
    """The task whose folder the CLI runs in ("" for a health check, or one that just ended)."""
    try:
        match = TASK_FOLDER.search(cli.cwd())
    except psutil.Error:
        return ""
    return match.group(1) if match else ""


def event_number(event_id: str) -> int:
    """django-eventstream's ids are "CHANNEL:N" (a bare N from older versions)."""
    return int(event_id.rsplit(":", 1)[-1])


def check_sse(streams: list[list], comment_ids: set[str]) -> None:
    """Every server's stream: each event once (no repeated id), ids in increasing order, every
    agent comment announced exactly once, and the same events in the same order everywhere."""
    sequences = []
    for index, events in enumerate(streams):
        ids = [event_number(e[0]) for e in events if e[0] is not None]
        assert len(ids) == len(set(ids)), f"server {index}: an event arrived twice"
        assert ids == sorted(ids), f"server {index}: events out of order"
        announced = [
            e[2]["comment_id"] for e in events if e[1] == "task.comment_added" and e[2] is not None
        ]
        seen = [c for c in announced if c in comment_ids]
        assert sorted(seen) == sorted(comment_ids), f"server {index}: comment events lost/doubled"
        sequences.append([(e[0], e[1]) for e in events])
    for index, sequence in enumerate(sequences[1:], start=1):
        pairs = zip(sequences[0], sequence, strict=False)
        first = next((n for n, (a, b) in enumerate(pairs) if a != b), None)
        assert sequence == sequences[0], (
            f"servers 0 and {index} streamed different events: {len(sequences[0])} and"
            f" {len(sequence)}, first difference at {first}:"
            f" {sequences[0][first : first + 3] if first is not None else sequences[0][-3:]}"
            f" vs {sequence[first : first + 3] if first is not None else sequence[-3:]}"
        )


def warm_up(cluster: Cluster, clients) -> list[int] | None:
    """Workspaces created until one reaches every stream (a server's stream may go live a
    moment after its client saw it open); per stream, where the events after it start. None if
    none got through in 5 tries."""
    api = cluster.api(0)
    for attempt in range(5):
        marker = api.workspace(f"Warm-up {attempt}", agents=())["id"]

        def positions(marker=marker) -> list[int | None]:
            return [
                next(
                    (
                        n
                        for n, e in enumerate(c.events)
                        if e[2] and e[2].get("workspace_id") == marker
                    ),
                    None,
                )
                for c in clients
            ]

        with contextlib.suppress(AssertionError):
            wait_until(lambda: None not in positions(), timeout=3, what="the warm-up event")
            if attempt:
                print(f"\nthe streams went live after {attempt + 1} warm-up workspaces")
            return [n + 1 for n in positions()]
    return None


def sse_today(clients, comment_ids: set[str]) -> str:
    """What the streams show without the channel layer (reported, not asserted)."""
    try:
        check_sse([c.events for c in clients], comment_ids)
    except (AssertionError, ValueError, KeyError, TypeError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "all checks passed already"


def span(start: int, end: int | None) -> dict:
    return {
        "started_at": f"2026-01-01T00:00:{start:02}Z",
        "ended_at": end and f"2026-01-01T00:00:{end:02}Z",
    }


def test_overlap_check_finds_runs_at_once():
    assert not overlapping_runs([span(0, 5), span(5, 9), span(10, 11)])
    assert overlapping_runs([span(0, 9), span(2, 3), span(4, 5)]) == [
        (span(0, 9), span(2, 3)),
        (span(0, 9), span(4, 5)),
    ]
    assert overlapping_runs([span(0, 3), span(1, None)])


def test_a_process_given_the_clusters_database_gets_no_database_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(databases, "ON_POSTGRES", True)  # as in a PostgreSQL run of the suite
    monkeypatch.setattr(databases, "url_for", lambda data_dir: pytest.fail("created a database"))
    env = process_env(tmp_path, DATABASE_URL="postgres://malamar@db/shared")
    assert env["DATABASE_URL"] == "postgres://malamar@db/shared"


@databases.postgres_only("scale-out runs in the PostgreSQL pass (its own PostgreSQL and Redis)")
def test_scaled_out_malamar_runs_every_task_exactly_once(tmp_path):
    not_checked = []
    multi = worker_capacity_supported()
    if not multi:
        not_checked.append(
            "several workers (no worker capacity yet): 1 worker ran everything and its"
            " kill -9 was recovered by a restart"
        )
    pg, redis = Postgres().start(), Redis().start()
    databases = Databases(pg.url())
    url = databases.create("scaleout", template=databases.migrated_template(tmp_path))
    cluster = Cluster(tmp_path, url, redis_url=redis.url, env=FAST_RECOVERY)
    try:
        cluster.start(servers=SERVERS, workers=WORKERS if multi else 1, capacity=CAPACITY)
        clients = [cluster.sse(i) for i in range(SERVERS)]
        layer = channel_layer_configured(redis.url)
        live_from = warm_up(cluster, clients) if layer else None
        started = time.monotonic()
        tasks, expected = create_tasks(cluster)
        created = time.monotonic() - started
        killed, killed_task = kill_a_busy_worker(cluster)
        killed_at = time.time()
        if not multi:
            cluster.start_worker(name=killed)  # the same machine's worker comes back
        cluster.api(0).wait_finished(tasks, timeout=FINISH_TIMEOUT)
        elapsed = time.monotonic() - started
        comment_ids = check_tasks(cluster, tasks, expected, killed_task)
        if layer:
            assert live_from is not None, "no event reached every server's stream"

            def settled() -> bool:
                streams = [c.events[n:] for c, n in zip(clients, live_from, strict=True)]
                comments = [sum(e[1] == "task.comment_added" for e in st) for st in streams]
                return min(comments) >= len(comment_ids) and len(set(map(len, streams))) == 1

            with contextlib.suppress(AssertionError):  # check_sse says what differs
                wait_until(settled, timeout=30, what="every event on every stream")
            check_sse([c.events[n:] for c, n in zip(clients, live_from, strict=True)], comment_ids)
        else:
            today = sse_today(clients, comment_ids)
            not_checked.append(f"SSE on each server (no channel layer yet; today: {today})")
        for client in clients:
            client.close()
        workers = len(cluster.workers)
        rerun = cluster.api(0).runs(killed_task)[-1] if killed_task else None
        if rerun:
            print(
                f"\nkilled run re-started {parse_time(rerun['started_at']) - killed_at:.1f} s later"
            )
        print(
            f"\n{len(tasks)} tasks (created in {created:.1f} s) done in {elapsed:.1f} s"
            f" by {workers} worker processes (one killed)"
        )
    finally:
        cluster.stop()
        pg.stop()
        redis.stop()
    for reason in not_checked:
        warnings.warn(f"scale-out: not checked yet: {reason}", stacklevel=1)


def check_tasks(cluster: Cluster, tasks, expected, killed_task: str) -> set[str]:
    """Every task in review with exactly one agent comment, its own; one completed run each; no
    two runs of a workspace overlapping; the killed run's task finished after a re-run. Statuses
    and the killed task through the API of the other server, the bulk from the database."""
    api = cluster.api(1)
    statuses = api.statuses(sorted({t["workspace_id"] for t in tasks}))
    assert {statuses[t["id"]] for t in tasks} == {"in_review"}
    comments = {}
    for comment_id, task_id, content in cluster.sql(
        "SELECT id, task_id, content FROM task_comments WHERE agent_id IS NOT NULL"
    ):
        comments.setdefault(task_id, []).append((comment_id, content))
    assert {task_id: [c[1] for c in found] for task_id, found in comments.items()} == {
        task_id: [text] for task_id, text in expected.items()
    }, "a task's agent comment is missing, doubled or another task's"
    runs_by_workspace, completed = {}, {}
    for task_id, workspace_id, status, started_at, ended_at in cluster.sql(
        "SELECT task_id, workspace_id, status, started_at, ended_at FROM agent_runs"
        " WHERE task_id IS NOT NULL"
    ):
        run = {"started_at": started_at, "ended_at": ended_at, "status": status}
        runs_by_workspace.setdefault(workspace_id, []).append(run)
        completed[task_id] = completed.get(task_id, 0) + (status == "completed")
    assert completed == dict.fromkeys(expected, 1), "a task ran to completion twice or never"
    for workspace_id, runs in runs_by_workspace.items():
        assert not overlapping_runs(runs), f"two runs at once in workspace {workspace_id}"
    if killed_task:
        statuses = [r["status"] for r in api.runs(killed_task)]
        assert len(statuses) >= 2 and statuses[-1] == "completed", statuses
    return {found[0][0] for found in comments.values()}
