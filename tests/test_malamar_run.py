"""`malamar` with no arguments: migrate, serve, run the worker; SIGTERM stops everything."""

import os
import signal
import subprocess
import sys

import psutil
import pytest
import requests

from tests.live import free_port, process_env, wait_until
from tests.stack import FAKES_BIN

pytestmark = pytest.mark.live


def test_malamar_runs_server_and_worker_and_stops_cleanly(tmp_path):
    port = free_port()
    env = process_env(
        tmp_path / "data",
        MALAMAR_PORT=port,
        MALAMAR_TEMP_DIR=tmp_path,
        PATH=f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "malamar_site.cli"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}/api"

    def ready():
        try:
            return requests.get(f"{base}/health", timeout=1).ok
        except requests.RequestException:
            return False

    try:
        wait_until(ready, timeout=30, what="malamar to serve")
        sample = requests.get(f"{base}/workspaces", timeout=5).json()["workspaces"]
        assert [w["title"] for w in sample] == ["Sample: Code Assistant"]  # a first launch
        ws = requests.post(f"{base}/workspaces", json={"title": "Run"}, timeout=5).json()
        requests.post(
            f"{base}/workspaces/{ws['id']}/agents",
            timeout=5,
            json={"name": "Solo", "instruction": "Go", "cli_type": "codex"},
        )
        task = requests.post(
            f"{base}/workspaces/{ws['id']}/tasks",
            timeout=5,
            json={"summary": "t", "description": "@fake review done"},
        ).json()
        wait_until(
            lambda: (
                requests.get(f"{base}/tasks/{task['id']}", timeout=5).json()["status"]
                == "in_review"
            ),
            timeout=30,
            what="the worker to run the task",
        )
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
    output = proc.stdout.read()
    assert code == 0, output
    assert "Malamar is running at" in output
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
