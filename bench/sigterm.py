"""How long `malamar` takes to exit after SIGTERM (what systemd, launchd and Ctrl-C send).

Starts the real `malamar` (server + worker) on a temp data dir N times, with an open event
stream (a browser tab) and optionally CPU burners to load the machine, sends SIGTERM once it
serves, and prints the median and max seconds until the process (and its children) exited.
Target: under 2 s.

    .venv/bin/python bench/sigterm.py [--runs 7] [--busy 2]
"""

import argparse
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from tests.live import ROOT, SseClient, free_port, process_env, serving, wait_until
from tests.stack import alive


def _burn(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def one_run(data_dir: Path) -> float:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "malamar_site.cli", "--port", str(port)],
        env=process_env(data_dir),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: serving(url), timeout=60, what="malamar to serve")
        wait_until(lambda: (data_dir / "worker.sock").exists(), timeout=30, what="the worker")
        stream = SseClient(url)  # an open tab
        children = psutil.Process(proc.pid).children(recursive=True)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        elapsed = time.monotonic() - started
        stream.close()
        left = [c for c in children if alive(c.pid)]
        assert not left, f"children still running: {left}"
        assert proc.returncode == 0, proc.returncode
        return elapsed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--busy", type=int, default=0, help="CPU-burning processes meanwhile")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="malamar-bench-sigterm-"))
    burners = [
        multiprocessing.Process(target=_burn, args=(time.monotonic() + 60 * args.runs,))
        for _ in range(args.busy)
    ]
    for burner in burners:
        burner.start()
    try:
        times = []
        for _ in range(args.runs):
            times.append(one_run(data_dir))
            print(f"  {times[-1]:.2f} s", flush=True)
    finally:
        for burner in burners:
            burner.terminate()
            burner.join()
    print(
        f"SIGTERM to exit over {args.runs} runs (busy={args.busy}, cores={os.cpu_count()}): "
        f"median {statistics.median(times):.2f} s, max {max(times):.2f} s"
    )


if __name__ == "__main__":
    main()
