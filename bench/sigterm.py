"""How long Malamar's processes take to exit after SIGTERM (what systemd, launchd and Ctrl-C send).

Each case starts a real process on a fresh copy of a migrated database N times, sends SIGTERM
once it is up, and measures until the process (and every child) exited. Target: under 2 s.

- command: `malamar` (server + worker, an open event stream like a browser tab) or a lone
  `malamar runworker`;
- state: idle, or mid-run (an agent's fake CLI is running a long task);
- database: SQLite (the data dir's file) or PostgreSQL (Debian's server, started here: the
  worker then holds a LISTEN connection, the server runs the event relay and fan-out threads).

Prints the median and max per case and the machine's load average when the case started.

    .venv/bin/python bench/sigterm.py [--runs 5] [--busy 0] [--database sqlite|postgres|both]
        [--command malamar|runworker|both] [--state idle|running|both] [--redis]
"""

import argparse
import itertools
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from tests.live import FAKES_BIN, ROOT, SseClient, free_port, process_env, serving, wait_until

LONG_TASK = """
from agents.services import agent_create
from tasks.services import task_create
from workspaces.services import workspace_create
ws = workspace_create(title="Bench")
agent_create(workspace=ws, name="Solo", instruction="Go", cli_type="codex")
task_create(workspace=ws, summary="long", description="@fake sleep 120")
"""


def alive(pid: int) -> bool:
    """Running, not a zombie (tests.stack's, which needs Django set up)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _burn(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


class Databases:
    """A migrated template (with or without a running task) and a fresh copy of it per run."""

    def __init__(self, kind: str, root: Path, redis_url: str | None = None):
        self.kind = kind
        self.root = root
        self.redis_url = redis_url
        self.postgres = None
        if kind == "postgres":
            from tests.services import Postgres

            self.postgres = Postgres().start()
        self.templates = {state: self._template(state) for state in ("idle", "running")}
        self.count = 0

    def _env(self, data_dir: Path, url: str | None) -> dict:
        extra = {"DATABASE_URL": url} if url else {}
        if self.redis_url:
            extra["REDIS_URL"] = self.redis_url
        fakes_first = f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}"
        return process_env(data_dir, PATH=fakes_first, MALAMAR_LOG_LEVEL="warning", **extra)

    def _template(self, state: str) -> tuple[Path, str | None]:
        folder = self.root / f"template-{state}"
        folder.mkdir(parents=True)
        (folder / "malamar.db").touch()  # not a first launch: no sample workspace
        url = self._create(f"template_{state}") if self.postgres else None
        env = self._env(folder, url)
        run = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*run, "migrate", "--no-input", "-v", "0"], env=env, check=True)
        if state == "running":
            code = f"import django; django.setup()\n{LONG_TASK}"
            subprocess.run([sys.executable, "-c", code], env=env, check=True)
        return folder, url

    def _create(self, name: str, template: str | None = None) -> str:
        import psycopg

        with psycopg.connect(self.postgres.url(), autocommit=True) as conn:
            copy = f' TEMPLATE "{template}"' if template else ""
            conn.execute(f'CREATE DATABASE "{name}"{copy}')
        return self.postgres.url(name)

    def fresh(self, state: str) -> tuple[Path, dict]:
        """A new data dir and the environment of a process on a copy of `state`'s template."""
        self.count += 1
        folder, url = self.templates[state]
        data_dir = self.root / f"run-{self.count}"
        data_dir.mkdir()
        shutil.copy(folder / "malamar.db", data_dir / "malamar.db")
        if url:
            url = self._create(f"run_{self.count}", template=url.rsplit("/", 1)[1])
        return data_dir, self._env(data_dir, url)


def _fake_cli_running(pid: int) -> bool:
    tree = psutil.Process(pid).children(recursive=True)
    return any("codex" in " ".join(_cmdline(p)) for p in tree)


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def one_run(databases: Databases, command: str, state: str) -> float:
    data_dir, env = databases.fresh(state)
    port = free_port()
    if command == "malamar":
        argv = [sys.executable, "-m", "malamar_site.cli", "--port", str(port)]
    else:
        argv = [sys.executable, str(ROOT / "manage.py"), "runworker"]
    env["MALAMAR_TEMP_DIR"] = str(data_dir)
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    stream = None
    try:
        if command == "malamar":
            wait_until(lambda: serving(url), timeout=90, what="malamar to serve")
            stream = SseClient(url)  # an open tab
        wait_until(lambda: (data_dir / "worker.sock").exists(), timeout=60, what="the worker")
        if state == "running":
            wait_until(lambda: _fake_cli_running(proc.pid), timeout=60, what="the fake CLI")
        else:
            time.sleep(1)  # the start's health checks are under way, as after a real start
        children = psutil.Process(proc.pid).children(recursive=True)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        wait_until(
            lambda: not [c for c in children if alive(c.pid)], timeout=60, what="the children"
        )
        elapsed = time.monotonic() - started
        assert proc.returncode == 0, proc.returncode
        return elapsed
    finally:
        if stream:
            stream.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy", type=int, default=0, help="CPU-burning processes meanwhile")
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--command", choices=["malamar", "runworker", "both"], default="both")
    parser.add_argument("--state", choices=["idle", "running", "both"], default="both")
    parser.add_argument("--redis", action="store_true", help="with REDIS_URL (Debian's Redis)")
    args = parser.parse_args()
    redis_url = None
    if args.redis:
        from tests.services import Redis

        redis_url = Redis().start().url

    def pick(value, choices):
        return choices if value == "both" else [value]

    root = Path(tempfile.mkdtemp(prefix="malamar-bench-sigterm-"))
    burners = [
        multiprocessing.Process(target=_burn, args=(time.monotonic() + 3600,))
        for _ in range(args.busy)
    ]
    for burner in burners:
        burner.start()
    results = []
    try:
        for database in pick(args.database, ["sqlite", "postgres"]):
            databases = Databases(database, root / database, redis_url)
            for command, state in itertools.product(
                pick(args.command, ["malamar", "runworker"]), pick(args.state, ["idle", "running"])
            ):
                load = os.getloadavg()[0]
                times = [one_run(databases, command, state) for _ in range(args.runs)]
                line = (
                    f"{database:8} {command:9} {state:7} load {load:4.1f}: "
                    f"median {statistics.median(times):.2f} s, max {max(times):.2f} s "
                    f"({', '.join(f'{t:.2f}' for t in times)})"
                )
                print(line, flush=True)
                results.append(line)
            if databases.postgres:
                databases.postgres.stop()
    finally:
        for burner in burners:
            burner.terminate()
            burner.join()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\nSIGTERM to exit, {args.runs} runs per case, busy={args.busy}, redis={args.redis},"
        f" cores={os.cpu_count()}"
    )
    print("\n".join(results))


if __name__ == "__main__":
    main()
