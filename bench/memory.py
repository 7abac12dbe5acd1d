"""Idle memory of `malamar`: start it on a temp data dir, wait until it serves and settles, print
each process's RSS and USS (psutil) and the total; with `--steps N`, run N agent steps (tasks of
4 agents whose stand-in CLI, bench/fakecli.c compiled as `codex`, answers at once) and print
them again once idle; then stop it with SIGTERM.

    .venv/bin/python bench/memory.py [--settle 5] [--steps 10000 [--rounds 4]] [--root PATH]

`--rounds 4` runs the steps in four rounds and measures after each: flat memory shows as the
same numbers from one round to the next.

`--root` measures another checkout (e.g. a `git worktree` of an older commit) with this venv.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.runner import compile_fake_cli  # noqa: E402

MB = 1024 * 1024


def role(process: psutil.Process, wrapper_pid: int) -> str:
    if process.pid == wrapper_pid:
        return "malamar (supervisor)"
    cmdline = " ".join(process.cmdline())
    if "--with-worker" in cmdline:
        return "server + worker"
    if "runworker" in cmdline:
        return "worker"
    if "server_process" in cmdline or "daphne" in cmdline:
        return "server"
    return cmdline[:60]


def wait_serving(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/api/health", timeout=1).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise SystemExit("malamar did not start serving")


def measure(wrapper_pid: int, title: str) -> None:
    wrapper = psutil.Process(wrapper_pid)
    processes = [wrapper, *wrapper.children(recursive=True)]
    total_rss = total_uss = 0
    print(f"{title:<24}{'RSS MB':>9}{'USS MB':>9}{'threads':>9}{'fds':>6}")
    for process in processes:
        info = process.memory_full_info()
        total_rss += info.rss
        total_uss += info.uss
        print(
            f"{role(process, wrapper_pid):<24}{info.rss / MB:>9.1f}{info.uss / MB:>9.1f}"
            f"{process.num_threads():>9}{process.num_fds():>6}"
        )
    print(f"{'total':<24}{total_rss / MB:>9.1f}{total_uss / MB:>9.1f}", flush=True)


def make_workspaces(port: int, count: int = 10) -> list[dict]:
    """`count` workspaces of 4 agents on the stub CLI."""
    api = f"http://127.0.0.1:{port}/api"
    spaces = []
    for n in range(count):
        ws = requests.post(f"{api}/workspaces", json={"title": f"M{n}"}, timeout=10).json()
        for a in range(4):
            agent = {"name": f"A{a}", "instruction": "Go", "cli_type": "codex"}
            requests.post(f"{api}/workspaces/{ws['id']}/agents", json=agent, timeout=10)
        spaces.append(ws)
    return spaces


def run_steps(port: int, spaces: list[dict], steps: int, log: Path) -> None:
    """Queue steps/4 tasks over the workspaces, wait until the stub CLI logged `steps` more
    runs."""
    api = f"http://127.0.0.1:{port}/api"
    before = len(log.read_text().splitlines()) if log.exists() else 0
    started = time.monotonic()
    for n in range((steps + 3) // 4):
        ws = spaces[n % len(spaces)]
        task = {"summary": f"t{n}", "description": "bench"}
        requests.post(f"{api}/workspaces/{ws['id']}/tasks", json=task, timeout=10)
    done = 0
    while done < steps:
        time.sleep(1)
        done = (len(log.read_text().splitlines()) if log.exists() else 0) - before
    print(f"{done} agent steps in {time.monotonic() - started:.0f} s", flush=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settle", type=float, default=5, help="seconds idle before measuring")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to run")
    parser.add_argument("--steps", type=int, default=0, help="agent steps to run, then measure")
    parser.add_argument("--rounds", type=int, default=1, help="measure after each of N rounds")
    args = parser.parse_args()
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="malamar-memory-")
    env = {
        **os.environ,
        "MALAMAR_DATA_DIR": data_dir,
        "MALAMAR_TEMP_DIR": str(Path(data_dir) / "tmp"),  # (the tasks' folders, removed with it)
        "MALAMAR_PORT": str(port),
        "PYTHONPATH": str(args.root),
        "DJANGO_SETTINGS_MODULE": "malamar_site.settings",
    }
    env.pop("MALAMAR_TESTING", None)
    log = Path(data_dir) / "cli.log"
    env["BENCH_CLI_LOG"] = str(log)
    bin_dir = compile_fake_cli(Path(data_dir) / "bin").parent  # the C stand-in for codex
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "malamar_site.cli"],
        cwd=args.root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_serving(port)
        time.sleep(args.settle)
        measure(proc.pid, "idle")
        if args.steps:
            spaces = make_workspaces(port)
            per_round = args.steps // args.rounds
            for round_number in range(1, args.rounds + 1):
                run_steps(port, spaces, per_round, log)
                time.sleep(args.settle)
                measure(proc.pid, f"after {per_round * round_number} steps")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
