"""The run pipeline's snapshots: the working directory before and after each CLI run.

Outside any transaction and never fatal: a snapshot that fails (no git, a folder git may not
read) is logged and stored on the run as `snapshot_error`, which the Changes tab shows; the
run goes on. The "before" fields are in the run's row from its first write (so the cleanup
keeps that tree while the run works); all of them reach the database again with the run's final
record (RunRecorder).

Between two agents of a pass there is one snapshot, not two: the next run's "before" is the
previous run's "after" (PassSnapshots). Totals are worked out only when the trees differ.
"""

import logging
import time

from core.fields import max_length_of
from runner import diffs, snapshots
from runner.git import GitError
from runner.models import AgentRun
from runner.selectors import task_first_tree

log = logging.getLogger(__name__)

BOUNDARY_SECONDS = 30.0  # an "after" older than this is no next run's "before"


class PassSnapshots:
    """What one owner (a task pass, a chat reply) remembers between its runs: the last
    snapshot and when it was taken, the task's first tree per store (read once a pass, not once
    a step) and the totals already worked out between two trees."""

    def __init__(self):
        self.last: snapshots.Snapshot | None = None
        self.last_cwd, self.last_at = "", 0.0
        self.first_trees: dict[str, str] = {}
        self.pair_totals: dict[tuple[str, str, str], dict] = {}  # by (store, before, after)

    def before(self, cwd) -> snapshots.Snapshot | None:
        """The previous run's "after" when it is this run's "before": same folder, just now."""
        last = self.last
        if last is None or time.monotonic() - self.last_at > BOUNDARY_SECONDS:
            return None
        return last if self.last_cwd == str(cwd) else None

    def after(self, cwd, snapshot: snapshots.Snapshot | None) -> None:
        self.last, self.last_cwd, self.last_at = snapshot, str(cwd), time.monotonic()


class RunSnapshots:
    def __init__(self, recorder, cwd, memory: PassSnapshots | None = None):
        self.recorder, self.cwd = recorder, cwd
        self.before: snapshots.Snapshot | None = None
        self.memory = PassSnapshots() if memory is None else memory

    @property
    def run(self) -> AgentRun:
        return self.recorder.run

    def _failed(self, exc: Exception) -> None:
        log.warning("Snapshot failed: %s", exc, extra={"run_id": self.run.id})
        self.recorder.snapshot_fields["snapshot_error"] = str(exc)

    def _record(self, **fields) -> None:
        """On the run's row from its first write, and again with its final record."""
        self.recorder.snapshot_fields.update(fields)
        for name, value in fields.items():
            setattr(self.run, name, value)

    def take_before(self) -> None:
        self._record(working_directory=str(self.cwd))
        try:
            self.before = self.memory.before(self.cwd) or snapshots.take(self.cwd)
        except (snapshots.SnapshotError, GitError) as exc:
            self.before = None
            self._failed(exc)
            return
        self._record(
            snapshot_store=self.before.store,
            tree_before=self.before.tree,
            # git allows names longer than the column (PostgreSQL would refuse the run's row)
            git_branch=self.before.branch[: max_length_of(AgentRun, "git_branch")],
        )

    def take_after(self) -> None:
        self.memory.after(self.cwd, None)
        before = self.before
        if before is None:
            return
        try:
            after = snapshots.take(self.cwd)
            if after.store != before.store:  # the folder became (or stopped being) a repository
                raise snapshots.SnapshotError("the working directory changed during the run")
            self.memory.after(self.cwd, after)
            totals = self._totals(before, after)
        except (snapshots.SnapshotError, GitError) as exc:
            self._failed(exc)
            return
        self.recorder.snapshot_fields.update(tree_after=after.tree, **totals)

    def _totals(self, before: snapshots.Snapshot, after: snapshots.Snapshot) -> dict:
        """The run's totals, and the task's from its first snapshot in this store (maybe this
        run's) to this one: git is asked only for pairs of trees that differ and were not
        counted before in this pass (one call for both)."""
        pairs = [(before.tree, after.tree)]
        if self.run.task_id:
            pairs.append((self._first_tree(after.store, before.tree), after.tree))
        known = self.memory.pair_totals
        missing = [pair for pair in pairs if (after.store, *pair) not in known]
        for pair, counted in zip(missing, diffs.totals_between(after.store, missing), strict=True):
            known[(after.store, *pair)] = counted
        fields = dict(known[(after.store, *pairs[0])])
        if self.run.task_id:
            task = known[(after.store, *pairs[1])]
            fields.update({f"task_{key}": value for key, value in task.items()})
        return fields

    def _first_tree(self, store: str, before: str) -> str:
        first = self.memory.first_trees.get(store)
        if first is None:
            first = task_first_tree(self.run.task_id, store) or before
            self.memory.first_trees[store] = first
        return first
