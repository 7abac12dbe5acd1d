"""The product install: build the wheel, install it into a new venv outside the checkout, run
`malamar` from an unrelated directory, and use it like a user would."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import requests

from tests import databases
from tests.live import FIRST_START, ROOT, free_port, serving, wait_until
from tests.stack import FAKES_BIN, alive

pytestmark = pytest.mark.live


def run(*argv, **kwargs):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("package")
    dist = base / "dist"
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(dist),
        str(ROOT),
    )
    wheel = next(dist.glob("malamar-*.whl"))
    venv = base / "venv"
    # This pip installs into the new venv (`--python`): bootstrapping a pip of its own there
    # took a third of the time; byte-compiling every dependency (--no-compile) another third.
    run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    # Dependencies come from the registry (or pip's cache); the project itself from the wheel.
    python = str(venv / "bin" / "python")
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--quiet",
        "--no-compile",
        str(wheel),
    )
    return venv


def test_wheel_contains_everything(installed):
    site = next((installed / "lib").glob("python3*/site-packages"))
    for relative in (
        "malamar_site/templates/base.html",
        "malamar_site/static/css/app.css",
        "chats/knowledge/concepts.md",
        "tasks/migrations/0001_initial.py",
    ):
        assert (site / relative).exists(), relative


def test_installed_malamar_serves_runs_tasks_and_stops(installed, tmp_path):
    malamar = installed / "bin" / "malamar"
    help_text = run(str(malamar), "--help", cwd=tmp_path).stdout
    for word in ("--port", "--data-dir", "--allowed-hosts", "doctor", "config", "version"):
        assert word in help_text
    assert run(str(malamar), "version", cwd=tmp_path).stdout.startswith("malamar ")
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MALAMAR_", "DJANGO_", "PYTHONPATH", "DATABASE_URL"))
    }
    data_dir = tmp_path / "home" / ".malamar"  # the default
    if databases.ON_POSTGRES:  # a database of its own (tests.databases)
        env["DATABASE_URL"] = databases.url_for(data_dir)
    env.update(
        {
            "HOME": str(tmp_path / "home"),  # the default data dir: ~/.malamar
            "MALAMAR_PORT": str(port),
            "MALAMAR_TEMP_DIR": str(tmp_path / "tmp"),
            "PATH": f"{FAKES_BIN}{os.pathsep}{env['PATH']}",
        }
    )
    proc = subprocess.Popen(
        [str(malamar)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: serving(base), timeout=FIRST_START, what="installed malamar")
        home = requests.get(f"{base}/", timeout=5)
        assert home.status_code == 200 and "Malamar" in home.text
        css = requests.get(f"{base}/static/css/app.css", timeout=5)
        assert css.status_code == 200 and css.headers["Content-Type"].startswith("text/css")
        assert data_dir.is_dir() and (databases.ON_POSTGRES or (data_dir / "malamar.db").exists())
        api = f"{base}/api"
        ws = requests.post(f"{api}/workspaces", json={"title": "Pkg"}, timeout=5).json()
        requests.post(
            f"{api}/workspaces/{ws['id']}/agents",
            timeout=5,
            json={"name": "Solo", "instruction": "Go", "cli_type": "opencode"},
        )
        task = requests.post(
            f"{api}/workspaces/{ws['id']}/tasks",
            timeout=5,
            json={"summary": "t", "description": "@fake review done"},
        ).json()
        wait_until(
            lambda: (
                requests.get(f"{api}/tasks/{task['id']}", timeout=5).json()["status"] == "in_review"
            ),
            timeout=60,
            what="the worker to finish the task",
        )
        children = psutil.Process(proc.pid).children(recursive=True)
    finally:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        stopped_in = time.monotonic() - started
    assert code == 0, proc.stdout.read()[-3000:]
    print(f"stopped in {stopped_in:.2f} s")
    wait_until(
        lambda: not [c for c in children if alive(c.pid)], timeout=30, what="no process left"
    )
