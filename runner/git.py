"""The one module that runs `git` (argv lists, never a shell).

Snapshots, diffs and branch-per-task worktrees all call `git()` here, so the binary's location,
its environment (no user config, no pager, no prompts) and its errors are handled once.
"""

import os
import shutil
import subprocess
from pathlib import Path

GIT_TIMEOUT_SECONDS = 120


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
