"""Line comments (DESIGN "Review verdicts"): a task comment anchored to lines of the task's
changes. Reads only, through runner.changes / runner.diffs (git in the snapshot stores): where a
new comment's lines are and what they say, whether later runs changed them ("outdated"), and
the markdown agents read. The writes are tasks.services'.

An anchor names the file as the Changes tab lists it, the lines (1-based, inclusive) on one side
of the diff ("new": as the run left them; "old": as they were before it), the snapshot the
comment was made on (the diff's "after" tree) and the run whose changes were shown ("" = the
whole task's). The quoted lines are stored with the comment: snapshots are pruned in time.
"""

from dataclasses import dataclass

from core.errors import ValidationFailed
from runner import changes as change_reads
from runner import diffs
from runner.git import GitError
from runner.models import AgentRun
from tasks.models import LineSide, TaskComment

QUOTE_LINES_MAX = 200  # lines a comment quotes (a longer range is quoted up to here)
QUOTE_CHARS_MAX = 20_000
LINE_COMMENTS_MAX = 100  # in one review


@dataclass(frozen=True)
class Anchor:
    path: str
    side: str
    start_line: int
    end_line: int
    store: str
    tree: str
    run_id: str
    code: str

    def fields(self) -> dict:
        """As TaskComment fields."""
        return {
            "anchor_path": self.path,
            "anchor_side": self.side,
            "anchor_start_line": self.start_line,
            "anchor_end_line": self.end_line,
            "anchor_store": self.store,
            "anchor_tree": self.tree,
            "anchor_run_id": self.run_id,
            "anchor_code": self.code,
        }


def _refuse(message: str, field: str):
    raise ValidationFailed(message, field=field)


def change_set(task, run_id: str, field: str) -> change_reads.ChangeSet:
    """The changes a line comment is made on: one run's, or the whole task's (run_id "")."""
    try:
        changes = change_reads.task_changes(task, run_id or None)
    except change_reads.UnknownRun:
        _refuse(f"This task has no run {run_id[:40]!r}", f"{field}.run_id")
    if changes.problem:
        _refuse(f"There are no changes to comment on: {changes.problem}", field)
    return changes


def resolve(
    task, *, path: str, side: str, start_line: int, end_line: int, run_id: str, field: str,
    changes: change_reads.ChangeSet | None = None,
) -> Anchor:  # fmt: skip
    """The anchor of a new line comment, checked against the task's snapshots: the file is one
    the changes list and has that side, the lines exist there. Raises ValidationFailed (its
    `field` is e.g. "line_comments.0.path")."""
    changes = changes or change_set(task, run_id, field)
    change = change_reads.find_file(changes, path)
    if change is None:
        _refuse(
            f"{path[:200]!r} is not among the changed files: a line comment goes on a file the "
            "Changes tab lists",
            f"{field}.path",
        )
    if change.binary:
        _refuse(f"{path} is a binary file: it has no lines to comment on", f"{field}.path")
    if side == LineSide.NEW and change.status == "deleted":
        _refuse(f"{path} was deleted: comment on its old lines (side 'old')", f"{field}.side")
    if side == LineSide.OLD and change.status == "added":
        _refuse(f"{path} is new: it has no old lines (side 'new')", f"{field}.side")
    tree = changes.after if side == LineSide.NEW else changes.before
    git_path = change.git_path if side == LineSide.NEW else change.git_old_path
    try:
        lines, cut = diffs.file_lines(changes.store, tree, git_path or path)
    except GitError as exc:
        _refuse(f"The snapshot of {path} can no longer be read: {exc}", f"{field}.path")
    if end_line > len(lines):
        more = " (and more: the file is too big to comment past that)" if cut else ""
        _refuse(
            f"{path} has {len(lines)} lines{more} on that side: line {end_line} is not one of them",
            f"{field}.end_line" if end_line != start_line else f"{field}.line",
        )
    return Anchor(
        path=change.path,
        side=side,
        start_line=start_line,
        end_line=end_line,
        store=changes.store,
        tree=changes.after,
        run_id=changes.run.id if changes.run else "",
        code=_quote(lines[start_line - 1 : end_line]),
    )


def _quote(lines: list[str]) -> str:
    shown = lines[:QUOTE_LINES_MAX]
    text = "\n".join(shown)[:QUOTE_CHARS_MAX]
    if len(shown) < len(lines) or len(text) < sum(len(line) + 1 for line in shown) - 1:
        text += f"\n… ({len(lines)} lines in all)"
    return text


# outdated -----------------------------------------------------------------------------------


def latest_trees(task_id: str) -> dict[str, str]:
    """The task's latest snapshot in each store it has ("after" tree of its newest run there)."""
    latest: dict[str, str] = {}
    runs = (
        AgentRun.objects.filter(task_id=task_id)
        .exclude(tree_after="")
        .order_by("-started_at", "-id")
        .values_list("snapshot_store", "tree_after")
    )
    for store, tree in runs:
        latest.setdefault(store, tree)
    return latest


def _overlaps(hunks, start: int, end: int) -> bool:
    """Did any hunk (first old line, count) change lines start..end?"""
    if hunks is diffs.WHOLE_FILE:
        return True
    for first, count in hunks:
        if count == 0:  # lines inserted after `first`: inside the range only between its lines
            if start <= first < end:
                return True
        elif first <= end and first + count - 1 >= start:
            return True
    return False


def mark_outdated(task_id: str, comments: list[TaskComment]) -> list[TaskComment]:
    """Give each comment `outdated`: a line comment whose lines later runs changed (compared
    from the snapshot it was made on to the task's latest one). On the old side (lines as they
    were before the changes) any later change of the file counts. One git call per snapshot
    the comments were made on; unreadable snapshots leave their comments current."""
    for comment in comments:
        comment.outdated = False
    anchored = [c for c in comments if c.anchor_path and c.anchor_tree]
    if not anchored:
        return comments
    latest = latest_trees(task_id)
    groups: dict[tuple[str, str], list[TaskComment]] = {}
    for comment in anchored:
        newest = latest.get(comment.anchor_store)
        if newest and newest != comment.anchor_tree:
            groups.setdefault((comment.anchor_store, comment.anchor_tree), []).append(comment)
    for (store, tree), group in groups.items():
        paths = sorted({c.anchor_path for c in group})
        try:
            changed = diffs.changed_hunks(store, tree, latest[store], paths)
        except GitError:
            continue
        for comment in group:
            if comment.anchor_path not in changed:
                continue
            hunks = changed[comment.anchor_path]
            if comment.anchor_side == LineSide.OLD:
                comment.outdated = True
            else:
                start, end = comment.anchor_start_line, comment.anchor_end_line
                comment.outdated = _overlaps(hunks, start, end)
    return comments


# what agents read ----------------------------------------------------------------------------


def lines_label(comment: TaskComment) -> str:
    start, end = comment.anchor_start_line, comment.anchor_end_line
    return f"line {start}" if start == end else f"lines {start} to {end}"


def _fence(code: str) -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return fence


def agent_markdown(comment: TaskComment) -> str:
    """A line comment as plain markdown every CLI reads: the file, the lines, the quoted code
    and what the person wrote (`outdated` from mark_outdated, when known)."""
    side = "" if comment.anchor_side == LineSide.NEW else " (before the changes)"
    head = f"Comment on `{comment.anchor_path}`, {lines_label(comment)}{side}"
    if getattr(comment, "outdated", False):
        head += " (outdated: later changes rewrote these lines)"
    fence = _fence(comment.anchor_code)
    return f"{head}:\n\n{fence}\n{comment.anchor_code}\n{fence}\n\n{comment.content}"
