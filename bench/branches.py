"""Branch per task: what git costs a task on a generated repository (no Django, no database).

    .venv/bin/python bench/branches.py [--files 10000]

Prints the time to make a task's worktree (`git worktree add`, a full checkout), to commit one
agent run that changed a few files (`git add -A` + commit), to find conflicts (`merge-tree`)
and to merge (fast-forward), each the median of a few tries.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner import git  # noqa: E402

WHO = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}
TRIES = 5


def make_repo(path: Path, files: int) -> None:
    path.mkdir()
    git.git("init", "-q", "-b", "main", cwd=path)
    for n in range(files):
        folder = path / f"pkg{n % 100}"
        folder.mkdir(exist_ok=True)
        (folder / f"module{n}.py").write_text(f"VALUE = {n}\n" * 20)
    git.git("add", "-A", cwd=path)
    git.git("commit", "-q", "-m", "generated", cwd=path, env=WHO)


def timed(action, *args, **kwargs) -> float:
    started = time.perf_counter()
    action(*args, **kwargs)
    return (time.perf_counter() - started) * 1000


def one_task(repo: Path, tree: Path, branch: str) -> tuple[float, float, float, float]:
    """A task's git life: its worktree, one run's commit, the conflict check and the merge."""
    add = timed(git.worktree_add, repo, tree, branch=branch, base="main")
    for k in range(3):
        (tree / f"pkg{k}" / f"module{k}.py").write_text(f"changed on {branch}\n")
    commit = timed(git.commit_all, tree, author="Agent", email="a@malamar.local", message="m")
    check = timed(git.merge_conflicts, repo, branch=branch, into="main")
    merge = timed(git.merge_into_checkout, repo, branch=branch, message="merge")
    git.worktree_remove(repo, tree)
    return add, commit, check, merge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, args.files)
        rows = [
            one_task(repo, Path(tmp) / "worktrees" / f"task{n}", f"malamar/task{n}")
            for n in range(TRIES)
        ]
        labels = (
            "worktree add (checkout)",
            "commit one run (3 files)",
            "conflict check (merge-tree)",
            "merge into the checkout",
        )
        print(f"repository: {args.files} files; median of {TRIES}")
        for label, values in zip(labels, zip(*rows, strict=True), strict=True):
            print(f"  {label:30} {statistics.median(values):8.1f} ms")


if __name__ == "__main__":
    main()
