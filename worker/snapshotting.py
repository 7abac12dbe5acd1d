"""The run pipeline's snapshots: the working directory before and after each CLI run.

Outside any transaction and never fatal: a snapshot that fails (no git, a folder git may not
read) is logged and stored on the run as `snapshot_error`, which the Changes tab shows; the
run goes on. The "before" fields are in the run's row from its first write (so the cleanup
keeps that tree while the run works); all of them reach the database again with the run's final
record (RunRecorder).

Between two agents of a pass there is one snapshot, not two: the next run's "before" is the
previous run's "after" (PassSnapshots). Totals are worked out only when the trees differ, and
then, when another agent runs next, once that agent's CLI started (`count_later`): the `git
diff-tree` is not on the path from one agent to the next; the run's totals reach its row a
little after its final record (`agent_run_totals_record`, with its task.changes_updated).
"""

import logging
import threading
import time

from django.db import transaction

from core.fields import max_length_of
from runner import diffs, snapshots
from runner.git import GitError
from runner.models import AgentRun
from runner.selectors import runs_without_totals, task_first_tree
from runner.services import agent_run_totals_record

log = logging.getLogger(__name__)

BOUNDARY_SECONDS = 30.0  # an "after" older than this is no next run's "before"
TOTALS = ("files_changed", "lines_added", "lines_removed")
COUNTED_LATER = (*TOTALS, *(f"task_{name}" for name in TOTALS), "snapshot_error")


class PassSnapshots:
    """What one owner (a task pass, a chat reply) remembers between its runs: the last
    snapshot and when it was taken, the task's first tree per store (read once a pass, not once
    a step) and the totals already worked out between two trees."""

    def __init__(self):
        self.last: snapshots.Snapshot | None = None
        self.last_cwd, self.last_at = "", 0.0
        self.first_trees: dict[str, str] = {}
        self.pair_totals: dict[tuple[str, str, str], dict] = {}  # by (store, before, after)
        self.ended: RunSnapshots | None = None  # the last run's, its totals not counted yet
        self.later: list[RunSnapshots] = []  # runs whose totals are written after their end
        self.store_ahead: str | None = None  # a new folder whose store is made as its run works
        self.spares_for: str | None = None  # the store of the run that works: spares made
        self.first_tree_wanted: tuple | None = None  # (task, store, before): read as a run works
        self.stores_found: set[str] = set()  # stores seen made (an empty folder's, each step)

    def before(self, cwd) -> snapshots.Snapshot | None:
        """The previous run's "after" when it is this run's "before": same folder, just now."""
        last = self.last
        if last is None or time.monotonic() - self.last_at > BOUNDARY_SECONDS:
            return None
        return last if self.last_cwd == str(cwd) else None

    def store_missing(self, store: str) -> bool:
        """Whether `store` is still to be made (once found, it is not looked for again)."""
        if store in self.stores_found:
            return False
        if snapshots.store_exists(store):
            self.stores_found.add(store)
            return False
        return True

    def after(self, cwd, snapshot: snapshots.Snapshot | None) -> None:
        self.last, self.last_cwd, self.last_at = snapshot, str(cwd), time.monotonic()

    def count_now(self) -> None:
        """The ended run's totals, with its final record (nothing runs after it)."""
        ended, self.ended = self.ended, None
        if ended is not None:
            ended.count()

    def count_later(self) -> None:
        """Another agent runs next: the ended run's totals are counted by git in a thread of
        their own once the next agent's CLI runs (`start_counting`) and written with a later
        finish (`counted_later`, `write`); at once when they need no git."""
        ended, self.ended = self.ended, None
        if ended is None:
            return
        missing = ended.missing_pairs()
        if not missing:
            ended.count()
            return
        ended.recorder.changes_later = True
        self.later.append((ended, _Counting(ended.after.store, missing)))

    def start_counting(self) -> None:
        """The next agent's CLI runs: git counts what was left for later, in a thread (it
        would hold this thread's interpreter lock on the way otherwise), a new folder's store
        is made and the store's spare files (its first change would make them between two
        agents otherwise), and the task's first tree in the store read (the run's totals need
        it as it ends)."""
        for _run_snapshots, counting in self.later:
            if not counting.begun:
                counting.begun = True
                counting.start()
        cwd, self.store_ahead = self.store_ahead, None
        store, self.spares_for = self.spares_for, None
        if cwd is not None or (store is not None and snapshots.spares_wanted(store)):
            name = "malamar-snapshot-store"
            kwargs = {"cwd": cwd, "store": store}
            threading.Thread(target=snapshots.made_ahead, kwargs=kwargs, name=name).start()
        wanted, self.first_tree_wanted = self.first_tree_wanted, None
        if wanted is not None:  # (a new task's first run: none recorded yet, its own "before")
            task_id, store, before = wanted
            self.first_trees.setdefault(store, _first_tree(task_id, store, before))

    def counted_later(self, *, wait: bool) -> list["RunSnapshots"]:
        """The runs whose totals were left for later and are counted now, in their order, to
        be written (`write`); `wait`: all of them (git ran while the next run started; with a
        CLI that ends in milliseconds it may still run: then, without `wait`, they stay for
        a later finish)."""
        ready = []
        while self.later:
            run_snapshots, counting = self.later[0]
            if not wait and (not counting.begun or counting.is_alive()):
                break
            if counting.begun:
                counting.join()
            else:  # the next CLI never started: counted here
                counting.begun = True
                counting.run()
            run_snapshots.learn(counting)
            ready.append(self.later.pop(0)[0])
        return ready

    def write(self, runs: list["RunSnapshots"]) -> None:
        """Totals counted later, written: inside the next run's finish transaction when there
        is one. Never fatal: a run without totals is still a run."""
        for run_snapshots in runs:
            try:
                run_snapshots.write_counted()
            except Exception:
                run_id = run_snapshots.run.id
                log.exception("Could not record a run's totals", extra={"run_id": run_id})

    def write_later(self) -> None:
        """Totals left for a next run that did not come, written now."""
        self.write(self.counted_later(wait=True))


def totals_recovered(*, limit: int = 100) -> int:
    """At a recovery: the totals of runs whose worker died before writing them (left for the
    next run's finish, `count_later`), counted now from the trees on their rows, newest first.
    A run whose store is not on this machine (another machine's worker, with PostgreSQL) is
    left to it; a run whose totals cannot be written is logged and left."""
    recovered = 0
    for run in runs_without_totals(limit):
        store = run.snapshot_store
        if not (snapshots.store_path(store) / "HEAD").exists():
            continue
        pairs = [(run.tree_before, run.tree_after)]
        if run.task_id:
            pairs.append((_first_tree(run.task_id, store, run.tree_before), run.tree_after))
        try:
            fields = _totals_fields(*diffs.totals_between(store, pairs))
        except (GitError, OSError) as exc:
            fields = {"snapshot_error": str(exc)}
        try:
            with transaction.atomic():
                agent_run_totals_record(run=run, fields=fields)
        except Exception:
            log.exception("Could not record a run's totals", extra={"run_id": run.id})
            continue
        recovered += 1
    return recovered


def _first_tree(task_id: str, store: str, before: str) -> str:
    """The tree the task's first run in `store` started from; `before` (this run's) if none."""
    return task_first_tree(task_id, store) or before


def _totals_fields(run: dict, task: dict | None = None) -> dict:
    """A run's row fields for its totals, and its task's (`task_` first) when it has a task."""
    return {**run, **{f"task_{key}": value for key, value in (task or {}).items()}}


class _Counting(threading.Thread):
    """`git diff-tree` of a run's trees, beside the next run's start (no database here)."""

    def __init__(self, store: str, pairs: list):
        super().__init__(name="malamar-totals", daemon=True)
        self.store, self.pairs = store, pairs
        self.counted: list | None = None
        self.error: Exception | None = None
        self.begun = False  # started (or run in the caller's thread)

    def run(self) -> None:
        try:
            self.counted = diffs.totals_between(self.store, self.pairs)
        except Exception as exc:  # (told with the run's record: snapshot_error)
            self.error = exc


class RunSnapshots:
    def __init__(self, recorder, cwd, memory: PassSnapshots | None = None):
        self.recorder, self.cwd = recorder, cwd
        self.before: snapshots.Snapshot | None = None
        self.after: snapshots.Snapshot | None = None
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
        if self.before.tree == snapshots.EMPTY_TREE and self.memory.store_missing(
            self.before.store
        ):  # a new folder (no store yet): made while this run works (start_counting)
            self.memory.store_ahead = str(self.cwd)
        self.memory.spares_for = self.before.store
        task_id, store = self.run.task_id, self.before.store
        if task_id and store not in self.memory.first_trees:  # (start_counting)
            self.memory.first_tree_wanted = (task_id, store, self.before.tree)
        self._record(
            snapshot_store=self.before.store,
            tree_before=self.before.tree,
            # git allows names longer than the column (PostgreSQL would refuse the run's row)
            git_branch=self.before.branch[: max_length_of(AgentRun, "git_branch")],
        )

    def take_after(self, *, count: bool = True) -> None:
        """The "after" snapshot, and the run's totals unless `count` is False: then the owner's
        PassSnapshots counts them now or later (count_now, count_later)."""
        self.memory.after(self.cwd, None)
        self.after = None
        before = self.before
        if before is None:
            return
        try:
            after = snapshots.take(self.cwd)
            if after.store != before.store:  # the folder became (or stopped being) a repository
                raise snapshots.SnapshotError("the working directory changed during the run")
        except (snapshots.SnapshotError, GitError) as exc:
            self._failed(exc)
            return
        self.memory.after(self.cwd, after)
        self.after = after
        self.recorder.snapshot_fields["tree_after"] = after.tree
        if count:
            self.count()
        else:
            self.memory.ended = self

    def count(self) -> None:
        """The run's totals into its final record."""
        try:
            totals = self._totals(self.before, self.after) if self.after else {}
        except (snapshots.SnapshotError, GitError) as exc:
            self._failed(exc)
            return
        self.recorder.snapshot_fields.update(totals)

    def missing_pairs(self) -> list:
        """The pairs of trees git must count for this run's totals (none: no git)."""
        return self._missing(self._pairs(self.before, self.after)) if self.after else []

    def learn(self, counting: "_Counting") -> None:
        """What a thread counted for this run: its totals, or why there are none."""
        if counting.error is not None:
            self._failed(counting.error)
            self.after = None  # no totals to count
            return
        known, store = self.memory.pair_totals, counting.store
        for pair, counted in zip(counting.pairs, counting.counted, strict=True):
            known[(store, *pair)] = counted

    def write_counted(self) -> None:
        """Its totals (or why there are none), counted after its final record, to its row."""
        self.count()
        fields = self.recorder.snapshot_fields
        agent_run_totals_record(
            run=self.run, fields={k: v for k, v in fields.items() if k in COUNTED_LATER}
        )

    def _pairs(self, before: snapshots.Snapshot, after: snapshots.Snapshot) -> list:
        """The run's pair of trees, and the task's: from its first snapshot in this store
        (maybe this run's) to this one."""
        pairs = [(before.tree, after.tree)]
        if self.run.task_id:
            pairs.append((self._first_tree(after.store, before.tree), after.tree))
        return pairs

    def _missing(self, pairs: list) -> list:
        """The pairs not counted before in this pass whose trees differ (git is asked)."""
        known, store = self.memory.pair_totals, self.after.store
        return [p for p in pairs if (store, *p) not in known and p[0] != p[1]]

    def _totals(self, before: snapshots.Snapshot, after: snapshots.Snapshot) -> dict:
        """The run's totals, and the task's: git is asked only for pairs of trees that differ
        and were not counted before in this pass (one call for both)."""
        pairs = self._pairs(before, after)
        known = self.memory.pair_totals
        missing = [pair for pair in pairs if (after.store, *pair) not in known]
        if missing:
            counted = diffs.totals_between(after.store, missing)
            for pair, totals in zip(missing, counted, strict=True):
                known[(after.store, *pair)] = totals
        return _totals_fields(*(known[(after.store, *pair)] for pair in pairs))

    def _first_tree(self, store: str, before: str) -> str:
        first = self.memory.first_trees.get(store)
        if first is None:
            first = _first_tree(self.run.task_id, store, before)
            self.memory.first_trees[store] = first
        return first
