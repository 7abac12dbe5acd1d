"""A real Malamar for tests: server + worker processes, fake CLIs first on PATH."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import requests

from tests.live import ROOT, Server, manage, process_env, wait_until

FAKES_BIN = ROOT / "tests" / "fakes" / "bin"
_TEMPLATE: dict[str, Path] = {}


def migrated_template(base: Path) -> Path:
    """Migrate once per test session; each stack copies the database."""
    if "db" not in _TEMPLATE:
        template = base / "template"
        result = manage(template, "migrate", "--no-input")
        assert result.returncode == 0, result.stderr
        _TEMPLATE["db"] = template / "malamar.db"
    return _TEMPLATE["db"]


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for PID 1 to reap it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Stack:
    def __init__(self, root: Path, template_db: Path, **env):
        self.data_dir = root / "data"
        self.temp_dir = root / "tmp"
        self.data_dir.mkdir(parents=True)
        self.temp_dir.mkdir()
        shutil.copy(template_db, self.data_dir / "malamar.db")
        self.fake_log = root / "fake.jsonl"
        self.env = {
            "PATH": f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}",
            "MALAMAR_TEMP_DIR": str(self.temp_dir),
            "MALAMAR_FAKE_LOG": str(self.fake_log),
            "MALAMAR_RUNNER_POLL_INTERVAL": "200",
            **env,
        }
        self.server = Server(self.data_dir, **self.env)
        self.worker: subprocess.Popen | None = None
        self.session = requests.Session()

    # processes ---------------------------------------------------------------------------
    def start(self, worker: bool = True) -> "Stack":
        self.server.start()
        if worker:
            self.start_worker()
        return self

    def start_worker(self) -> subprocess.Popen:
        self.worker = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworker"],
            env=process_env(self.data_dir, **self.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_until(
            lambda: (self.data_dir / "worker.sock").exists() or self.worker.poll() is not None,
            timeout=20,
            what="worker start",
        )
        return self.worker

    def stop(self) -> None:
        if self.worker and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.worker.kill()
        self.server.stop()

    # API ---------------------------------------------------------------------------------
    def api(self, method: str, path: str, body=None, expect: int | None = None):
        response = self.session.request(
            method, f"{self.server.url}/api{path}", json=body, timeout=10
        )
        if expect is not None:
            assert response.status_code == expect, response.text
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
        wait_until(lambda: self.status(task) == status, timeout=timeout, what=f"status {status}")

    def wait_comments(self, task: dict, count: int, timeout: float = 30) -> list[dict]:
        wait_until(lambda: len(self.comments(task)) >= count, timeout=timeout, what="comments")
        return self.comments(task)

    # inspection ----------------------------------------------------------------------------
    def sql(self, query: str, *params) -> list[tuple]:
        with sqlite3.connect(self.data_dir / "malamar.db", timeout=5) as db:
            return db.execute(query, params).fetchall()

    def fake_runs(self) -> list[dict]:
        if not self.fake_log.exists():
            return []
        return [json.loads(line) for line in self.fake_log.read_text().splitlines() if line]

    def task_runs(self) -> list[dict]:
        return [run for run in self.fake_runs() if run.get("input_path")]

    def wait_run(self, count: int = 1, timeout: float = 20) -> list[dict]:
        wait_until(lambda: len(self.task_runs()) >= count, timeout=timeout, what="CLI runs")
        return self.task_runs()
