"""Live events across two real servers sharing a real PostgreSQL and a real Redis (issue 21):
every client on every server sees every event once, in id order; the relay fails over when its
server is killed; a client reconnecting to the other server with Last-Event-ID gets what it
missed."""

import threading

import pytest
import requests

from tests.deployment import Deployment
from tests.live import SseClient, wait_until

pytestmark = pytest.mark.live


@pytest.fixture
def deployment(tmp_path):
    running = Deployment(tmp_path)
    yield running
    running.stop()


def _numeric(event_id: str) -> int:
    return int(event_id.rsplit(":", 1)[1])


def _received(client: SseClient) -> list[tuple[int, str, int]]:
    return [
        (_numeric(event_id), data["publisher"], data["seq"])
        for event_id, _type, data, _at in client.of_type("task.updated")
    ]


def _create_tasks(server, count: int) -> list[str]:
    """Tasks created through server's API (events published by its request handlers)."""
    api = f"{server.url}/api"
    workspace = requests.post(f"{api}/workspaces", json={"title": "Scale"}, timeout=30).json()
    return [
        requests.post(
            f"{api}/workspaces/{workspace['id']}/tasks",
            json={"summary": f"Task {n}", "description": "d"},
            timeout=30,
        ).json()["id"]
        for n in range(count)
    ]


def _streamed(client: SseClient) -> list[tuple[str, str]]:
    return [(event_id, event_type) for event_id, event_type, *_ in client.events]


def _since_both_connected(*clients: SseClient) -> bool:
    start = max(_numeric(client.events[0][0]) for client in clients)
    streams = [[e for e in _streamed(c) if _numeric(e[0]) >= start] for c in clients]
    return all(stream == streams[0] for stream in streams)


def _created_tasks(client: SseClient) -> list[str]:
    return [data["task_id"] for _id, _type, data, _at in client.of_type("task.created")]


def _assert_once_in_order(received, expected_counts: dict[str, int]) -> None:
    ids = [event_id for event_id, _, _ in received]
    assert ids == sorted(set(ids)), "event ids repeated or out of order"
    for name, count in expected_counts.items():
        seqs = [seq for _, publisher, seq in received if publisher == name]
        assert seqs == list(range(count)), f"{name}: not every event once, in order"


def test_every_server_streams_every_event_once_in_order_and_the_relay_fails_over(deployment):
    first, second = deployment.server("a"), deployment.server("b")
    on_first, on_second = SseClient(first.url), SseClient(second.url)

    publishing = threading.Thread(target=deployment.publish, kwargs={"p1": 150, "p2": 150})
    publishing.start()
    tasks = _create_tasks(first, 20)  # meanwhile, through the API of one server
    publishing.join()
    for client in (on_first, on_second):
        wait_until(lambda c=client: len(_received(c)) >= 300, timeout=60, what="300 events")
        wait_until(lambda c=client: len(_created_tasks(c)) >= 20, timeout=60, what="20 tasks")
        _assert_once_in_order(_received(client), {"p1": 150, "p2": 150})
        assert _created_tasks(client) == tasks
        all_ids = [_numeric(event_id) for event_id, *_ in client.events]
        assert all_ids == sorted(set(all_ids)), "event ids repeated or out of order"
    # (A client starts at the stream's head: the first-launch events relayed before one of
    # them connected are not its own.)
    wait_until(
        lambda: _since_both_connected(on_first, on_second),
        timeout=30,
        what="both servers to have streamed the same events under the same ids",
    )

    holder = deployment.relay_holder()
    survivor, lost_client = (second, on_first) if holder is first else (first, on_second)
    survivor_client = on_second if survivor is second else on_first
    last_seen_on_lost = client_last_id = lost_client.of_type("task.updated")[-1][0]
    holder.proc.kill()  # kill -9: its database session, and the relay lock, go with it
    holder.proc.wait()

    deployment.publish(p3=50)
    wait_until(lambda: len(_received(survivor_client)) >= 350, timeout=60, what="failover")
    _assert_once_in_order(_received(survivor_client), {"p1": 150, "p2": 150, "p3": 50})
    all_ids = [_numeric(event_id) for event_id, *_ in survivor_client.events]
    assert all_ids == sorted(set(all_ids)), "event ids repeated or out of order"
    assert deployment.relay_holder() is survivor

    # The killed server's client reconnects to the survivor and replays what it missed.
    replay = SseClient(survivor.url, last_event_id=client_last_id)
    wait_until(lambda: len(_received(replay)) >= 50, timeout=30, what="50 replayed events")
    missed = [e for e in _received(survivor_client) if e[0] > _numeric(last_seen_on_lost)]
    assert _received(replay) == missed
    for client in (on_first, on_second, replay):
        client.close()


def test_events_keep_flowing_to_every_server_while_redis_restarts(deployment):
    first, second = deployment.server("a"), deployment.server("b")
    clients = [SseClient(first.url), SseClient(second.url)]
    deployment.publish(before=40)
    for client in clients:
        wait_until(lambda c=client: len(_received(c)) >= 40, timeout=60, what="40 events")

    port = deployment.redis.port
    deployment.redis.stop()
    deployment.publish(during=40)  # the relay cannot reach Redis: the storage carries them
    for client in clients:
        wait_until(lambda c=client: len(_received(c)) >= 80, timeout=60, what="events, no Redis")
    deployment.restart_redis()
    assert deployment.redis.port == port
    deployment.publish(after=40)  # Redis is back, empty: the listeners join again
    for client in clients:
        wait_until(lambda c=client: len(_received(c)) >= 120, timeout=60, what="120 events")
        _assert_once_in_order(_received(client), {"before": 40, "during": 40, "after": 40})
        client.close()
