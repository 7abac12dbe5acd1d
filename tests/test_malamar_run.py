"""`malamar` with no arguments: migrate, serve, run the worker; SIGTERM stops everything."""

import json
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest
import requests

from tests import databases
from tests.databases import SQLITE_ONE_WORKER
from tests.live import (
    FIRST_START,
    ROOT,
    FreezableProxy,
    SseClient,
    django_script,
    free_port,
    process_env,
    serving,
    start_malamar,
    wait_until,
)
from tests.stack import FAKES_BIN, alive, command_line, data_dir_from

pytestmark = pytest.mark.live


# `malamar` on a new data dir migrates from zero first (on PostgreSQL, into an empty database:
# over 30 s at a load of 11 on 2 cores): the waits for it to serve allow 90 s. Only the first
# test needs a first launch; the others start on a copy of the migrated template.


@pytest.mark.pg
def test_malamar_runs_server_and_worker_and_stops_cleanly(tmp_path):
    port = free_port()
    proc = _start_with_fakes(tmp_path, port)
    url = f"http://127.0.0.1:{port}"
    base = f"{url}/api"
    try:
        wait_until(lambda: serving(url), timeout=FIRST_START, what="malamar to serve")
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
        # one child serves and runs the worker (a thread of it): Django is loaded once
        assert [c for c in children if "--with-worker" in command_line(c)], children
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
    output = proc.stdout.read()
    assert code == 0, output
    assert "Malamar is running at" in output
    assert "did not stop" not in output  # server and worker stopped by themselves
    assert not _gone(children)


def _gone(processes: list[psutil.Process]) -> list[psutil.Process]:
    """The processes still alive (one may end between two questions: alive() asks once)."""
    return [p for p in processes if alive(p.pid)]


def test_sigterm_mid_run_with_a_tab_open_stops_everything_cleanly(tmp_path, template_db):
    """SIGTERM while an agent's CLI runs and a browser holds the event stream: the server, the
    worker and the CLI all end by themselves (none killed by the supervisor), exit code 0."""
    port = free_port()
    data_dir_from(template_db, tmp_path / "data")
    proc = _start_with_fakes(tmp_path, port)
    url = f"http://127.0.0.1:{port}"
    base = f"{url}/api"
    try:
        wait_until(lambda: serving(url), timeout=FIRST_START, what="malamar to serve")
        ws = requests.post(f"{base}/workspaces", json={"title": "Stop"}, timeout=5).json()
        requests.post(
            f"{base}/workspaces/{ws['id']}/agents",
            timeout=5,
            json={"name": "Solo", "instruction": "Go", "cli_type": "codex"},
        )
        requests.post(
            f"{base}/workspaces/{ws['id']}/tasks",
            timeout=5,
            json={"summary": "long", "description": "@fake sleep 60"},
        )
        stream = SseClient(url)

        def cli_running():
            tree = psutil.Process(proc.pid).children(recursive=True)
            return [p for p in tree if "codex" in command_line(p)] or None

        cli = wait_until(cli_running, timeout=FIRST_START, what="the fake CLI to run")
        everything = psutil.Process(proc.pid).children(recursive=True)
        assert len(everything) >= 2 and cli  # the server-and-worker process, the CLI
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
    stream.close()
    output = proc.stdout.read()
    assert code == 0, output
    assert "did not stop" not in output and "Traceback" not in output, output
    wait_until(lambda: not _gone(everything), timeout=30, what="every child to be gone")


def _start_with_fakes(tmp_path, port: int):
    """`malamar` on tmp_path/data with the fake CLIs first on PATH."""
    path = f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}"
    return start_malamar(
        tmp_path / "data", tmp_path, MALAMAR_PORT=port, MALAMAR_TEMP_DIR=tmp_path, PATH=path
    )


def test_json_logs_stay_json_lines_including_each_request(tmp_path, template_db):
    port = free_port()
    data_dir = data_dir_from(template_db, tmp_path / "data")
    proc = start_malamar(data_dir, tmp_path, MALAMAR_PORT=port, MALAMAR_LOG_FORMAT="json")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: serving(base), timeout=FIRST_START, what="malamar to serve")
        assert requests.get(f"{base}/{'z' * 5000}", timeout=5).status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    lines = [line for line in proc.stdout.read().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines if not line.startswith("Malamar is running")]
    assert len(records) == len(lines) - 1, lines  # nothing but JSON records (and the banner)
    requests_logged = [r for r in records if r["logger"] == "malamar.access"]
    assert any(r["message"] == "GET /api/health 200" for r in requests_logged)
    long_one = next(r for r in requests_logged if r["message"].startswith("GET /zzz"))
    assert long_one["message"].endswith("… 404") and len(long_one["message"]) < 300


@SQLITE_ONE_WORKER
def test_a_failing_worker_stops_the_server_and_malamar_exits_1(tmp_path, template_db):
    """The worker runs in the server's process: when it fails (here: a second `malamar` on the
    same data dir, whose worker finds the first one's lock), the server stops too."""
    first_port, second_port = free_port(), free_port()
    data_dir = data_dir_from(template_db, tmp_path / "data")

    def start(port):
        return start_malamar(data_dir, tmp_path, MALAMAR_PORT=port, MALAMAR_TEMP_DIR=tmp_path)

    first = start(first_port)
    try:
        first_url = f"http://127.0.0.1:{first_port}"
        wait_until(lambda: serving(first_url), timeout=FIRST_START, what="1st")
        second = start(second_port)
        code = second.wait(timeout=FIRST_START)
        output = second.stdout.read()
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=10)
    assert code == 1, output
    assert "Another Malamar worker" in output and "already running" in output
    assert "malamar: the server and worker exited with 1" in output
    assert "Traceback" not in output


LONG_TASK = """
from agents.services import agent_create
from tasks.services import task_create
from workspaces.services import workspace_create
ws = workspace_create(title="Frozen")
agent_create(workspace=ws, name="Solo", instruction="Go", cli_type="codex")
task_create(workspace=ws, summary="long", description="@fake sleep 60")
"""


@databases.postgres_only("a database server that stops answering")
@pytest.mark.parametrize("command", ["runworker", "malamar"])
def test_sigterm_stops_promptly_while_the_database_does_not_answer(tmp_path, template_db, command):
    """PostgreSQL hangs (or the network drops its packets) mid-run: SIGTERM still ends the
    process by itself and kills the agent's CLI; the database work of a clean stop (handing the
    runs back) is given up. A lone `runworker` waited forever in a query; `malamar`'s worker
    thread outlived the server until `malamar` killed it after 3 s."""
    data_dir = data_dir_from(template_db, tmp_path / "data")
    django_script(data_dir, LONG_TASK)
    url = databases.url_for(data_dir)
    where, name = url.rsplit("@", 1)[1].split("/", 1)
    host, port = where.split(":")
    proxy = FreezableProxy(host, int(port)).start()
    env = {
        "DATABASE_URL": f"{url.rsplit('@', 1)[0]}@127.0.0.1:{proxy.port}/{name}",
        "PATH": f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}",
        "MALAMAR_TEMP_DIR": tmp_path,
        "MALAMAR_PORT": free_port(),
    }
    argv = [sys.executable, str(ROOT / "manage.py"), "runworker"]
    if command == "malamar":
        argv = [sys.executable, "-m", "malamar_site.cli"]
    proc = subprocess.Popen(
        argv,
        env=process_env(data_dir, **env),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def cli_running():
            tree = psutil.Process(proc.pid).children(recursive=True)
            return [p for p in tree if "codex" in command_line(p)] or None

        cli = wait_until(cli_running, timeout=60, what="the fake CLI to run")
        proxy.freeze()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)  # (it waited forever; it takes a few seconds)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.close()
    output = proc.stdout.read()
    assert code == 0, output
    assert "did not stop" not in output, output
    wait_until(lambda: not _gone(cli), timeout=30, what="the CLI to be gone")


def test_the_link_is_printed_only_once_the_server_answers(tmp_path):
    """ "Malamar is running at …" came 14-40 s before the server listened (the link gave
    "site can't be reached"): the moment it is printed, the port answers."""
    port = free_port()
    proc = start_malamar(tmp_path / "data", tmp_path, MALAMAR_PORT=port)
    try:
        for line in proc.stdout:  # the child's log shares this pipe
            if line.startswith("Malamar is running at"):
                break
        else:
            raise AssertionError("malamar ended without printing its link")
        assert line.strip() == f"Malamar is running at http://127.0.0.1:{port}"
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # accepted at once: no "site can't be reached"
        assert requests.get(f"http://127.0.0.1:{port}/api/health", timeout=30).ok
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
