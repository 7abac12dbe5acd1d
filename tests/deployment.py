"""Several servers sharing one PostgreSQL and one Redis, started for real (issue 21): for the
scale-out tests of live events and bench/events.py --redis. Each server gets its own data dir,
as if on another machine."""

import threading
from pathlib import Path

import psutil
import psycopg

from tests.live import Server, django_script, manage
from tests.services import Postgres, Redis

PUBLISH = """
from django.db import transaction
from core.events import publish
for seq in range({count}):
    with transaction.atomic():
        publish("task.updated", {{"workspace_id": "w", "publisher": "{name}", "seq": seq}})
"""


class Deployment:
    """PostgreSQL + Redis + servers, each server with its own data dir (another machine)."""

    def __init__(self, root: Path, redis: bool = True):
        self.root = root
        self.postgres = Postgres().start()
        with psycopg.connect(self.postgres.url("postgres"), autocommit=True) as db:
            db.execute("CREATE DATABASE malamar")
        self.redis = Redis().start() if redis else None
        self.env = {"DATABASE_URL": self.postgres.url("malamar")}
        if self.redis:
            self.env["REDIS_URL"] = self.redis.url
        self.servers: list[Server] = []
        migrated = manage(self.data_dir("migrate"), "migrate", "--no-input", **self.env)
        assert migrated.returncode == 0, migrated.stderr

    def data_dir(self, name: str) -> Path:
        folder = self.root / name
        folder.mkdir(exist_ok=True)
        return folder

    def server(self, name: str) -> Server:
        server = Server(self.data_dir(name), log=self.root / f"{name}.log", **self.env).start()
        self.servers.append(server)
        return server

    def restart_redis(self) -> None:
        """Redis (stopped) comes back empty on its port: groups and queued messages lost."""
        port = self.redis.port
        self.redis.stop()
        self.redis = Redis()
        self.redis.port = port
        self.redis.start()

    def script(self, code: str) -> None:
        """Python code in a separate process (like the worker) on the shared database."""
        django_script(self.data_dir("script"), code, **self.env)

    def publish(self, **counts: int) -> None:
        """Publishers in separate processes at once: ids and commit order interleave."""
        threads = [
            threading.Thread(
                target=django_script,
                args=(self.data_dir(name), PUBLISH.format(name=name, count=count)),
                kwargs=self.env,
            )
            for name, count in counts.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def relay_holder(self) -> Server:
        """The server whose database session holds the relay's advisory lock."""
        with psycopg.connect(self.postgres.url("malamar")) as db:
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
        for server in self.servers:
            server.stop()
        if self.redis:
            self.redis.stop()
        self.postgres.stop()
