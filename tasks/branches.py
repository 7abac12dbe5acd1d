"""Branch per task (DESIGN "Git snapshots"): where a task's worktree lives, what its branch is
called, and the git steps of its life (make, commit, merge, remove). Git only, through
runner.git; the writes to Malamar's own rows are in tasks.services.

Every step raises BranchProblem with a sentence for the task's system comment when the
repository, the worktree or the branch is not what Malamar left there.
"""

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils.text import slugify

from core.errors import Conflict
from runner import git

log = logging.getLogger(__name__)

SLUG_CHARS = 40
SHORT_ID_CHARS = 8


class BranchProblem(Exception):
    """The task's repository, worktree or branch is missing or refuses; str() says so."""


@dataclass(frozen=True)
class Worktree:
    path: Path
    branch: str
    base: str
    created: bool  # made now (its setup command runs once)
    note: str = ""  # something the user should know (a vanished worktree was made again)


def worktrees_dir() -> Path:
    return Path(settings.DATA_DIR) / "worktrees"


def worktree_path(task_id: str) -> Path:
    return worktrees_dir() / task_id


def _setup_marker(task_id: str) -> Path:
    return worktrees_dir() / f"{task_id}.setup-done"


def setup_done(task_id: str) -> bool:
    return _setup_marker(task_id).exists()


def setup_mark_done(task_id: str) -> None:
    _setup_marker(task_id).touch()


def branch_name_for(task) -> str:
    """`malamar/<short id>-<slug of summary>`: readable, and unique through the id."""
    short = slugify(task.id[:SHORT_ID_CHARS]).strip("-_") or "task"
    slug = slugify(task.summary)[:SLUG_CHARS].strip("-_")
    return f"malamar/{short}-{slug}" if slug else f"malamar/{short}"


def author_email(agent_name: str) -> str:
    return f"{slugify(agent_name) or 'agent'}@malamar.local"


def repository(workspace) -> Path:
    """The workspace's repository, which must still be one."""
    path = Path(workspace.working_directory_path or "").expanduser()
    if not path.is_dir() or not git.is_repository(path):
        raise BranchProblem(
            f"The repository {path} is gone (moved, deleted or no longer a git repository), so "
            "this task's branch cannot be used. Move it back, or change the workspace settings."
        )
    return path


def _base_of(workspace, repo: Path) -> str:
    base = workspace.base_branch or git.current_branch(repo)
    if not base:
        raise BranchProblem(
            f"{repo} is on a detached HEAD: set a base branch in the workspace settings."
        )
    problem = git.branch_name_problem(base)
    if problem:
        raise BranchProblem(
            f"The base branch {base} is not a branch name Malamar can use ({problem}): set a "
            "base branch in the workspace settings."
        )
    if not git.branch_exists(repo, base):
        raise BranchProblem(f"The base branch {base} does not exist in {repo}.")
    return base


def prepare(task, workspace) -> Worktree:
    """The task's worktree, made on first use; one that vanished is made again from its branch,
    and a branch deleted by hand is started again from the base (with a note saying so)."""
    repo = repository(workspace)
    path = worktree_path(task.id)
    try:
        if not task.branch_name:
            return _start(task, workspace, repo, path, note="")
        if not git.branch_exists(repo, task.branch_name):
            git.worktree_remove(repo, path)
            note = (
                f"The branch {task.branch_name} was deleted outside Malamar: this task starts "
                "again on a new branch from the base, and earlier work on it is not there."
            )
            return _start(task, workspace, repo, path, note=note)
        if not (path / ".git").exists():
            _setup_marker(task.id).unlink(missing_ok=True)
            git.worktree_attach(repo, path, branch=task.branch_name)
            note = (
                f"The worktree of branch {task.branch_name} had vanished; Malamar made it again "
                "from the branch (committed work is kept, uncommitted changes are lost)."
            )
            return Worktree(path, task.branch_name, task.branch_base, True, note)
    except git.GitError as exc:
        raise BranchProblem(f"Malamar could not prepare this task's worktree: {exc}") from exc
    return Worktree(path, task.branch_name, task.branch_base, created=False)


def _start(task, workspace, repo: Path, path: Path, *, note: str) -> Worktree:
    base = _base_of(workspace, repo)
    branch = branch_name_for(task)
    if git.branch_exists(repo, branch):  # the same task id prefix and summary: make it unique
        branch = f"malamar/{slugify(task.id).strip('-_') or 'task'}"
    _setup_marker(task.id).unlink(missing_ok=True)
    if path.exists():  # a leftover folder that is no worktree any more
        git.worktree_remove(repo, path)
        shutil.rmtree(path, ignore_errors=True)
    git.worktree_add(repo, path, branch=branch, base=base)
    return Worktree(path, branch, base, created=True, note=note)


def commit_run(path: Path, *, agent_name: str, task) -> str | None:
    """Commit what one agent run changed on the task branch; the commit id, None if nothing."""
    message = f"{agent_name}: work on task “{task.summary}”\n\nMalamar task {task.id}"
    try:
        return git.commit_all(
            path, author=agent_name, email=author_email(agent_name), message=message
        )
    except git.GitError as exc:
        raise BranchProblem(f"Malamar could not commit {agent_name}'s changes: {exc}") from exc


ALREADY_MERGED = "already merged"


@dataclass(frozen=True)
class MergeResult:
    how: str = ""  # "fast-forward" | "merge commit" | ALREADY_MERGED; "" when refused
    conflicts: tuple[str, ...] = ()
    dirty: tuple[str, ...] = ()
    commit: str = ""  # the base's commit once merged

    @property
    def merged(self) -> bool:
        return bool(self.how)


def merge(task, workspace) -> MergeResult:
    """Merge the task branch into its base. Nothing changes when files conflict (worked out
    in git's object store) or when the checkout of the base has uncommitted changes."""
    repo = repository(workspace)
    branch, base = task.branch_name, task.branch_base
    try:
        for name in (branch, base):
            if not git.branch_exists(repo, name):
                raise BranchProblem(f"The branch {name} does not exist in {repo} any more.")
        if git.is_merged(repo, branch, base):  # nothing of its own (or merged by hand)
            return MergeResult(how=ALREADY_MERGED, commit=_tip(repo, base))
        conflicts = git.merge_conflicts(repo, branch=branch, into=base)
        if conflicts:
            return MergeResult(conflicts=tuple(conflicts))
        message = f"Merge {branch}: {task.summary}\n\nMalamar task {task.id}"
        checkout = git.checkout_of(repo, base)
        if checkout is None:
            how = git.merge_into_branch(repo, branch=branch, into=base, message=message)
            return MergeResult(how=how, commit=_tip(repo, base))
        dirty = git.dirty_files(checkout)
        if dirty:
            return MergeResult(dirty=tuple(dirty))
        how = git.merge_into_checkout(checkout, branch=branch, message=message)
        return MergeResult(how=how, commit=_tip(repo, base))
    except git.GitError as exc:
        raise BranchProblem(f"Malamar could not merge {branch} into {base}: {exc}") from exc


def base_commit(task, workspace) -> str:
    """The commit the task's base branch is at ("" when git cannot tell)."""
    try:
        return _tip(repository(workspace), task.branch_base)
    except (BranchProblem, git.GitError):
        return ""


def _tip(repo: Path, branch: str) -> str:
    return git.git_text(
        "rev-parse", "--verify", "--end-of-options", f"refs/heads/{branch}", cwd=repo
    )


class BranchState:
    NONE = "none"  # no branch, or Malamar merged it already
    GONE = "gone"  # the repository or the branch is not there any more
    IN_BASE = "in_base"  # its base holds every commit of it (no work of its own, or merged)
    UNMERGED = "unmerged"  # commits its base does not have


def branch_state(task, workspace) -> str:
    """Where the task's branch stands against its base (git reads only). A branch git cannot
    read counts as unmerged: ask rather than lose work."""
    if not task.branch_name or task.merged_at is not None:
        return BranchState.NONE
    repo = Path(workspace.working_directory_path or "").expanduser()
    try:
        if not repo.is_dir() or not git.is_repository(repo):
            return BranchState.GONE
        if not git.branch_exists(repo, task.branch_name):
            return BranchState.GONE
        base = task.branch_base
        if base and git.branch_exists(repo, base) and git.is_merged(repo, task.branch_name, base):
            return BranchState.IN_BASE
    except git.GitError:
        pass
    return BranchState.UNMERGED


def remove(*, repo_path: str, task_id: str, branch: str, base: str, keep_merged: bool) -> None:
    """Remove a task's worktree and branch (a branch already merged into its base stays when
    `keep_merged`). Quiet: a repository that is gone leaves nothing to clean."""
    repo = Path(repo_path or "").expanduser()
    path = worktree_path(task_id)
    try:
        if not repo.is_dir() or not git.is_repository(repo):
            return
        git.worktree_remove(repo, path)
        shutil.rmtree(path, ignore_errors=True)
        if not branch or not git.branch_exists(repo, branch):
            return
        merged = base and git.branch_exists(repo, base) and git.is_merged(repo, branch, base)
        if not (keep_merged and merged):
            git.branch_delete(repo, branch)
    except git.GitError:
        log.warning("Could not remove a task worktree", extra={"task_id": task_id})
    finally:  # even when the repository is gone, our copy goes
        shutil.rmtree(path, ignore_errors=True)
        _setup_marker(task_id).unlink(missing_ok=True)


def leftover_task_ids() -> set[str]:
    """Task ids that have something under the worktrees folder."""
    folder = worktrees_dir()
    if not folder.is_dir():
        return set()
    return {path.name.removesuffix(".setup-done") for path in folder.iterdir()}


def leftovers_remove(task_ids: set[str]) -> None:
    """Remove what these (deleted) tasks left under the worktrees folder; git's own record of
    such a worktree goes at its repository's next `git worktree prune`."""
    for task_id in task_ids:
        shutil.rmtree(worktree_path(task_id), ignore_errors=True)
        _setup_marker(task_id).unlink(missing_ok=True)


class UnmergedBranches(Conflict):
    """A delete that would throw away work on branches no base holds: asked first."""

    code = "UNMERGED_BRANCHES"


def unmerged_refusal(tasks: list, what: str) -> UnmergedBranches:
    names = ", ".join(f"{t.branch_name} (“{t.summary}”)" for t in tasks[:5])
    more = f" and {len(tasks) - 5} more" if len(tasks) > 5 else ""
    listed = [
        {"task_id": t.id, "summary": t.summary, "branch": t.branch_name, "base": t.branch_base}
        for t in tasks
    ]
    return UnmergedBranches(
        f"Deleting {what} deletes work that is on no other branch: {names}{more}. Merge it "
        "first, or confirm the delete (confirm=true).",
        field="confirm",
        details={"branches": listed},
    )
