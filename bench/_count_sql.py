"""`manage.py runworker`, counting the worker's SQL statements from outside the product code.

    python bench/_count_sql.py COUNTS_FILE

Every database connection the worker opens gets an execute wrapper that counts statements by
their first word (SELECT, INSERT, UPDATE, DELETE, SAVEPOINT, RELEASE, BEGIN, ...); COMMIT and
ROLLBACK go to SQLite directly, not through a cursor, so they are counted on the connection.
The programs the worker starts (`git`, the CLIs) are counted by name too, under "processes".
Each CLI's reaping (the end of worker.process.Held.wait) and go (Held.release) are appended to
`step-marks.txt` beside COUNTS_FILE (wall time, thread, the thread's CPU time): bench/gap.py
splits each gap with them into the CLI's reaping, the worker's own step and the CLI's start.
With `BENCH_PROFILE_STEPS=FILE`, the
worker's own step (each reaping to the next go, in the thread that runs it) is profiled with
cProfile and the stats written to FILE at each SIGUSR1 (`python -m pstats FILE`).
SIGUSR1 writes the totals to COUNTS_FILE as JSON (atomically, with a sequence number the bench
waits for). The command itself runs exactly as `manage.py runworker` does (system checks
included), through its name, so this keeps working whatever module holds the worker.
"""

import cProfile
import json
import os
import pstats
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

counts: Counter = Counter()
processes: Counter = Counter()
lock = threading.Lock()
dumps = 0


def count(kind: str) -> None:
    with lock:
        counts[kind] += 1


def count_statement(execute, sql, params, many, context):
    count(sql.lstrip()[:12].split(None, 1)[0].upper() if sql.strip() else "EMPTY")
    return execute(sql, params, many, context)


marks = None
profiling = None  # BENCH_PROFILE_STEPS: per thread, the step being profiled
profiled: list = []  # the steps profiled to their go (a pass's last reaping has none)


def mark(tag: str) -> None:
    line = f"{tag} {time.time():.6f} {threading.get_ident()} {time.thread_time():.6f}\n"
    with lock:
        marks.write(line)


def profile_ended(*, keep: bool) -> None:
    """The thread's step being profiled (if any) ends; `keep`: it counts (it reached a go)."""
    step = getattr(profiling, "step", None)
    if step is not None:
        step.disable()
        profiling.step = None
        if keep:
            with lock:
                profiled.append(step)


def mark_steps() -> None:
    """Once Django is set up: the reaping and the go of every CLI, marked."""
    try:
        from worker import pickup, process
    except ImportError:  # an older layout (a build measured for a before/after): no marks
        return

    if getattr(process.Held, "marked", False):
        return
    wait, release = process.Held.wait, process.Held.release

    def marked_wait(self, *args, **kwargs):
        try:
            return wait(self, *args, **kwargs)
        finally:
            mark("reaped")
            if profiling is not None:
                profiling.step = cProfile.Profile()
                profiling.step.enable()

    def marked_release(self):
        profile_ended(keep=True)
        mark("go")
        return release(self)

    process.Held.wait, process.Held.release, process.Held.marked = marked_wait, marked_release, True
    claim_next = pickup.claim_next

    def unprofiled_claim(*args, **kwargs):  # a pass ended: its last reaping was no step's
        profile_ended(keep=False)
        return claim_next(*args, **kwargs)

    pickup.claim_next = unprofiled_claim
    if os.environ.get("BENCH_STEP_PHASES"):
        mark_phases()


# What BENCH_STEP_PHASES marks as it returns, in a step's order from a reaping to the next go:
# with the next agent's early go (worker.pipeline.TaskPass.go_early) from the answer's rows to
# the before-snapshot, the finish coming after the go; without it, the finish, then the rest.
PHASES = (
    ("worker.pipeline", "_launch", "CLI's end"),
    ("worker.snapshotting", "RunSnapshots.take_after", "after-snapshot"),
    ("worker.pipeline", "TaskPass.read", "answer read"),
    ("worker.snapshotting", "PassSnapshots.count_later", "totals left"),
    ("tasks.services", "task_step_rows", "answer's rows"),  # (the early go's, from here)
    ("worker.pipeline", "TaskPass.lock_if_wanted", "locking read"),
    ("runner.recorder", "RunRecorder.finish_writes", "run's record"),
    ("worker.pipeline", "TaskPass.apply", "answer applied"),
    ("django.db.backends.base.base", "BaseDatabaseWrapper.commit", "commit"),
    ("worker.pipeline", "TaskPass.recorder", "next recorder"),
    ("worker.pipeline", "TaskPass.take_ready", "ready taken"),
    ("worker.pipeline", "TaskPass._write_input", "input written"),
    ("worker.pipeline", "InputAhead.write", "input written"),  # (made ahead: its rows added)
    ("worker.snapshotting", "RunSnapshots.take_before", "before-snapshot"),
)


def mark_phases() -> None:
    """Each phase of a step marked as it returns (bench/gap.py splits the own step by them)."""
    import importlib

    for module_name, qualified, tag in PHASES:
        owner = importlib.import_module(module_name)
        *owner_names, name = qualified.split(".")
        for owner_name in owner_names:
            owner = getattr(owner, owner_name)
        original = getattr(owner, name, None)
        if original is None:  # (an older build measured for a before/after)
            continue

        def marked(*args, _original=original, _tag=tag, **kwargs):
            try:
                return _original(*args, **kwargs)
            finally:
                mark("phase:" + _tag.replace(" ", "_"))

        setattr(owner, name, marked)


def instrument(sender, connection, **kwargs) -> None:
    mark_steps()
    if count_statement not in connection.execute_wrappers:
        connection.execute_wrappers.append(count_statement)
    for name, kind in (("_commit", "COMMIT"), ("_rollback", "ROLLBACK")):
        original = getattr(connection, name)

        def counted(original=original, kind=kind):
            if connection.connection is not None and connection.connection.in_transaction:
                count(kind)
            return original()

        setattr(connection, name, counted)


def count_processes() -> None:
    """Every program started through subprocess (git, the CLIs), by its file name."""
    execute_child = subprocess.Popen._execute_child

    def counted(self, args, executable, *rest, **kwargs):
        program = executable or (args if isinstance(args, (str, bytes)) else args[0])
        with lock:
            processes[os.path.basename(os.fsdecode(program))] += 1
        return execute_child(self, args, executable, *rest, **kwargs)

    subprocess.Popen._execute_child = counted


def dump(path: Path) -> None:
    global dumps
    dumps += 1
    with lock:
        data = {
            "seq": dumps,
            "time": time.time(),
            "counts": dict(counts),
            "processes": dict(processes),
        }
    with lock:
        steps = list(profiled)
    if steps:
        pstats.Stats(*steps).dump_stats(os.environ["BENCH_PROFILE_STEPS"])
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)


def main() -> None:
    global marks, profiling
    path = Path(sys.argv[1])
    if os.environ.get("BENCH_PROFILE_STEPS"):
        profiling = threading.local()
    marks = path.with_name("step-marks.txt").open("a", buffering=1)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")
    from django.db.backends.signals import connection_created

    connection_created.connect(instrument, weak=False)
    count_processes()
    signal.signal(signal.SIGUSR1, lambda signum, frame: dump(path))
    from django.core.management import execute_from_command_line

    execute_from_command_line([str(ROOT / "manage.py"), "runworker"])


if __name__ == "__main__":
    main()
