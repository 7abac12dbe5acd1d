"""Malamar with a worker for tests, the fake CLIs first on PATH, in two forms with one API:

- `InProcessStack` (the `stack` fixture): the worker's loop in a thread of the test process
  against the test database, the API through Django's test client. Behaviour tests use it.
- `Stack` (the `live_stack` fixture): real server and `runworker` processes, for what only real
  processes show (kill -9 recovery, SIGTERM, process groups, a second worker refused).
"""

import contextlib
import dataclasses
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import requests
from django.db import connection
from django.test import Client

from tests import databases
from tests.live import (
    FAKES_BIN,
    ROOT,
    START,
    Server,
    blank_database,
    manage,
    process_env,
    wait_until,
)
from worker.loop import Worker


def session_template(folder: Path) -> databases.Template:
    """The session's template (tests.databases): the test database as it is right after its
    migrations, copied (SQLite's backup into `folder`, or a PostgreSQL template database)."""
    if databases.ON_POSTGRES:
        source = connection.settings_dict["NAME"]
        connection.close()  # CREATE DATABASE … TEMPLATE needs the source without connections
        return databases.Template(database=databases.create_database(source).rsplit("/", 1)[1])
    target = folder / "malamar.db"
    source = connection.settings_dict["NAME"]
    with sqlite3.connect(source) as src, contextlib.closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
    return databases.Template(path=target)


def migrated_template(folder: Path) -> databases.Template:
    """A database migrated by `manage.py migrate` (a blank one up front: no sample)."""
    blank_database(folder)
    result = manage(folder, "migrate", "--no-input")
    assert result.returncode == 0, result.stderr
    if databases.ON_POSTGRES:
        return databases.Template(database=databases.url_for(folder).rsplit("/", 1)[1])
    return databases.Template(path=folder / "malamar.db")


def data_dir_from(template: databases.Template, data_dir: Path) -> Path:
    """`data_dir` with a copy of the migrated template database: a server ready in a moment."""
    template.install(data_dir)
    return data_dir


def command_line(process: psutil.Process) -> str:
    """A process's command line; "" for one that ended meanwhile (a zombie has none to read)."""
    try:
        return " ".join(process.cmdline())
    except psutil.NoSuchProcess:  # (ZombieProcess too)
        return ""


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for PID 1 to reap it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class StackBase:
    """What both forms share: a data dir, a temp dir, the fake CLIs' log, API helpers."""

    def __init__(self, root: Path, **env):
        self.data_dir = root / "data"
        self.temp_dir = root / "tmp"
        self.data_dir.mkdir(parents=True)
        self.temp_dir.mkdir()
        self.fake_log = root / "fake.jsonl"
        self.env = {
            "PATH": f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}",
            "MALAMAR_TEMP_DIR": str(self.temp_dir),
            "MALAMAR_FAKE_LOG": str(self.fake_log),
            "MALAMAR_RUNNER_POLL_INTERVAL": "200",
            **env,
        }

    # API (through `request`, which each form defines) ---------------------------------
    def api(self, method: str, path: str, body=None, expect: int | None = None):
        response = self.request(method, f"/api{path}", body)
        if expect is not None:
            assert response.status_code == expect, response.content.decode()
        return response.json() if response.content else None

    def workspace(self, title="W", agents=(), **fields) -> dict:
        ws = self.api("POST", "/workspaces", {"title": title, **fields}, expect=201)
        for spec in agents:
            name, cli, instruction = (
                (*spec, "")[:3] if isinstance(spec, tuple) else (spec, "claude", "")
            )
            self.api(
                "POST",
                f"/workspaces/{ws['id']}/agents",
                {"name": name, "cli_type": cli, "instruction": instruction or f"You are {name}."},
                expect=201,
            )
        return ws

    def task(self, workspace: dict, description: str, summary="Task") -> dict:
        body = {"summary": summary, "description": description}
        return self.api("POST", f"/workspaces/{workspace['id']}/tasks", body, expect=201)

    def comments(self, task: dict) -> list[dict]:
        return self.api("GET", f"/tasks/{task['id']}/comments")["comments"]

    def logs(self, task: dict) -> list[dict]:
        return self.api("GET", f"/tasks/{task['id']}/logs")["logs"]

    def status(self, task: dict) -> str:
        return self.api("GET", f"/tasks/{task['id']}")["status"]

    def wait_status(self, task: dict, status: str, timeout: float = 30) -> None:
        try:
            wait_until(
                lambda: self.status(task) == status, timeout=timeout, what=f"status {status}"
            )
        except AssertionError as timed_out:  # say where the task stands: a failure explains itself
            comments = [f"{c['author_name']}: {c['content'][:300]}" for c in self.comments(task)]
            raise AssertionError(
                f"{timed_out}; it is {self.status(task)}, comments: {comments[-5:]}"
            ) from None

    def wait_comments(self, task: dict, count: int, timeout: float = 30) -> list[dict]:
        wait_until(lambda: len(self.comments(task)) >= count, timeout=timeout, what="comments")
        return self.comments(task)

    # inspection ----------------------------------------------------------------------------
    def fake_runs(self) -> list[dict]:
        """The fake CLIs' runs logged so far. A record being appended may be read half written
        (a write that crosses a page shows its first page first): only whole lines count."""
        if not self.fake_log.exists():
            return []
        text = self.fake_log.read_text()
        whole = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in whole.splitlines() if line]

    def task_runs(self) -> list[dict]:
        return [run for run in self.fake_runs() if run.get("input_path")]

    def wait_run(self, count: int = 1, timeout: float = 20) -> list[dict]:
        wait_until(lambda: len(self.task_runs()) >= count, timeout=timeout, what="CLI runs")
        return self.task_runs()


class Stack(StackBase):
    """Real server and worker processes on a copy of the migrated template database."""

    def __init__(self, root: Path, template_db: databases.Template, **env):
        super().__init__(root, **env)
        template_db.install(self.data_dir)
        self.server = Server(self.data_dir, **self.env)
        self.worker: subprocess.Popen | None = None
        self.session = requests.Session()

    # processes ---------------------------------------------------------------------------
    def start(self, worker: bool = True) -> "Stack":
        self.server.start()
        if worker:
            try:
                self.start_worker()
            except BaseException:
                self.stop()  # nothing is left running by a start that failed
                raise
        return self

    def start_worker(self) -> subprocess.Popen:
        # A worker killed with SIGKILL leaves its socket behind: wait for the new one's.
        (self.data_dir / "worker.sock").unlink(missing_ok=True)
        self.worker = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworker"],
            env=process_env(self.data_dir, **self.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_until(
            lambda: (self.data_dir / "worker.sock").exists() or self.worker.poll() is not None,
            timeout=START,
            what="worker start",
        )
        return self.worker

    def stop_worker(self) -> None:
        if self.worker and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()
        # A killed worker leaves its wake socket: the next start_worker must wait for its own.
        (self.data_dir / "worker.sock").unlink(missing_ok=True)

    def stop(self) -> None:
        self.stop_worker()
        self.server.stop()
        databases.release(self.data_dir)

    def request(self, method: str, path: str, body=None, **kwargs):
        url = f"{self.server.url}{path}"
        return self.session.request(method, url, json=body, timeout=10, **kwargs)

    def worker_alive(self) -> bool:
        return self.worker is not None and self.worker.poll() is None

    def sql(self, query: str, *params) -> list[tuple]:
        """`?` placeholders, as in sqlite3."""
        return databases.query(self.data_dir, query, *params)


class _UnexpectedErrors(logging.Handler):
    """Collects what the worker logs with a traceback (a run or loop step that crashed)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


class InProcessStack(StackBase):
    """The worker's loop in a thread of the test process, on the test database (which must be
    a file: see tests/settings.py) and the data dir `root/data`; the API and pages through
    Django's test client. Needs a `transactional_db` test (the worker's threads see only
    committed rows), pytest-django's `settings` and `monkeypatch` (both undone afterwards)."""

    def __init__(self, root: Path, *, settings, monkeypatch, health_at_start=False, **env):
        """`health_at_start`: the worker checks the CLIs as it starts (a real worker does; a
        test that is not about health saves the eight fake runs)."""
        super().__init__(root, **env)
        self.health_at_start = health_at_start
        for name, value in self.env.items():
            monkeypatch.setenv(name, value)
        settings.DATA_DIR = self.data_dir
        settings.CONFIG = dataclasses.replace(
            settings.CONFIG, temp_dir=self.temp_dir, runner_poll_interval=200
        )
        self.client = Client()
        self.worker: Worker | None = None
        self.thread: threading.Thread | None = None
        self.errors = _UnexpectedErrors()

    # the worker --------------------------------------------------------------------------
    def start(self, worker: bool = True) -> "InProcessStack":
        if worker:
            self.start_worker()
        return self

    def start_worker(self) -> Worker:
        logging.getLogger("runner").addHandler(self.errors)
        self.worker = Worker(poll_interval=0.2, health_at_start=self.health_at_start)
        self.thread = threading.Thread(target=self._serve, name="test-worker", daemon=True)
        self.thread.start()
        wait_until(
            lambda: (self.data_dir / "worker.sock").exists() or not self.thread.is_alive(),
            timeout=20,
            what="worker start",
        )
        return self.worker

    def _serve(self) -> None:
        try:
            self.worker.serve_forever()
        finally:
            connection.close()

    def stop(self) -> None:
        """Stop the loop and wait for every thread it started (runs, health checks): nothing
        may touch the database once the test's tables are flushed."""
        logging.getLogger("runner").removeHandler(self.errors)
        if self.worker is None:
            return
        self.worker.shutdown.set()
        self.worker.kick()
        self.thread.join(timeout=30)
        with self.worker.lock:
            threads = list(self.worker.chat_threads)
            threads += [thread for thread, _jobs in self.worker.idle_runners]
            for runners in self.worker.workspaces.values():  # a thread, or a set of them
                threads += runners if isinstance(runners, set | list) else [runners]
        threads += list(self.worker.health.started)  # both lanes of health checks
        for thread in threads:
            thread.join(timeout=30)
        assert not self.thread.is_alive() and not any(t.is_alive() for t in threads), (
            "the in-process worker did not stop"
        )
        for fd in (self.worker.kick_r, self.worker.kick_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def wait_idle(self, timeout: float = 20) -> None:
        """Until no run is running: a run leaves the worker's map of runs last, after its
        final transaction and what that transaction triggers on commit."""
        wait_until(lambda: not self.worker.runs, timeout=timeout, what="the worker to be idle")

    def worker_alive(self) -> bool:
        """The loop runs and nothing in it crashed (logged a traceback)."""
        crashed = [record.getMessage() for record in self.errors.records]
        assert not crashed, f"the worker logged unexpected errors: {crashed}"
        return self.thread is not None and self.thread.is_alive()

    # API ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, body=None, **kwargs):
        if body is not None:
            kwargs.update(data=json.dumps(body), content_type="application/json")
        return self.client.generic(method, path, **kwargs)

    def sql(self, query: str, *params) -> list[tuple]:
        """`?` placeholders, as in sqlite3."""
        with connection.cursor() as cursor:
            cursor.execute(query.replace("?", "%s"), params)
            return cursor.fetchall()
