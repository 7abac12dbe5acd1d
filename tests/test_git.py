"""runner/git.py: the one module that runs git."""

import pytest

from runner.git import (
    GitError,
    GitTimeout,
    branch_delete,
    branch_exists,
    branch_name_problem,
    commit_all,
    dirty_files,
    git,
    git_head,
    git_text,
    is_merged,
    is_repository,
    merge_conflicts,
    worktree_add,
)
from tests.gitrepo import IDENTITY, make_repo


def test_is_repository_tells_a_work_tree_from_a_plain_folder(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "sub").mkdir()
    assert is_repository(repo) and is_repository(repo / "sub")
    assert not is_repository(tmp_path)


def test_a_failing_git_command_is_a_readable_error(tmp_path):
    with pytest.raises(GitError, match="not a git repository"):
        git_text("rev-parse", "HEAD", cwd=tmp_path)


def test_the_users_global_config_does_not_reach_git(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[alias]\n    hi = status\n[core]\n    pager = false\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    assert (repo / ".git").is_dir()  # GIT_DIR from our environment was not used
    assert git("hi", cwd=repo, check=False).returncode != 0  # no user aliases


# --- branch per task helpers -----------------------------------------------------------------


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", {"a.txt": "a\n"})


def test_dirty_files_lists_changes_untracked_files_and_renames_once(repo):
    assert dirty_files(repo) == []
    git("mv", "a.txt", "b c.txt", cwd=repo)
    (repo / "new dir").mkdir()
    (repo / "new dir" / "n.txt").write_text("n\n")
    assert sorted(dirty_files(repo)) == ["b c.txt", "new dir/n.txt"]


def test_commit_all_commits_everything_as_the_author_or_nothing(repo):
    assert commit_all(repo, author="Planner", email="planner@malamar.local", message="m") is None
    (repo / "a.txt").unlink()
    (repo / "plan.md").write_text("plan\n")
    sha = commit_all(repo, author="Planner", email="planner@malamar.local", message="Plan it")
    assert git_text("log", "-1", "--format=%H|%an|%ae|%cn|%s", cwd=repo) == (
        f"{sha}|Planner|planner@malamar.local|Malamar|Plan it"
    )
    assert git_text("ls-files", cwd=repo) == "plan.md"


def test_merge_conflicts_are_found_without_touching_anything(repo):
    git("branch", "topic", cwd=repo)
    (repo / "a.txt").write_text("main\n")
    git("commit", "-q", "-am", "main", cwd=repo, env=IDENTITY)
    git("checkout", "-q", "topic", cwd=repo)
    (repo / "a.txt").write_text("topic\n")
    git("commit", "-q", "-am", "topic", cwd=repo, env=IDENTITY)
    git("checkout", "-q", "main", cwd=repo)
    before = git_text("for-each-ref", cwd=repo), git_text("status", "--porcelain", cwd=repo)
    assert merge_conflicts(repo, branch="topic", into="main") == ["a.txt"]
    assert (git_text("for-each-ref", cwd=repo), git_text("status", "--porcelain", cwd=repo)) == (
        before
    )
    with pytest.raises(GitError):
        merge_conflicts(repo, branch="nope", into="main")


def test_a_git_command_that_takes_too_long_is_a_timeout_error(tmp_path):
    with pytest.raises(GitTimeout, match="took longer than"):
        git("hash-object", "--stdin", cwd=tmp_path, input=b"x", timeout=0.000001)


def test_git_head_reads_at_most_its_limit_and_says_there_was_more(tmp_path):
    (tmp_path / "big.txt").write_bytes(b"y" * 5_000_000)
    out, more = git_head("hash-object", "--stdin", cwd=tmp_path, limit=10)  # 41 bytes
    assert (len(out), more) == (10, True)
    out, more = git_head("version", cwd=tmp_path, limit=1000)
    assert out.startswith(b"git version") and not more
    big, more = git_head("diff", "--no-index", "/dev/null", "big.txt", cwd=tmp_path, limit=1000)
    assert (len(big), more) == (1000, True)  # diff --no-index exits 1: stopped, not failed


def test_git_head_errors_and_timeouts_are_readable(tmp_path):
    with pytest.raises(GitError, match="not a git repository"):
        git_head("rev-parse", "HEAD", cwd=tmp_path, limit=100)
    with pytest.raises(GitTimeout, match="took longer than"):
        git_head("-c", "alias.wait=!sleep 2", "wait", cwd=tmp_path, limit=100, timeout=0.2)


def test_branch_names_that_look_like_options_stay_names(repo, tmp_path):
    """refs/heads/--detach can exist (update-ref makes it): the helpers pass such a name where
    git cannot read it as an option."""
    git("update-ref", "refs/heads/--detach", "HEAD", cwd=repo)
    assert is_merged(repo, "--detach", "main") and is_merged(repo, "main", "--detach")
    assert merge_conflicts(repo, branch="--detach", into="main") == []
    worktree_add(repo, tmp_path / "tree", branch="task", base="--detach")
    assert git_text("rev-parse", "task", cwd=repo) == git_text("rev-parse", "main", cwd=repo)
    assert branch_name_problem("--detach") == "starts with '-'"
    assert branch_name_problem("a..b") and branch_name_problem("a b")
    assert branch_name_problem("feature/login") is None
    branch_delete(repo, "--detach")
    assert not branch_exists(repo, "--detach")
