"""The one module that runs `git` (argv lists, never a shell; a branch name never where git
would read it as an option: after `--end-of-options`, or as a full `refs/heads/…` ref).

Snapshots, diffs and branch-per-task worktrees all call `git()` here, so the binary's location,
its environment (no user config, no pager, no prompts) and its errors are handled once.
"""

import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 120
EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
# What `git add` says of a repository nested in the work tree (LC_ALL=C: never translated).
NESTED_UNBORN = re.compile(r"^error: '(.+?)/' does not have a commit checked out$", re.M | re.S)
NESTED_EMBEDDED = re.compile(r"^warning: adding embedded git repository: (.+)$", re.M)
NESTED_MARKER = ".malamar-nested"  # an index entry that makes git enter a nested repository
NESTED_DEPTH = 8  # repositories nested in nested repositories, at most this deep


class GitError(Exception):
    """git is missing or answered with an error; `str()` is a message a user can read."""


class GitMissing(GitError):
    pass


class GitTimeout(GitError):
    pass


def git_binary() -> str | None:
    return shutil.which("git")


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for every git call: no user or system config that could change output
    (pagers, colours, hooks paths, aliases), no terminal prompts, stable English messages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        LC_ALL="C",
    )
    env.update(extra or {})
    return env


def git(
    *args: str,
    cwd: str | Path,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
    timeout: float = GIT_TIMEOUT_SECONDS,
) -> subprocess.CompletedProcess:
    """Run `git args…` in `cwd`; stdout/stderr as bytes. Raises GitError when `check` and git
    fails, GitMissing when the binary is not installed."""
    binary = git_binary()
    if binary is None:
        raise GitMissing("git is not installed (install the git package)")
    try:
        done = subprocess.run(
            [binary, *args],
            cwd=str(cwd),
            env=git_env(env),
            input=input,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GitTimeout(f"git {args[0] if args else ''} took longer than {timeout:g} s") from exc
    except OSError as exc:
        raise GitError(f"git {args[0] if args else ''} failed: {exc}") from exc
    if check and done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
        raise GitError(f"git {args[0] if args else ''}: {message}")
    return done


def git_head(
    *args: str,
    cwd: str | Path,
    limit: int,
    env: dict[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
) -> tuple[bytes, bool]:
    """At most `limit` bytes of what `git args…` prints, and whether it printed more: git is
    stopped past the limit, so a diff of a huge file is never read whole. Raises GitError like
    `git()` when git fails (a stop of our own is no failure)."""
    binary = git_binary()
    if binary is None:
        raise GitMissing("git is not installed (install the git package)")
    name = args[0] if args else ""
    with tempfile.TemporaryFile() as stderr:  # a file: a full stderr pipe could block git
        try:
            process = subprocess.Popen(
                [binary, *args], cwd=str(cwd), env=git_env(env),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
            )  # fmt: skip
        except OSError as exc:
            raise GitError(f"git {name} failed: {exc}") from exc
        timed_out = threading.Event()
        timer = threading.Timer(timeout, lambda: (timed_out.set(), process.kill()))
        timer.start()
        try:
            out, more = _read_at_most(process.stdout, limit)
            if more:
                process.kill()
            process.stdout.close()
            code = process.wait()
        finally:
            timer.cancel()
        if timed_out.is_set():
            raise GitTimeout(f"git {name} took longer than {timeout:g} s")
        if code != 0 and not more:
            stderr.seek(0)
            message = stderr.read(4096).decode("utf-8", "replace").strip()
            raise GitError(f"git {name}: {message or f'exit code {code}'}")
    return out, more


def _read_at_most(stream, limit: int) -> tuple[bytes, bool]:
    read = bytearray()
    while len(read) <= limit:
        chunk = stream.read1(min(1 << 20, limit + 1 - len(read)))
        if not chunk:
            return bytes(read), False
        read += chunk
    return bytes(read[:limit]), True


def add_all(
    root: str | Path, *, env: dict[str, str] | None = None, timeout: float = GIT_TIMEOUT_SECONDS
) -> str:
    """`git add -A` of the work tree at `root` that nothing an agent creates makes fail.

    A repository nested in the work tree (a vendored checkout, a sub-repository, `cargo new`)
    is added as its files, not as a pointer to its last commit (a "gitlink", which git cannot
    even make before the nested repository's first commit): an index entry under its folder
    makes git enter it like any folder, and the entry itself, which is no file, goes with the
    next add. A file git cannot read is left out (`--ignore-errors`). Returns git's complaints
    about files it left out ("" when none); raises GitError only when git itself failed."""
    entered: set[str] = set()
    for _ in range(NESTED_DEPTH + 1):
        done = git("add", "-A", "--ignore-errors", ".", cwd=root, env=env, timeout=timeout,
                   check=False)  # fmt: skip
        said = done.stderr.decode("utf-8", "surrogateescape")
        if done.returncode not in (0, 1):
            raise GitError(f"git add: {said.strip() or f'exit code {done.returncode}'}")
        nested = [path for path in _nested_repositories(root, said) if path not in entered]
        if not nested:
            break
        enter_nested(root, nested, env=env)
        entered.update(nested)
    return "" if done.returncode == 0 else said.strip()


def _nested_repositories(root: str | Path, said: str) -> list[str]:
    """The nested repositories `git add` named (only folders that do hold a `.git`)."""
    named = NESTED_UNBORN.findall(said) + NESTED_EMBEDDED.findall(said)
    return [path for path in dict.fromkeys(named) if os.path.lexists(Path(root, path, ".git"))]


def enter_nested(root: str | Path, paths: list[str], *, env: dict[str, str] | None = None):
    """Make the next `git add -A` enter these nested repositories (their gitlinks go)."""
    lines = "".join(f"100644 {EMPTY_BLOB} 0\t{path}/{NESTED_MARKER}\0" for path in paths)
    git("update-index", "--replace", "-z", "--index-info", cwd=root, env=env,
        input=os.fsencode(lines))  # fmt: skip


def gitlinks(root: str | Path, *, env: dict[str, str] | None = None) -> list[str]:
    """The index's gitlinks (nested repositories recorded as a commit, submodules)."""
    out = git("ls-files", "--stage", "-z", cwd=root, env=env).stdout
    entries = out.decode("utf-8", "surrogateescape").split("\0")
    return [entry.split("\t", 1)[1] for entry in entries if entry.startswith("160000 ")]


def git_text(*args: str, cwd: str | Path, env: dict[str, str] | None = None) -> str:
    """stdout of a git command that must succeed, decoded, without the trailing newline."""
    return git(*args, cwd=cwd, env=env).stdout.decode("utf-8", "replace").rstrip("\n")


def is_repository(path: str | Path) -> bool:
    """True when `path` is inside a git work tree (False without git)."""
    try:
        done = git("rev-parse", "--is-inside-work-tree", cwd=path, check=False)
    except GitError:
        return False
    return done.returncode == 0 and done.stdout.strip() == b"true"


# branch per task (worktrees) ---------------------------------------------------------------
# Each task of an isolated workspace works in `git worktree` of its own on a branch of its own;
# these helpers are the only git commands that flow uses. The user's checkout is only written
# by `merge_into_checkout`, and only when it is on the base branch and clean.


def current_branch(repo: str | Path) -> str:
    """The branch checked out in `repo` ("" on a detached HEAD)."""
    done = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repo, check=False)
    return done.stdout.decode("utf-8", "replace").strip() if done.returncode == 0 else ""


def branch_name_problem(name: str) -> str | None:
    """Why `name` cannot be a branch Malamar passes to git, or None. A name git itself would not
    give a branch (spaces, "..", control characters…) or one starting with "-", which git
    would read as an option (refs/heads/--detach can exist: update-ref makes it)."""
    if name.startswith("-"):
        return "starts with '-'"
    done = git("check-ref-format", f"refs/heads/{name}", cwd="/", check=False)  # no repo needed
    return None if done.returncode == 0 else "is not valid in git"


def branch_exists(repo: str | Path, branch: str) -> bool:
    done = git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", cwd=repo, check=False)
    return done.returncode == 0


def worktree_add(repo: str | Path, path: Path, *, branch: str, base: str) -> None:
    """A new worktree at `path` on a new `branch` made from `base`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # The base as a full ref: a name is never read as an option, whatever it starts with.
    git("worktree", "add", "-q", "-b", branch, str(path), f"refs/heads/{base}", cwd=repo)


def worktree_attach(repo: str | Path, path: Path, *, branch: str) -> None:
    """A worktree at `path` for an existing `branch` (its folder had vanished)."""
    git("worktree", "prune", cwd=repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    git("worktree", "add", "-q", str(path), branch, cwd=repo)


def worktree_remove(repo: str | Path, path: Path) -> None:
    """Remove the worktree at `path` (its files too, even uncommitted ones); a worktree that is
    already gone is only pruned."""
    if path.exists():
        git("worktree", "remove", "--force", "--force", str(path), cwd=repo, check=False)
    git("worktree", "prune", cwd=repo, check=False)


def branch_delete(repo: str | Path, branch: str) -> None:
    git("branch", "-D", "--end-of-options", branch, cwd=repo, check=False)


def is_merged(repo: str | Path, branch: str, into: str) -> bool:
    """True when every commit of `branch` is already on `into`."""
    done = git(
        "merge-base", "--is-ancestor", "--end-of-options", branch, into, cwd=repo, check=False
    )
    return done.returncode == 0


def dirty_files(path: str | Path) -> list[str]:
    """Changed, added and untracked files of a work tree (ignored files not counted)."""
    out = git("status", "--porcelain", "-z", "--untracked-files=all", cwd=path).stdout
    entries = out.decode("utf-8", "replace").split("\0")
    files, skip_next = [], False
    for entry in entries:
        if skip_next or not entry:
            skip_next = False
            continue
        files.append(entry[3:])
        skip_next = entry[0] in "RC"  # a rename's old name follows as its own entry
    return files


def commit_all(path: str | Path, *, author: str, email: str, message: str) -> str | None:
    """Commit every change of the work tree at `path` (`add_all`: a repository an agent made
    inside it is committed as its files); the new commit's id, or None when nothing changed."""
    left_out = add_all(path)
    if left_out:
        log.warning("Some files were not committed: %s", left_out, extra={"path": str(path)})
    if git("diff", "--cached", "--quiet", cwd=path, check=False).returncode == 0:
        return None
    who = {
        "GIT_AUTHOR_NAME": author,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": "Malamar",
        "GIT_COMMITTER_EMAIL": "malamar@malamar.local",
    }
    git("commit", "-q", "--no-verify", "-m", message, cwd=path, env=who)
    return git_text("rev-parse", "HEAD", cwd=path)


MERGER = {
    "GIT_AUTHOR_NAME": "Malamar",
    "GIT_AUTHOR_EMAIL": "malamar@malamar.local",
    "GIT_COMMITTER_NAME": "Malamar",
    "GIT_COMMITTER_EMAIL": "malamar@malamar.local",
}


def merge_conflicts(repo: str | Path, *, branch: str, into: str) -> list[str]:
    """Files that conflict when merging `branch` into `into`, worked out in git's object store
    only (`merge-tree`): no work tree, index or ref changes."""
    done = git(
        "merge-tree", "--write-tree", "--name-only", "--no-messages", "--end-of-options", into,
        branch,
        cwd=repo, check=False,
    )  # fmt: skip
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    if done.returncode == 0:
        return []
    if done.returncode != 1 or not lines:  # 1 without a tree: a branch git cannot merge
        message = done.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"git merge-tree: {message or f'exit code {done.returncode}'}")
    return [line for line in lines[1:] if line]  # the first line is the tree id


def merge_into_checkout(repo: str | Path, *, branch: str, message: str) -> str:
    """Merge `branch` into the branch checked out in `repo`: "fast-forward" or "merge commit".
    The caller checked that the checkout is clean and that nothing conflicts; a merge that fails
    anyway is aborted, so nothing is left half-merged."""
    if is_merged(repo, "HEAD", branch):
        git("merge", "-q", "--ff-only", branch, cwd=repo, env=MERGER)
        return "fast-forward"
    done = git("merge", "-q", "--no-ff", "--no-edit", "-m", message, branch,
               cwd=repo, env=MERGER, check=False)  # fmt: skip
    if done.returncode != 0:
        git("merge", "--abort", cwd=repo, check=False)
        text = done.stderr.decode("utf-8", "replace").strip() or done.stdout.decode().strip()
        raise GitError(f"git merge: {text or f'exit code {done.returncode}'}")
    return "merge commit"


def merge_into_branch(repo: str | Path, *, branch: str, into: str, message: str) -> str:
    """Merge `branch` into `into` when `into` is not checked out anywhere: only its ref moves
    (a fast-forward, or a merge commit built with `merge-tree`)."""
    if is_merged(repo, into, branch):
        git("update-ref", f"refs/heads/{into}", branch, cwd=repo)
        return "fast-forward"
    tree = git_text(
        "merge-tree", "--write-tree", "--end-of-options", into, branch, cwd=repo
    ).splitlines()[0]
    commit = git_text(
        "commit-tree", tree, "-p", into, "-p", branch, "-m", message, cwd=repo, env=MERGER
    )
    git("update-ref", f"refs/heads/{into}", commit, cwd=repo)
    return "merge commit"


def checkout_of(repo: str | Path, branch: str) -> Path | None:
    """The work tree (the main checkout or a linked worktree) that has `branch` checked out."""
    out = git_text("worktree", "list", "--porcelain", cwd=repo)
    path = None
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = Path(line.removeprefix("worktree "))
        elif line == f"branch refs/heads/{branch}":
            return path
    return None


def toplevel(path: str | Path) -> Path:
    """The root of the main work tree `path` belongs to."""
    common = Path(git_text("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=path))
    return common.parent if common.name == ".git" else common
