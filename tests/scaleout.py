"""Malamar scaled out, for the end-to-end test and bench/scale.py: plain classes, no fixtures.

One PostgreSQL (and optionally one Redis), M server processes and N `manage.py runworker`
processes, each process with a data dir of its own (as if on its own machine) and the same
MALAMAR_SECRET_KEY, the fake CLIs of tests/fakes first on PATH (or another bin dir, e.g. the
bench's compiled stand-in).

    pg = Postgres().start()                      # tests/services.py
    databases = Databases(pg.url())              # the cluster's maintenance database
    template = databases.migrated_template(root) # `manage.py migrate` once
    cluster = Cluster(root, databases.create("run1", template=template), redis_url=...)
    cluster.start(servers=2, workers=3, capacity=2)
    api = cluster.api(0)                         # the JSON API of server 0
    ...
    cluster.stop()

`runworker --capacity K` is passed only when the command accepts it (`worker_capacity_supported`),
so the harness runs Malamar before and after multi-worker support.
"""

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path

import psutil
import psycopg
import requests

from core import config as malamar_config
from tests.live import FAKES_BIN, ROOT, Server, SseClient, free_port, process_env, wait_until

MANAGE = [sys.executable, str(ROOT / "manage.py")]
WORKER_READY = "Worker started"  # what runworker logs once it has recovered and polls
CAPACITY_OPTION = "worker_capacity"  # core.config's option, once workers have a capacity
FINISHED = ("in_review", "done")  # where a task's pass ends (agents skip or ask for review)


# --- what the installed Malamar can do -------------------------------------------------------
@cache
def worker_capacity_supported() -> str:
    """How a worker is told its capacity (several workers sharing one database): "flag"
    (`runworker --capacity`), "env" (MALAMAR_WORKER_CAPACITY only), or "" (not yet)."""
    result = subprocess.run(
        [*MANAGE, "runworker", "--help"],
        env=process_env(Path(os.devnull)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "--capacity" in result.stdout:
        return "flag"
    return "env" if CAPACITY_OPTION in malamar_config.OPTIONS_BY_NAME else ""


@cache
def channel_layer_configured(redis_url: str) -> bool:
    """With REDIS_URL set, the settings define a Channels layer (events through Redis)."""
    code = (
        "import django; django.setup(); from django.conf import settings;"
        "print(bool(getattr(settings, 'CHANNEL_LAYERS', None)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=process_env(Path(os.devnull), REDIS_URL=redis_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout.strip() == "True"


# --- databases -------------------------------------------------------------------------------
def with_database(url: str, name: str) -> str:
    """`url` addressing database `name` instead (postgres://user@host:port/NAME)."""
    return url.rsplit("/", 1)[0] + "/" + name


class Databases:
    """Creates databases on a PostgreSQL cluster through its maintenance database's URL."""

    def __init__(self, admin_url: str):
        self.admin_url = admin_url

    def execute(self, sql: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def create(self, name: str, template: str | None = None) -> str:
        """A new database (a copy of `template`'s when given: migrated in a moment); its URL."""
        copy = f" TEMPLATE {template}" if template else ""
        self.execute(f"DROP DATABASE IF EXISTS {name}")
        self.execute(f"CREATE DATABASE {name}{copy}")
        return with_database(self.admin_url, name)

    def migrated_template(self, root: Path, name: str = "malamar_template") -> str:
        """Database `name` migrated once by `manage.py migrate` (in a blank data dir: no
        sample workspace); pass its name as `template` to `create`."""
        url = self.create(name)
        data_dir = root / "migrate"
        data_dir.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [*MANAGE, "migrate", "--no-input", "-v", "0"],
            env=process_env(data_dir, DATABASE_URL=url),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            raise RuntimeError(f"migrate failed: {result.stderr[-3000:]}")
        return name


# --- the JSON API of one server ---------------------------------------------------------------
def parse_time(value: str | datetime | None) -> float | None:
    """An API timestamp (ISO text) or a database one (datetime) in seconds; None stays."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.timestamp() if value else None


class Api:
    def __init__(self, url: str):
        self.url = url
        self.session = requests.Session()

    def call(self, method: str, path: str, body=None, expect: int | None = None):
        response = self.session.request(method, f"{self.url}/api{path}", json=body, timeout=30)
        if expect is not None and response.status_code != expect:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.content else None

    def workspace(self, title: str, agents: tuple[str, ...] = ("Worker",), cli="claude") -> dict:
        ws = self.call("POST", "/workspaces", {"title": title}, expect=201)
        for name in agents:
            body = {"name": name, "cli_type": cli, "instruction": f"You are {name}."}
            self.call("POST", f"/workspaces/{ws['id']}/agents", body, expect=201)
        return ws

    def task(self, workspace: dict, description: str, summary: str = "Task") -> dict:
        body = {"summary": summary, "description": description}
        return self.call("POST", f"/workspaces/{workspace['id']}/tasks", body, expect=201)

    def get_task(self, task_id: str) -> dict:
        return self.call("GET", f"/tasks/{task_id}", expect=200)

    def tasks(self, workspace_id: str) -> list[dict]:
        return self.call("GET", f"/workspaces/{workspace_id}/tasks", expect=200)["tasks"]

    def comments(self, task_id: str) -> list[dict]:
        return self.call("GET", f"/tasks/{task_id}/comments", expect=200)["comments"]

    def runs(self, task_id: str) -> list[dict]:
        return self.call("GET", f"/tasks/{task_id}/runs", expect=200)["runs"]

    def statuses(self, workspace_ids) -> dict[str, str]:
        """Task id → status, for every task of these workspaces (one request each)."""
        return {t["id"]: t["status"] for ws in workspace_ids for t in self.tasks(ws)}

    def wait_finished(
        self, tasks: list[dict], timeout: float, statuses=FINISHED, interval: float = 0.5
    ) -> float:
        """Until every task's status is one of `statuses`; returns when (time.time())."""
        workspace_ids = sorted({t["workspace_id"] for t in tasks})
        wanted = {t["id"] for t in tasks}

        def finished() -> bool:
            now = self.statuses(workspace_ids)
            return all(now.get(task_id) in statuses for task_id in wanted)

        wait_until(
            finished, timeout=timeout, what=f"{len(wanted)} tasks to finish", interval=interval
        )
        return time.time()


# --- processes -------------------------------------------------------------------------------
@dataclass
class Worker:
    name: str
    data_dir: Path
    log: Path
    fake_log: Path
    proc: subprocess.Popen | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cli_children(self) -> list[psutil.Process]:
        """The CLIs it runs now (its child processes)."""
        try:
            return psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []


@dataclass
class Cluster:
    """M servers and N workers on one database; `root` holds a folder per process."""

    root: Path
    database_url: str
    redis_url: str = ""
    fake_bin: Path = FAKES_BIN
    poll_ms: int = 200
    env: dict = field(default_factory=dict)
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(50))
    servers: list[Server] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)

    def process_env(self, name: str) -> dict:
        """What every process shares (database, Redis, secret key, fake CLIs) plus its own temp
        dir and fake-CLI log; PGAPPNAME names its connections (for the bench's statement log)."""
        folder = self.root / name
        env = {
            "DATABASE_URL": self.database_url,
            "MALAMAR_SECRET_KEY": self.secret_key,
            "MALAMAR_TEMP_DIR": str(folder / "tmp"),
            "MALAMAR_RUNNER_POLL_INTERVAL": str(self.poll_ms),
            "MALAMAR_FAKE_LOG": str(folder / "fake.jsonl"),
            "PATH": f"{self.fake_bin}{os.pathsep}{os.environ['PATH']}",
            "PGAPPNAME": f"malamar-{name}",
            **self.env,
        }
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        return env

    def _folder(self, name: str) -> Path:
        data_dir = self.root / name / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        (self.root / name / "tmp").mkdir(exist_ok=True)
        return data_dir

    # starting and stopping --------------------------------------------------------------
    def start(self, *, servers: int = 1, workers: int = 1, capacity: int | None = None):
        for _ in range(servers):
            self.start_server()
        for _ in range(workers):
            self.start_worker(capacity=capacity)
        return self

    def start_server(self, name: str | None = None) -> Server:
        name = name or f"server{len(self.servers)}"
        data_dir = self._folder(name)
        server = Server(data_dir, port=free_port(), log=self.root / name / "server.log")
        server.env = self.process_env(name)
        self.servers.append(server.start())
        return server

    def start_worker(self, capacity: int | None = None, name: str | None = None) -> Worker:
        """`manage.py runworker` (with `--capacity` when supported); waits until it polls.
        `name` reuses that worker's data dir (a restart on the same machine)."""
        name = name or f"worker{len(self.workers)}"
        data_dir = self._folder(name)
        worker = Worker(
            name, data_dir, self.root / name / "worker.log", self.root / name / "fake.jsonl"
        )
        argv, env = [*MANAGE, "runworker"], self.process_env(name)
        if capacity and worker_capacity_supported() == "flag":
            argv += ["--capacity", str(capacity)]
        elif capacity and worker_capacity_supported() == "env":
            env[malamar_config.OPTIONS_BY_NAME[CAPACITY_OPTION].env] = str(capacity)
        with worker.log.open("ab") as log:
            worker.proc = subprocess.Popen(
                argv,
                env=process_env(data_dir, **env),
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(lambda: self._worker_ready(worker), timeout=60, what=f"{name} to start")
        self.workers.append(worker)
        return worker

    @staticmethod
    def _worker_ready(worker: Worker) -> bool:
        if not worker.alive:
            raise RuntimeError(f"{worker.name} exited: {worker.log.read_text()[-3000:]}")
        return WORKER_READY in worker.log.read_text(errors="replace")

    def kill9(self, worker: Worker) -> None:
        """kill -9 the worker alone: its CLIs live on, as when a machine's worker crashes."""
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait()

    def stop(self) -> None:
        for worker in self.workers:
            if worker.alive:
                worker.proc.send_signal(signal.SIGTERM)
        for worker in self.workers:
            if worker.proc is None:
                continue
            try:
                worker.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
        for server in self.servers:
            server.stop()

    # reading --------------------------------------------------------------------------------
    def api(self, index: int = 0) -> Api:
        return Api(self.servers[index].url)

    def sse(self, index: int) -> SseClient:
        """An event-stream client on server `index`: `.events` holds (id, type, data, at)."""
        return SseClient(self.servers[index].url)

    def django(self, code: str, name: str = "script") -> str:
        """Run Python `code` with Django set up on the cluster's database (a process of its
        own, as a management script would, in folder `name`); its standard output."""
        env = process_env(self._folder(name), **self.process_env(name))
        result = subprocess.run(
            [sys.executable, "-c", "import django; django.setup()\n" + code],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError(f"script failed: {result.stderr[-3000:]}")
        return result.stdout

    def sql(self, query: str, *params) -> list[tuple]:
        with psycopg.connect(self.database_url) as conn:
            return conn.execute(query, params).fetchall()


# --- checks shared by the test and the bench -----------------------------------------------
def overlapping_runs(runs: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of runs (of one workspace) whose [started_at, ended_at] intersect."""
    spans = sorted(
        (parse_time(r["started_at"]), parse_time(r["ended_at"]) or float("inf"), r) for r in runs
    )
    clashes, latest_end, latest = [], float("-inf"), None
    for start, end, run in spans:
        if start < latest_end:
            clashes.append((latest, run))
        if end > latest_end:
            latest_end, latest = end, run
    return clashes


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]
