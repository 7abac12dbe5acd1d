"""Publish→client latency of live events published by another process (like the worker).

Starts a real server on a temp data dir, opens an SSE client, publishes paced events from a
separate OS process, and prints p50/p95/max latency. Target: p95 <= 100 ms.

    .venv/bin/python bench/events.py [--events 200] [--interval-ms 20]
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=20)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="malamar-bench-"))
    manage(data_dir, "migrate", "--no-input")
    server = Server(data_dir).start()
    try:
        client = SseClient(server.url)
        django_script(
            data_dir, PUBLISHER.format(count=args.events, interval=args.interval_ms / 1000)
        )
        wait_until(
            lambda: len(client.of_type("task.updated")) >= args.events, timeout=60, what="events"
        )
        latencies = [
            (received - data["sent_at"]) * 1000
            for _id, _type, data, received in client.of_type("task.updated")
        ]
        client.close()
    finally:
        server.stop()
    print(
        f"events: {len(latencies)} published from a separate process, paced {args.interval_ms} ms"
    )
    print(f"latency p50: {statistics.median(latencies):.1f} ms")
    print(f"latency p95: {percentile(latencies, 95):.1f} ms  (target <= 100 ms)")
    print(f"latency max: {max(latencies):.1f} ms")


if __name__ == "__main__":
    main()
