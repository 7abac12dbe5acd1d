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
"""

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.deployment import Deployment
from tests.live import Server, SseClient, django_script, manage, wait_until

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=20)
    parser.add_argument("--redis", action="store_true", help="PostgreSQL + Redis, 2 servers")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL, 1 server")
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--idle", type=float, default=0, help="seconds of idle CPU to measure")
    args = parser.parse_args()
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
