"""Git repositories for tests, made with the product's own git runner (runner.git)."""

from pathlib import Path

from runner.git import git, git_text

# Commits need an author; tests never read the user's own git configuration for one.
IDENTITY = {
    "GIT_AUTHOR_NAME": "Me",
    "GIT_AUTHOR_EMAIL": "me@example.com",
    "GIT_COMMITTER_NAME": "Me",
    "GIT_COMMITTER_EMAIL": "me@example.com",
}


def commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    """Write `files` (name → text), commit everything; the new commit's id."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo, env=IDENTITY)
    return git_text("rev-parse", "HEAD", cwd=repo)


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A new repository at `path` on branch main, with one commit of `files`."""
    path.mkdir()
    git("init", "-q", "-b", "main", cwd=path)
    commit(path, files or {"README.md": "hello\n"}, "first")
    return path
