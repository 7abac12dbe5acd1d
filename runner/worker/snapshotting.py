"""The run pipeline's snapshots: the working directory before and after each CLI run.

Outside any transaction and never fatal: a snapshot that fails (no git, a folder git may not
read) is logged and stored on the run as `snapshot_error`, which the Changes tab shows; the
run goes on. The fields reach the database with the run's final record (RunRecorder)."""

import logging

from core.fields import max_length_of
from runner import diffs, snapshots
from runner.git import GitError
from runner.models import AgentRun
from runner.selectors import task_first_tree

log = logging.getLogger(__name__)


class RunSnapshots:
    def __init__(self, recorder, cwd, first_trees: dict[str, str] | None = None):
        """`first_trees`: the owner's memory of its task's first tree per store (read once a
        pass, not once a step)."""
        self.recorder, self.cwd = recorder, cwd
        self.before: snapshots.Snapshot | None = None
        self.first_trees = {} if first_trees is None else first_trees

    @property
    def run(self) -> AgentRun:
        return self.recorder.run

    def _failed(self, exc: Exception) -> None:
        log.warning("Snapshot failed: %s", exc, extra={"run_id": self.run.id})
        self.recorder.snapshot_fields["snapshot_error"] = str(exc)

    def take_before(self) -> None:
        self.recorder.snapshot_fields["working_directory"] = str(self.cwd)
        try:
            self.before = snapshots.take(self.cwd)
            snapshots.keep(self.before, self.run.id, "before")
        except (snapshots.SnapshotError, GitError) as exc:
            self.before = None
            self._failed(exc)
            return
        self.recorder.snapshot_fields.update(
            snapshot_store=self.before.store,
            tree_before=self.before.tree,
            # git allows names longer than the column (PostgreSQL would refuse the run's row)
            git_branch=self.before.branch[: max_length_of(AgentRun, "git_branch")],
        )

    def take_after(self) -> None:
        before = self.before
        if before is None:
            return
        try:
            after = snapshots.take(self.cwd)
            snapshots.keep(after, self.run.id, "after")
            if after.store != before.store:  # the folder became (or stopped being) a repository
                raise snapshots.SnapshotError("the working directory changed during the run")
            run_totals = diffs.totals(diffs.changed_files(after.store, before.tree, after.tree))
            task_totals = self._task_totals(after) if self.run.task_id else {}
        except (snapshots.SnapshotError, GitError) as exc:
            self._failed(exc)
            return
        self.recorder.snapshot_fields.update(tree_after=after.tree, **run_totals, **task_totals)

    def _task_totals(self, after: snapshots.Snapshot) -> dict:
        """From the task's first snapshot in this store (maybe this run's) to this one."""
        first = self.first_trees.get(after.store)
        if first is None:
            first = task_first_tree(self.run.task_id, after.store) or self.before.tree
            self.first_trees[after.store] = first
        files = diffs.changed_files(after.store, first, after.tree)
        return {f"task_{key}": value for key, value in diffs.totals(files).items()}
