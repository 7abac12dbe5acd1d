"""Cost of snapshots and of the Changes tab (issue 18).

1. A generated repository of 10,000 files (committed): the first snapshot (the private store is
   created, the repository's index copied), then later snapshots after one file changed, after a
   few files changed, and with nothing changed. Goal: a later snapshot < 200 ms.
2. The Changes tab's server time (the view, through Django's test client) for a task whose run
   changed 300 files with 20,000 lines in all. Goal: < 300 ms.

    .venv/bin/python bench/changes.py [--files 10000] [--rounds 5]
"""

import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRATCH = Path(tempfile.mkdtemp(prefix="malamar-bench-changes-"))  # removed at exit
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)
os.environ["MALAMAR_DATA_DIR"] = str(SCRATCH / "data")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from runner import diffs, snapshots  # noqa: E402
from runner.models import AgentRun  # noqa: E402
from tasks.services import task_create  # noqa: E402
from workspaces.services import workspace_create  # noqa: E402

GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def sh(cwd, *args) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


def make_repository(root: Path, files: int) -> None:
    root.mkdir()
    for n in range(files):
        folder = root / f"pkg{n % 100:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"module_{n}.py").write_text(f"def f{n}():\n    return {n}\n" * 3)
    sh(root, "init", "-q", "-b", "main")
    sh(root, "add", ".")
    sh(root, "-c", "user.name=B", "-c", "user.email=b@x", "commit", "-qm", "bench")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def bench_snapshots(files: int, rounds: int) -> None:
    repo = SCRATCH / "repo"
    started = time.monotonic()
    make_repository(repo, files)
    print(f"repository: {files} files, made in {time.monotonic() - started:.1f} s")
    first = snapshots.take(repo)
    print(f"first snapshot: {ms(first.seconds)}")
    cases = {
        "one file edited": lambda n: edit(repo, [0], n),
        "3 files edited, 1 added": lambda n: edit(repo, [1, 2, 3], n, new=f"new_{n}.txt"),
        "nothing changed": lambda n: None,
    }
    for name, change in cases.items():
        took = []
        for n in range(rounds):
            change(n)
            took.append(snapshots.take(repo).seconds)
        print(
            f"later snapshot ({name}): median {ms(statistics.median(took))}, "
            f"max {ms(max(took))} over {rounds} (goal < 200 ms)"
        )


def edit(repo: Path, modules: list[int], n: int, new: str = "") -> None:
    for k in modules:
        path = repo / f"pkg{k:02d}" / f"module_{k}.py"
        path.write_text(path.read_text() + f"# round {n}\n")
    if new:
        (repo / new).write_text("new\n")


def task_with_changes(workspace, files: int, lines_per_file: int, seed: int):
    """A task whose one run changed `files` files, `files * lines_per_file` lines in all."""
    folder = Path(tempfile.mkdtemp(prefix="tab-", dir=SCRATCH))
    for n in range(files):
        (folder / f"src{n % 10}").mkdir(exist_ok=True)
        (folder / f"src{n % 10}" / f"file_{n}.py").write_text("x = 0\n" * 40)
    before = snapshots.take(folder)
    for n in range(files):
        lines = "".join(
            f"value_{seed}_{n}_{i} = compute({i}, 'text')\n" for i in range(lines_per_file)
        )
        (folder / f"src{n % 10}" / f"file_{n}.py").write_text(lines)
    after = snapshots.take(folder)
    task = task_create(workspace=workspace, summary=f"Many changes {seed}")
    AgentRun.objects.create(
        id=f"benchrun{seed}",
        workspace=workspace,
        task=task,
        agent_name="Bench",
        cli_type="claude",
        status="completed",
        started_at=task.created_at,
        working_directory=str(folder),
        snapshot_store=before.store,
        tree_before=before.tree,
        tree_after=after.tree,
    )
    return task


def timed_get(client, url) -> tuple[float, bytes]:
    started = time.monotonic()
    response = client.get(url, HTTP_HX_REQUEST="true")
    assert response.status_code == 200, response.status_code
    return time.monotonic() - started, response.content


def bench_tab(rounds: int) -> None:
    workspace = workspace_create(title="Bench")
    client = Client(HTTP_HOST="127.0.0.1")
    # 300 files, each 40 lines replaced by 33: 21,900 changed lines
    warmup = task_with_changes(workspace, 300, 33, seed=0)
    timed_get(client, f"/tasks/{warmup.id}/changes/")  # templates, Pygments lexers: loaded once
    task = task_with_changes(workspace, 300, 33, seed=1)
    url = f"/tasks/{task.id}/changes/"
    cold, content = timed_get(client, url)
    warm = [timed_get(client, url)[0] for _ in range(rounds)]
    stats = task.runs.get()
    files = content.decode().count("data-change-path=")
    print(
        f"Changes tab, {files} files / {changed_lines(stats)} changed lines: first view "
        f"{ms(cold)}, again median {ms(statistics.median(warm))} (max {ms(max(warm))}, "
        f"{rounds} views; {len(content) // 1024} KB of HTML; goal < 300 ms)"
    )


def changed_lines(run) -> int:
    totals = diffs.totals(diffs.changed_files(run.snapshot_store, run.tree_before, run.tree_after))
    return totals["lines_added"] + totals["lines_removed"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    bench_snapshots(args.files, args.rounds)
    bench_tab(args.rounds)


if __name__ == "__main__":
    main()
