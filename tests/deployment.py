"""Several servers sharing one PostgreSQL and one Redis, started for real (issue 21): for the
scale-out tests of live events and bench/events.py --redis. The servers are a
tests/scaleout.py Cluster (each with its own data dir, as if on another machine); this adds the
services it runs on and what the event tests need (publishers, Redis restarts, the relay's
lock holder)."""

import threading
from pathlib import Path

import psutil
import psycopg

from tests.live import Server
from tests.scaleout import Cluster, Databases
from tests.services import Postgres, Redis

PUBLISH = """
from django.db import transaction
from core.events import publish
for seq in range({count}):
    with transaction.atomic():
        publish("task.updated", {{"workspace_id": "w", "publisher": "{name}", "seq": seq}})
"""


class Deployment:
    """PostgreSQL + Redis + a Cluster of servers on them."""

    def __init__(self, root: Path, redis: bool = True):
        self.postgres = Postgres().start()
        self.redis = Redis().start() if redis else None
        databases = Databases(self.postgres.url())
        database_url = databases.create("malamar", template=databases.migrated_template(root))
        redis_url = self.redis.url if self.redis else ""
        self.cluster = Cluster(root, database_url, redis_url=redis_url)
        self.servers: list[Server] = self.cluster.servers

    def server(self, name: str) -> Server:
        return self.cluster.start_server(name)

    def restart_redis(self) -> None:
        """Redis (stopped) comes back empty on its port: groups and queued messages lost."""
        port = self.redis.port
        self.redis.stop()
        self.redis = Redis()
        self.redis.port = port
        self.redis.start()

    def script(self, code: str) -> None:
        """Python code in a separate process (like the worker) on the shared database."""
        self.cluster.django(code)

    def publish(self, **counts: int) -> None:
        """Publishers in separate processes at once: ids and commit order interleave."""
        threads = [
            threading.Thread(
                target=self.cluster.django, args=(PUBLISH.format(name=name, count=count), name)
            )
            for name, count in counts.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def relay_holder(self) -> Server:
        """The server whose database session holds the relay's advisory lock."""
        with psycopg.connect(self.cluster.database_url) as db:
            ports = {
                port
                for (port,) in db.execute(
                    "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a"
                    " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
                )
            }
        holders = [
            server
            for server in self.servers
            if server.proc.poll() is None
            and any(
                c.laddr.port in ports for c in psutil.Process(server.proc.pid).net_connections()
            )
        ]
        assert len(holders) == 1, f"{len(holders)} servers hold the relay lock"
        return holders[0]

    def stop(self) -> None:
        self.cluster.stop()
        if self.redis:
            self.redis.stop()
        self.postgres.stop()
