"""What a workspace whose last agent's CLI cannot run costs, in runs and tokens per hour.

    .venv/bin/python bench/broken_agent.py                      # this checkout
    .venv/bin/python bench/broken_agent.py --root /path/to/old  # another checkout (before)

Black box, real processes: `manage.py migrate`, then a server (daphne) and `manage.py runworker`
of the checkout at --root on a new data directory (SQLite), the fake CLIs of tests/fakes on
PATH. Through the JSON API: a workspace of four agents (Planner, Implementer and Auditor on
Claude Code, Reviewer on Codex CLI), Codex CLI's binary set to a file that is then removed (a
CLI that cannot run at all), one task whose agents skip. Each healthy run takes --run-seconds
(the fake sleeps), standing in for a real agent's minutes scaled down.

After --seconds of wall time it reads the database. The first cycle (the agents up to the
Reviewer's first run) is paid whatever the code does; after it, it counts the healthy agents'
runs (the paid ones: a real CLI bills them), the Reviewer's attempts (cycles) and the tokens
the runs reported (the fake Claude Code reports the same small usage each run; a real run
reports thousands). Per hour = count x 3600 / (the window after the first cycle), at this
time scale; the cycles' count carries the result to real run lengths.
"""

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent.parent
FAKES_BIN = HERE / "tests" / "fakes" / "bin"
HEALTHY = ("Planner", "Implementer", "Auditor")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(root: Path, data_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MALAMAR_TESTING")}
    env.update(
        DJANGO_SETTINGS_MODULE="malamar_site.settings",
        MALAMAR_DATA_DIR=str(data_dir),
        MALAMAR_TEMP_DIR=str(data_dir.parent / "tmp"),
        PYTHONPATH=str(root),
        PATH=f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}",
        MALAMAR_RUNNER_POLL_INTERVAL="200",
    )
    return env


def _wait(check, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def _serving(url: str) -> bool:
    try:
        return requests.get(f"{url}/api/health", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def measure(root: Path, seconds: float, run_seconds: float) -> dict:
    work = Path(tempfile.mkdtemp(prefix="malamar-broken-"))
    data_dir, tmp = work / "data", work / "tmp"
    data_dir.mkdir()
    tmp.mkdir()
    (data_dir / "malamar.db").touch()  # not a first launch: no sample workspace
    env = _env(root, data_dir)
    python = sys.executable
    subprocess.run(
        [python, str(root / "manage.py"), "migrate", "--no-input", "-v", "0"],
        env=env,
        cwd=root,
        check=True,
    )
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": root, "env": env}
    server = subprocess.Popen(
        [
            python,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "malamar_site.asgi:application",
        ],
        **quiet,
    )
    worker = None
    try:
        _wait(lambda: _serving(url), "the server")
        api = requests.Session()
        codex = work / "bin" / "codex"
        codex.parent.mkdir()
        codex.symlink_to(FAKES_BIN / "codex")
        body = {"cli_settings": {"codex": {"binary_path": str(codex)}}}
        api.put(f"{url}/api/settings", json=body, timeout=10).raise_for_status()
        codex.unlink()  # Codex CLI cannot run any more
        ws = api.post(f"{url}/api/workspaces", json={"title": "Broken"}, timeout=10).json()
        for name in (*HEALTHY, "Reviewer"):
            cli = "codex" if name == "Reviewer" else "claude"
            agent = {"name": name, "cli_type": cli, "instruction": f"You are {name}."}
            response = api.post(f"{url}/api/workspaces/{ws['id']}/agents", json=agent, timeout=10)
            response.raise_for_status()
        worker = subprocess.Popen([python, str(root / "manage.py"), "runworker"], **quiet)
        _wait(lambda: (data_dir / "worker.sock").exists(), "the worker")
        task = {"summary": "Build it", "description": f"@fake sleep {run_seconds} skip"}
        started = time.monotonic()
        api.post(f"{url}/api/workspaces/{ws['id']}/tasks", json=task, timeout=10)
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        window = time.monotonic() - started
    finally:
        for proc in (worker, server):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    with sqlite3.connect(data_dir / "malamar.db") as db:
        rows = db.execute(
            "SELECT agent_name, status, COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0), "
            "started_at, ended_at FROM agent_runs ORDER BY started_at"
        ).fetchall()
        errors = db.execute("SELECT COUNT(*) FROM task_comments WHERE kind = 'error'").fetchone()
    shutil.rmtree(work, ignore_errors=True)
    return _tally(rows, window, errors[0])


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


def _tally(rows, window: float, errors: int) -> dict:
    """The first cycle (the agents up to the Reviewer's first run) is paid once whatever the
    code does; what follows it, per hour, is what the broken agent costs in the long run."""
    first_reviewer = next((n for n, row in enumerate(rows) if row[0] == "Reviewer"), None)
    if first_reviewer is None:
        return {"window_s": round(window, 1), "runs": len(rows), "note": "no Reviewer run yet"}
    first, later = rows[: first_reviewer + 1], rows[first_reviewer + 1 :]
    start = _seconds(rows[0][3])
    first_end = _seconds(first[-1][4] or first[-1][3])
    later_window = max(1.0, window - (first_end - start))
    per_hour = 3600 / later_window
    paid = [row for row in later if row[0] in HEALTHY]
    cycles = sum(1 for row in later if row[0] == "Reviewer")
    return {
        "window_s": round(window, 1),
        "first_cycle_runs": len(first),
        "later_window_s": round(later_window, 1),
        "later_cycles": cycles,
        "later_paid_runs": len(paid),
        "later_tokens": sum(row[2] for row in later),
        "paid_runs_per_hour": round(len(paid) * per_hour),
        "tokens_per_hour": round(sum(row[2] for row in later) * per_hour),
        "tokens_per_paid_run": round(sum(r[2] for r in first if r[0] in HEALTHY) / 3),
        "error_comments": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout to measure")
    parser.add_argument("--seconds", type=float, default=120.0, help="wall time measured")
    parser.add_argument("--run-seconds", type=float, default=1.5, help="one healthy run")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"root {args.root.resolve()}  load {os.getloadavg()}")
    for n in range(args.repeat):
        print(n + 1, measure(args.root.resolve(), args.seconds, args.run_seconds), flush=True)


if __name__ == "__main__":
    main()
