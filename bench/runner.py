"""Runner speed and memory, measured from outside on real Malamar processes.

    .venv/bin/python bench/runner.py            # 10,000 agent steps (several minutes)
    .venv/bin/python bench/runner.py --quick    # about a minute
    .venv/bin/python bench/runner.py --via malamar   # through the `malamar` command

Black box: it starts `manage.py runserver --noreload` and `manage.py runworker` (the worker
through bench/_count_sql.py, which counts its SQL statements; `--no-count` runs it bare) or
`malamar`, drives them through the JSON API and reads the database. The agent CLI is
bench/fakecli.c, compiled with `cc -O2` into a temp dir and installed as `codex`: it logs its
own start and exit (CLOCK_REALTIME) and answers "skip", so every task is one pass of its
workspace's 4 agents and goes to In Review.

Measured (see DEFINITIONS below, printed with the results):
- own work per step: for each pass, (pass end - task created) - the 4 CLI lifetimes, / 4
- step gap: CLI k exit → CLI k+1 start inside a pass (finish one run, start the next)
- statements per step: the worker's statements during the sequential passes / steps, after
  subtracting its idle rate measured just before
- pickup: task created (its row's created_at) → the fake CLI's first instruction
- RSS and USS of each process, idle and after all steps
"""

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live import free_port, wait_until  # noqa: E402

BENCH = ROOT / "bench"
AGENTS_PER_WORKSPACE = 4
SERVER_AND_WORKER = "server + worker"
TASK_PROMPT = re.compile(r"malamar_task_(\S+?)\.md")

DEFINITIONS = """\
definitions (all timestamps CLOCK_REALTIME; the fake CLI logs its own first and last instant):
  own work/step   per pass: (pass end - task created) - sum of its 4 CLI lifetimes, / 4;
                  task created = tasks.created_at, pass end = the pass's queue item updated_at
                  (its last write); so it holds pickup, 4 x (start + finish a run), pass end
  step gap        CLI k exit -> CLI k+1 start within a pass (3 per pass)
  pickup          tasks.created_at -> fake CLI start, one task at a time on an idle worker
                  (all times include spawning the tiny C fake and reaping it: ours too)
  statements/step worker statements during the sequential passes / their steps, minus the
                  idle rate (by kind, measured over a quiet 2 s before) x elapsed time;
                  BEGIN/COMMIT are not statements here: COMMITs are the write transactions
  cpu/step        worker user+system CPU during the sequential passes / steps, minus idle
  rss/uss         psutil memory_full_info of each process; idle = after warm-up passes
  fds, threads    open file descriptors and threads of each process, idle -> after"""


# --- small helpers ---------------------------------------------------------------------------
def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def db_time(value: str) -> float:
    """Django stores aware datetimes in SQLite as naive UTC text."""
    parsed = datetime.fromisoformat(value)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def load_text(averages: tuple[float, ...]) -> str:
    return " ".join(f"{value:.2f}" for value in averages)


def compile_fake_cli(bin_dir: Path, *, source: str = "fakecli.c", name: str = "codex") -> Path:
    """A fake CLI in C (bench/`source`) compiled as bin_dir/`name`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    binary = bin_dir / name
    subprocess.run(["cc", "-O2", "-o", str(binary), str(BENCH / source)], check=True)
    return binary


@dataclass
class CliRun:
    kind: str
    start: float
    end: float
    pid: int
    task_id: str | None

    @property
    def lifetime(self) -> float:
        return self.end - self.start


def read_cli_log(path: Path) -> list[CliRun]:
    if not path.exists():
        return []
    runs = []
    for line in path.read_text().splitlines():
        kind, start, end, pid, *prompt = line.split(" ", 4)
        match = TASK_PROMPT.search(prompt[0]) if prompt else None
        task_id = match.group(1) if match else None
        runs.append(CliRun(kind, float(start), float(end), int(pid), task_id))
    return runs


def task_runs(path: Path) -> list[CliRun]:
    return [run for run in read_cli_log(path) if run.kind == "task"]


# --- the Malamar under test ------------------------------------------------------------------
@dataclass
class Stack:
    root: Path
    via: str
    count_sql: bool
    port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self):
        self.data_dir = self.root / "data"
        self.data_dir.mkdir(parents=True)
        (self.data_dir / "malamar.db").touch()  # not a first launch: no sample workspace
        self.cli_log = self.root / "cli.log"
        self.counts_file = self.root / "sql-counts.json"
        self.url = f"http://127.0.0.1:{self.port}"
        self.session = requests.Session()
        self._db: sqlite3.Connection | None = None
        bin_dir = self.root / "bin"
        compile_fake_cli(bin_dir)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MALAMAR_")}
        self.env.update(
            {
                "DJANGO_SETTINGS_MODULE": "malamar_site.settings",
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}"
                f"{os.pathsep}{os.environ['PATH']}",
                "MALAMAR_DATA_DIR": str(self.data_dir),
                "MALAMAR_TEMP_DIR": str(self.root / "tmp"),
                "MALAMAR_PORT": str(self.port),
                "BENCH_CLI_LOG": str(self.cli_log),
            }
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            argv, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def start(self) -> "Stack":
        manage = [sys.executable, str(ROOT / "manage.py")]
        if self.via == "malamar":
            malamar = shutil.which("malamar", path=str(Path(sys.executable).parent))
            self._spawn("malamar", [malamar or "malamar", "--port", str(self.port)])
        else:
            migrate = subprocess.run(
                [*manage, "migrate", "--no-input", "-v", "0"],
                env=self.env,
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            if migrate.returncode:
                raise RuntimeError(migrate.stderr)
            self._spawn("server", [*manage, "runserver", "--noreload", f"127.0.0.1:{self.port}"])
            worker = [sys.executable, str(BENCH / "_count_sql.py"), str(self.counts_file)]
            self._spawn("worker", worker if self.count_sql else [*manage, "runworker"])
        wait_until(self._ready, timeout=60, what="the server to answer /api/health")
        return self

    def _ready(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.root / f"{name}.log").read_text()[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")
        try:
            return self.session.get(f"{self.url}/api/health", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def processes(self) -> dict[str, psutil.Process]:
        """The Malamar processes by role (the fake CLIs are excluded)."""
        if self.via != "malamar":
            return {name: psutil.Process(proc.pid) for name, proc in self.procs.items()}
        wrapper = psutil.Process(self.procs["malamar"].pid)
        found = {"malamar": wrapper}
        for child in wrapper.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                cmdline = " ".join(child.cmdline())
                if "runworker" in cmdline:
                    found["worker"] = child
                elif "--with-worker" in cmdline:  # the worker is a thread of the server
                    found[SERVER_AND_WORKER] = child
                elif "python" in Path(child.exe()).name:
                    found.setdefault("server", child)
        return found

    def memory(self) -> dict[str, tuple[float, float, int, int]]:
        """RSS and USS (MB), open files and threads of each process."""
        result = {}
        for name, proc in self.processes().items():
            info = proc.memory_full_info()
            result[name] = (info.rss / 2**20, info.uss / 2**20, proc.num_fds(), proc.num_threads())
        return result

    def worker_cpu(self) -> float:
        """The worker's CPU time (with `malamar`, the server's in the same process counts too)."""
        processes = self.processes()
        times = processes.get("worker", processes.get(SERVER_AND_WORKER)).cpu_times()
        return times.user + times.system

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # statements ------------------------------------------------------------------------------
    def sql_counts(self) -> tuple[float, dict[str, int]]:
        """Ask the counting worker for its totals (SIGUSR1) and wait for the fresh dump."""
        seq = self._counts_seq()
        os.kill(self.procs["worker"].pid, signal.SIGUSR1)
        wait_until(lambda: self._counts_seq() > seq, timeout=10, what="the SQL counts dump")
        data = json.loads(self.counts_file.read_text())
        return data["time"], data["counts"]

    def _counts_seq(self) -> int:
        try:
            return json.loads(self.counts_file.read_text())["seq"]
        except (FileNotFoundError, json.JSONDecodeError):
            return 0

    # API and database ------------------------------------------------------------------------
    def api(self, method: str, path: str, body=None) -> dict:
        response = self.session.request(method, f"{self.url}/api{path}", json=body, timeout=30)
        if response.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else {}

    def workspace(self, title: str) -> str:
        workspace_id = self.api("POST", "/workspaces", {"title": title})["id"]
        for n in range(AGENTS_PER_WORKSPACE):
            body = {"name": f"A{n}", "cli_type": "codex", "instruction": f"You are A{n}."}
            self.api("POST", f"/workspaces/{workspace_id}/agents", body)
        return workspace_id

    def task(self, workspace_id: str, summary: str) -> str:
        body = {"summary": summary, "description": "bench"}
        return self.api("POST", f"/workspaces/{workspace_id}/tasks", body)["id"]

    def sql(self, query: str, *params) -> list[tuple]:
        """Read-only, on one connection kept open (the polling must cost the machine little)."""
        if self._db is None:
            uri = f"file:{self.data_dir / 'malamar.db'}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, timeout=10, isolation_level=None)
        return self._db.execute(query, params).fetchall()

    def status(self, task_id: str) -> str:
        return self.sql("SELECT status FROM tasks WHERE id = ?", task_id)[0][0]

    def wait_in_review(self, task_id: str, timeout: float = 60) -> None:
        def reviewed():
            status = self.status(task_id)
            if status not in ("todo", "in_progress", "in_review"):
                raise RuntimeError(f"task {task_id} went to {status}")
            return status == "in_review"

        wait_until(reviewed, timeout=timeout, what=f"task {task_id} In Review")

    def pass_times(self, task_id: str) -> tuple[float, float]:
        """(task created, pass end = the last write of its single pass: its queue item's
        finish, or the task's move to In Review if the queue table ever changes name)."""
        created, reviewed = self.sql(
            "SELECT created_at, updated_at FROM tasks WHERE id = ?", task_id
        )[0]
        try:
            finished = self.sql(
                "SELECT MAX(updated_at) FROM task_queue WHERE task_id = ? AND status = ?",
                task_id,
                "completed",
            )[0][0]
        except sqlite3.OperationalError:
            finished = None
        return db_time(created), db_time(finished or reviewed)


# --- phases ----------------------------------------------------------------------------------
@dataclass
class Results:
    via: str
    load_start: tuple[float, ...] = ()
    load_after_passes: tuple[float, ...] = ()
    load_end: tuple[float, ...] = ()
    own_per_step: list[float] = field(default_factory=list)
    step_gaps: list[float] = field(default_factory=list)
    pass_tails: list[float] = field(default_factory=list)
    pickups: list[float] = field(default_factory=list)
    idle_per_s: dict[str, float] = field(default_factory=dict)  # statements by kind
    per_step: dict[str, float] = field(default_factory=dict)  # net statements by kind
    busy_per_step: dict[str, float] = field(default_factory=dict)
    cpu_per_step_ms: float | None = None
    memory_idle: dict[str, tuple[float, float, int, int]] = field(default_factory=dict)
    memory_after: dict[str, tuple[float, float, int, int]] = field(default_factory=dict)
    total_steps: int = 0
    busy_steps: int = 0
    busy_seconds: float = 0.0
    busy_workspaces: int = 0


def warm_up(stack: Stack, workspace_id: str, passes: int = 3) -> None:
    for n in range(passes):
        stack.wait_in_review(stack.task(workspace_id, f"warm-up {n}"))


TRANSACTION_KINDS = ("BEGIN", "COMMIT", "ROLLBACK")


def statements(by_kind: dict[str, float]) -> float:
    """Round trips that are statements proper; BEGIN/COMMIT are shown as transactions."""
    return sum(v for k, v in by_kind.items() if k not in TRANSACTION_KINDS)


def net_counts(
    before: tuple[float, dict], after: tuple[float, dict], idle_per_s: dict[str, float]
) -> dict[str, float]:
    """Statements by kind between two dumps, minus the idle rate over the same time."""
    elapsed = after[0] - before[0]
    return {
        kind: count - before[1].get(kind, 0) - idle_per_s.get(kind, 0.0) * elapsed
        for kind, count in sorted(after[1].items())
    }


def idle_rates(stack: Stack, seconds: float = 2.0) -> tuple[float, dict[str, float]]:
    """Worker CPU (s/s) and statements by kind (per s) while nothing is queued."""
    cpu0, counts0 = stack.worker_cpu(), stack.sql_counts() if stack.count_sql else None
    time.sleep(seconds)
    cpu1, counts1 = stack.worker_cpu(), stack.sql_counts() if stack.count_sql else None
    rates = {}
    if counts0 and counts1:
        elapsed = counts1[0] - counts0[0]
        rates = {k: v / elapsed for k, v in net_counts(counts0, counts1, {}).items() if v}
    return (cpu1 - cpu0) / seconds, rates


def sequential_passes(stack: Stack, workspace_id: str, passes: int, results: Results) -> None:
    """One task at a time on an idle worker: pickup, own work per step, statements, CPU."""
    idle_cpu, results.idle_per_s = idle_rates(stack)
    counts0 = stack.sql_counts() if stack.count_sql else None
    cpu0, wall0 = stack.worker_cpu(), time.time()
    task_ids = []
    for n in range(passes):
        task_id = stack.task(workspace_id, f"pass {n}")
        stack.wait_in_review(task_id)
        task_ids.append(task_id)
        time.sleep(0.3)  # let the worker go idle: the next pickup starts from rest
    cpu1, wall1 = stack.worker_cpu(), time.time()
    counts1 = stack.sql_counts() if stack.count_sql else None
    steps = passes * AGENTS_PER_WORKSPACE
    results.cpu_per_step_ms = ((cpu1 - cpu0) - idle_cpu * (wall1 - wall0)) / steps * 1000
    if counts0 and counts1:
        net = net_counts(counts0, counts1, results.idle_per_s)
        results.per_step = {k: v / steps for k, v in net.items()}

    runs_by_task: dict[str, list[CliRun]] = {}
    for run in task_runs(stack.cli_log):
        runs_by_task.setdefault(run.task_id, []).append(run)
    for task_id in task_ids:
        runs = sorted(runs_by_task.get(task_id, []), key=lambda run: run.start)
        if len(runs) != AGENTS_PER_WORKSPACE:
            raise RuntimeError(f"task {task_id}: {len(runs)} CLI runs, not one pass of 4")
        created, ended = stack.pass_times(task_id)
        own = (ended - created) - sum(run.lifetime for run in runs)
        results.own_per_step.append(own / AGENTS_PER_WORKSPACE * 1000)
        results.pickups.append((runs[0].start - created) * 1000)
        results.step_gaps += [(b.start - a.end) * 1000 for a, b in itertools.pairwise(runs)]
        results.pass_tails.append((ended - runs[-1].end) * 1000)


def busy_steps(stack: Stack, steps: int, workspaces: int, results: Results) -> None:
    """Run `steps` more agent steps with `workspaces` workspaces busy at once (2 tasks each
    in flight), the load that the memory-after number is about."""
    spaces = [stack.workspace(f"busy {n}") for n in range(workspaces)]
    tasks_needed = -(-steps // AGENTS_PER_WORKSPACE)
    placeholders = ",".join("?" * len(spaces))
    open_query = (
        f"SELECT workspace_id, COUNT(*) FROM tasks WHERE workspace_id IN ({placeholders})"
        " AND status IN ('todo', 'in_progress') GROUP BY workspace_id"
    )
    done_query = (
        f"SELECT COUNT(*) FROM tasks WHERE workspace_id IN ({placeholders})"
        " AND status = 'in_review'"
    )
    counts0 = stack.sql_counts() if stack.count_sql else None
    before = len(task_runs(stack.cli_log))
    started, created, next_report = time.time(), 0, time.time() + 30
    while True:
        done = stack.sql(done_query, *spaces)[0][0]
        if done >= tasks_needed:
            break
        in_flight = dict(stack.sql(open_query, *spaces))
        for workspace_id in spaces:
            for _ in range(2 - in_flight.get(workspace_id, 0)):
                if created < tasks_needed:
                    stack.task(workspace_id, f"busy {created}")
                    created += 1
        if time.time() > next_report:
            print(f"  ... {done * AGENTS_PER_WORKSPACE} of {steps} steps", file=sys.stderr)
            next_report += 30
        time.sleep(0.02)
    results.busy_seconds = time.time() - started
    results.busy_steps = len(task_runs(stack.cli_log)) - before
    results.busy_workspaces = workspaces
    if counts0:
        net = net_counts(counts0, stack.sql_counts(), results.idle_per_s)
        results.busy_per_step = {k: v / max(results.busy_steps, 1) for k, v in net.items()}


def run(args) -> Results:
    results = Results(via=args.via, load_start=os.getloadavg())
    root = Path(tempfile.mkdtemp(prefix="malamar-bench-runner-"))
    stack = Stack(root, via=args.via, count_sql=args.via == "manage" and not args.no_count)
    try:
        stack.start()
        workspace_id = stack.workspace("sequential")
        warm_up(stack, workspace_id)
        time.sleep(2)
        results.memory_idle = stack.memory()
        print(f"  idle memory measured; {args.passes} sequential passes ...", file=sys.stderr)
        sequential_passes(stack, workspace_id, args.passes, results)
        results.load_after_passes = os.getloadavg()
        remaining = args.steps - len(task_runs(stack.cli_log))
        if remaining > 0:
            print(f"  {remaining} more steps, {args.workspaces} workspaces ...", file=sys.stderr)
            busy_steps(stack, remaining, args.workspaces, results)
        time.sleep(2)
        results.memory_after = stack.memory()
        results.total_steps = len(task_runs(stack.cli_log))
    except BaseException:
        print(f"logs kept in {root}", file=sys.stderr)
        raise
    finally:
        stack.stop()
    results.load_end = os.getloadavg()
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return results


# --- report ----------------------------------------------------------------------------------
def p50_p95(values: list[float], unit: str = "ms") -> str:
    if not values:
        return "n/a"
    return (
        f"p50 {statistics.median(values):6.2f} {unit}   p95 {percentile(values, 95):6.2f} {unit}"
        f"   (min {min(values):.2f}, n={len(values)})"
    )


def report(results: Results) -> str:
    r = results
    busiest = max(r.load_start[0], r.load_after_passes[0], r.load_end[0])
    warning = (
        [
            f"WARNING: 1-min load average up to {busiest:.1f} on {os.cpu_count()} CPUs: "
            "the timings include waiting for a CPU; compare runs on a quiet machine only",
            "",
        ]
        if busiest > (os.cpu_count() or 1)
        else []
    )
    lines = [
        *warning,
        f"bench/runner.py via {r.via}, {r.total_steps} agent steps; "
        f"load average (1/5/15 min) start {load_text(r.load_start)}, after the sequential passes "
        f"{load_text(r.load_after_passes)}, end {load_text(r.load_end)}; {os.cpu_count()} CPUs",
        "",
        f"own work per step      {p50_p95(r.own_per_step)}   [goal <= 2 ms]",
        f"  step gap             {p50_p95(r.step_gaps)}",
        f"  pass end (tail)      {p50_p95(r.pass_tails)}",
        "worker CPU per step    "
        + (f"{r.cpu_per_step_ms:6.2f} ms" if r.cpu_per_step_ms is not None else "n/a"),
    ]
    if r.per_step:
        kinds = ", ".join(
            f"{k} {v:.1f}"
            for k, v in r.per_step.items()
            if k not in TRANSACTION_KINDS and round(v, 1)
        )
        idle = ", ".join(f"{k} {v:.1f}" for k, v in r.idle_per_s.items()) or "none"
        lines += [
            f"statements per step    {statements(r.per_step):6.1f}   [goal <= 12]   ({kinds})",
            f"  write transactions   {r.per_step.get('COMMIT', 0.0):6.1f}"
            f"   (COMMITs; BEGINs {r.per_step.get('BEGIN', 0.0):.1f})",
            f"  idle rate subtracted {idle} per s",
        ]
        if r.busy_per_step:
            lines.append(
                f"  busy phase           {statements(r.busy_per_step):6.1f}"
                f"   ({r.busy_workspaces} workspaces at once;"
                f" write transactions {r.busy_per_step.get('COMMIT', 0.0):.1f})"
            )
    else:
        lines.append("statements per step    n/a (not counted with --no-count or --via malamar)")
    lines += [f"pickup                 {p50_p95(r.pickups)}   [goal <= 10 ms of our own]"]
    if r.busy_steps:
        lines.append(
            f"throughput (busy)      {r.busy_steps / r.busy_seconds:6.1f} steps/s"
            f"   ({r.busy_steps} steps in {r.busy_seconds:.1f} s, {r.busy_workspaces} workspaces)"
        )
    lines += [
        "",
        f"memory (MB)            {'idle RSS':>9} {'idle USS':>9} {'after RSS':>10} "
        f"{'after USS':>10}  {'fds':>9}  {'threads':>9}   (after = after {r.total_steps} steps)",
    ]
    names = list(dict.fromkeys([*r.memory_idle, *r.memory_after]))
    for name in [*names, "total"]:
        if name == "total":
            idle = [sum(v[i] for v in r.memory_idle.values()) for i in range(4)]
            after = [sum(v[i] for v in r.memory_after.values()) for i in range(4)]
        else:
            idle = r.memory_idle.get(name, (0.0, 0.0, 0, 0))
            after = r.memory_after.get(name, (0.0, 0.0, 0, 0))
        lines.append(
            f"  {name:<20} {idle[0]:9.1f} {idle[1]:9.1f} {after[0]:10.1f} {after[1]:10.1f}"
            f"  {idle[2]:>4}→{after[2]:<4}  {idle[3]:>4}→{after[3]:<4}"
        )
    lines += ["", DEFINITIONS]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="about a minute: 50 passes, 600 steps")
    parser.add_argument("--steps", type=int, help="agent steps in all (default 10000)")
    parser.add_argument("--passes", type=int, help="sequential passes timed (default 60)")
    parser.add_argument("--workspaces", type=int, default=8, help="busy workspaces at once")
    parser.add_argument("--via", choices=("manage", "malamar"), default="manage")
    parser.add_argument("--no-count", action="store_true", help="run the worker bare")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, database)")
    args = parser.parse_args()
    args.steps = args.steps or (600 if args.quick else 10_000)
    args.passes = args.passes or (50 if args.quick else 60)
    print(report(run(args)))


if __name__ == "__main__":
    main()
