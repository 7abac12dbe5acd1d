"""`make test`'s two pytest passes, at the same time: the whole suite on SQLite in two xdist
processes, and the tests marked `pg` on PostgreSQL in a third process beside them.

Many tests mostly wait (real servers, workers and browsers starting, answering, stopping), so
the SQLite pass alone leaves part of two cores idle; the PostgreSQL pass fills it, and the two
together take about as long as the SQLite pass alone. The sessions share nothing: each starts
its own PostgreSQL (the PostgreSQL pass only), data dirs and servers on free ports
(tests/settings.py, tests/services.py), and keeps its own pytest cache.

The SQLite pass prints as it goes; the PostgreSQL pass's output is held and printed whole once
both have ended, then one line with both results. The exit status is non-zero when either pass
failed. Ctrl-C stops both. Extra arguments go to both passes (`python tests/run_suite.py -x`).
"""

import compileall
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [str(Path(sys.executable).parent / "pytest")]  # the venv's, as `make test` ran it
# The costliest files first (tests/conftest.py orders them; xdist would reorder by size).
SQLITE_PASS = [*PYTEST, "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder", "--durations=15"]
# One process: its tests take a fraction of the SQLite pass's time.
POSTGRES_PASS = [*PYTEST, "-m", "pg", "--durations=10", "-o", "cache_dir=.pytest_cache/pg"]


# Not compiled: the virtualenv (pip compiled it), git's, tools' and build folders.
NOT_OURS = {".venv", ".git", ".pytest_cache", ".ruff_cache", "build", "dist", "node_modules"}


def compile_sources() -> None:
    """Our modules compiled once into __pycache__ (a second run only compares times): with
    PYTHONDONTWRITEBYTECODE set, as on some machines, every Malamar process and fake CLI run of
    a session (hundreds, and thousands) compiled them again: ~0.2 CPU-s per Malamar process."""
    for folder in sorted(ROOT.iterdir()):
        if folder.is_dir() and folder.name not in NOT_OURS:
            compileall.compile_dir(folder, quiet=1)


def _verdict(status: int) -> str:
    return "passed" if status == 0 else f"FAILED (exit status {status})"


def main(extra: list[str]) -> int:
    compile_sources()
    env = {**os.environ, "MALAMAR_TEST_DATABASE": "postgres"}
    with tempfile.TemporaryFile("w+", prefix="malamar-pg-pass-") as held:
        postgres = subprocess.Popen(
            [*POSTGRES_PASS, *extra], cwd=ROOT, env=env, stdout=held, stderr=subprocess.STDOUT
        )
        sqlite = subprocess.Popen([*SQLITE_PASS, *extra], cwd=ROOT)
        # Ctrl-C reaches both passes (one process group): each stops its servers and reports;
        # this process waits for them rather than dying first (exec resets this handler).
        previous = signal.signal(signal.SIGINT, lambda *_: None)
        try:
            sqlite_status, postgres_status = sqlite.wait(), postgres.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        held.seek(0)
        print(f"\n{' PostgreSQL pass (tests marked pg), run alongside '.center(80, '=')}")
        sys.stdout.write(held.read())
    print(
        f"\nSQLite pass (whole suite): {_verdict(sqlite_status)};"
        f" PostgreSQL pass (-m pg): {_verdict(postgres_status)}"
    )
    return 1 if sqlite_status or postgres_status else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
