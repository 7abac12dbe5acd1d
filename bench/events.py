"""Publish→client latency of live events published by another process (like the worker).

Starts real servers, opens an SSE client on each, publishes paced events from a separate OS
process, and prints p50/p95/max latency per server. Target: p95 <= 100 ms.

    .venv/bin/python bench/events.py [--events 200] [--interval-ms 20]
        one server on SQLite (the default deployment)
    .venv/bin/python bench/events.py --redis [--servers 2]
        servers sharing a real PostgreSQL and Redis (tests.services): the relay runs in one of
        them, the others get each event through the Redis channel layer
    .venv/bin/python bench/events.py --postgres
        one server on PostgreSQL without Redis
    --idle 30: first, with a client on each server and nothing published, the CPU each server
        process uses over 30 s (the relay's poll, the listener's tick)
    .venv/bin/python bench/events.py --scale [--servers 2 --workers 3 --tasks 80
            --workspaces 25 --agents 3 --sleep-ms 1000-2000]
        live events under a real load: PostgreSQL, Redis, 2 servers and 3 workers running 80
        tasks (25 workspaces of 3 agents; bench/fakecli.c as `codex`, each run sleeping 1-2 s).
        An SSE client on each server; the latency of an event is the time from its outbox row
        (written in the transaction of the change) to its arrival on the stream, for every
        event of the batch. Prints p50/p95/max per server, the events that never arrived, the
        machine's load, and where the time went: the change's commit (PostgreSQL's commit
        timestamps), the relay storing it, the CPU the servers and workers used.
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.runner import compile_fake_cli
from tests.deployment import Deployment
from tests.live import Server, SseClient, django_script, manage, wait_until
from tests.scaleout import Cluster, Databases, parse_time
from tests.services import Postgres, Redis

PUBLISHER = """
import time
from core.events import publish
for seq in range({count}):
    publish("task.updated", {{"workspace_id": "bench", "seq": seq, "sent_at": time.time()}})
    time.sleep({interval})
"""


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


@contextlib.contextmanager
def sqlite_servers(root: Path, count: int):
    manage(root, "migrate", "--no-input")
    servers = [Server(root).start()]
    try:
        yield servers, lambda code: django_script(root, code)
    finally:
        servers[0].stop()


@contextlib.contextmanager
def shared_servers(root: Path, count: int, redis: bool):
    deployment = Deployment(root, redis=redis)
    try:
        servers = [deployment.server(f"server-{n}") for n in range(count)]
        yield servers, deployment.script
    finally:
        deployment.stop()


def idle_cpu(servers: list, seconds: float) -> list[float]:
    """Percent of one core each server process used over `seconds` with nothing to send."""
    processes = [psutil.Process(server.proc.pid) for server in servers]
    time.sleep(2)  # past the start-up work (the relay's lock, the listener joining)
    before = [sum(p.cpu_times()[:2]) for p in processes]
    time.sleep(seconds)
    return [
        (sum(p.cpu_times()[:2]) - start) / seconds * 100
        for p, start in zip(processes, before, strict=True)
    ]


CREATE_TASKS = """
import json, time
from django.db import transaction
from tasks.services import task_create
from workspaces.models import Workspace
ids = json.loads({ids!r})
spaces = Workspace.objects.in_bulk(ids)
with transaction.atomic():
    for n in range({tasks}):
        task_create(workspace=spaces[ids[n % len(ids)]], summary=f"T{{n}}", description="bench")
"""


UNFINISHED = "SELECT count(*) FROM tasks WHERE status NOT IN ('in_review', 'done')"


def stored_at(cluster: Cluster, created: dict[int, float]) -> dict[int, float]:
    """Outbox id → when the relay stored its event (the shared replay log)."""
    stored = {}
    for data, at in cluster.sql("SELECT data, created FROM django_eventstream_event WHERE eid > 0"):
        payload = json.loads(data)
        payload = json.loads(payload) if isinstance(payload, str) else payload
        if payload.get("outbox_id") in created:
            stored[payload["outbox_id"]] = parse_time(at)
    return stored


class ProcessCpu:
    """CPU time the cluster's servers and workers (with the CLIs and git they start) use."""

    def __init__(self, cluster: Cluster):
        self.groups = {
            "servers": [psutil.Process(s.proc.pid) for s in cluster.servers],
            "workers": [psutil.Process(w.proc.pid) for w in cluster.workers],
        }
        self.start = {name: self._total(procs) for name, procs in self.groups.items()}

    @staticmethod
    def _total(processes) -> float:
        total = 0.0
        for process in processes:
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def used(self) -> dict[str, float]:
        return {name: self._total(p) - self.start[name] for name, p in self.groups.items()}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def scale(args) -> None:
    """The change → stream latency of every event while workers run a batch of tasks."""
    root = Path(tempfile.mkdtemp(prefix="malamar-bench-events-"))
    os.chmod(root, 0o755)
    bin_dir = compile_fake_cli(root / "bin").parent
    pg, redis = Postgres("track_commit_timestamp=on").start(), Redis().start()
    databases = Databases(pg.url())
    url = databases.create("bench_events", template=databases.migrated_template(root))
    cluster = Cluster(
        root, url, redis_url=redis.url, fake_bin=bin_dir, env={"BENCH_FAKE_SLEEP_MS": args.sleep_ms}
    )
    try:
        cluster.start(servers=args.servers, workers=args.workers)
        api = cluster.api(0)
        agents = tuple(f"Agent {n}" for n in range(args.agents))
        ids = [api.workspace(f"W{n}", agents, cli="codex")["id"] for n in range(args.workspaces)]
        clients = [cluster.sse(n) for n in range(args.servers)]
        (first,) = cluster.sql("SELECT coalesce(max(id), 0) FROM event_outbox")[0]
        load_before = load()
        cpu = ProcessCpu(cluster)
        cluster.django(CREATE_TASKS.format(ids=json.dumps(ids), tasks=args.tasks))
        wait_until(  # read from the database: polling a server's API would load it
            lambda: not cluster.sql(UNFINISHED)[0][0],
            timeout=args.tasks * args.agents * 3 + 300,
            what="every task to finish",
            interval=0.5,
        )
        load_after, used = load(), cpu.used()
        rows = cluster.sql(
            "SELECT id, created_at, pg_xact_commit_timestamp(xmin) FROM event_outbox WHERE id > %s",
            first,
        )
        created = {row_id: parse_time(at) for row_id, at, _ in rows}
        committed = {row_id: parse_time(at) for row_id, _, at in rows}

        def arrived(client) -> dict[int, float]:
            return {
                data["outbox_id"]: at
                for _id, _type, data, at in list(client.events)
                if isinstance(data, dict) and data.get("outbox_id") in created
            }

        with contextlib.suppress(AssertionError):  # what never arrives is counted below
            wait_until(
                lambda: all(len(arrived(c)) == len(created) for c in clients),
                timeout=args.drain,
                what="every event on every stream",
                interval=0.5,
            )
        print(
            f"PostgreSQL + Redis, {args.servers} servers, {args.workers} workers:"
            f" {args.tasks} tasks over {args.workspaces} workspaces of {args.agents} agents,"
            f" runs sleeping {args.sleep_ms} ms; {len(created)} events; load {load_before}"
            f" before, {load_after} after"
        )
        print("CPU seconds during the batch: " + ", ".join(f"{k} {v:.1f}" for k, v in used.items()))
        stored = stored_at(cluster, created)
        spans = {
            "change → commit (the worker)": [committed[i] - created[i] for i in created],
            "commit → stored (the relay)": [stored[i] - committed[i] for i in stored],
        }
        for number, client in enumerate(clients):
            got = arrived(client)
            spans[f"stored → stream {number}"] = [got[i] - stored[i] for i in got if i in stored]
        for name, seconds in spans.items():
            print(
                f"{name}: p50 {statistics.median(seconds) * 1000:.0f} ms,"
                f" p95 {percentile(seconds, 95) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms"
            )
        for number, client in enumerate(clients):
            got = arrived(client)
            latencies = [(at - created[outbox_id]) * 1000 for outbox_id, at in got.items()]
            client.close()
            print(
                f"server {number}: change → stream p50 {statistics.median(latencies):.0f} ms,"
                f" p95 {percentile(latencies, 95):.0f} ms (target <= 1000 ms),"
                f" max {max(latencies):.0f} ms, never arrived {len(created) - len(got)}"
            )
        failures = sum(
            server.log.read_text(errors="replace").count("the channel layer failed")
            for server in cluster.servers
        )
        print(f"channel-layer failures the servers logged (Redis stayed up): {failures}")
    finally:
        cluster.stop()
        redis.stop()
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=20)
    parser.add_argument("--redis", action="store_true", help="PostgreSQL + Redis, 2 servers")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL, 1 server")
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--idle", type=float, default=0, help="seconds of idle CPU to measure")
    parser.add_argument("--scale", action="store_true", help="workers running tasks (see above)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=80)
    parser.add_argument("--workspaces", type=int, default=25)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--sleep-ms", default="1000-2000", help="each run's sleep (or MIN-MAX)")
    parser.add_argument("--drain", type=float, default=300, help="seconds to wait for stragglers")
    args = parser.parse_args()
    if args.scale:
        scale(args)
        return
    root = Path(tempfile.mkdtemp(prefix="malamar-bench-"))
    if args.redis:
        mode, started = "PostgreSQL + Redis", shared_servers(root, args.servers, redis=True)
    elif args.postgres:
        mode, started = "PostgreSQL", shared_servers(root, 1, redis=False)
    else:
        mode, started = "SQLite", sqlite_servers(root, 1)
    with started as (servers, run_script):
        clients = [SseClient(server.url) for server in servers]
        if args.idle:
            for number, cpu in enumerate(idle_cpu(servers, args.idle)):
                print(f"{mode}, server {number}: idle CPU {cpu:.2f} % of a core")
        run_script(PUBLISHER.format(count=args.events, interval=args.interval_ms / 1000))
        for client in clients:
            wait_until(
                lambda c=client: len(c.of_type("task.updated")) >= args.events,
                timeout=60,
                what="events",
            )
        print(
            f"{mode}, {len(servers)} server(s): {args.events} events published from a"
            f" separate process, paced {args.interval_ms} ms"
        )
        for number, client in enumerate(clients):
            latencies = [
                (received - data["sent_at"]) * 1000
                for _id, _type, data, received in client.of_type("task.updated")
            ]
            client.close()
            print(
                f"server {number}: p50 {statistics.median(latencies):.1f} ms,"
                f" p95 {percentile(latencies, 95):.1f} ms (target <= 100 ms),"
                f" max {max(latencies):.1f} ms"
            )


if __name__ == "__main__":
    main()
