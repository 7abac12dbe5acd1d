"""Reads for the Changes tab and its JSON API: what a task's runs changed in their working
directory, for the whole task (its first snapshot to its latest) or for one run."""

from dataclasses import dataclass, field

from runner import diffs
from runner.git import GitError
from runner.models import AgentRun

FILES_LISTED = 1000  # a bigger change set lists its first files and says how many more
FILE_LINES_INLINE = 1500  # a longer file diff is collapsed and opens on its own page
INLINE_LINES = 600  # diff lines rendered with the tab; later files load when opened
PAGE_LINES = 20_000  # a file's own page stops here (and says so)
API_DIFF_CHARS = 1_000_000  # the API's diff text of one file stops here (and says so)

RUN_FIELDS = (
    "id",
    "task_id",
    "agent_name",
    "status",
    "started_at",
    "working_directory",
    "git_branch",
    "snapshot_store",
    "tree_before",
    "tree_after",
    "snapshot_error",
    "files_changed",
    "lines_added",
    "lines_removed",
)


@dataclass
class ChangeSet:
    runs: list[AgentRun]  # the task's runs, oldest first, each with `number`
    run: AgentRun | None = None  # the run shown; None: the whole task
    working_directory: str = ""
    branch: str = ""
    store: str = ""
    before: str = ""
    after: str = ""
    files: list[diffs.FileChange] = field(default_factory=list)
    problem: str = ""  # why there is nothing to show

    @property
    def totals(self) -> dict:
        return diffs.totals(self.files)

    @property
    def listed(self) -> list[diffs.FileChange]:
        return self.files[:FILES_LISTED]

    @property
    def hidden_files(self) -> int:
        return max(0, len(self.files) - FILES_LISTED)

    @property
    def snapshot_runs(self) -> list[AgentRun]:
        return [run for run in self.runs if run.tree_after]


class UnknownRun(Exception):
    pass


def _runs(task) -> list[AgentRun]:
    runs = list(AgentRun.objects.filter(task=task).order_by("started_at", "id").only(*RUN_FIELDS))
    for number, run in enumerate(runs, start=1):
        run.number = number
    return runs


def _why_empty(runs: list[AgentRun]) -> str:
    if not runs:
        return "No agent has run on this task yet: changes show here after the first run."
    failed = next((run.snapshot_error for run in reversed(runs) if run.snapshot_error), "")
    if failed:
        return f"Malamar could not record the working directory: {failed}"
    if any(run.status == "running" for run in runs):
        return "The first run is still working: its changes show here when it ends."
    return "No snapshot of the working directory was recorded for this task's runs."


def task_changes(task, run_id: str | None = None) -> ChangeSet:
    """The whole task's changes, or one run's (`run_id`). Raises UnknownRun for a run that is
    not this task's."""
    runs = _runs(task)
    changes = ChangeSet(runs=runs)
    if run_id:
        run = next((r for r in runs if r.id == run_id), None)
        if run is None:
            raise UnknownRun(run_id)
        changes.run = run
        changes.working_directory, changes.branch = run.working_directory, run.git_branch
        if not run.tree_after:
            changes.problem = _run_problem(run)
            return changes
        changes.store, changes.before, changes.after = (
            run.snapshot_store,
            run.tree_before,
            run.tree_after,
        )
    else:
        latest = next((r for r in reversed(runs) if r.tree_after), None)
        if latest is None:
            changes.problem = _why_empty(runs)
            if runs:
                changes.working_directory = runs[-1].working_directory
            return changes
        first = next(r for r in runs if r.snapshot_store == latest.snapshot_store and r.tree_before)
        changes.working_directory, changes.branch = latest.working_directory, latest.git_branch
        changes.store, changes.before, changes.after = (
            latest.snapshot_store,
            first.tree_before,
            latest.tree_after,
        )
    try:
        changes.files = diffs.changed_files(changes.store, changes.before, changes.after)
    except GitError as exc:
        changes.problem = f"The snapshots of this task can no longer be read: {exc}"
    return changes


def _run_problem(run: AgentRun) -> str:
    if run.snapshot_error:
        return f"Malamar could not record the working directory: {run.snapshot_error}"
    if run.status == "running":
        return "This run is still working: its changes show here when it ends."
    return "No snapshot was recorded for this run."


@dataclass
class FileView:
    change: diffs.FileChange
    index: int
    diff: diffs.FileDiff | None = None
    collapsed: str = ""  # "" | "large": on its own page | "later": loads when opened


def file_views(changes: ChangeSet) -> list[FileView]:
    """The listed files, the first ones with their diff rendered (one git call for all)."""
    views, inline, budget = [], [], INLINE_LINES
    for index, change in enumerate(changes.listed):
        view = FileView(change, index)
        if change.binary or (change.lines == 0 and change.status == "renamed"):
            pass  # nothing to show line by line
        elif change.lines > FILE_LINES_INLINE:
            view.collapsed = "large"
        elif change.lines > budget:
            view.collapsed = "later"
        else:
            budget -= change.lines
            inline.append(view)
        views.append(view)
    _render(changes, inline, max_lines=FILE_LINES_INLINE + 200)
    return views


def _render(changes: ChangeSet, views: list[FileView], *, max_lines: int) -> None:
    """Each view's diff, from the cache or rendered (one git call for all that are not)."""
    trees = (changes.store, changes.before, changes.after)
    missing = []
    for view in views:
        view.diff = diffs.rendered.get((*trees, view.change.path, max_lines))
        if view.diff is None:
            missing.append(view)
    if not missing:
        return
    blocks = diffs.patches(*trees, [v.change for v in missing])
    for view, block in zip(missing, blocks, strict=True):
        view.diff = diffs.render(block, view.change.path, max_lines=max_lines)
        diffs.rendered.put((*trees, view.change.path, max_lines), view.diff)


def find_file(changes: ChangeSet, path: str) -> diffs.FileChange | None:
    return next((f for f in changes.files if f.path == path), None)


def file_diff(changes: ChangeSet, change: diffs.FileChange, *, max_lines=PAGE_LINES):
    view = FileView(change, 0)
    _render(changes, [view], max_lines=max_lines)
    return view.diff


def file_patch_text(changes: ChangeSet, change: diffs.FileChange) -> tuple[str, bool]:
    """The unified diff of one file for the API: (text, truncated)."""
    block = diffs.patches(changes.store, changes.before, changes.after, [change])[0]
    return block[:API_DIFF_CHARS], len(block) > API_DIFF_CHARS or block.cut
